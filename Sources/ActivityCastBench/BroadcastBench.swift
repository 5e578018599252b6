import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSettings
import ActivityCastWorker
import APNs
import ArgumentParser
import Foundation
import Logging
import RedisClient
import Synchronization

/// Broadcast latency end to end: a publisher `XADD`s `match.score` events at a steady rate,
/// round-robin over many keys, to the sports feed that running workers consume; each event's
/// latency is the sandbox's receipt time of its broadcast minus the time the bench issued its
/// `XADD` (both the wall clock of this machine, in µs).
///
/// Each event carries a unique number in `clock`, which the route copies into the content-state
/// and the sandbox's delivery log keeps: that is how a broadcast is matched to its event. The
/// keys' channels are made by a warm-up (one event per key, waited for), so the runs measure the
/// steady state, not channel creation.
struct BroadcastBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broadcast",
        abstract: "Latency from XADD to the sandbox's receipt of the broadcast, at a steady rate over many keys: p50/p90/p99/max per run and their medians.",
        discussion: """
        Needs workers consuming the same Redis and prefix and sending to the sandbox given here, and a sandbox whose
        delivery log (--delivery-log) holds a run's broadcasts. scripts/bench-broadcast.sh starts them all on free loopback
        ports. Writes under the configured prefix; use a Redis nobody else uses.
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "The sandbox, host:port (default: sandbox.listen). Its certificate is read from sandbox.dir.") var sandbox: String?
    @Option(help: "Events per second, paced by a clock (not bursts).") var eventsPerSecond = 2000.0
    @Option(help: "Activity keys (matches) the events go to, round-robin.") var keys = 1000
    @Option(help: "Seconds of events per run.") var seconds = 10.0
    @Option(help: "Runs; the median of each figure is reported.") var runs = 3
    @Option(help: "A worker's PID (repeatable): its CPU during each run is reported.") var workerPid: [Int32] = []
    @Option(help: "The sandbox's PID: its CPU during each run is reported.") var sandboxPid: Int32?
    @Option(help: "redis-server's PID (once per node of a cluster): its CPU during each run is reported.") var redisPid: [Int32] = []
    @Option(help: "Seconds to wait for the workers to finish a run's events before giving up.") var drainTimeout = 60.0
    @Option(help: "Write every measured event to this CSV file (run, event, key, XADD µs, first and last receipt µs; empty: lost), for a closer look.")
    var dump: String?

    func validate() throws {
        guard eventsPerSecond > 0, eventsPerSecond <= 100_000 else { throw ValidationError("--events-per-second is 1-100000") }
        guard keys > 0, keys <= 5000 else {
            throw ValidationError("--keys is 1-5000 (each key has a channel per APNs environment; the sandbox allows 10,000 per app)")
        }
        guard seconds > 0, runs > 0 else { throw ValidationError("--seconds and --runs must be positive") }
    }

    func run() async throws {
        let (settings, logger) = try benchSetup(common, sandbox: sandbox)
        let feed = try settings.sportsFeed()
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let admin = try makeAPNsClient(settings, logger: logger)
        defer { admin.shutdown() }
        let log = DeliveryLog(client: admin)
        let counting = CountingRedis(redis)
        let publisher = try Publisher(redis: redis, counting: counting, settings: settings, keys: keys,
                                      matchPrefix: "bb\(UInt32.random(in: 0...UInt32.max))-")
        let perRun = Int((eventsPerSecond * seconds).rounded())
        print("target: sandbox \(admin.configuration.endpoint), stream \(feed.stream); \(Int(eventsPerSecond)) events/s over \(keys) keys, "
              + "\(perRun) events per run; latency = the sandbox's receipt of the broadcast − XADD issued (wall clock, µs)")

        // Warm-up: a device on broadcast per key, then each key's first event makes its channels;
        // nothing of it is measured.
        try await publisher.registerViewers(registrations: settings.registrationsStream, timeout: .seconds(drainTimeout + Double(keys) / 100))
        var since = try await log.lastSequence()
        let warmStart = ContinuousClock.now
        let warm = try await publisher.publish(count: keys, rate: eventsPerSecond)
        try await publisher.waitDrained(timeout: .seconds(drainTimeout + Double(keys) / 100),
                                        hint: "are workers running against this Redis with prefix '\(settings.prefix)' and this sandbox?")
        let warmDeliveries = try await log.fetch(after: since)
        since = warmDeliveries.last
        let warmCounts = warm.receipts(warmDeliveries.broadcasts).map(\.count)
        let perEvent = warmCounts.max() ?? 0
        guard perEvent > 0, warmCounts.allSatisfy({ $0 == perEvent }) else {
            let none = warmCounts.filter { $0 == 0 }.count
            throw CommandFailure("warm-up: \(none) of \(keys) keys' first events reached no channel, others got up to \(perEvent) broadcasts: the keys' channels are missing")
        }
        print(String(format: "warm-up: %d events (one per key, creating its channels) done in %.2f s; each event is %d broadcast%@ (a channel per APNs environment), latency is measured to the first and to the last",
                     keys, (ContinuousClock.now - warmStart).seconds, perEvent, perEvent == 1 ? "" : "s"))

        var results: [RunResult] = []
        var steals: [Double] = []
        var redisPerEvent: [Double] = []
        var csv = "run,event,key,xadd_us,first_us,last_us\n"
        for run in 1...runs {
            let steal = StealProbe()
            let host = HostProbe()
            let cpu = CPUProbe(workers: workerPid, sandbox: sandboxPid, redis: redisPid)
            let (redisBefore, _, _) = try await counting.snapshot()
            let started = ContinuousClock.now
            let sent = try await publisher.publish(count: perRun, rate: eventsPerSecond)
            try await publisher.waitDrained(timeout: .seconds(drainTimeout), hint: "the workers fell behind or stopped")
            let window = (ContinuousClock.now - started).seconds
            let (redisAfter, own, trips) = try await counting.snapshot()
            let redisWork = redisBefore.delta(to: redisAfter, own: own, ownTrips: trips)
            redisPerEvent.append(redisWork.cpuSeconds * 1e6 / Double(perRun))
            let load = cpu.finish(seconds: window)
            let busy = host.finish()
            let stolen = steal.finish()
            let fetched = try await log.fetch(after: since)
            since = fetched.last
            let receipts = sent.receipts(fetched.broadcasts)
            let result = RunResult(sent: sent, receipts: receipts, perEvent: perEvent)
            results.append(result)
            if dump != nil {
                for (i, (issued, times)) in zip(sent.micros, receipts).enumerated() {
                    let sorted = times.sorted()
                    let last = sorted.count >= perEvent ? String(sorted[perEvent - 1]) : ""
                    csv += "\(run),\(sent.firstNumber + i),\((sent.firstNumber + i) % keys),\(issued),\(sorted.first.map(String.init) ?? ""),\(last)\n"
                }
            }
            print(String(format: "run %d: %d events at %.0f/s; first broadcast p50 %@, p90 %@, p99 %@, max %@; last broadcast p50 %@, p99 %@; lost %d",
                         run, perRun, sent.achievedRate, ms(result.first.p50), ms(result.first.p90), ms(result.first.p99), ms(result.first.max),
                         ms(result.last.p50), ms(result.last.p99), result.lost))
            print(String(format: "       publisher: sends late against the clock p99 %@, max %@; duplicates received %d",
                         ms(sent.lateness.p99), ms(sent.lateness.max), result.duplicates))
            print("       CPU (share of one core over \(String(format: "%.1f", window)) s): \(load)")
            // Everything Redis did during the run, the publisher's XADDs and the drain included
            // (the bench's own polls and INFO taken out).
            print("       redis: \(redisWork.describe(per: perRun, unit: "event", top: 8))")
            if let busy {
                let cores = ProcessInfo.processInfo.activeProcessorCount
                print(String(format: "       machine: %.1f of %d cores busy, %.1f of them with other processes than the ones above",
                             busy, cores, max(0, busy - load.total)))
            }
            if let stolen {
                steals.append(stolen)
                print(String(format: "       host steal: %.0f%% of this VM's CPU time went to other guests during this run", stolen * 100))
            }
        }
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        let lost = results.map(\.lost).reduce(0, +)
        print(String(format: "median of %d runs: first broadcast p50 %@, p90 %@, p99 %@ (goal ≤ 2 ms), max %@; last broadcast p50 %@, p99 %@; achieved %.0f events/s; lost %d",
                     runs, ms(median(results.map(\.first.p50))), ms(median(results.map(\.first.p90))), ms(median(results.map(\.first.p99))),
                     ms(median(results.map(\.first.max))), ms(median(results.map(\.last.p50))), ms(median(results.map(\.last.p99))),
                     median(results.map(\.rate)), lost))
        if let worst = steals.max() {
            print(String(format: "host steal: %.0f%% at most (runs with much steal measure the host, not the code)", worst * 100))
        }
        try await printRedisShare(publisher, counting, median(redisPerEvent), prefix: settings.prefix)
        if let dump { try csv.write(toFile: dump, atomically: true, encoding: .utf8) }
        if lost > 0 { throw CommandFailure("\(lost) events lost: their broadcast never reached the sandbox") }
    }

    private func ms(_ micros: Double) -> String { String(format: "%.2f ms", micros / 1000) }

    /// Redis's CPU per event split into the feed's part and the workers': the same events at the
    /// same rate to a stream no worker reads (nothing woken, nothing processed) measure what the
    /// publisher's `XADD` costs Redis by itself; the rest of a run's figure is the workers' doing.
    private func printRedisShare(_ publisher: Publisher, _ counting: CountingRedis, _ runsMedian: Double, prefix: String) async throws {
        let stream = "\(prefix):bench:xadd-only:\(publisher.matchPrefix)"
        let n = Int((eventsPerSecond * min(seconds, 5)).rounded())
        let (before, _, _) = try await counting.snapshot()
        _ = try await publisher.publish(count: n, rate: eventsPerSecond, to: stream)
        let (after, own, trips) = try await counting.snapshot()
        try await counting.send(RedisCommand("DEL", stream))
        let xadd = before.delta(to: after, own: own, ownTrips: trips).cpuSeconds * 1e6 / Double(n)
        print(String(format: "redis: %.0f µs of CPU per event (median of the runs; goal ≤ 100 µs); the publisher's XADD by itself %.0f µs (%d events at the same "
                     + "rate to a stream no worker reads); the workers' share %.0f µs", runsMedian, xadd, n, runsMedian - xadd))
    }
}

/// Latency percentiles in µs.
struct Percentiles {
    var p50 = 0.0, p90 = 0.0, p99 = 0.0, max = 0.0

    /// Nearest-rank percentiles of `values`.
    init(_ values: [Int64]) {
        guard !values.isEmpty else { return }
        let sorted = values.sorted()
        func rank(_ p: Double) -> Double { Double(sorted[Swift.max(0, Int((p * Double(sorted.count)).rounded(.up)) - 1)]) }
        p50 = rank(0.50); p90 = rank(0.90); p99 = rank(0.99); max = Double(sorted[sorted.count - 1])
    }
}

struct RunResult {
    var first: Percentiles
    var last: Percentiles
    var rate: Double
    /// Events of which at least one broadcast never reached the sandbox.
    var lost: Int
    /// Broadcasts received more than once (a request sent again after a lost connection).
    var duplicates: Int

    init(sent: Sent, receipts: [[Int64]], perEvent: Int) {
        var first: [Int64] = [], last: [Int64] = []
        var lost = 0, duplicates = 0
        for (sentAt, times) in zip(sent.micros, receipts) {
            if times.count < perEvent { lost += 1 }
            duplicates += Swift.max(0, times.count - perEvent)
            guard let earliest = times.min() else { continue }
            first.append(earliest - sentAt)
            // The last distinct broadcast: with duplicates, the perEvent-th receipt.
            last.append(times.sorted()[Swift.min(times.count, perEvent) - 1] - sentAt)
        }
        self.first = Percentiles(first)
        self.last = Percentiles(last)
        self.rate = sent.achievedRate
        self.lost = lost
        self.duplicates = duplicates
    }
}

/// What the publisher sent: event numbers `firstNumber…` and when each `XADD` was issued.
struct Sent {
    var firstNumber: Int
    var micros: [Int64]
    /// How late each send was against its slot on the clock, µs.
    var lateness: Percentiles
    var achievedRate: Double

    /// The receipt times of each event's broadcasts, in event order.
    func receipts(_ broadcasts: [(number: Int, micros: Int64)]) -> [[Int64]] {
        var out = [[Int64]](repeating: [], count: micros.count)
        for b in broadcasts where b.number >= firstNumber && b.number < firstNumber + micros.count {
            out[b.number - firstNumber].append(b.micros)
        }
        return out
    }
}

/// The wall clock in µs since 1970 (the sandbox stamps receipts with the same clock).
func wallMicros() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
}

/// Adds `match.score` events at a steady rate and knows when the workers have finished them.
final class Publisher: Sendable {
    let redis: RedisConnection
    /// The bench's own polls go through it (taken out of what Redis reports); the XADDs don't.
    let counting: CountingRedis
    let group: String
    let keys: Int
    let matchPrefix: String
    /// Per key (round-robin), the sports feed's stream it goes to: its shard (`streams.shards`),
    /// or the feed itself.
    let streams: [String]
    private let counter = NumberCounter()

    /// Redis's URL: the paced publisher (`PacedXADD`) opens its own connection where it can.
    let url: RedisURL

    init(redis: RedisConnection, counting: CountingRedis, settings: Settings, keys: Int, matchPrefix: String) throws {
        self.redis = redis
        self.url = settings.redisConfiguration.url
        self.counting = counting
        self.group = settings.group
        self.keys = keys
        self.matchPrefix = matchPrefix
        let feed = try settings.sportsFeed().stream
        streams = (0..<keys).map { settings.feedStream(.sports, fields: [("match", "\(matchPrefix)\($0)")]) ?? feed }
    }

    /// `count` events, event i due at start + i/rate on the monotonic clock (a late one goes at
    /// once; none waits for an earlier one's reply), round-robin over the keys. Each carries its
    /// number in `clock` (the content-state's `clock`), `ts` is the wall clock in ms. `to`:
    /// another stream for all of them. Paced by a thread of its own (`PacedXADD`) when every
    /// stream is on one node that needs no TLS, password or database; else from tasks.
    func publish(count: Int, rate: Double, to other: String? = nil) async throws -> Sent {
        let first = counter.take(count)
        let (streams, keys, prefix) = (self.streams, self.keys, self.matchPrefix)
        let command = { @Sendable (i: Int, issued: Int64) -> [[UInt8]] in
            let number = first + i
            return ["XADD", other ?? streams[number % keys], "*", "type", "match.score", "ts", String(issued / 1000),
                    "match", "\(prefix)\(number % keys)", "home_score", "0", "away_score", "0", "clock", String(number)].map { Array($0.utf8) }
        }
        let sent: PacedXADD.Result
        let node = try await pacedNode(for: other.map { [$0] } ?? streams)
        // The first slot once the path is chosen (asking a cluster where the streams are takes a moment).
        let start = ContinuousClock.now + .milliseconds(5)
        if let node {
            sent = try await PacedXADD.run(host: node.host, port: node.port, count: count, rate: rate, start: start, command: command)
        } else {
            sent = try await publishFromTasks(count: count, rate: rate, start: start, command: command)
        }
        let span = Double(sent.micros.max()! - sent.micros.min()!) / 1e6
        return Sent(firstNumber: first, micros: sent.micros, lateness: Percentiles(sent.lateness),
                    achievedRate: count > 1 && span > 0 ? Double(count - 1) / span : 0)
    }

    /// The node every stream is on, when a plain connection to it can publish.
    private func pacedNode(for streams: [String]) async throws -> RedisNodeAddress? {
        guard !url.tls, url.username == nil, url.password == nil, url.database == 0 else { return nil }
        var nodes = Set<RedisNodeAddress>()
        for stream in Set(streams) { nodes.insert(try await redis.node(forKey: stream)) }
        return nodes.count == 1 ? nodes.first : nil
    }

    /// The same, each event from a task of its own through the Redis client.
    private func publishFromTasks(count: Int, rate: Double, start: ContinuousClock.Instant,
                                  command: @escaping @Sendable (Int, Int64) -> [[UInt8]]) async throws -> PacedXADD.Result {
        var lateness: [Int64] = []
        lateness.reserveCapacity(count)
        var micros = [Int64](repeating: 0, count: count)
        let redis = self.redis
        try await withThrowingTaskGroup(of: (Int, Int64).self) { group in
            for i in 0..<count {
                let due = start + .nanoseconds(PacedXADD.slot(i, rate: rate))
                if due > .now { try await Task.sleep(until: due, tolerance: .microseconds(10), clock: .continuous) }
                lateness.append(Int64((ContinuousClock.now - due).seconds * 1e6))
                group.addTask {
                    let issued = wallMicros()
                    let reply = try await redis.send(RedisCommand(arguments: command(i, issued)))
                    guard reply.string != nil else { throw CommandFailure("XADD: \(reply)") }
                    return (i, issued)
                }
            }
            for try await (i, issued) in group { micros[i] = issued }
        }
        return PacedXADD.Result(micros: micros, lateness: lateness)
    }

    /// One device on broadcast per key (an activity the app started on the key's channel): a key
    /// nobody follows on broadcast has no channel. Waits until the workers applied them.
    func registerViewers(registrations: String, timeout: Duration) async throws {
        let (keys, prefix) = (self.keys, self.matchPrefix)
        let now = wallMicros() / 1000
        for chunk in stride(from: 0, to: keys, by: 500) {
            let commands = (chunk..<min(keys, chunk + 500)).map { k in
                RedisCommand("XADD", registrations, "*", "type", "activity.token", "ts", now, "device", "\(prefix)viewer\(k)",
                             "key", "match:\(prefix)\(k)", "activity", "V\(k)", "token", String(format: "%064x", k), "env", "development",
                             "broadcast", "true")
            }
            for reply in try await redis.pipeline(commands) where reply.string == nil { throw CommandFailure("XADD \(registrations): \(reply)") }
        }
        try await BenchRedis.waitConsumed(streams: [registrations], group: group, timeout: timeout,
                                          hint: "are workers running against this Redis?") { try await redis.pipeline($0) }
    }

    /// Waits until the group has delivered every entry of the stream and none is pending: every
    /// event's sends have a final outcome.
    func waitDrained(timeout: Duration, hint: String) async throws {
        try await BenchRedis.waitConsumed(streams: Array(Set(streams)).sorted(), group: group, timeout: timeout, hint: hint) { [counting] in
            try await counting.pipeline($0)
        }
    }
}

/// Event numbers, unique within one bench.
final class NumberCounter: Sendable {
    private let next = Mutex(0)
    func take(_ n: Int) -> Int {
        next.withLock { value in
            let first = value
            value += n
            return first
        }
    }
}

/// Reads the sandbox's delivery log through its admin API, page by page.
struct DeliveryLog {
    let client: APNsClient
    /// The client keeps at most 64 KiB of a response body; pages are sized to stay under it.
    static let bodyCap = 64 * 1024

    struct Fetched {
        /// Broadcasts whose content-state has a numeric `clock`: (event number, receipt µs).
        var broadcasts: [(number: Int, micros: Int64)] = []
        /// The sequence number of the last delivery read.
        var last: Int
    }

    func lastSequence() async throws -> Int {
        let page = try await get("/sandbox/deliveries?since=0&limit=0")
        guard let last = page["last"] as? Int else { throw CommandFailure("the sandbox's delivery log has no paging (GET /sandbox/deliveries?since=): an older sandbox?") }
        return last
    }

    /// Every delivery after `since`, up to the newest.
    func fetch(after since: Int) async throws -> Fetched {
        var out = Fetched(last: since)
        out.last = try await read(after: since, logSize: "the broadcasts of one run") { d in
            guard d["kind"] as? String == "broadcast", let micros = d["receivedMicros"] as? Int,
                  let clock = (d["contentState"] as? [String: Any])?["clock"] as? String, let number = Int(clock) else { return }
            out.broadcasts.append((number, Int64(micros)))
        }
        return out
    }

    /// Hands every delivery after `since`, up to the newest, to `each`, a page at a time (halved
    /// while a page is too large for the client); returns the sequence number of the last.
    /// `logSize`: what the sandbox's `--delivery-log` must hold, said when it overwrote any.
    func read(after since: Int, logSize: String, _ each: ([String: Any]) -> Void) async throws -> Int {
        var last = since, limit = 150
        while true {
            let page: [String: Any]
            do {
                page = try await get("/sandbox/deliveries?since=\(last)&limit=\(limit)")
            } catch is PageTooLarge where limit > 1 {
                limit /= 2
                continue
            }
            if let overwritten = page["overwritten"] as? Int, overwritten > 0 {
                throw CommandFailure("the sandbox's delivery log overwrote \(overwritten) deliveries before they were read: start it with a larger --delivery-log (at least \(logSize))")
            }
            let list = page["deliveries"] as? [[String: Any]] ?? []
            list.forEach(each)
            if let sequence = list.last?["sequence"] as? Int { last = sequence }
            if list.isEmpty || last >= (page["last"] as? Int ?? 0) { return last }
        }
    }

    struct PageTooLarge: Error {}

    private func get(_ path: String) async throws -> [String: Any] {
        let result = await client.request(method: "GET", path: path, headers: [])
        guard case .response(let r) = result, r.status == 200 else { throw CommandFailure("GET \(path) on the sandbox: \(result)") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any] else {
            if r.body.count >= Self.bodyCap { throw PageTooLarge() }
            throw CommandFailure("GET \(path) on the sandbox: not JSON: \(String(decoding: r.body.prefix(200), as: UTF8.self))")
        }
        return object
    }
}

/// CPU time of the processes under test over a run: workers, sandbox, redis-server and the
/// bench itself, as a share of one core.
struct CPUProbe: CustomStringConvertible {
    let workers: [Int32]
    let sandbox: Int32?
    /// redis-server: one node, or every node of a cluster.
    let redis: [Int32]
    private var start: [Int32: Double] = [:]
    private let selfStart = cpuSeconds(RUSAGE_SELF)
    private var shares: [(String, Double)] = []

    init(workers: [Int32], sandbox: Int32?, redis: [Int32]) {
        self.workers = workers
        self.sandbox = sandbox
        self.redis = redis
        for pid in workers + redis + [sandbox].compactMap({ $0 }) { start[pid] = Self.processCPU(pid) }
    }

    func finish(seconds: Double) -> CPUProbe {
        var done = self
        func share(_ pid: Int32) -> Double { ((Self.processCPU(pid) ?? 0) - (start[pid] ?? 0)) / seconds }
        if !workers.isEmpty {
            let each = workers.map(share)
            let detail = workers.count > 1 ? " (" + each.map { String(format: "%.0f%%", $0 * 100) }.joined(separator: ", ") + ")" : ""
            done.shares.append(("workers\(detail)", each.reduce(0, +)))
        }
        if let sandbox { done.shares.append(("sandbox", share(sandbox))) }
        if !redis.isEmpty {
            let each = redis.map(share)
            let detail = redis.count > 1 ? " (\(redis.count) nodes: " + each.map { String(format: "%.0f%%", $0 * 100) }.joined(separator: ", ") + ")" : ""
            done.shares.append(("redis-server\(detail)", each.reduce(0, +)))
        }
        done.shares.append(("bench (publisher)", (cpuSeconds(RUSAGE_SELF) - selfStart) / seconds))
        return done
    }

    /// Every measured process together, in cores.
    var total: Double { shares.map(\.1).reduce(0, +) }

    var description: String {
        var parts = shares.map { String(format: "%@ %.0f%%", $0.0, $0.1 * 100) }
        if workers.isEmpty { parts.insert("workers not measured (--worker-pid)", at: 0) }
        return parts.joined(separator: ", ")
    }

    /// CPU seconds (user + system) of a process, threads that ended included.
    static func processCPU(_ pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
        // After "pid (comm)": state is field 3, utime 14 and stime 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// How many cores the whole machine kept busy (user, nice, system, irq, softirq in /proc/stat)
/// between creation and `finish()`: what ran besides the processes under test shows there.
struct HostProbe {
    let start: (busy: Double, total: Double)?

    init() { start = Self.sample() }

    func finish() -> Double? {
        guard let start, let end = Self.sample(), end.total > start.total else { return nil }
        return (end.busy - start.busy) / (end.total - start.total) * Double(ProcessInfo.processInfo.activeProcessorCount)
    }

    static func sample() -> (busy: Double, total: Double)? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n").first, line.hasPrefix("cpu ") else { return nil }
        let v = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard v.count >= 8 else { return nil }
        return (v[0] + v[1] + v[2] + v[5] + v[6], v.reduce(0, +))
    }
}
