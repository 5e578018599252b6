import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastInspect
import ActivityCastWorker
import ArgumentParser
import Foundation
import RedisClient

struct InspectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Show streams, groups, consumers, lag, pending entries, dead letters and registration counts (read-only).")

    @OptionGroup var common: CommonOptions

    @Flag(help: "Print JSON instead of tables.")
    var json = false

    @Option(help: "How many of the latest dead letters to show (0-100).")
    var deadLetters = 5

    @Flag(help: "Also list the tiers' budgets of keys that have no device of that tier.")
    var allBudgets = false

    @Option(help: "One activity key: its state, channels, budgets, audience and trail.")
    var key: String?

    @Option(help: "One device: its settings, start tokens, follows and keys.")
    var device: String?

    func validate() throws {
        if key != nil && device != nil { throw ValidationError("--key and --device go one at a time") }
        if let key, ActivityKey(parsing: key) == nil { throw ValidationError("'\(key)' is not an activity key (kind:id, such as match:4711)") }
        guard (0...Inspector.maxDeadLetters).contains(deadLetters) else {
            throw ValidationError("--dead-letters must be 0-\(Inspector.maxDeadLetters), got \(deadLetters)")
        }
    }

    func run() async throws {
        let settings = try common.settings()
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        if key != nil || device != nil {
            let inspector = Inspector(settings: settings, redis: redis)
            do {
                if let key, let parsed = ActivityKey(parsing: key) {
                    let one = try await inspector.key(parsed)
                    print(json ? try SafeJSON.encode(one) : InspectOneText.render(one), terminator: json ? "\n" : "")
                } else if let device {
                    let one = try await inspector.device(device)
                    print(json ? try SafeJSON.encode(one) : InspectOneText.render(one), terminator: json ? "\n" : "")
                }
            } catch {
                throw CommandFailure("inspect failed: \(error)")
            }
            return
        }
        let report: InspectReport
        do {
            report = try await Inspector(settings: settings, redis: redis).report(latest: deadLetters, allBudgets: allBudgets)
        } catch {
            throw CommandFailure("inspect failed: \(error)")
        }
        if json {
            print(try report.json())
        } else {
            print(report.rendered(), terminator: "")
        }
    }
}
