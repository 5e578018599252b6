import ActivityCastCore
import Foundation
import Synchronization
import RedisClient

/// One slice of one fan-out: the tokens of `key` whose place in Redis's scan order of
/// `{key}:tokens` falls in the slice's range (see `SliceMath`). Any worker can take it.
public struct SliceRef: Sendable, Equatable, CustomStringConvertible {
    public var key: ActivityKey
    /// The fan-out (generation) it belongs to.
    public var gen: String
    public var index: Int
    public var count: Int
    /// The fan-out's highest priority (10 when any audience of it is at 10, else 5): which slices
    /// stream it waits in (`RedisKeys.slices(priority:)`).
    public var priority: Int

    public init(key: ActivityKey, gen: String, index: Int, count: Int, priority: Int) {
        self.key = key
        self.gen = gen
        self.index = index
        self.count = count
        self.priority = priority >= 10 ? 10 : 5
    }

    public var description: String { "\(key) \(gen) slice \(index + 1)/\(count)" }

    /// The fields of its entry in the slices stream.
    public var fields: [String] { ["key", key.description, "gen", gen, "slice", "\(index)", "of", "\(count)", "pri", "\(priority)"] }

    /// From a slices-stream entry's fields; nil when they aren't one.
    public init?(fields: [[UInt8]]) {
        var values: [String: String] = [:]
        var i = 0
        while i + 1 < fields.count {
            values[String(decoding: fields[i], as: UTF8.self)] = String(decoding: fields[i + 1], as: UTF8.self)
            i += 2
        }
        guard let k = values["key"], let key = ActivityKey(parsing: k), let gen = values["gen"], !gen.isEmpty,
              let index = values["slice"].flatMap(Int.init), let count = values["of"].flatMap(Int.init),
              count >= 1, count <= SliceMath.maxSlices, index >= 0, index < count else { return nil }
        // Entries queued before slices had a priority are all in the priority-10 stream.
        self.init(key: key, gen: gen, index: index, count: count, priority: values["pri"].flatMap(Int.init) ?? 10)
    }
}

/// How an audience is cut into slices. Redis's `HSCAN` visits a hash's buckets in reverse-binary
/// order of their index: reversing a cursor's 32 low bits gives its place in `[0, 2^32)`, which
/// only grows during a scan and doesn't depend on the table's size (that is what lets SCAN
/// survive rehashing). A slice is a range of that space: slice `j` of `n` (a power of two)
/// covers `[j·2^32/n, (j+1)·2^32/n)`. Every bucket belongs to exactly one slice, so the slices
/// partition the audience without anyone reading it first; `FanoutScripts.step` scans one range.
public enum SliceMath {
    public static let space: UInt64 = 1 << 32
    public static let maxSlices = 1 << 16

    /// Slices for an audience of `tokens`: the smallest power of two that keeps each slice at
    /// about `sliceSize` tokens or fewer (hash buckets spread tokens evenly over the space).
    public static func count(tokens: Int, sliceSize: Int) -> Int {
        var n = 1
        while n * max(1, sliceSize) < tokens, n < maxSlices { n *= 2 }
        return n
    }

    public static func bounds(index: Int, count: Int) -> (lo: UInt64, hi: UInt64) {
        let width = space / UInt64(count)
        return (UInt64(index) * width, UInt64(index + 1) * width)
    }

    /// A cursor's place in scan order: its 32 low bits reversed.
    public static func place(cursor: UInt64) -> UInt64 {
        var x = cursor & 0xFFFF_FFFF, r: UInt64 = 0
        for _ in 0..<32 { r = (r << 1) | (x & 1); x >>= 1 }
        return r
    }

    /// Where a scan stands once an `HSCAN` answered `cursor`: its place, or the end of the space
    /// when the answer is 0 (the scan is over).
    public static func reached(cursor: UInt64) -> UInt64 { cursor == 0 ? space : place(cursor: cursor) }
}

/// What an earlier delivery of the entry left: its fan-out's `left` and whether it broadcast.
struct FanoutPrior {
    var left: Int?
    var broadcastDone: Bool
    /// The priority the fan-out was created with (`pri`: its audiences' highest), which picks its
    /// slices stream; nil without a record.
    var priority: Int?

    /// The fields `init` reads, in its order.
    static let fields = ["left", "b", "pri"]

    init(_ reply: RESPValue) {
        let v = reply.array ?? []
        left = v.first?.string.flatMap(Int.init)
        broadcastDone = v.count > 1 && v[1].string == "1"
        priority = v.count > 2 ? v[2].string.flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil } : nil
    }
}

/// An event's entry that a fan-out's last slice acknowledged: its stream, and 1 if XACK found it
/// pending (0: another worker acknowledged it first).
public struct AcknowledgedEntry: Sendable, Equatable {
    public var stream: String
    public var count: Int
}

/// How taking a slice ended.
public enum SliceResult: Sendable, Equatable {
    /// The slice has its final outcome (sent, or superseded); `left` slices of its fan-out remain.
    /// The fan-out's last slice, run by a slice taker, acknowledged its event's entry
    /// (`acknowledged`: on which stream, and whether XACK found it pending), for that stream's
    /// counters.
    case final(left: Int, acknowledged: AcknowledgedEntry? = nil)
    /// The fan-out is over and cleared (a redelivered slice of a finished fan-out).
    case gone
    /// Another worker is sending a batch of it right now: leave it for later.
    case busy
    /// Stopped between batches (the worker is stopping, or a caller that doesn't wait met tokens
    /// waiting for their back-off): the rest is for another worker.
    case paused
}

struct SliceRunner: SendRole {
    let ctx: SendContext
    let tokens: TokenBatches
    let fanouts: Fanouts

    /// Sends one slice, a batch at a time; each step records the last batch as done and hands
    /// out the next (see `FanoutScripts.step`). When this is the fan-out's last slice, the event's
    /// entry is acknowledged. Throws (leaving the slice to be taken again) when a batch's sends
    /// keep failing.
    /// `attempts`: the hash field that counts the deliveries of the slice's entry; it is cleared
    /// once a batch is confirmed, so deaths of workers that were making progress don't use up the
    /// slice's attempts (only deliveries that get nowhere do).
    func runSlice(_ slice: SliceRef, attempts: (key: String, field: String)? = nil,
                         shouldStop: @Sendable () -> Bool = { false }) async throws -> SliceResult {
        var summary = SendSummary()
        return try await runSlice(slice, summary: &summary, attempts: attempts, shouldStop: shouldStop)
    }

    /// A slice whose attempts ran out: final without being sent (recorded as a send failure).
    func abandonSlice(_ slice: SliceRef, reason: String) async throws -> AcknowledgedEntry? {
        let fan = keys.fanout(slice.key, slice.gen)
        let entry = try await redis.send(RedisCommand("HMGET", fan, "stream", "entry"))
        let reply = try await redis.send(FanoutAbandon(keys: fanoutKeys(slice.key), gen: slice.gen, slice: slice.index).command)
        guard case .abandoned(let n) = try FanoutAbandonReply(reply) else { return nil }
        try await recordFailures(slice.key, kind: "slice", [("slice \(slice.index + 1)/\(slice.count)", reason)], entry: slice.gen)
        _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "fanout_slices_abandoned", 1))
        let e = entry.array ?? []
        guard n == 0, e.count == 2 else { return nil }
        return try await fanouts.acknowledge(entry: "\(e[0].string ?? "")/\(e[1].string ?? "")", record: fan)
    }

    /// `acknowledges`: acknowledge the event's entry when this is the last slice (false for the
    /// first slice, sent by the worker processing the entry, which acknowledges it itself).
    /// What a slice needs of its fan-out, when the caller has it (the worker that just created
    /// the fan-out): saves reading it back.
    struct SliceHead {
        /// The push at 10 (with its alert, if any).
        var payload: [UInt8]
        /// The push at 5: without the alert.
        var payload5: [UInt8]
        /// Each tier's priority (nil: its devices are skipped; a flush brings them the state).
        var tiers: AudiencePriorities
        var live: Set<APNsEnvironment>
        var entry: String
    }

    /// A batch's tokens that go out as one: same environment, same priority.
    struct Group: Hashable {
        var env: APNsEnvironment
        var priority: Int
    }

    /// `firstStep`: the reply of the slice's first step, when the caller already made it (in the
    /// fan-out's creating round trip). `broadcast`: the channels' broadcast, still unanswered (the
    /// environments it was delivered in): devices on those channels wait for it; the others don't.
    /// `waits`: when only tokens waiting for their back-off are left, wait for them here (a slice
    /// taken from the stream); else (slice 0 of an event or a flush, whose caller has other work)
    /// end `paused`, and the caller hands the slice to the stream.
    func runSlice(_ slice: SliceRef, summary: inout SendSummary, acknowledges: Bool = true, attempts: (key: String, field: String)? = nil,
                  known: SliceHead? = nil, firstStep: RESPValue? = nil, broadcast: Task<[APNsEnvironment], Error>? = nil, waits: Bool = true,
                  shouldStop: @Sendable () -> Bool = { false }) async throws -> SliceResult {
        var attempts = attempts
        var firstStep = firstStep
        let fan = keys.fanout(slice.key, slice.gen)
        let head: SliceHead
        let read: HeadRead
        if let known { read = .head(known) } else { read = try await readHead(fan, broadcastPending: broadcast != nil) }
        switch read {
        case .head(let h): head = h
        case .gone: return .gone
        case .busy: return .busy
        }
        var batch = Batch(slice: slice, head: head, fan: fan, broadcast: broadcast, lease: SliceLease(redis: redis, slice: slice,
                                                                                                      inflight: keys.inflight(slice.key),
                                                                                                      millis: configuration.leaseMillis))
        var confirm: FanoutBatch?
        var waiting = TokenBatches.Waiting()
        var width: Int64 = 0
        var waitedSince: ContinuousClock.Instant?
        // The next batch, scanned by this worker while the last one was being sent (`FanoutScan`).
        var scanned: FanoutScan?
        while true {
            let reply: RESPValue
            let confirmed = confirm != nil
            let scan = scanned
            if let first = firstStep {
                reply = first
                firstStep = nil
            } else {
                let want = shouldStop() ? 0 : confirm == nil && scan == nil ? configuration.firstSliceBatch : configuration.sliceBatch
                reply = try await redis.send(fanouts.stepCommand(slice, want: want, confirm: confirm,
                                                                 waiting: waiting, width: scan?.width ?? width, scanned: scan?.scanned))
                (confirm, waiting, scanned) = (nil, TokenBatches.Waiting(), nil)
            }
            let step = try FanoutStepReply(reply, scan: scan)
            var waitingOnly = false
            if case .later = step { waitingOnly = true }
            if confirmed || waitingOnly, let counter = attempts {
                // A batch of this delivery was confirmed, or the slice's range is all sent and
                // only tokens waiting for their back-off are left (bounded by `tokenAttempts`): it
                // made progress, and claims of it meanwhile are no failures.
                attempts = nil
                _ = try? await redis.send(RedisCommand("HDEL", counter.key, counter.field))
            }
            switch step {
            case .send(_, let handed, let resent, let seen, let triples, let entries):
                confirm = handed
                waitedSince = nil
                if case .range = handed { width = seen }
                (waiting, scanned) = try await send(&batch, handed, triples, resent: resent, width: seen, waiting: entries, summary: &summary,
                                                    shouldStop: shouldStop)
            case .later(let ms):
                // The slice's failing tokens go again when due (a stopping worker leaves them to another).
                guard waits else { return .paused }
                try await Task.sleep(for: .milliseconds(min(ms, 250)))
            case .finished, .superseded, .done:
                return try await end(slice, step, head: head, fan: fan, acknowledges: acknowledges, summary: summary)
            case .relaid:
                await trail(slice.key, [TrailRecord(.slice, ["e": head.trailEntry(slice), "i": String(slice.index), "of": String(slice.count), "r": "relaid"])])
                try await relay(slice)
            case .gone:
                return .gone
            case .paused:
                return .paused
            case .busy:
                return .busy
            case .wait:
                // An older fan-out of the key still has a batch in flight: it ends within its lease.
                let since = waitedSince ?? .now
                waitedSince = since
                if ContinuousClock.now - since > .milliseconds(configuration.leaseMillis * 2) { return .busy }
                try await Task.sleep(for: .milliseconds(2))
            }
        }
    }

    enum HeadRead { case head(SliceHead), gone, busy }

    /// The fan-out's record as a slice needs it. `busy` while its broadcast isn't answered (`live`
    /// isn't final): the worker sending it records the answer, else the entry's next delivery
    /// broadcasts again.
    private func readHead(_ fan: String, broadcastPending: Bool) async throws -> HeadRead {
        let reply = try await redis.send(RedisCommand("HMGET", fan, "p", "pri", "live", "stream", "entry", "p5", "t", "b"))
        let h = reply.array ?? []
        guard h.count == 8, let b = h[0].bytes, let p = h[1].string.flatMap(Int.init) else { return .gone }
        if h[7].string == "0", !broadcastPending { return .busy }
        // A fan-out recorded before budgets has one priority for every tier.
        let tiers = h[6].string.flatMap { AudiencePriorities(encodedTiers: $0) } ?? AudiencePriorities(all: p)
        return .head(SliceHead(payload: b, payload5: h[5].bytes ?? b, tiers: tiers,
                               live: Set((h[2].string ?? "").split(separator: " ").compactMap { APNsEnvironment(rawValue: String($0)) }),
                               entry: "\(h[3].string ?? "")/\(h[4].string ?? "")"))
    }

    /// A slice being sent: its fan-out, the environments whose channel had the push (final once
    /// the broadcast is answered), its lease, and the tiers already marked as sent at 10.
    struct Batch {
        let slice: SliceRef
        let head: SliceHead
        let fan: String
        var broadcast: Task<[APNsEnvironment], Error>?
        let lease: SliceLease
        var live: Set<APNsEnvironment>
        /// The tiers already marked as sent at 10 by this worker.
        let markedAtTen = Marks()

        final class Marks: Sendable {
            let tiers = Mutex<Set<String>>([])
        }

        init(slice: SliceRef, head: SliceHead, fan: String, broadcast: Task<[APNsEnvironment], Error>?, lease: SliceLease) {
            self.slice = slice
            self.head = head
            self.fan = fan
            self.broadcast = broadcast
            self.lease = lease
            self.live = head.live
        }

        /// By environment and priority; a tier without a push now is skipped.
        func grouped(_ rows: some Sequence<TokenRow>) -> [Group: [TokenRow]] {
            var groups: [Group: [TokenRow]] = [:]
            for row in rows {
                guard let priority = head.tiers.tier(row.tier) else { continue }
                groups[Group(env: row.env, priority: priority), default: []].append(row)
            }
            return groups
        }
    }

    /// A batch the step handed out, sent. While a range batch that doesn't end the slice is out,
    /// the worker scans the next one (`FanoutScan`), for the next step to take.
    private func send(_ batch: inout Batch, _ handed: FanoutBatch, _ rows: [(activity: String, meta: [UInt8])], resent: FanoutResent,
                      width: Int64, waiting: [String: FanoutWaiting], summary: inout SendSummary,
                      shouldStop: () -> Bool) async throws -> (waiting: TokenBatches.Waiting, next: FanoutScan?) {
        var parking = TokenBatches.Parking()
        var ahead: Task<FanoutScan?, Never>?
        switch handed {
        case .range(let range):
            let hi = SliceMath.bounds(index: batch.slice.index, count: batch.slice.count).hi
            if range.to < hi, !shouldStop() {
                ahead = Task { [redis, meta = keys.meta(batch.slice.key), want = configuration.sliceBatch] in
                    try? await FanoutScan.run(redis, meta: meta, from: range.to, stop: hi, want: want, hint: width)
                }
            }
        case .waiting(let round): parking = TokenBatches.Parking(round: round, waiting: waiting)
        }
        do {
            let waiting = try await send(&batch, rows, resent: resent, parking: parking, summary: &summary)
            return (waiting, await ahead?.value ?? nil)
        } catch {
            ahead?.cancel()
            throw error
        }
    }

    /// One batch the step handed out, to its devices off the channel (those on a channel that had
    /// the push get nothing per token; while its broadcast is unanswered, they wait for the answer).
    /// Returns its tokens still failing, which wait for the slice's end.
    private func send(_ batch: inout Batch, _ triples: [(activity: String, meta: [UInt8])], resent: FanoutResent, parking: TokenBatches.Parking,
                      summary: inout SendSummary) async throws -> TokenBatches.Waiting {
        let slice = batch.slice, head = batch.head
        let resentBatch = resent != .fresh
        if resentBatch {
            // A worker stopped with this batch in flight, or the slice started again after a Redis
            // restart: APNs may already have had some of it.
            stats.tokensResent.add(triples.count, ordering: .relaxed)
            _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "fanout_tokens_resent", triples.count))
            if resent == .afterTakeover {
                logger.info("slice taken over: its last batch is sent again", metadata: ["slice": "\(slice)", "tokens": "\(triples.count)"])
            }
        }
        // The tiers' pushes differ: each token's tier is needed (its registration's, else its device's).
        let rows = try await tokens.tokenRows(slice.key, triples, tiers: head.tiers.standard != head.tiers.frequent)
        let live = batch.live
        var groups = batch.grouped(rows.lazy.filter { !($0.onBroadcast && live.contains($0.env)) })
        // A device on broadcast whose key has no channel gets its push per token, and the key's
        // next event makes the channel (`ChannelRegistry`: channels only for an audience).
        if rows.contains(where: { $0.onBroadcast && !head.live.contains($0.env) }) {
            _ = try? await redis.pipeline(channels.wantCommands(slice.key))
        }
        let onChannel = batch.broadcast == nil ? [] : rows.filter { $0.onBroadcast && live.contains($0.env) }
        let heartbeat = batch.lease.heartbeat()
        defer { heartbeat.cancel() }
        var waiting = TokenBatches.Waiting()
        while true {
            // Priority 10 first.
            for (group, rows) in groups.sorted(by: { ($0.key.priority, $1.key.env.rawValue) > ($1.key.priority, $0.key.env.rawValue) }) {
                waiting.add(try await send(group, rows, of: batch, resent: resentBatch, parking: parking, summary: &summary))
            }
            guard let pending = batch.broadcast else { break }
            // The broadcast's answer: a channel's devices get the push per token where it failed.
            batch.live = Set(try await pending.value)
            batch.broadcast = nil
            let answered = batch.live
            groups = batch.grouped(onChannel.lazy.filter { !answered.contains($0.env) })
        }
        return waiting
    }

    /// One environment and priority of a batch.
    private func send(_ group: Group, _ rows: [TokenRow], of batch: Batch, resent: Bool, parking: TokenBatches.Parking,
                      summary: inout SendSummary) async throws -> TokenBatches.Waiting {
        let slice = batch.slice, fan = batch.fan, markedAtTen = batch.markedAtTen
        let plan = Plan(key: slice.key, event: .update, priority: group.priority == 10 ? .critical : .routine, timestampMillis: 0,
                        audience: .activity(slice.key))
        // A batch sent again after a takeover (or a Redis restart) may have reached its devices:
        // the state goes again without its alert.
        let payload = group.priority == 10 && !resent ? batch.head.payload : batch.head.payload5
        // A tier with a device sent at 10 keeps its token (`refundUnsent`): marked once per slice on this worker.
        let sentAtTen: (([TokenRow]) async throws -> Void)? = group.priority != 10 ? nil : { [redis] delivered in
            let tiers = Set(delivered.map(\.tier.rawValue)).subtracting(markedAtTen.tiers.withLock { $0 })
            guard !tiers.isEmpty else { return }
            if (try? await redis.send(FanoutMark(record: fan, .sentAtTen(tiers: tiers.sorted())).command)) != nil {
                markedAtTen.tiers.withLock { $0.formUnion(tiers) }
            }
        }
        var waiting = try await tokens.sendBatch(plan, payload, quiet: batch.head.payload5, priority: group.priority, env: group.env, rows: rows,
                                                 kind: .token, entry: batch.head.trailEntry(batch.slice), summary: &summary, onDelivered: sentAtTen, parking: parking)
        // A batch sent again went without the alert: what of it waits stays without it, whatever APNs said.
        if resent { waiting.tokens = waiting.tokens.map(\.quietly) }
        return waiting
    }

    /// The slice is final: counted; the fan-out's last gives back what its tiers took at 10 and
    /// sent nobody, and acknowledges the entry (`acknowledges`).
    private func end(_ slice: SliceRef, _ step: FanoutStepReply, head: SliceHead, fan: String, acknowledges: Bool,
                     summary: SendSummary) async throws -> SliceResult {
        let left = step.left
        // On the trail: the slice's tokens all had their outcome (those that differed from the
        // audience's are on it already), or a newer fan-out took over the rest.
        let how: String
        switch step {
        case .superseded: how = "superseded"
        case .finished: how = "finished"
        default: how = "done"
        }
        await trail(slice.key, [TrailRecord(.slice, ["e": head.trailEntry(slice), "i": String(slice.index), "of": String(slice.count), "r": how,
                                                     "sent": String(summary.tokens), "forgotten": String(summary.forgotten),
                                                     "failed": String(summary.failed)])])
        switch step {
        case .superseded:
            stats.slicesSuperseded.add(1, ordering: .relaxed)
            _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "fanout_slices_superseded", 1))
        case .finished:
            stats.slicesFinished.add(1, ordering: .relaxed)
        default:
            break
        }
        // Only a fan-out with a tier at 10 can have spent a token (no round trip otherwise).
        if case .done = step {} else if left <= 0, head.tiers.standard == 10 || head.tiers.frequent == 10 {
            await fanouts.refundUnsent(slice.key, fan)
        }
        guard left <= 0, acknowledges else { return .final(left: left) }
        return .final(left: left, acknowledged: try await fanouts.acknowledge(entry: head.entry, record: fan))
    }

    /// Redis restarted since the fan-out began (a new hash seed, so another scan order): every
    /// slice starts again. This one goes on here; the others are queued again, and `q` set once
    /// they are (else the entry's next delivery queues them).
    private func relay(_ slice: SliceRef) async throws {
        logger.warning("Redis restarted during a fan-out: every slice starts again", metadata: ["slice": "\(slice)"])
        try await fanouts.queueOthers(slice, also: [RedisCommand("HINCRBY", keys.counters, "fanout_relaid", 1)])
    }
}

/// A batch in flight keeps its slice by a lease in `{key}:inflight` (`FanoutScripts.renew`).
struct SliceLease: Sendable {
    let redis: RedisConnection
    let slice: SliceRef
    let inflight: String
    let millis: Int

    /// Extends the lease to `extra` past now, only while it still exists: false once it is gone
    /// (it ended and a newer fan-out's step dropped it, or the slice ended as superseded).
    func renew(_ extra: Duration) async throws -> Bool {
        let until = Int64(Date().timeIntervalSince1970 * 1000) + Int64(millis) + extra.milliseconds
        let kept = try await redis.send(FanoutRenew(inflightKey: inflight, gen: slice.gen, slice: slice.index, leaseEndMillis: until).command)
        return try FanoutRenewReply(kept) == .renewed
    }

    /// While a batch is out, its lease is renewed every third of it: a slow APNs (or a busy
    /// machine) doesn't let a newer fan-out overtake requests still being sent.
    func heartbeat() -> Task<Void, Never> {
        let every = Duration.milliseconds(max(20, millis / 3))
        return Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: every)
                if Task.isCancelled { break }
                _ = try? await renew(.zero)
            }
        }
    }
}

extension SliceHead {
    /// What the key's trail names the fan-out by: its event's entry, or a flush's name.
    func trailEntry(_ slice: SliceRef) -> String { entry.isEmpty ? slice.gen : entry }
}
