import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastInspect
import ActivityCastSettings
import ActivityCastWorker
import ArgumentParser
import Foundation
import Logging
import RedisClient

/// `activitycast bench …`: the benchmarks, one subcommand each (docs/benchmarks.md). `package`:
/// the command line lists it; nothing outside this package runs it.
package struct BenchCommand: AsyncParsableCommand {
    package static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Benchmarks. `intake`: events per second one worker reads, decodes and acknowledges; `apns`: our client against h2load; `broadcast`: latency from XADD to the sandbox's receipt; `fanout`: per-token fan-out rate against h2load, peak RSS, Redis work per event; `priority`: priority-10 latency under a priority-5 fan-out; `budgets`: budget decisions per second; `scripts`: Redis's cost of an event's two scripts; `lanes`: priority-10 latency through the APNs client with priority-5 requests queued; `soak`: a realistic feed for minutes, memory, RSS, latency and lag over time, PASS or FAIL.",
        subcommands: [IntakeBench.self, APNsBench.self, BroadcastBench.self, FanoutBench.self, PriorityBench.self, BudgetsBench.self, ScriptsBench.self,
                      LanesBench.self, SoakBench.self])

    package init() {}
}

/// A bench's settings (`--sandbox`, when given, over the common options) and its logger: the
/// workers' and the bench's own lines at warning and above, as text.
func benchSetup(_ common: CommonOptions, sandbox: String? = nil) throws -> (Settings, Logger) {
    let settings = try common.settings(extra: sandbox.map { ["sandbox.listen": $0] } ?? [:])
    LineLogHandler.bootstrap(level: "warning", format: "text")
    return (settings, Logger(label: "bench"))
}

extension Settings {
    /// The configured sports feed, which the benches publish to.
    func sportsFeed() throws -> Settings.Feed {
        guard let feed = feeds.first(where: { $0.kind == .sports }) else { throw CommandFailure("no sports feed configured (streams.feeds)") }
        return feed
    }
}

struct IntakeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "intake",
        abstract: "Preload a stream, then time one worker consuming it; prints each run and the median.",
        discussion: "Uses a private key prefix and deletes what it wrote. Run it against a Redis nobody else uses (scripts/bench.sh starts one).")

    @OptionGroup var common: CommonOptions

    @Option(help: "Events per run.") var events = 200_000
    @Option(help: "Runs; the median is reported.") var runs = 5
    @Option(help: "Entries per XREADGROUP (worker.batch_size).") var batchSize = 512
    @Option(help: "decode: decode + plan + ack (trivial handler); full: also count audiences and log plans at debug.")
    var mode = "decode"
    @Option(help: "The ops endpoints during each run, a comma-separated list taken in turn: off, on (listening, the group monitor running), scraped (on, and /metrics fetched every 100 ms). Each run measures every mode listed; medians per mode.")
    var ops = "off"

    func run() async throws {
        guard mode == "decode" || mode == "full" else { throw ValidationError("--mode is decode or full") }
        let opsModes = ops.split(separator: ",").map(String.init)
        guard !opsModes.isEmpty, opsModes.allSatisfy({ ["off", "on", "scraped"].contains($0) }) else {
            throw ValidationError("--ops takes off, on and scraped, comma-separated")
        }
        LineLogHandler.bootstrap(level: "warning", format: "text")
        var byMode: [String: [(rate: Double, roundTrips: Double, seconds: Double)]] = [:]
        for run in 1...runs { for opsMode in opsModes {
            let prefix = "bench\(UInt32.random(in: 0...UInt32.max))"
            let settings = try common.settings(extra: [
                "prefix": prefix, "streams.feeds": "sports=\(prefix):feed:sports",
                "worker.batch_size": "\(batchSize)", "worker.max_in_flight": "\(batchSize * 8)",
                "worker.block_ms": "50", "log.level": "warning", "worker.send": "false",
            ])
            let redis = RedisConnection(configuration: settings.redisConfiguration)
            defer { redis.close() }
            try await preload(redis, settings, count: events)

            let worker = Worker(settings: settings, logger: Logger(label: "bench"), mode: mode == "full" ? .full : .decodeOnly)
            var service: OpsService?
            var scraper: Task<Int, Never>?
            if opsMode != "off" {
                let s = OpsService(worker: worker, listen: OpsListen(host: "127.0.0.1", port: 0), logger: Logger(label: "bench"))
                try s.start()
                service = s
                if opsMode == "scraped", let endpoint = MetricsEndpoint("http://127.0.0.1:\(s.port)/metrics") {
                    scraper = Task {
                        var scrapes = 0
                        while !Task.isCancelled {
                            if case .success = await endpoint.fetch(timeout: .seconds(1)) { scrapes += 1 }
                            try? await Task.sleep(for: .milliseconds(100))
                        }
                        return scrapes
                    }
                }
            }
            let started = ContinuousClock.now
            let task = Task { try await worker.run() }
            while worker.stats.snapshot.acked < events {
                try await Task.sleep(for: .milliseconds(2))
                if ContinuousClock.now - started > .seconds(600) { throw CommandFailure("run \(run) did not finish in 10 minutes") }
            }
            let elapsed = ContinuousClock.now - started
            let roundTrips = Double(worker.redisStats.roundTrips) / Double(events)
            scraper?.cancel()
            let scrapes = await scraper?.value
            worker.requestStop()
            let snapshot = try await task.value
            service?.stop()
            let seconds = elapsed.seconds
            byMode[opsMode, default: []].append((Double(events) / seconds, roundTrips, seconds))
            print(String(format: "run %d, ops %@: %d events in %.3f s = %.0f events/s, %.4f Redis round trips/event (acked %d, dead-lettered %d)%@",
                         run, opsMode, events, seconds, Double(events) / seconds, roundTrips, snapshot.acked, snapshot.deadLettered,
                         scrapes.map { ", \($0) scrapes" } ?? ""))
            // One DEL per key: on a cluster they sit in different slots.
            let keys = settings.feeds.map(\.stream) + ["\(prefix):registrations", "\(prefix):deadletter", "\(prefix):keys"]
            _ = try await redis.pipeline(keys.map { RedisCommand("DEL", $0) })
        } }
        let baseline = byMode[opsModes[0]].map { $0.map(\.rate).sorted()[$0.count / 2] }
        for opsMode in opsModes {
            let results = byMode[opsMode] ?? []
            let rates = results.map(\.rate).sorted()
            let trips = results.map(\.roundTrips).sorted()
            let ratio = baseline.map { String(format: ", %.3f of ops %@", rates[rates.count / 2] / $0, opsModes[0]) } ?? ""
            print(String(format: "median, ops %@: %.0f events/s, %.4f round trips/event (%d runs of %d events, batch %d, mode %@)%@",
                         opsMode, rates[rates.count / 2], trips[trips.count / 2], runs, events, batchSize, mode, ratio))
        }
    }

    /// Adds `count` realistic score updates over 500 matches, each to its match's shard of the
    /// sports feed (`streams.shards`), pipelined in chunks (not timed).
    private func preload(_ redis: RedisConnection, _ settings: Settings, count: Int) async throws {
        let streams = (0..<500).map { settings.feedStream(.sports, fields: [("match", "m\($0)")]) ?? settings.feeds[0].stream }
        let base = Int64(Date().timeIntervalSince1970 * 1000)
        var done = 0
        while done < count {
            let n = min(5000, count - done)
            let commands = (0..<n).map { i -> RedisCommand in
                let k = done + i
                return RedisCommand("XADD", streams[k % 500], "*", "type", "match.score", "ts", base + Int64(k), "match", "m\(k % 500)",
                                    "home_score", k % 7, "away_score", k % 5, "clock", "\(k % 90)'", "period", "second_half")
            }
            for r in try await redis.pipeline(commands) { _ = try r.orThrow("XADD") }
            done += n
        }
    }
}
