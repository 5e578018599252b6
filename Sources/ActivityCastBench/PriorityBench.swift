import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSend
import ActivityCastWorker
import APNs
import ArgumentParser
import Foundation
import Logging
import RedisClient

/// Priority-10 latency under a priority-5 flood (docs/budgets.md, "Priority 10 first"): critical
/// `match.score` updates to a key B with a small audience, first on an idle worker, then while the
/// same worker fans a routine `match.clock` update (priority 5) out to a key A of N tokens.
///
/// Each update of B carries its own `ts` second, so the sandbox's delivery log names it by
/// `aps.timestamp`; its latency is the receipt (`receivedMicros`) of the last of B's tokens (of
/// it, or of a newer update that superseded it) minus the time the bench issued its `XADD`, both
/// this machine's wall clock in µs. Under the flood
/// only the updates received while A's fan-out was in progress (between A's first and last
/// receipt) count. The log also shows that A's pushes went at priority 5 and B's at 10.
struct PriorityBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "priority",
        abstract: "Priority-10 latency of a small key's critical updates, idle and under a priority-5 fan-out of N tokens: p50/p90/p99/max and the p99 difference.",
        discussion: """
        Needs workers consuming the same Redis and prefix, sending to the sandbox given here, with budgets that keep
        key B's critical updates at 10 (budgets.standard.capacity 10000 and a high refill) and budgets.standard.spacing_ms
        0 (so A's routine update isn't coalesced after its warm-up), and a sandbox whose delivery log (--delivery-log)
        holds a flood's deliveries (N plus B's). scripts/bench-priority.sh starts them all on free loopback ports.
        Writes under the configured prefix and deletes the audiences it loaded; use a Redis nobody else uses.
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "The sandbox, host:port (default: sandbox.listen). Its certificate is read from sandbox.dir.") var sandbox: String?
    @Option(help: "Critical updates to key B per phase (K).") var updates = 200
    @Option(help: "Milliseconds between B's updates (paced by a clock).") var spacingMs = 10.0
    @Option(help: "Tokens of key B (the measured audience).") var audience = 4
    @Option(help: "Tokens of key A (the priority-5 flood).") var floodTokens = 100_000
    @Option(help: "The flood's priority: 5 (a routine match.clock, the goal's case) or 10 (a critical match.score: B's updates then share the lane and the slices stream with it).")
    var floodPriority = 5
    @Option(help: "The goal's queue: the flood's updates counted for it are those issued while at least this many of A's pushes had not reached the sandbox yet (give --flood-tokens well above it, so that many updates are).")
    var queued = 100_000
    @Option(help: "Updates to B before the idle phase (connections, scripts; not measured).") var warmup = 20
    @Option(help: "A worker's PID (repeatable): its CPU during the flood is reported.") var workerPid: [Int32] = []
    @Option(help: "The sandbox's PID: its CPU during the flood is reported.") var sandboxPid: Int32?
    @Option(help: "redis-server's PID (once per node of a cluster): its CPU during the flood is reported.") var redisPid: [Int32] = []
    @Option(help: "Give up when the workers have not finished the events after this many seconds.") var stallTimeout = 60.0
    @Option(help: "Write every measured update to this CSV file (phase, update, XADD µs, first and last receipt µs, tokens that had this very update, counted).") var dump: String?

    func validate() throws {
        guard updates >= 1, updates <= 100_000 else { throw ValidationError("--updates is 1…100000") }
        guard spacingMs > 0, spacingMs <= 10_000 else { throw ValidationError("--spacing-ms is above 0 and at most 10000") }
        guard audience >= 1, audience <= 1000 else { throw ValidationError("--audience is 1…1000") }
        guard floodTokens >= 1, floodTokens <= 10_000_000 else { throw ValidationError("--flood-tokens is 1…10000000") }
        guard warmup >= 0 else { throw ValidationError("--warmup must be 0 or more") }
        guard queued >= 0 else { throw ValidationError("--queued must be 0 or more") }
        guard floodPriority == 5 || floodPriority == 10 else { throw ValidationError("--flood-priority is 5 or 10") }
    }

    func run() async throws {
        let (settings, logger) = try benchSetup(common, sandbox: sandbox)
        let bench = try Bench(settings: settings, logger: logger, workers: workerPid, sandboxPid: sandboxPid, redisPid: redisPid, stallTimeout: stallTimeout)
        defer { bench.close() }
        let redis = bench.redis, admin = bench.admin, feed = bench.feed
        let log = DevicePushLog(client: admin)
        let b = settings.budgets
        func policy(_ name: String, _ p: AudiencePolicy) -> String {
            "\(name) \(p.bucket.capacity)+\(p.bucket.refillPerHour)/h spacing \(p.minSpacingMillis) ms"
        }
        print("target: sandbox \(admin.configuration.endpoint), stream \(feed), prefix \(settings.prefix); APNs \(settings.apns.connections) connection(s) x "
              + "\(settings.apns.maxConcurrentStreams) streams; \(workerPid.count) worker(s); budgets (as this process reads them, the workers should agree): "
              + [policy("standard", b.standard), policy("frequent", b.frequent), policy("channel_no_storage", b.channelNoStorage)].joined(separator: ", "))
        if b.standard.minSpacingMillis > 0 {
            print("warning: budgets.standard.spacing_ms is \(b.standard.minSpacingMillis): A's routine update may be coalesced after its warm-up event (set it to 0)")
        }
        // The stats connection first, before any worker connects (see FanoutBench).
        _ = try await bench.sandbox.read()

        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let keyB = ActivityKey(kind: .match, id: "pb\(run)-b")
        // B's updates carry consecutive seconds (each its own `aps.timestamp`), ending about now:
        // a time far ahead of Redis's clock is refused (limits.max_future_ms).
        var bSecond = Int64(Date().timeIntervalSince1970) - Int64(warmup + 2 * updates + 60)
        func nextB() -> Int64 { bSecond += 1; return bSecond * 1000 + 500 }

        // Key B: its channels (first event), then its audience.
        _ = try await publish(redis, feed, type: "match.score", key: keyB, ts: nextB(), clock: "w")
        try await bench.waitAcknowledged(timeout: 30)
        try await AudienceLoader.load(redis, keys: settings.keys, key: keyB, count: audience, env: bench.env, ts: Int64(Date().timeIntervalSince1970 * 1000))
        let bTokens = Set((try await redis.send(RedisCommand("HVALS", settings.keys.tokens(keyB))).array ?? []).compactMap { $0.string?.lowercased() })
        guard bTokens.count == audience else { throw CommandFailure("key B has \(bTokens.count) tokens, expected \(audience)") }

        // Warm-up: B's path (connections, provider token, scripts), and a small priority-5 fan-out.
        let warmStart = ContinuousClock.now
        if warmup > 0 {
            _ = try await series(redis, feed, key: keyB, count: warmup, ts: nextB)
        }
        let keyW = ActivityKey(kind: .match, id: "pb\(run)-w")
        _ = try await publish(redis, feed, type: "match.score", key: keyW, ts: wallMillis(), clock: "w")
        try await bench.waitAcknowledged(timeout: 30)
        try await AudienceLoader.load(redis, keys: settings.keys, key: keyW, count: 2000, env: bench.env, ts: wallMillis())
        _ = try await publish(redis, feed, type: "match.clock", key: keyW, ts: wallMillis(), clock: "w2")
        try await bench.waitAcknowledged(timeout: stallTimeout)
        print(String(format: "warm-up: %d updates to B (%d tokens) and a 2,000-token priority-5 fan-out in %.2f s (not measured)",
                     warmup, audience, (ContinuousClock.now - warmStart).seconds))

        // Phase idle: B's updates alone.
        try await Task.sleep(for: .milliseconds(300))
        let idleSince = try await log.lastSequence()
        let idleSent = try await series(redis, feed, key: keyB, count: updates, ts: nextB)
        try await bench.waitAcknowledged(timeout: stallTimeout)
        let idleLog = try await log.fetch(after: idleSince)
        let idle = BSamples(sent: idleSent, log: idleLog, tokens: bTokens, window: nil)
        print(idle.report(phase: "idle", spacingMs: spacingMs))

        // Phase flood: A's audience, then its routine update, and B's updates while it fans out.
        let keyA = ActivityKey(kind: .match, id: "pb\(run)-a")
        _ = try await publish(redis, feed, type: "match.score", key: keyA, ts: wallMillis(), clock: "w")
        try await bench.waitAcknowledged(timeout: 30)
        let loadStart = ContinuousClock.now
        try await AudienceLoader.load(redis, keys: settings.keys, key: keyA, count: floodTokens, env: bench.env, ts: wallMillis())
        let loadSeconds = (ContinuousClock.now - loadStart).seconds
        try await Task.sleep(for: .milliseconds(300))
        let floodSince = try await log.lastSequence()
        let cpu = CPUProbe(workers: workerPid, sandbox: sandboxPid, redis: redisPid)
        let host = HostProbe(), steal = StealProbe()
        let phaseStart = ContinuousClock.now
        let aIssued = try await publish(redis, feed, type: floodPriority == 10 ? "match.score" : "match.clock", key: keyA, ts: wallMillis(), clock: "flood")
        let floodSent = try await series(redis, feed, key: keyB, count: updates, ts: nextB)
        try await bench.waitAcknowledged(timeout: stallTimeout)
        // Before reading the log (which costs the sandbox and the bench): the whole phase.
        let phaseSeconds = (ContinuousClock.now - phaseStart).seconds
        let load = cpu.finish(seconds: phaseSeconds)
        let busy = host.finish(), stolen = steal.finish()
        let floodLog = try await log.fetch(after: floodSince)
        var a = FloodStats()
        for d in floodLog.devices where !bTokens.contains(d.target) { a.add(d) }
        guard a.count > 0, let aFirst = a.first, let aLast = a.last else { throw CommandFailure("the flood: no push to A's tokens in the delivery log") }
        let aSeconds = Double(aLast - aIssued) / 1e6
        let flood = BSamples(sent: floodSent, log: floodLog, tokens: bTokens, window: (aFirst, aLast))
        // The updates issued while at least `queued` of A's pushes were still to come (A's receipts so far ≤ N − queued).
        let aReceipts = floodLog.devices.filter { !bTokens.contains($0.target) }.map(\.micros).sorted()
        func receivedBefore(_ micros: Int64) -> Int {
            var lo = 0, hi = aReceipts.count
            while lo < hi { let mid = (lo + hi) / 2; if aReceipts[mid] <= micros { lo = mid + 1 } else { hi = mid } }
            return lo
        }
        let deep = BSamples(sent: floodSent.filter { floodTokens - receivedBefore($0.issued) >= queued }, log: floodLog, tokens: bTokens,
                            window: (aFirst, aLast))
        print(String(format: "flood: A's fan-out of %@ tokens (audience loaded in %.1f s): XADD → first receipt %.1f ms, → last receipt %.3f s = %.0f tokens/s; "
                     + "%@ pushes to A received (%@ distinct tokens), priorities %@, %d with an alert",
                     floodTokens.formatted(), loadSeconds, Double(aFirst - aIssued) / 1000, aSeconds, Double(floodTokens) / aSeconds,
                     a.count.formatted(), a.distinct.formatted(), a.priorityText, a.alerts))
        var cpuLine = String(format: "       CPU over the flood phase (A's fan-out and B's updates until acknowledged, %.2f s; share of one core): ", phaseSeconds) + "\(load)"
        if let busy { cpuLine += String(format: "; machine %.2f of %d cores busy, %.2f of them other processes", busy, ProcessInfo.processInfo.activeProcessorCount, max(0, busy - load.total)) }
        if let stolen { cpuLine += String(format: "; host steal %.0f%%", stolen * 100) }
        print(cpuLine)
        print(flood.report(phase: "flood", spacingMs: spacingMs))

        // B's budget hash: every critical update at 10, none downgraded.
        let hash = try await redis.send(RedisCommand("HGETALL", settings.keys.budget(keyB, .tier(.standard))))
        let counters = BudgetScripts.state(fromHash: hash)?.counters
        print("key B's standard budget: p10 \(counters?.priority10 ?? 0), p5 \(counters?.priority5 ?? 0), downgraded \(counters?.downgraded ?? 0)")

        print("summary:")
        print("  idle:  \(idle.summary)")
        print("  flood: \(flood.summary)")
        print("  flood with ≥ \(queued.formatted()) of A's pushes queued: \(deep.summary)")
        let diff = (flood.latency.p99 - idle.latency.p99) / 1000
        print(String(format: "  p99 flood − idle: %+.2f ms; p50 ratio flood/idle %.2f; A's fan-out %.0f tokens/s at priority %@ (%@ pushes)",
                     diff, idle.latency.p50 > 0 ? flood.latency.p50 / idle.latency.p50 : 0, Double(floodTokens) / aSeconds, a.priorityText, a.count.formatted()))
        if deep.counted >= 100 {
            print(String(format: "  p99 with ≥ %@ queued − idle: %+.2f ms over %d samples (goal ≤ 10 ms)", queued.formatted(),
                         (deep.latency.p99 - idle.latency.p99) / 1000, deep.counted))
        } else {
            print("  p99 with ≥ \(queued.formatted()) queued: \(deep.counted) samples, too few for a p99 (the goal needs 100 or more: raise --flood-tokens above --queued)")
        }

        if let dump {
            var csv = "phase,update,xadd_us,first_us,last_us,tokens_with_this_update,counted\n"
            for (name, s) in [("idle", idle), ("flood", flood)] { csv += s.csv(phase: name) }
            try csv.write(toFile: dump, atomically: true, encoding: .utf8)
        }
        _ = try await redis.pipeline([keyA, keyB, keyW].flatMap { [RedisCommand("UNLINK", settings.keys.tokens($0), settings.keys.meta($0))] })

        var problems: [String] = []
        if a.count != floodTokens || a.distinct != floodTokens { problems.append("A: \(a.count) pushes to \(a.distinct) tokens, expected \(floodTokens) once each") }
        if a.priorities.keys.contains(where: { $0 != floodPriority }) { problems.append("A's pushes were not all at priority \(floodPriority) (\(a.priorityText))") }
        for (name, s) in [("idle", idle), ("flood", flood)] where s.lost > 0 || s.notAt10 > 0 {
            problems.append("\(name): \(s.lost) of B's updates never reached a token (nor anything newer), \(s.notAt10) of B's pushes not at priority 10")
        }
        if !problems.isEmpty { throw CommandFailure(problems.joined(separator: "; ")) }
    }

    func wallMillis() -> Int64 { wallMicros() / 1000 }

    /// `XADD`s one sports event; returns when it was issued (µs, the wall clock).
    func publish(_ redis: CountingRedis, _ stream: String, type: String, key: ActivityKey, ts: Int64, clock: String) async throws -> Int64 {
        let issued = wallMicros()
        // match.clock takes the clock and period only (an unknown field dead-letters the entry).
        let score: [any RedisArgument] = type == "match.score" ? ["home_score", 1, "away_score", 0] : []
        let head: [any RedisArgument] = [stream, "*", "type", type, "ts", ts, "match", key.id]
        let tail: [any RedisArgument] = ["clock", clock, "period", "first_half"]
        let reply = try await redis.send(RedisCommand("XADD", head + score + tail))
        guard reply.string != nil else { throw CommandFailure("XADD \(stream): \(reply)") }
        return issued
    }

    /// `count` critical updates to `key`, one every `spacingMs` on a monotonic clock (a late one
    /// goes at once), each with its own `ts` second.
    func series(_ redis: CountingRedis, _ stream: String, key: ActivityKey, count: Int, ts: () -> Int64) async throws -> [SentUpdate] {
        var out: [SentUpdate] = []
        out.reserveCapacity(count)
        let start = ContinuousClock.now + .milliseconds(1)
        for i in 0..<count {
            let due = start + .microseconds(Int64((Double(i) * spacingMs * 1000).rounded()))
            if due > .now { try await Task.sleep(until: due, tolerance: .microseconds(50), clock: .continuous) }
            let late = (ContinuousClock.now - due).seconds
            let millis = ts()
            let issued = try await publish(redis, stream, type: "match.score", key: key, ts: millis, clock: "b\(i)")
            out.append(SentUpdate(second: millis / 1000, issued: issued, late: late))
        }
        return out
    }
}

struct SentUpdate {
    /// Its `ts` in whole seconds: the push's `aps.timestamp`.
    var second: Int64
    /// When the bench issued its `XADD` (µs, the wall clock).
    var issued: Int64
    /// How late against its slot (s).
    var late: Double
}

/// B's updates matched with their receipts. An update's latency runs until every token of B has
/// received it **or a newer one**: when updates come faster than they are sent, a newer update's
/// fan-out supersedes an older one's (it carries the whole state), and the older one's remaining
/// tokens get the newer push instead — what a device shows is then at least as new.
struct BSamples {
    struct Row { var sent: SentUpdate; var first: Int64?; var last: Int64?; var exact: Int; var counted: Bool }
    var rows: [Row] = []
    var latency = Percentiles([])
    var firstLatency = Percentiles([])
    var counted = 0
    var before = 0, after = 0
    /// Updates some token of B never received, nor anything newer.
    var lost = 0
    /// Updates some token received only through a newer one.
    var superseded = 0
    var received = 0
    /// B's pushes not at priority 10.
    var notAt10 = 0
    /// B's pushes whose timestamp is no update of this phase.
    var unknown = 0
    var audience: Int
    var lateMax = 0.0
    var inWindow: Bool

    /// `window`: (first, last) receipt of the flood (µs); an update counts when all of B's tokens
    /// had it (or a newer one) inside it. nil: every update counts.
    init(sent: [SentUpdate], log: DevicePushLog.Fetched, tokens: Set<String>, window: (Int64, Int64)?) {
        audience = tokens.count
        inWindow = window != nil
        let seconds = Set(sent.map(\.second))
        // Per token: its receipts by timestamp, then the earliest receipt of each second or newer.
        var perToken: [String: [(second: Int64, micros: Int64)]] = [:]
        for d in log.devices where tokens.contains(d.target) {
            guard seconds.contains(d.timestamp) else { unknown += 1; continue }
            received += 1
            if d.priority != 10 { notAt10 += 1 }
            perToken[d.target, default: []].append((d.timestamp, d.micros))
        }
        var earliestFrom: [String: [(second: Int64, micros: Int64)]] = [:]
        for (token, list) in perToken {
            var suffix: [(Int64, Int64)] = []
            var best = Int64.max
            for r in list.sorted(by: { $0.second > $1.second }) {
                best = min(best, r.micros)
                suffix.append((r.second, best))
            }
            earliestFrom[token] = suffix.reversed()  // ascending seconds, each with the earliest receipt of it or newer
        }
        var last: [Int64] = [], first: [Int64] = []
        for s in sent {
            lateMax = max(lateMax, s.late)
            var times: [Int64] = []
            var exact = 0
            for token in tokens {
                let list = perToken[token] ?? []
                if list.contains(where: { $0.second == s.second }) { exact += 1 }
                if let hit = earliestFrom[token]?.first(where: { $0.second >= s.second }) { times.append(hit.micros) }
            }
            var counts = times.count == tokens.count
            if !counts { lost += 1 } else if exact < tokens.count { superseded += 1 }
            let lo = times.min(), hi = times.max()
            if counts, let (from, to) = window, let lo, let hi {
                if hi > to { after += 1; counts = false } else if lo < from { before += 1; counts = false }
            }
            rows.append(Row(sent: s, first: lo, last: hi, exact: exact, counted: counts))
            if counts, let lo, let hi {
                last.append(hi - s.issued)
                first.append(lo - s.issued)
            }
        }
        counted = last.count
        latency = Percentiles(last)
        firstLatency = Percentiles(first)
    }

    private func ms(_ micros: Double) -> String { String(format: "%.2f ms", micros / 1000) }

    func report(phase: String, spacingMs: Double) -> String {
        var line = "\(phase): \(rows.count) critical updates to B (\(audience) token\(audience == 1 ? "" : "s")) every \(String(format: "%g", spacingMs)) ms"
        if inWindow {
            line += "; counted \(counted) received while A's fan-out was in progress (\(before) began before A's first receipt, \(after) ended after its last)"
        }
        line += "; XADD → last of B's tokens p50 \(ms(latency.p50)), p90 \(ms(latency.p90)), p99 \(ms(latency.p99)), max \(ms(latency.max))"
        line += "; first token p50 \(ms(firstLatency.p50)), p99 \(ms(firstLatency.p99))"
        line += "\n       B's pushes: \(received) received, \(notAt10) not at priority 10, \(unknown) of no update of the phase; \(superseded) updates reached some token only through a newer one, "
            + "\(lost) never reached a token (nor anything newer); publisher late by \(ms(lateMax * 1e6)) at most"
        return line
    }

    var summary: String {
        "\(counted) samples, p50 \(ms(latency.p50)), p90 \(ms(latency.p90)), p99 \(ms(latency.p99)), max \(ms(latency.max)); superseded \(superseded); B's pushes not at 10: \(notAt10)"
    }

    func csv(phase: String) -> String {
        rows.enumerated().map { i, r in
            "\(phase),\(i),\(r.sent.issued),\(r.first.map(String.init) ?? ""),\(r.last.map(String.init) ?? ""),\(r.exact),\(r.counted ? 1 : 0)\n"
        }.joined()
    }
}

/// A's pushes in the flood's log.
struct FloodStats {
    var count = 0
    var targets = Set<String>()
    var priorities: [Int: Int] = [:]
    var alerts = 0
    var first: Int64?
    var last: Int64?

    var distinct: Int { targets.count }
    var priorityText: String { priorities.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.formatted())" }.joined(separator: ", ") }

    mutating func add(_ d: DevicePushLog.Push) {
        count += 1
        targets.insert(d.target)
        priorities[d.priority, default: 0] += 1
        if d.alert { alerts += 1 }
        first = min(first ?? d.micros, d.micros)
        last = max(last ?? d.micros, d.micros)
    }
}

/// Reads the device pushes of the sandbox's delivery log (`GET /sandbox/deliveries?since=`),
/// page by page.
struct DevicePushLog {
    let log: DeliveryLog

    init(client: APNsClient) { log = DeliveryLog(client: client) }

    struct Push { var target: String; var priority: Int; var timestamp: Int64; var micros: Int64; var alert: Bool }
    struct Fetched { var devices: [Push] = []; var broadcasts = 0; var last: Int }

    func lastSequence() async throws -> Int { try await log.lastSequence() }

    /// Every delivery after `since`, up to the newest.
    func fetch(after since: Int) async throws -> Fetched {
        var out = Fetched(last: since)
        out.last = try await log.read(after: since, logSize: "the flood's tokens plus B's pushes") { d in
            if d["kind"] as? String == "broadcast" { out.broadcasts += 1; return }
            guard let target = d["target"] as? String, let micros = (d["receivedMicros"] as? NSNumber)?.int64Value,
                  let timestamp = (d["timestamp"] as? NSNumber)?.doubleValue else { return }
            out.devices.append(Push(target: target, priority: (d["priority"] as? NSNumber)?.intValue ?? 0, timestamp: Int64(timestamp),
                                    micros: micros, alert: d["alert"] as? Bool ?? false))
        }
        return out
    }
}
