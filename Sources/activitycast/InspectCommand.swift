import ActivityCastCommandSupport
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

    func validate() throws {
        guard (0...Inspector.maxDeadLetters).contains(deadLetters) else {
            throw ValidationError("--dead-letters must be 0-\(Inspector.maxDeadLetters), got \(deadLetters)")
        }
    }

    func run() async throws {
        let settings = try common.settings()
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
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
