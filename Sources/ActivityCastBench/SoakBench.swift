import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastInspect
import ActivityCastWorker
import APNs
import ArgumentParser
import Foundation
import Logging
import RedisClient
import Synchronization

/// A soak: a sustained, realistic feed (SoakFeed) for minutes against running workers, sampled
/// every few seconds — Redis's memory, every worker's RSS, the broadcast latency of the window
/// and the consumer group's lag — and judged at the end: Redis memory flat after a warm-up,
/// workers' peak RSS bounded, p99 at the end no worse than 1.5× its value after warm-up, and
/// nothing lost.
///
/// Latency is measured as BroadcastBench does: each `match.score` carries a unique number in
/// `clock`, which reaches the broadcasts' content-state in the sandbox's delivery log; latency is
/// the sandbox's receipt minus the `XADD`'s issue (wall clock, µs). The bench reads the delivery
/// log every half second and forgets an event once all its broadcasts are in, so neither it nor
/// the sandbox's log grows with the run's length.
struct SoakBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "A sustained realistic feed for minutes: Redis memory, workers' RSS, latency and lag sampled over time; PASS or FAIL.",
        discussion: """
        Needs workers consuming the same Redis and prefix and sending to the sandbox given here; the sandbox's delivery log \
        (--delivery-log) must hold a few seconds of pushes. scripts/bench-soak.sh starts them all on free loopback ports and \
        draws the plot. Writes under the configured prefix; use a Redis nobody else uses.

        Criteria: Redis used_memory grows less than --max-slope MB/min after the warm-up (least squares; the warm-up is the \
        first third of the run or 5 minutes, whichever is shorter, or --warmup-seconds); every worker's VmHWM during the soak is at most --max-rss \
        MiB; the p99 of the last window is at most --max-p99-ratio times the p99 of the first window after warm-up (windows of \
        1 minute, shorter for short runs); no match.score lacks a broadcast and nothing was dead-lettered.
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "The sandbox, host:port (default: sandbox.listen). Its certificate is read from sandbox.dir.") var sandbox: String?
    @Option(help: "Length of the soak in minutes (default 30).") var minutes: Double?
    @Option(help: "Length of the soak in seconds, instead of --minutes.") var seconds: Double?
    @Option(help: "match.score events per second over the matches (the measured events), paced by a clock.") var eventsPerSecond = 1000.0
    @Option(help: "Live matches at any time, broadcast only (each gets a score every keys/rate seconds).") var keys = 500
    @Option(help: "Matches that end per minute; a new one takes each one's place (scheduled, started: push-to-start to followers).")
    var endsPerMinute = 30.0
    @Option(help: "Matches with a per-token audience, besides --keys.") var audienceKeys = 4
    @Option(help: "Activity tokens registered for each audience match.") var audienceTokens = 2000
    @Option(help: "Minutes an audience match lasts; then it ends, its devices unregister, and a new one with a new audience starts.")
    var audienceMinutes = 10.0
    @Option(help: "Audience registrations replaced per second (unregister an activity, register a new one).") var churnPerSecond = 10.0
    @Option(help: "Teams (fans follow one or two).") var teams = 400
    @Option(help: "Fans: devices with a push-to-start token that follow teams.") var fans = 4000
    @Option(help: "Live transit trips at any time (2-4 minutes each).") var trips = 40
    @Option(help: "Transit routes.") var routes = 20
    @Option(help: "Riders: devices with a push-to-start token that follow a route.") var riders = 1000
    @Option(help: "Seconds between samples (default 10; 5 for runs under 2 minutes).") var sampleSeconds: Double?
    @Option(help: "Seconds of warm-up before the criteria apply (default: the first third of the run, at most 5 minutes). It must cover every window that fills by design: the streams' retention, and an ended key's life (its dismissal, 10 minutes' grace and its trail's trace.retention_s).")
    var warmupSeconds: Double?
    @Option(help: "Directory for soak.csv (one row per sample) and soak-summary.gp (the fit and verdict, for scripts/soak-plot.gp).")
    var out: String?
    @Option(help: "A worker's PID (repeatable): its RSS is sampled.") var workerPid: [Int32] = []
    @Option(help: "A worker's /metrics URL (repeatable): the events it counted stale explain scores that got no broadcast of their own.")
    var workerMetrics: [String] = []
    @Option(help: "The sandbox's PID: its RSS is sampled.") var sandboxPid: Int32?
    @Option(help: "redis-server's PID (once per node of a cluster): its CPU over the soak is reported.") var redisPid: [Int32] = []
    @Option(help: "Seconds to wait for the workers to finish everything after the soak before counting what was lost.") var drainTimeout = 120.0
    @Option(help: "Limit: Redis used_memory slope after warm-up, MB (10^6 bytes) per minute.") var maxSlope = 1.0
    @Option(help: "Limit: each worker's RSS slope after warm-up, MiB per minute (judged when 10 minutes or more follow the warm-up).") var maxRssSlope = 0.05
    @Option(help: "Limit: every worker's peak RSS (VmHWM), MiB.") var maxRss = 64.0
    @Option(help: "Limit: the last window's p99 over the first window's (after warm-up).") var maxP99Ratio = 1.5
    @Option(help: "Seed of the feed's random choices (the same seed gives the same feed).") var seed: UInt64 = 1

    var duration: Double { seconds ?? (minutes ?? 30) * 60 }

    func validate() throws {
        guard seconds == nil || minutes == nil else { throw ValidationError("give --minutes or --seconds, not both") }
        guard duration >= 30 else { throw ValidationError("the soak lasts at least 30 s") }
        guard eventsPerSecond >= 10, eventsPerSecond <= 20_000 else { throw ValidationError("--events-per-second is 10-20000") }
        guard keys >= 1, keys <= 3000 else {
            throw ValidationError("--keys is 1-3000 (each match has a channel per APNs environment, ended ones for an hour; the sandbox allows 10,000)")
        }
        guard Double(keys) / eventsPerSecond >= 0.1 else {
            throw ValidationError("--keys / --events-per-second must be at least 0.1 s: a match's events closer than that may be processed out of order by two workers, and a stale score is not sent as itself")
        }
        guard audienceKeys >= 0, audienceKeys <= 32, audienceTokens >= 0, audienceTokens <= 100_000, audienceMinutes > 0 else {
            throw ValidationError("--audience-keys is 0-32, --audience-tokens 0-100000, --audience-minutes positive")
        }
        guard teams >= 2, fans >= 0, trips >= 0, routes >= 1, riders >= 0, churnPerSecond >= 0, endsPerMinute >= 0 else {
            throw ValidationError("--teams is at least 2, --routes at least 1, the other counts and rates not negative")
        }
        if let s = sampleSeconds, s < 1 || s > duration / 6 { throw ValidationError("--sample-seconds is 1 s up to a sixth of the run") }
    }

    func run() async throws {
        let (settings, logger) = try benchSetup(common, sandbox: sandbox)
        guard let sports = settings.feeds.first(where: { $0.kind == .sports })?.stream,
              let transit = settings.feeds.first(where: { $0.kind == .transit })?.stream else {
            throw CommandFailure("the soak needs a sports and a transit feed (streams.feeds)")
        }
        let streams = SoakStreams(sports: sports, transit: transit, registrations: settings.registrationsStream)
        let windows = SoakWindows(duration: duration, interval: sampleSeconds ?? (duration < 120 ? 5 : 10), warmup: warmupSeconds)
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let monitorRedis = RedisConnection(configuration: settings.redisConfiguration)
        defer { monitorRedis.close() }
        let admin = try makeAPNsClient(settings, logger: logger)
        defer { admin.shutdown() }
        let log = DeliveryLog(client: admin)
        if let out { try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true) }

        var feed = SoakFeed(options: .init(rate: eventsPerSecond, keys: keys, endsPerMinute: endsPerMinute, audienceKeys: audienceKeys,
                                           audienceTokens: audienceTokens, audienceSeconds: audienceMinutes * 60, churnPerSecond: churnPerSecond,
                                           teams: teams, fans: fans, trips: trips, routes: routes, riders: riders), seed: seed)
        say(String(format: "soak: %@ against sandbox %@, prefix %@; %.0f match.score/s over %d matches (%.0f end per minute, replaced), "
                   + "%d audience matches of %d tokens (%.0f replaced/s, each match %.0f min), %d fans of %d teams, %d trips on %d routes, %d riders",
                   Self.length(duration), "\(admin.configuration.endpoint)", settings.prefix, eventsPerSecond, keys, endsPerMinute,
                   audienceKeys, audienceTokens, churnPerSecond, audienceMinutes, fans, teams, trips, routes, riders))

        // Setup, not measured: registrations, the matches' channels, one score per match.
        let setupStart = ContinuousClock.now
        let registrations = feed.setupRegistrations()
        try await Self.send(registrations, perSecond: 2000, redis: redis, streams: streams)
        try await BenchRedis.waitConsumed(streams: [streams.registrations], group: settings.group,
                                          timeout: .seconds(drainTimeout + Double(registrations.count) / 500),
                                          hint: "are workers running against this Redis with prefix '\(settings.prefix)'?") { try await redis.pipeline($0) }
        let schedules = feed.schedules(nowMillis: wallMicros() / 1000)
        try await Self.send(schedules, perSecond: 2000, redis: redis, streams: streams)
        try await BenchRedis.waitConsumed(streams: [streams.sports], group: settings.group, timeout: .seconds(drainTimeout + Double(schedules.count) / 100),
                                          hint: "the matches' channels were not made") { try await redis.pipeline($0) }
        var since = try await log.lastSequence()
        let warm = feed.warmScores()
        try await Self.send(warm, perSecond: 2000, redis: redis, streams: streams)
        try await BenchRedis.waitConsumed(streams: [streams.sports], slices: settings.keys.sliceStreams, group: settings.group,
                                          timeout: .seconds(drainTimeout), hint: "the warm-up scores were not sent") { try await redis.pipeline($0) }
        let warmFetched = try await log.fetch(after: since)
        since = warmFetched.last
        var warmCounts: [Int: Int] = [:]
        for b in warmFetched.broadcasts { warmCounts[b.number, default: 0] += 1 }
        let counts = warm.compactMap(\.number).map { warmCounts[$0] ?? 0 }
        let perEvent = counts.max() ?? 0
        guard perEvent > 0, counts.allSatisfy({ $0 == perEvent }) else {
            throw CommandFailure("warm-up: \(counts.filter { $0 == 0 }.count) of \(counts.count) matches' first scores reached no channel, others got up to \(perEvent) broadcasts: the matches' channels are missing")
        }
        say(String(format: "setup (not measured): %d registrations (2,000/s), %d matches scheduled and scored once, in %.1f s; each score is %d broadcast%@ (a channel per APNs environment)",
                   registrations.count, schedules.count, (ContinuousClock.now - setupStart).seconds, perEvent, perEvent == 1 ? "" : "s"))
        say("warm-up: \(Self.length(windows.warmup)) (\(windows.warmupRule)); p99 windows: the first and last \(Self.length(windows.window)) after it"
            + (windows.window < 60 ? " (1 minute, scaled down for a run this short)" : "") + "; a sample every \(Self.length(windows.interval))")

        // The workers' peak RSS is judged over the soak: reported for the setup, then reset.
        if !workerPid.isEmpty {
            let setup = workerPid.map { PeakMemory.read($0).map { String(format: "%.1f/%.1f", Double($0.rss) / 1024, Double($0.hwm) / 1024) } ?? "?" }
            let resets = workerPid.map { PeakMemory.reset($0) }
            say("workers' RSS/peak after setup: \(setup.joined(separator: ", ")) MiB; "
                + (resets.allSatisfy { $0 } ? "peak reset (clear_refs): the peaks judged below are the soak's"
                    : "could not reset the peak (/proc/PID/clear_refs not writable): the peaks below include the setup's"))
        }

        // The soak.
        let start = ContinuousClock.now
        let t0 = wallMicros()
        let tracker = SoakTracker(perEvent: perEvent, t0: t0, interval: Int64(windows.interval * 1e6), samples: windows.samples)
        let monitor = SoakMonitor(redis: monitorRedis, log: log, tracker: tracker, windows: windows, t0: t0,
                                  inputs: [streams.sports, streams.transit, streams.registrations], slices: settings.keys.sliceStreams,
                                  group: settings.group, workers: workerPid, sandboxPid: sandboxPid,
                                  csv: out.map { "\($0)/soak.csv" })
        let cpu = CPUProbe(workers: workerPid, sandbox: sandboxPid, redis: redisPid)
        let firstNumber = feed.nextNumber
        let logFrom = since
        let (watched, publishing) = try await withThrowingTaskGroup(of: SoakMonitor.Result?.self) { group in
            group.addTask {
                do { return try await monitor.run(since: logFrom) } catch {
                    tracker.abort("\(error)")
                    throw error
                }
            }
            let publishing = try await Self.publish(&feed, start: start, duration: duration, rate: eventsPerSecond, redis: redis,
                                                    streams: streams, tracker: tracker)
            var watched: SoakMonitor.Result?
            for try await r in group { if let r { watched = r } }
            return (watched!, publishing)
        }
        let load = cpu.finish(seconds: (ContinuousClock.now - start).seconds)

        // Everything the workers read must reach its outcome; then what never arrived is lost.
        let drainStart = ContinuousClock.now
        try await BenchRedis.waitConsumed(streams: [streams.sports, streams.transit, streams.registrations], slices: settings.keys.sliceStreams,
                                          group: settings.group, timeout: .seconds(drainTimeout), hint: "the workers fell behind or stopped") {
            try await redis.pipeline($0)
        }
        let drained = (ContinuousClock.now - drainStart).seconds
        try await Task.sleep(for: .milliseconds(200))
        tracker.received(try await log.fetch(after: watched.since).broadcasts)
        let deadLetters = try await redis.send(RedisCommand("XLEN", settings.deadLetterStream)).int ?? 0
        let stale = await Self.staleEvents(workerMetrics)
        let result = tracker.result()
        // Each worker's peak: its VmHWM now, or the highest sampled (a worker that exited).
        let hwm = workerPid.indices.map { i in
            max(PeakMemory.read(workerPid[i]).map { Double($0.hwm) / 1024 } ?? 0, watched.samples.compactMap { $0.workers[i]?.hwm }.max() ?? 0)
        }

        say("")
        say(String(format: "sent: %d match.score during the soak (numbered %d…%d); %d entries with the setup's: %@; registrations still queued at the end (not sent): %d",
                   result.sent, firstNumber, feed.nextNumber - 1, feed.counts.values.reduce(0, +),
                   feed.counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "), feed.queued))
        say(String(format: "publisher: %.0f slots/s achieved, late against its clock by more than 100 ms in %d slots (max %.0f ms); workers drained %.1f s after the end",
                   publishing.achievedRate, publishing.lateSlots, publishing.maxLateMs, drained))
        say("CPU over the soak (share of one core): \(load)")

        // Where Redis's memory went (after the soak: a SCAN of every key and sizes of a sample).
        let used = BenchRedis.info("used_memory", in: try await redis.send(RedisCommand("INFO", "memory"))) ?? 0
        let kinds = try await BenchRedis.memoryByKind { try await redis.pipeline($0) }
        say(String(format: "Redis at the end: used_memory %.1f MB; largest kinds of key (MEMORY USAGE of up to 500 keys of each, times their count): ", Double(used) / 1e6)
            + kinds.prefix(6).map { String(format: "%@ %d keys %.1f MB", $0.kind, $0.keys, $0.bytes / 1e6) }.joined(separator: "; "))

        let verdict = SoakVerdict(samples: watched.samples, windows: windows, first: watched.firstWindow, last: watched.lastWindow,
                                  hwm: hwm, result: result, deadLetters: Int(deadLetters), staleEvents: stale, limits: (maxSlope, maxRss, maxP99Ratio, maxRssSlope))
        for line in verdict.lines { say(line) }
        say(verdict.passed ? "PASS" : "FAIL (\(verdict.failed.joined(separator: ", ")))")
        if let out {
            try verdict.gnuplotSummary(workers: workerPid.count, duration: duration, windows: windows)
                .write(toFile: "\(out)/soak-summary.gp", atomically: true, encoding: .utf8)
            say("samples: \(out)/soak.csv")
        }
        if !verdict.passed { throw ExitCode.failure }
    }

    /// The events the workers counted stale (`activitycast_events_stale_total`: processed after a
    /// newer event of their key, so not sent as themselves) or after their key's end
    /// (`activitycast_events_after_end_total`: a score read after full time, sent to nobody); nil
    /// when a worker's metrics can't be read or none were given.
    static func staleEvents(_ urls: [String]) async -> Int? {
        guard !urls.isEmpty else { return nil }
        var total = 0.0
        for url in urls {
            guard let endpoint = MetricsEndpoint(url), case .success(let text) = await endpoint.fetch(timeout: .seconds(2)) else { return nil }
            total += PrometheusText.parse(text).filter { ["activitycast_events_stale_total", "activitycast_events_after_end_total"].contains($0.name) }
                .map(\.value).reduce(0, +)
        }
        return Int(total)
    }

    /// Adds `entries` at `perSecond` (setup), in pipelines of a tenth of a second's.
    static func send(_ entries: [SoakEntry], perSecond: Int, redis: RedisConnection, streams: SoakStreams) async throws {
        let chunk = max(1, perSecond / 10)
        let start = ContinuousClock.now
        var i = 0
        while i < entries.count {
            try await Task.sleep(until: start + .milliseconds(100 * (i / chunk)), clock: .continuous)
            let ts = wallMicros() / 1000
            let commands = entries[i..<min(entries.count, i + chunk)].map { $0.command(stream: streams.name($0.stream), ts: ts) }
            for r in try await redis.pipeline(commands) where r.string == nil { throw CommandFailure("XADD: \(r)") }
            i += chunk
        }
    }

    struct Publishing { var achievedRate: Double; var lateSlots: Int; var maxLateMs: Double }

    /// The feed's slots at `rate` a second for `duration`, each due at its place on the monotonic
    /// clock (a late one goes at once; none waits for an earlier one's reply), each slot's entries
    /// in one pipeline.
    static func publish(_ feed: inout SoakFeed, start: ContinuousClock.Instant, duration: Double, rate: Double, redis: RedisConnection,
                        streams: SoakStreams, tracker: SoakTracker) async throws -> Publishing {
        let total = Int(duration * rate)
        var late = 0
        var maxLate = 0.0
        try await withThrowingDiscardingTaskGroup { group in
            for i in 0..<total {
                let due = start + .nanoseconds(Int64((Double(i) * 1e9 / rate).rounded()))
                if due > .now {
                    try await Task.sleep(until: due, tolerance: .microseconds(50), clock: .continuous)
                } else {
                    let behind = (ContinuousClock.now - due).seconds * 1000
                    maxLate = max(maxLate, behind)
                    if behind > 100 { late += 1 }
                }
                if i % 1000 == 0, let reason = tracker.failure { throw CommandFailure("the monitor stopped: \(reason)") }
                let entries = feed.slot(i, nowMillis: wallMicros() / 1000)
                if entries.isEmpty { continue }
                // Redis not answering: don't pile up pipelines without bound.
                while tracker.inFlight >= 2000 { try await Task.sleep(for: .milliseconds(1)) }
                let issued = wallMicros()
                tracker.issued(entries.compactMap(\.number), at: issued)
                let commands = entries.map { $0.command(stream: streams.name($0.stream), ts: issued / 1000) }
                group.addTask {
                    var failure: String?
                    do {
                        for r in try await redis.pipeline(commands) where r.string == nil { failure = "XADD: \(r)"; break }
                    } catch {
                        failure = "\(error)"
                    }
                    tracker.done(failure: failure)
                }
            }
        }
        if let f = tracker.result().publishFailure { throw CommandFailure("adding the feed's entries failed: \(f)") }
        return Publishing(achievedRate: Double(total) / (ContinuousClock.now - start).seconds, lateSlots: late, maxLateMs: maxLate)
    }

    static func length(_ seconds: Double) -> String {
        seconds >= 120 && seconds.truncatingRemainder(dividingBy: 60) == 0 ? "\(Int(seconds / 60)) min" : String(format: "%g s", seconds)
    }
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

struct SoakStreams: Sendable {
    var sports: String
    var transit: String
    var registrations: String

    func name(_ s: SoakEntry.Stream) -> String {
        switch s {
        case .sports: sports
        case .transit: transit
        case .registrations: registrations
        }
    }
}

/// When samples are taken and which of them the criteria compare.
struct SoakWindows: Sendable {
    let duration: Double
    let interval: Double
    /// The first third of the run, or 5 minutes when that is shorter; rounded up to a sample.
    let warmup: Double
    /// The p99 windows: 1 minute, or 3/8 of what follows the warm-up when that is shorter, in
    /// whole samples (a 60 s run: 15 s).
    let window: Double

    /// `warmup`: seconds given instead of the rule (at most 3/4 of the run).
    init(duration: Double, interval: Double, warmup given: Double? = nil) {
        self.duration = duration
        self.interval = interval
        warmupGiven = given != nil
        warmup = (min(given ?? min(duration / 3, 300), duration * 3 / 4) / interval).rounded(.up) * interval
        window = min(60, max(interval, ((duration - warmup) * 3 / 8 / interval).rounded(.down) * interval))
    }

    let warmupGiven: Bool
    var warmupRule: String {
        warmupGiven ? "--warmup-seconds" : duration / 3 <= 300 ? "the first third of the run" : "5 minutes, shorter than a third of the run"
    }
    var samples: Int { Int((duration / interval).rounded(.up)) }
    /// Sample k covers [k·interval, end(k)) seconds into the soak.
    func end(_ k: Int) -> Double { min(duration, Double(k + 1) * interval) }
    func inFirstWindow(_ k: Int) -> Bool { Double(k) * interval >= warmup - 1e-9 && end(k) <= warmup + window + 1e-9 }
    func inLastWindow(_ k: Int) -> Bool { Double(k) * interval >= duration - window - 1e-9 }
}

/// Every measured event from its `XADD` until its broadcasts are in, and the latencies of each
/// sample's window (by receipt time). Bounded by the events in flight, not the run's length.
final class SoakTracker: Sendable {
    struct Bucket: Sendable {
        var first: [Int64] = []
        var last: [Int64] = []
    }

    struct Result: Sendable {
        var sent = 0
        /// Events with every broadcast received.
        var complete = 0
        /// Receipts of events already complete or from before the soak (a state flushed again).
        var extra = 0
        /// Events that got some of their broadcasts, and none.
        var partial = 0
        var missing = 0
        /// The first few event numbers not complete, to look them up.
        var incomplete: [Int] = []
        var publishFailure: String?
    }

    private struct Pending {
        var issued: Int64
        var receipts: Int
    }

    private struct State {
        var outstanding: [Int: Pending] = [:]
        var buckets: [Int: Bucket] = [:]
        var closedBelow = 0
        var result = Result()
        var inFlight = 0
        var failure: String?
    }

    let perEvent: Int
    let t0: Int64
    let interval: Int64
    let samples: Int
    private let state = Mutex(State())

    init(perEvent: Int, t0: Int64, interval: Int64, samples: Int) {
        self.perEvent = perEvent
        self.t0 = t0
        self.interval = interval
        self.samples = samples
    }

    func issued(_ numbers: [Int], at micros: Int64) {
        state.withLock { s in
            s.inFlight += 1
            s.result.sent += numbers.count
            for n in numbers { s.outstanding[n] = Pending(issued: micros, receipts: 0) }
        }
    }

    func done(failure: String?) {
        state.withLock { s in
            s.inFlight -= 1
            if let failure, s.result.publishFailure == nil { s.result.publishFailure = failure }
        }
    }

    var inFlight: Int { state.withLock { $0.inFlight } }
    var failure: String? { state.withLock { $0.failure } }
    func abort(_ reason: String) { state.withLock { $0.failure = reason } }

    func received(_ broadcasts: [(number: Int, micros: Int64)]) {
        state.withLock { s in
            for b in broadcasts {
                guard var p = s.outstanding[b.number] else { s.result.extra += 1; continue }
                p.receipts += 1
                let k = max(s.closedBelow, Int((b.micros - t0) / interval))
                if p.receipts == 1, k < samples { s.buckets[k, default: Bucket()].first.append(b.micros - p.issued) }
                if p.receipts >= perEvent {
                    if k < samples { s.buckets[k, default: Bucket()].last.append(b.micros - p.issued) }
                    s.outstanding[b.number] = nil
                    s.result.complete += 1
                } else {
                    s.outstanding[b.number] = p
                }
            }
        }
    }

    /// The latencies received in sample k's window; later receipts count in later samples.
    func close(_ k: Int) -> Bucket {
        state.withLock { s in
            s.closedBelow = k + 1
            return s.buckets.removeValue(forKey: k) ?? Bucket()
        }
    }

    func result() -> Result {
        state.withLock { s in
            var r = s.result
            r.partial = s.outstanding.values.filter { $0.receipts > 0 }.count
            r.missing = s.outstanding.count - r.partial
            r.incomplete = Array(s.outstanding.keys.sorted().prefix(8))
            return r
        }
    }
}

/// One sample: readings at the end of its window, latencies of the broadcasts received in it.
struct SoakSample: Sendable {
    struct Worker: Sendable { var rss: Double; var hwm: Double }
    var t: Double
    /// The window's length (the last one may be shorter).
    var seconds: Double
    var usedMB: Double
    var rssMB: Double
    var keys: Int64
    var entries: Int64
    var lag: Int64?
    var pending: Int64
    var scores: Int
    var p50: Double?
    var p99: Double?
    var max: Double?
    var lastP99: Double?
    var workers: [Worker?]
    var sandboxMiB: Double?
    var benchMiB: Double?
    /// How many cores the whole machine kept busy in the window, and the share of its CPU time
    /// the host gave to other guests (steal): what a latency spike may come from.
    var busyCores: Double?
    var steal: Double?
}

/// Reads the delivery log every half second, and closes a sample at the end of each window:
/// prints it as a table row and appends it to the CSV file.
final class SoakMonitor: Sendable {
    struct Result: Sendable {
        var samples: [SoakSample]
        var firstWindow: [Int64]
        var lastWindow: [Int64]
        /// The delivery log's sequence read up to.
        var since: Int
    }

    let redis: RedisConnection
    let log: DeliveryLog
    let tracker: SoakTracker
    let windows: SoakWindows
    let t0: Int64
    let inputs: [String]
    let slices: [String]
    let group: String
    let workers: [Int32]
    let sandboxPid: Int32?
    let csv: String?

    init(redis: RedisConnection, log: DeliveryLog, tracker: SoakTracker, windows: SoakWindows, t0: Int64, inputs: [String], slices: [String],
         group: String, workers: [Int32], sandboxPid: Int32?, csv: String?) {
        self.redis = redis
        self.log = log
        self.tracker = tracker
        self.windows = windows
        self.t0 = t0
        self.inputs = inputs
        self.slices = slices
        self.group = group
        self.workers = workers
        self.sandboxPid = sandboxPid
        self.csv = csv
    }

    func run(since start: Int) async throws -> Result {
        var since = start
        var result = Result(samples: [], firstWindow: [], lastWindow: [], since: start)
        var file: FileHandle?
        if let csv {
            let header = ["t_s", "redis_used_mb", "redis_rss_mb", "redis_keys", "stream_entries", "lag", "pending", "scores", "p50_ms", "p99_ms",
                          "max_ms", "last_p99_ms", "sandbox_rss_mib", "bench_rss_mib", "host_busy_cores", "host_steal_pct"]
                + workers.indices.flatMap { ["w\($0 + 1)_rss_mib", "w\($0 + 1)_hwm_mib"] }
            _ = FileManager.default.createFile(atPath: csv, contents: Data((header.joined(separator: ",") + "\n").utf8))
            file = FileHandle(forWritingAtPath: csv)
            file?.seekToEndOfFile()
        }
        defer { try? file?.close() }
        say(tableHeader)
        var host = (busy: HostProbe.sample(), steal: StealProbe.sample())
        var k = 0
        while k < windows.samples {
            let boundary = t0 + Int64(windows.end(k) * 1e6) + 100_000
            let now = wallMicros()
            let wake = min(now + 500_000, boundary)
            if wake > now { try await Task.sleep(for: .microseconds(wake - now)) }
            let fetchStarted = wallMicros()
            let fetched = try await log.fetch(after: since)
            since = fetched.last
            tracker.received(fetched.broadcasts)
            while k < windows.samples, fetchStarted >= t0 + Int64(windows.end(k) * 1e6) + 100_000 {
                let bucket = tracker.close(k)
                var sample = try await measure(k, bucket)
                let now = (busy: HostProbe.sample(), steal: StealProbe.sample())
                if let a = host.busy, let b = now.busy, b.total > a.total {
                    sample.busyCores = (b.busy - a.busy) / (b.total - a.total) * Double(ProcessInfo.processInfo.activeProcessorCount)
                }
                if let a = host.steal, let b = now.steal, b.total > a.total { sample.steal = (b.steal - a.steal) / (b.total - a.total) }
                host = now
                if windows.inFirstWindow(k) { result.firstWindow += bucket.first }
                if windows.inLastWindow(k) { result.lastWindow += bucket.first }
                say(row(sample))
                file?.write(Data((csvRow(sample) + "\n").utf8))
                result.samples.append(sample)
                k += 1
            }
        }
        result.since = since
        return result
    }

    private func measure(_ k: Int, _ bucket: SoakTracker.Bucket) async throws -> SoakSample {
        var commands = [RedisCommand("INFO", "memory"), RedisCommand("DBSIZE")]
        for s in inputs { commands += [RedisCommand("XINFO", "GROUPS", s), RedisCommand("XLEN", s)] }
        commands += slices.map { RedisCommand("XINFO", "GROUPS", $0) }
        let replies = try await redis.pipeline(commands)
        var lag: Int64? = 0
        var pending = replies.suffix(slices.count).reduce(0) { $0 + (BenchRedis.group(group, in: $1)?["pending"]?.int ?? 0) }
        var entries: Int64 = 0
        for i in inputs.indices {
            let g = BenchRedis.group(group, in: replies[2 + 2 * i])
            pending += g?["pending"]?.int ?? 0
            if let l = g?["lag"], !l.isNull, let n = l.int { lag = lag.map { $0 + n } } else { lag = nil }
            entries += replies[3 + 2 * i].int ?? 0
        }
        let first = Percentiles(bucket.first), last = Percentiles(bucket.last)
        func ms(_ micros: Double) -> Double? { bucket.first.isEmpty ? nil : micros / 1000 }
        return SoakSample(
            t: windows.end(k), seconds: windows.end(k) - Double(k) * windows.interval,
            usedMB: Double(BenchRedis.info("used_memory", in: replies[0]) ?? 0) / 1e6,
            rssMB: Double(BenchRedis.info("used_memory_rss", in: replies[0]) ?? 0) / 1e6,
            keys: replies[1].int ?? 0, entries: entries, lag: lag, pending: pending, scores: bucket.first.count,
            p50: ms(first.p50), p99: ms(first.p99), max: ms(first.max), lastP99: bucket.last.isEmpty ? nil : last.p99 / 1000,
            workers: workers.map { pid in PeakMemory.read(pid).map { SoakSample.Worker(rss: Double($0.rss) / 1024, hwm: Double($0.hwm) / 1024) } },
            sandboxMiB: sandboxPid.flatMap { PeakMemory.read($0) }.map { Double($0.rss) / 1024 },
            benchMiB: PeakMemory.read(ProcessInfo.processInfo.processIdentifier).map { Double($0.rss) / 1024 })
    }

    private var tableHeader: String {
        table(["t", "redis MB", "keys", "entries", "lag", "pending", "scores/s", "p50 ms", "p99 ms"]
              + workers.indices.map { "w\($0 + 1) RSS/HWM" } + ["sandbox MiB", "bench MiB", "busy", "steal"])
    }

    private func row(_ s: SoakSample) -> String {
        func opt(_ v: Double?, _ f: String) -> String { v.map { String(format: f, $0) } ?? "-" }
        return table([String(format: "%.0fs", s.t), String(format: "%.1f", s.usedMB), "\(s.keys)", "\(s.entries)", s.lag.map { "\($0)" } ?? "-",
                      "\(s.pending)", String(format: "%.0f", Double(s.scores) / s.seconds), opt(s.p50, "%.2f"), opt(s.p99, "%.2f")]
                     + s.workers.map { w in w.map { String(format: "%.1f/%.1f", $0.rss, $0.hwm) } ?? "-" }
                     + [opt(s.sandboxMiB, "%.1f"), opt(s.benchMiB, "%.1f"), opt(s.busyCores, "%.2f"), opt(s.steal.map { $0 * 100 }, "%.0f%%")])
    }

    /// Right-aligned columns, as wide as the header's.
    private func table(_ cells: [String]) -> String {
        let widths = [6, 9, 8, 9, 7, 8, 8, 7, 7] + workers.map { _ in 14 } + [11, 9, 5, 5]
        return zip(cells, widths).map { String(repeating: " ", count: max(0, $1 - $0.count)) + $0 }.joined(separator: " ")
    }

    private func csvRow(_ s: SoakSample) -> String {
        func opt(_ v: Double?, _ f: String = "%.3f") -> String { v.map { String(format: f, $0) } ?? "" }
        var cells = [String(format: "%.1f", s.t), opt(s.usedMB), opt(s.rssMB), "\(s.keys)", "\(s.entries)", s.lag.map { "\($0)" } ?? "", "\(s.pending)",
                     "\(s.scores)", opt(s.p50), opt(s.p99), opt(s.max), opt(s.lastP99), opt(s.sandboxMiB, "%.1f"), opt(s.benchMiB, "%.1f"),
                     opt(s.busyCores, "%.2f"), opt(s.steal.map { $0 * 100 }, "%.1f")]
        for w in s.workers { cells += [opt(w?.rss, "%.1f"), opt(w?.hwm, "%.1f")] }
        return cells.joined(separator: ",")
    }
}

/// The criteria, each with its measured figure.
struct SoakVerdict {
    var lines: [String] = []
    var failed: [String] = []
    var passed: Bool { failed.isEmpty }
    var slope = 0.0
    var intercept = 0.0
    var fitted = 0
    var limits: (slope: Double, rss: Double, ratio: Double, rssSlope: Double)
    var p99First = 0.0
    var p99Last = 0.0

    init(samples: [SoakSample], windows: SoakWindows, first: [Int64], last: [Int64], hwm: [Double], result: SoakTracker.Result, deadLetters: Int,
         staleEvents: Int?, limits: (slope: Double, rss: Double, ratio: Double, rssSlope: Double)) {
        self.limits = limits
        lines.append("criteria:")
        func judge(_ name: String, _ ok: Bool, _ text: String) {
            lines.append("  \(ok ? "PASS" : "FAIL")  \(name): \(text)")
            if !ok { failed.append(name) }
        }

        // Redis memory: least squares over the samples from the end of the warm-up on.
        let points = samples.filter { $0.t >= windows.warmup - 1e-9 }.map { (x: $0.t / 60, y: $0.usedMB) }
        fitted = points.count
        if let fit = SoakVerdict.leastSquares(points) {
            (slope, intercept) = fit
            let from = points.first!.y, to = points.last!.y
            judge("Redis memory", slope < limits.slope, String(format: "used_memory grows %.2f MB/min after warm-up (least squares over %d samples from %@ to %@: %.1f → %.1f MB); limit < %.2f MB/min",
                                                               slope, points.count, SoakBench.length(windows.warmup), SoakBench.length(windows.duration), from, to, limits.slope))
        } else {
            judge("Redis memory", false, "only \(points.count) samples after warm-up (3 needed)")
        }

        // Workers' RSS over time: a worker that runs for days must not creep. Judged on fits of
        // 10 minutes or more (shorter ones measure the allocator's jitter, about ±1 MiB).
        let span = (samples.last?.t ?? 0) - windows.warmup
        var creeps: [String] = []
        var creepOK = true
        for i in 0..<(samples.first?.workers.count ?? 0) {
            let pts = samples.filter { $0.t >= windows.warmup - 1e-9 }.compactMap { s in s.workers[i].map { (x: s.t / 60, y: $0.rss) } }
            guard let fit = SoakVerdict.leastSquares(pts) else { continue }
            creeps.append(String(format: "w%d %+.3f", i + 1, fit.slope))
            if fit.slope > limits.rssSlope { creepOK = false }
        }
        if span >= 600 {
            judge("worker RSS flat", creepOK, "VmRSS slope after warm-up (least squares) \(creeps.joined(separator: ", ")) MiB/min; limit \(limits.rssSlope) MiB/min")
        } else {
            lines.append("  ----  worker RSS flat: VmRSS slope after warm-up \(creeps.joined(separator: ", ")) MiB/min (not judged: under 10 minutes of samples)")
        }

        // Workers' peak RSS.
        let peak = hwm.max() ?? 0
        judge("worker RSS", !hwm.isEmpty && peak <= limits.rss,
              hwm.isEmpty ? "no worker PIDs given (--worker-pid)"
                  : String(format: "peak VmHWM %.1f MiB (%@); limit %.0f MiB", peak,
                           hwm.enumerated().map { String(format: "w%d %.1f", $0.offset + 1, $0.element) }.joined(separator: ", "), limits.rss))

        // p99 at the end against just after warm-up.
        let a = Percentiles(first), b = Percentiles(last)
        p99First = a.p99 / 1000
        p99Last = b.p99 / 1000
        let w = SoakBench.length(windows.window)
        if first.isEmpty || last.isEmpty {
            judge("p99", false, "no broadcasts received in the \(first.isEmpty ? "first" : "last") window")
        } else {
            let ratio = b.p99 / a.p99
            judge("p99", ratio <= limits.ratio,
                  String(format: "last %@ %.2f ms (p50 %.2f, %d scores) against the first %@ after warm-up %.2f ms (p50 %.2f, %d scores) = %.2f×; limit %.2f×",
                         w, b.p99 / 1000, b.p50 / 1000, last.count, w, a.p99 / 1000, a.p50 / 1000, first.count, ratio, limits.ratio))
            // A machine busy with other work moves the tail more than anything measured here.
            let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
            let compared = samples.filter { s in
                let from = s.t - s.seconds
                return (from >= windows.warmup - 1e-9 && s.t <= windows.warmup + windows.window + 1e-9) || from >= windows.duration - windows.window - 1e-9
            }
            if let busiest = compared.compactMap(\.busyCores).max(), busiest >= 0.9 * cores {
                lines.append(String(format: "        note: the machine was busy on %.2f of %.0f cores in a compared window (the busy column; the soak's own processes use about 1): its p99 measures the machine as much as the code",
                                    busiest, cores))
            }
        }

        // Nothing lost. A score processed after a newer event of its match (two workers, one of
        // them held up) is stale by design: not sent as itself, the device shows the newer state.
        // Scores that got no broadcast at all are excused up to the stale events the workers
        // counted; one that reached some of its channels and not the others never is.
        let excused = min(result.missing, staleEvents ?? 0)
        let lost = result.partial + result.missing - excused
        let staleText = staleEvents.map { "the workers counted \($0) events stale or after their match's end (processed after a newer event of their match, or after its full time: by design not sent as themselves), which excuses \(excused)" }
            ?? "the workers' stale counts unknown (no --worker-metrics), so none excused"
        judge("nothing lost", lost == 0 && deadLetters == 0,
              "\(lost) of \(result.sent) match.score events lost: \(result.missing) got no broadcast, \(result.partial) only some of theirs; \(staleText); "
                  + "\(deadLetters) dead letters; \(result.complete) complete, \(result.extra) receipts beyond a score's own (states sent again) not counted"
                  + (result.incomplete.isEmpty ? "" : "; incomplete, the first: \(result.incomplete.map(String.init).joined(separator: ", "))"))
    }

    /// The least-squares line through `points`; nil with fewer than 3.
    static func leastSquares(_ points: [(x: Double, y: Double)]) -> (slope: Double, intercept: Double)? {
        guard points.count >= 3 else { return nil }
        let mx = points.map(\.x).reduce(0, +) / Double(points.count), my = points.map(\.y).reduce(0, +) / Double(points.count)
        let sxy = points.map { ($0.x - mx) * ($0.y - my) }.reduce(0, +), sxx = points.map { ($0.x - mx) * ($0.x - mx) }.reduce(0, +)
        let slope = sxx > 0 ? sxy / sxx : 0
        return (slope, my - slope * mx)
    }

    /// Variables for scripts/soak-plot.gp.
    func gnuplotSummary(workers: Int, duration: Double, windows: SoakWindows) -> String {
        let title = passed ? "PASS" : "FAIL: " + failed.joined(separator: ", ")
        return """
        # written by activitycast bench soak; loaded by scripts/soak-plot.gp
        duration = \(duration)
        warmup = \(windows.warmup)
        window = \(windows.window)
        slope = \(slope)
        slope_limit = \(limits.slope)
        rss_limit = \(limits.rss)
        p99_first = \(p99First)
        p99_last = \(p99Last)
        intercept = \(intercept)
        workers = \(workers)
        cores = \(ProcessInfo.processInfo.activeProcessorCount)
        verdict = "\(title)"

        """
    }
}
