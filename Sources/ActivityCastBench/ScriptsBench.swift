import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSend
import ActivityCastWorker
import ArgumentParser
import Foundation
import RedisClient

/// What a broadcast-only event's two scripts cost Redis by themselves: the key-state merge
/// (`KeyStateScripts.merge`) and the channel's budget decision with its guards
/// (`BudgetScripts.decide`), as the send path builds them (three content-state fields, Redis's
/// clock, a live channel in both environments), in pipelines of 100 on one connection, so the
/// round trips' own cost is spread thin. The merge alone, then both per event (each event a
/// newer time and a new clock value, so every decision is a real one: alone, the decision would
/// find the state it decided last unchanged); µs per script call from `INFO commandstats` and
/// Redis's process CPU (`INFO cpu`) per event; the decision's share is the difference. Against
/// a Redis nobody else uses (scripts/bench-scripts.sh starts one).
struct ScriptsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scripts",
        abstract: "Redis's own cost of a broadcast event's two scripts (the merge and the channel's decision), pipelined: the merge alone, then both.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Events per case.") var events = 20_000

    func validate() throws {
        guard events >= 100 else { throw ValidationError("--events must be 100 or more") }
    }

    func run() async throws {
        let settings = try common.settings()
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let prefix = "\(settings.prefix)-sb\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        let key = ActivityKey(parsing: "match:1")!
        let keys = RedisKeys(prefix: prefix)
        let state = keys.state(key), channels = keys.channels(key)
        _ = try await redis.send(RedisCommand("HSET", channels, "development", "abcdefghijklmnopqrstuv== 0 1700000000000",
                                              "production", "zbcdefghijklmnopqrstuv== 0 1700000000000"))
        var ts = Int64(Date().timeIntervalSince1970 * 1000) - 86_400_000
        func merge() -> RedisCommand {
            ts += 1000
            let event = KeyState.Event(millis: ts, event: .update, staleAfter: "3983", relevance: "50.0", stateLimit: 1200)
            return KeyStateScripts.mergeCommand(stateKey: state, event, entry: "s/\(ts)-0", ttlSeconds: 43_200,
                                                contentState: ["homeScore": .int(0), "awayScore": .int(0), "clock": .string("\(ts)")])
        }
        func decide() -> RedisCommand {
            BudgetScripts.decideCommand(budgetKey: keys.budget(key, .channel(.noStorage)), event: .update(millis: ts, priority: .routine), entry: "s/\(ts)-0",
                                        nowMillis: nil, policy: settings.budgets.channelNoStorage, ttlSeconds: 43_200,
                                        guards: BudgetGuards(state: state, fanout: keys.fanout(key, "s/\(ts)-0"), channels: (channels, ["development", "production"])),
                                        shown: (state, true, 1_991_500))
        }
        _ = try await redis.pipeline([merge(), decide()])
        // Redis's own figures from the node serving the key (on a cluster, one of several).
        let node = try await redis.node(forKey: state)
        let run = events / 100 * 100
        print("\(run) events per case, pipelines of 100")
        var cpu: [Double] = []
        for (label, make) in [("merge", { [merge()] }), ("merge + decide", { [merge(), decide()] })] as [(String, () -> [RedisCommand])] {
            let before = try await snapshot(redis, node)
            for _ in 0..<(run / 100) {
                let replies = try await redis.pipeline((0..<100).flatMap { _ in make() })
                if let e = replies.lazy.compactMap(\.errorMessage).first { throw CommandFailure("\(label): \(e)") }
            }
            let after = try await snapshot(redis, node)
            let (was, now) = (before.calls["evalsha"] ?? (0, 0), after.calls["evalsha"] ?? (0, 0))
            let calls = now.calls - was.calls, usec = now.usec - was.usec
            cpu.append((after.cpuSeconds - before.cpuSeconds) * 1e6 / Double(run))
            print(String(format: "%@: %.1f µs per script call (commandstats, %d calls), %.1f µs of Redis process CPU per event", label,
                         Double(usec) / Double(max(1, calls)), calls, cpu.last!))
        }
        print(String(format: "decide (channel), the difference: %.1f µs of Redis process CPU per event", cpu[1] - cpu[0]))
        _ = try await redis.send(RedisCommand("UNLINK", state, channels, keys.budget(key, .channel(.noStorage))))
    }

    /// Redis's CPU and command statistics, from the node serving the bench's key.
    func snapshot(_ redis: RedisConnection, _ node: RedisNodeAddress) async throws -> RedisSnapshot {
        RedisSnapshot(try await redis.pipeline([RedisCommand("INFO", "cpu", "commandstats")], on: node)[0].orThrow("INFO").string ?? "")
    }
}
