import ActivityCastCommandSupport
import ActivityCastWorker
import APNs
import APNsCore
import ArgumentParser
import Foundation
import Logging

/// The worker's APNs client alone: priority-10 requests while N priority-5 requests are queued in
/// it, against the same requests with nothing queued. What the two lanes of the in-flight window
/// promise (docs/budgets.md, "Priority 10 first"), without Redis or the rest of the send path.
struct LanesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lanes",
        abstract: "Priority-10 request latency through the APNs client, idle and with N priority-5 requests queued in it: p50/p90/p99/max and the p99 difference.",
        discussion: "Point it at a running sandbox (the default settings use the local one); scripts/bench-lanes.sh starts one. The client is configured from the settings like a worker's (apns.connections, apns.max_concurrent_streams, apns.priority5_in_flight).")

    @OptionGroup var common: CommonOptions
    @Option(help: "Priority-5 requests queued at once for the flood.") var flood = 100_000
    @Option(help: "Tokens per priority-5 call (a worker hands its client one batch of a slice at a time).") var batch = 256
    @Option(help: "Priority-10 probes per phase.") var probes = 200
    @Option(help: "Milliseconds between probes.") var spacingMs = 10
    @Option(help: "Runs; each has an idle and a flood phase. Medians are reported.") var runs = 3

    func run() async throws {
        let (settings, logger) = try benchSetup(common)
        let configuration = try makeAPNsClient(settings, logger: logger).configuration
        let signer = try ProviderTokenSigner.load(pemFile: settings.apns.keyFile, pem: settings.apns.keyPEM,
                                                  identity: try ProviderIdentity(keyID: settings.apns.keyID, teamID: settings.apns.teamID))
        let tokens = LocalProviderTokens(signer: signer)
        let payload = LiveActivityPayload(event: .update, timestamp: Int64(Date().timeIntervalSince1970),
                                          contentState: ["homeScore": 2, "awayScore": 1, "clock": "67'", "period": "second_half"]).encoded()
        let bundle = settings.apns.bundleID
        print("target https://\(configuration.endpoint), \(configuration.connections) connections x \(configuration.maxConcurrentStreams) streams, "
              + "priority-5 cap \(configuration.lowPriorityInFlight.map(String.init) ?? "default (a quarter of the window)"); "
              + "flood \(flood) requests in calls of \(batch), \(probes) probes every \(spacingMs) ms")

        var diffs: [Double] = []
        var idle99: [Double] = [], flood99: [Double] = [], rates: [Double] = []
        for run in 1...runs {
            let client = try APNsClient(configuration: configuration, tokens: tokens, logger: logger)
            defer { client.shutdown() }
            // Warm-up: connections open, provider token accepted, streams at their limit.
            _ = await client.sendLiveActivity(payload: payload, to: deviceTokens(2000, base: 0xF0000000), bundleID: bundle, priority: 5)
            let idle = await probe(client, payload: payload, bundle: bundle, while: nil)

            // The flood: every call handed to the client at once, so N requests wait in its
            // priority-5 lane while the probes run.
            let started = ContinuousClock.now
            let done = Flag()
            let floodTask = Task {
                defer { done.set() }
                return await withTaskGroup(of: Int.self) { group in
                    var start = 0
                    while start < flood {
                        let list = deviceTokens(min(batch, flood - start), base: 0x10000000 + start)
                        group.addTask { await client.sendLiveActivity(payload: payload, to: list, bundleID: bundle, priority: 5).filter { $0.action == .delivered }.count }
                        start += batch
                    }
                    return await group.reduce(0, +)
                }
            }
            let flooded = await probe(client, payload: payload, bundle: bundle, while: done, startAfter: .milliseconds(20))
            let delivered = await floodTask.value
            let floodSeconds = (ContinuousClock.now - started).seconds
            guard delivered == flood else { throw ValidationError("the flood delivered \(delivered) of \(flood)") }
            let a = Percentiles(idle.samples), b = Percentiles(flooded.samples)
            let diff = (b.p99 - a.p99) / 1000
            diffs.append(diff); idle99.append(a.p99 / 1000); flood99.append(b.p99 / 1000); rates.append(Double(flood) / floodSeconds)
            print(String(format: "run %d: idle %d probes p50 %.2f, p90 %.2f, p99 %.2f, max %.2f ms; flood %d probes during it (of %d) p50 %.2f, p90 %.2f, p99 %.2f, max %.2f ms; p99 flood − idle %+.2f ms; flood %.0f req/s",
                         run, idle.samples.count, a.p50 / 1000, a.p90 / 1000, a.p99 / 1000, a.max / 1000,
                         flooded.samples.count, probes, b.p50 / 1000, b.p90 / 1000, b.p99 / 1000, b.max / 1000, diff, Double(flood) / floodSeconds))
        }
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        print(String(format: "median of %d runs: p99 idle %.2f ms, flood %.2f ms, flood − idle %+.2f ms (goal ≤ 10 ms); flood %.0f req/s",
                     runs, median(idle99), median(flood99), median(diffs), median(rates)))
    }

    /// `probes` priority-10 requests, one every `spacingMs`, each timed from the call to its
    /// result (µs). With `while`, only probes that finished before the flood did are kept.
    private func probe(_ client: APNsClient, payload: [UInt8], bundle: String, while flood: Flag?, startAfter: Duration = .zero) async
        -> (samples: [Int64], dropped: Int) {
        try? await Task.sleep(for: startAfter)
        var samples: [Int64] = []
        var dropped = 0
        var next = ContinuousClock.now
        for i in 0..<probes {
            if let flood, flood.isSet { dropped = probes - i; break }
            try? await Task.sleep(until: next, clock: .continuous)
            next += .milliseconds(spacingMs)
            let t0 = ContinuousClock.now
            let result = await client.sendLiveActivity(payload: payload, to: [String(format: "%064x", 0xB0000000 + i)], bundleID: bundle, priority: 10)[0]
            let micros = (ContinuousClock.now - t0).seconds * 1e6
            guard result.action == .delivered else { continue }
            if let flood, flood.isSet { dropped += 1; continue }
            samples.append(Int64(micros))
        }
        return (samples, dropped)
    }

    private func deviceTokens(_ n: Int, base: Int) -> [String] { (0..<n).map { String(format: "%064x", base + $0) } }
}

/// Set once, read from anywhere.
private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.lock(); value = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
}
