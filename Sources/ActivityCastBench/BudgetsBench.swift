import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSend
import ActivityCastWorker
import ArgumentParser
import Foundation
import Logging
import RedisClient
import Synchronization

/// Budget decisions per second against Redis: `BudgetScripts.decide` (loaded first with
/// `SCRIPT LOAD`, then called with `EVALSHA`) in pipelines, on many keys or on one hot key, over
/// 1 or more connections, with Redis's clock (`-`: the script reads `TIME`, as the send path
/// does) or an explicit one. Every call is a critical update with a newer event time than the
/// last (one shared counter), decided with the configured standard-tier policy.
struct BudgetsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "budgets",
        abstract: "Budget decisions per second (BudgetScripts.decide, pipelined) on many keys and one hot key, over 1 and 4 connections, Redis's clock and an explicit one; Redis CPU per decision.",
        discussion: """
        Writes budget hashes under a private prefix (`<prefix>-bb<random>:{match:…}:budget:standard`) and deletes
        them at the end. Run it against a Redis nobody else uses (scripts/bench-budgets.sh starts one): it
        saturates the server.
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "Seconds per run.") var seconds = 3.0
    @Option(help: "Runs per configuration; the median is reported.") var runs = 3
    @Option(help: "Keys of the many-keys case (the calls go round-robin over them).") var keys = 10_000
    @Option(help: "Decisions per pipeline (each connection keeps one pipeline in flight).") var pipeline = 64
    @Option(help: "Connection counts, comma-separated.") var connections = "1,4"
    @Option(help: "Cases, comma-separated: many, hot.") var cases = "many,hot"
    @Option(help: "Clocks, comma-separated: redis (the script reads TIME), explicit (the caller's ms).") var clocks = "redis,explicit"

    func list(_ text: String) -> [String] { text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }

    func validate() throws {
        guard seconds > 0, runs >= 1, keys >= 1, pipeline >= 1, pipeline <= 10_000 else {
            throw ValidationError("--seconds, --runs, --keys and --pipeline (at most 10000) must be positive")
        }
        guard list(connections).allSatisfy({ Int($0).map { $0 >= 1 && $0 <= 64 } ?? false }) else { throw ValidationError("--connections is a list of 1…64") }
        guard list(cases).allSatisfy({ ["many", "hot"].contains($0) }) else { throw ValidationError("--cases is a list of many, hot") }
        guard list(clocks).allSatisfy({ ["redis", "explicit"].contains($0) }) else { throw ValidationError("--clocks is a list of redis, explicit") }
    }

    struct Result {
        var rate: Double
        var redisMicros: Double
        var evalshaMicros: Double
        var benchCores: Double
        var busyCores: Double?
        var decisions: [String: Int]
    }

    func run() async throws {
        let settings = try common.settings()
        LineLogHandler.bootstrap(level: "warning", format: "text")
        let policy = settings.budgets.standard
        let prefix = "\(settings.prefix)-bb\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        let admin = RedisConnection(configuration: settings.redisConfiguration)
        defer { admin.close() }
        let loaded = try await admin.send(RedisCommand("SCRIPT", "LOAD", BudgetScripts.decide.source)).string
        guard loaded == BudgetScripts.decide.sha1 else { throw CommandFailure("SCRIPT LOAD answered \(loaded ?? "nothing"), expected \(BudgetScripts.decide.sha1)") }
        let info = try await admin.send(RedisCommand("INFO", "server")).string ?? ""
        let version = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("redis_version:") }.map { String($0.dropFirst(14)) } ?? "?"
        print("target: \(settings.redisConfiguration.url) (Redis \(version)); decide loaded as \(BudgetScripts.decide.sha1.prefix(12)); policy: standard "
              + "\(policy.bucket.capacity)+\(policy.bucket.refillPerHour)/h, spacing \(policy.minSpacingMillis) ms, reserve \(policy.endReserve); "
              + "critical updates, \(pipeline) per pipeline, \(runs) run\(runs == 1 ? "" : "s") of \(String(format: "%g", seconds)) s per case")

        let keyNames = (0..<keys).map { "\(prefix):{match:k\($0)}:budget:standard" }
        let hotName = "\(prefix):{match:hot}:budget:standard"
        // Each case starts from no budget hashes (full buckets), whatever ran before it.
        func clean() async throws {
            for chunk in stride(from: 0, to: keyNames.count, by: 1000) {
                _ = try await admin.send(RedisCommand("UNLINK", Array(keyNames[chunk..<min(keyNames.count, chunk + 1000)])))
            }
            _ = try await admin.send(RedisCommand("UNLINK", hotName))
        }
        var rows: [(String, Result)] = []
        let sequence = EventSequence()
        let baseMillis = wallMicros() / 1000
        for c in list(connections).compactMap({ Int($0) }) {
            let conns = (0..<c).map { _ in RedisConnection(configuration: settings.redisConfiguration) }
            defer { for conn in conns { conn.close() } }
            for conn in conns { _ = try await conn.send(RedisCommand("PING")) }
            for name in list(cases) {
                for clock in list(clocks) {
                    let label = "\(name == "many" ? "\(keys.formatted()) keys" : "1 hot key"), \(c) connection\(c == 1 ? "" : "s"), \(clock == "redis" ? "Redis's clock" : "explicit clock")"
                    var results: [Result] = []
                    for run in 1...runs {
                        try await clean()
                        let r = try await measure(conns: conns, admin: admin, names: name == "many" ? keyNames : [hotName], explicit: clock == "explicit",
                                                  policy: policy, sequence: sequence, baseMillis: baseMillis)
                        results.append(r)
                        let mix = r.decisions.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value.formatted())" }.joined(separator: ", ")
                        var line = String(format: "%@, run %d: %.0f decisions/s; Redis %.2f µs CPU/decision (EVALSHA %.2f µs inside Redis); bench %.0f%% of a core",
                                          label, run, r.rate, r.redisMicros, r.evalshaMicros, r.benchCores * 100)
                        if let busy = r.busyCores { line += String(format: "; machine %.2f cores busy", busy) }
                        print(line + "; decisions: " + mix)
                    }
                    func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
                    let m = Result(rate: median(results.map(\.rate)), redisMicros: median(results.map(\.redisMicros)),
                                   evalshaMicros: median(results.map(\.evalshaMicros)), benchCores: median(results.map(\.benchCores)),
                                   busyCores: nil, decisions: [:])
                    rows.append((label, m))
                }
            }
        }
        print("summary (median of \(runs) run\(runs == 1 ? "" : "s") of \(String(format: "%g", seconds)) s, \(pipeline) decisions per pipeline):")
        for (label, m) in rows {
            print(String(format: "  %@: %.0f decisions/s, Redis %.2f µs CPU/decision, bench %.0f%% of a core", label, m.rate, m.redisMicros, m.benchCores * 100))
        }
        try await clean()
    }

    /// One run: every connection keeps one pipeline of `pipeline` decisions in flight for
    /// `seconds`; decisions/s and Redis's CPU per decision from `INFO` before and after.
    func measure(conns: [RedisConnection], admin: RedisConnection, names: [String], explicit: Bool, policy: AudiencePolicy,
                 sequence: EventSequence, baseMillis: Int64) async throws -> Result {
        let before = RedisSnapshot(try await admin.send(RedisCommand("INFO", "stats", "cpu", "commandstats")).string ?? "")
        let host = HostProbe()
        let self0 = cpuSeconds(RUSAGE_SELF)
        let t0 = ContinuousClock.now
        let deadline = t0 + .seconds(seconds)
        let (pipeline, count) = (self.pipeline, names.count)
        let tallies = try await withThrowingTaskGroup(of: [String: Int].self) { group in
            for conn in conns {
                group.addTask {
                    var tally: [String: Int] = [:]
                    while ContinuousClock.now < deadline {
                        var commands: [RedisCommand] = []
                        commands.reserveCapacity(pipeline)
                        let first = sequence.take(Int64(pipeline))
                        let now: Int64? = explicit ? wallMicros() / 1000 : nil
                        for i in 0..<Int64(pipeline) {
                            let n = first + i
                            commands.append(BudgetScripts.decideCommand(budgetKey: names[Int(n % Int64(count))],
                                                                        event: .update(millis: baseMillis + n, priority: .critical),
                                                                        nowMillis: now, policy: policy, ttlSeconds: 3600))
                        }
                        for reply in try await conn.pipeline(commands) {
                            switch try BudgetScripts.parse(reply).decision {
                            case .priority10: tally["p10", default: 0] += 1
                            case .priority5: tally["p5", default: 0] += 1
                            case .coalesce: tally["coalesce", default: 0] += 1
                            case .stale: tally["stale", default: 0] += 1
                            case .unchanged: tally["unchanged", default: 0] += 1
                            }
                        }
                    }
                    return tally
                }
            }
            return try await group.reduce(into: [String: Int]()) { all, t in all.merge(t, uniquingKeysWith: +) }
        }
        let elapsed = (ContinuousClock.now - t0).seconds
        let benchCPU = cpuSeconds(RUSAGE_SELF) - self0
        let busy = host.finish()
        let after = RedisSnapshot(try await admin.send(RedisCommand("INFO", "stats", "cpu", "commandstats")).string ?? "")
        let decisions = tallies.values.reduce(0, +)
        let d = Double(max(1, decisions))
        let evalsha = (after.calls["evalsha"]?.usec ?? 0) - (before.calls["evalsha"]?.usec ?? 0)
        return Result(rate: Double(decisions) / elapsed, redisMicros: (after.cpuSeconds - before.cpuSeconds) * 1e6 / d,
                      evalshaMicros: Double(evalsha) / d, benchCores: benchCPU / elapsed, busyCores: busy, decisions: tallies)
    }
}

/// Event numbers shared by the connections: each pipeline takes the next block.
final class EventSequence: Sendable {
    private let next = Atomic<Int64>(0)
    func take(_ n: Int64) -> Int64 { next.wrappingAdd(n, ordering: .relaxed).oldValue }
}
