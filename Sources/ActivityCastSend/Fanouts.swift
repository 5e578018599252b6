import ActivityCastCore
import APNs
import APNsCore
import Foundation
import Logging
import RedisClient
import Synchronization

/// A fan-out's record in Redis, shared by every role that starts one or hands one back: create it
/// (with slice 0's first step in the same round trip), queue its slices for the fleet,
/// acknowledge its entry when its last slice is final, give back what its tiers took at 10.
struct Fanouts: SendRole {
    let ctx: SendContext

    enum FanoutStart {
        /// A newer fan-out of the key is under way (or, for a flush, one of the same time).
        case older
        /// It exists and every slice is final.
        case over
        /// The key has no tokens: it is the key's newest fan-out, with no record and no slices.
        case noAudience
        /// Slices 1…n-1 are queued for the fleet (`unqueued`: not yet, the caller queues them);
        /// slice 0 is the caller's (`head`: what the caller knows of it, nil when the fan-out
        /// existed before; `step`: its first step's reply).
        case firstSlice(slices: Int, head: SliceHead?, step: RESPValue, unqueued: Bool)
    }

    /// Creates a fan-out (see `FanoutScripts.create`; an existing one of the same `gen` is taken
    /// up where it is), takes slice 0's first batch in the same round trip (an event's latency is
    /// made of round trips; the step finds nothing to take when the creation didn't happen), and
    /// queues slices 1…n-1. `also`: commands for the same round trip.
    /// `broadcastPending`: the broadcast isn't answered yet: `b` is not recorded, and slices 1…n-1
    /// are left for the caller to queue once `live` is final. `newest`: a flush's read of the key's
    /// newest fan-out (`FanoutCreate.newest`).
    func createFanout(key: ActivityKey, gen: String, millis: Int64, payload: [UInt8], quiet: [UInt8], tiers: AudiencePriorities,
                      live: [APNsEnvironment], entry: String, flush: Bool, newest: String? = nil, broadcastPending: Bool = false,
                      also: [RedisCommand] = []) async throws -> FanoutStart {
        let (stream, entryID) = Fanouts.split(entry: entry)
        let commands = [FanoutCreate(keys: fanoutKeys(key), gen: gen, millis: millis, sliceSize: configuration.sliceSize,
                                     ttlSeconds: configuration.stateTTLSeconds, payload: payload, quiet: quiet,
                                     priority: tiers.highest, tiers: tiers.encodedTiers, live: live, stream: stream,
                                     entryID: entryID, flush: flush, newest: newest, broadcastPending: broadcastPending).command] + also + [
            // Slice 0's count is the fan-out's, decided by the create (0: the step reads it).
            stepCommand(SliceRef(key: key, gen: gen, index: 0, count: 0, priority: tiers.highest), want: ctx.stopping.load(ordering: .relaxed) ? 0 : configuration.firstSliceBatch),
        ]
        let replies = try await redis.pipeline(commands)
        let step = replies[replies.count - 1]
        let slices: Int
        var queued = false
        var head: SliceHead?
        switch try FanoutCreateReply(replies[0]) {
        case .older:
            return .older
        case .none:
            return .noAudience
        case .exists(let left, let n, _, let q):
            if left == 0 { return .over }
            slices = n
            queued = q
        case .new(let n, _):
            slices = n
            stats.fanouts.add(1, ordering: .relaxed)
            head = SliceHead(payload: payload, payload5: quiet, tiers: tiers, live: Set(live), entry: entry)
        }
        if slices > 1, !queued, broadcastPending { return .firstSlice(slices: slices, head: head, step: step, unqueued: true) }
        if slices > 1, !queued { try await queueOthers(SliceRef(key: key, gen: gen, index: 0, count: slices, priority: tiers.highest)) }
        return .firstSlice(slices: slices, head: head, step: step, unqueued: false)
    }

    /// Puts every slice of `mine`'s fan-out but `mine` (the caller's own) on its slices stream
    /// (with `also` in the same pipeline), then records that they are (`q`) once every `XADD` is
    /// answered: the stream and the record may sit on different nodes of a cluster, so the mark
    /// never rides beside the `XADD`s (one that failed beside a recorded `q` would leave the
    /// fan-out unfinished for good). Until `q` is recorded, the entry's next delivery (or the
    /// key's next flush) queues them again; a slice queued twice is harmless (its batches are
    /// handed out once).
    func queueOthers(_ mine: SliceRef, also: [RedisCommand] = []) async throws {
        let adds = (0..<mine.count).filter { $0 != mine.index }.map { index in
            var other = mine
            other.index = index
            return queueCommand(other)
        }
        let replies = try await redis.pipeline(adds + also)
        if let bad = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "queueing slices: \(bad)") }
        let marked = try await redis.send(FanoutMark(record: keys.fanout(mine.key, mine.gen), .queued).command)
        if let bad = marked.errorMessage { throw RedisError(.server, "recording queued slices: \(bad)") }
    }

    /// Puts `slice` on its priority's slices stream for any worker to take.
    func queueCommand(_ slice: SliceRef) -> RedisCommand { RedisCommand("XADD", [keys.slices(priority: slice.priority), "*"] + slice.fields) }

    /// The fan-out's last slice is final: its event's entry is acknowledged (by whichever worker
    /// finished it; `XACK` works for any consumer of the group), then its finished record goes
    /// (a redelivery of an acknowledged entry sends nothing: `acknowledgedAlready`).
    func acknowledge(entry: String, record: String) async throws -> AcknowledgedEntry? {
        let (stream, id) = Fanouts.split(entry: entry)
        guard !stream.isEmpty, !id.isEmpty else { return nil }
        // The record goes after the acknowledgement's answer, never beside it: it is what tells a
        // redelivery before it that the fan-out is over.
        switch try await Acknowledgement(stream: stream, group: configuration.group, ids: [id], keys: keys).run(redis, unlinkAfter: [record], sweep: ctx.sweep) {
        case .success(let n): return AcknowledgedEntry(stream: stream, count: n)
        case .failure(let error): throw error
        }
    }

    /// Whether `entry`, delivered again, was acknowledged meanwhile by the worker that finished it
    /// (its claim raced the acknowledgement). Its fan-out record is read first and the pending
    /// list after: a record deleted before the first read was deleted after the acknowledgement,
    /// which the second then sees. Two round trips, for redeliveries only.
    func acknowledgedAlready(_ key: ActivityKey, entry: String) async throws -> Bool {
        let (stream, id) = Fanouts.split(entry: entry)
        guard !stream.isEmpty, !id.isEmpty else { return false }
        let record = try await redis.send(RedisCommand("EXISTS", keys.fanout(key, entry)))
        if let e = record.errorMessage { throw RedisError(.server, "reading a fan-out record: \(e)") }
        if record.int == 1 { return false }
        let pending = try await redis.send(RedisCommand("XPENDING", stream, configuration.group, id, id, 1))
        if let e = pending.errorMessage { throw RedisError(.server, "XPENDING \(stream): \(e)") }
        return (pending.array ?? []).isEmpty
    }

    /// `stream/id` → (stream, id); entry ids have no `/`.
    static func split(entry: String) -> (String, String) {
        guard let slash = entry.lastIndex(of: "/") else { return ("", entry) }
        return (String(entry[..<slash]), String(entry[entry.index(after: slash)...]))
    }

    /// A fan-out whose last slice is final: the tiers whose decision took a token (`spent` on the
    /// record) and none of whose devices was sent the push at 10 (`s10:<tier>` never set:
    /// superseded by a newer fan-out first, or no device of that tier) give it back. Run by the
    /// one worker that ended the fan-out; a failure here leaves the token spent (logged).
    func refundUnsent(_ key: ActivityKey, _ fan: String) async {
        do {
            let v = try await redis.send(RedisCommand("HMGET", fan, "spent", "s10:standard", "s10:frequent")).array ?? []
            guard let spent = v.first?.string, !spent.isEmpty else { return }
            let unsent = spent.split(separator: " ").compactMap { Tier(rawValue: String($0)) }.filter { tier in
                (tier == .standard ? v[1] : v[2]).string != "1"
            }
            _ = try await redis.send(.script(FanoutScripts.mark, keys: [fan], args: ["spent", ""]))
            try await refund(key, unsent.map { .tier($0) })
        } catch {
            logger.warning("giving back a superseded fan-out's budget tokens failed", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }

    /// Gives back the tokens `audiences`' decisions took for pushes at 10 that didn't go out.
    func refund(_ key: ActivityKey, _ audiences: [BudgetAudience]) async throws {
        guard !audiences.isEmpty else { return }
        let replies = try await redis.pipeline(audiences.map { audience in
            .script(BudgetScripts.refund, keys: [keys.budget(key, audience)], args: [configuration.budgets.audience(audience).bucket.capacityTicks])
        })
        if let e = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "giving a budget token back: \(e)") }
        for audience in audiences { stats.countDecision(audience, "refunded") }
    }

    /// A step of `slice` (see `FanoutScripts.step`) at the current time: confirms `confirm` (the
    /// last batch, or nil) with what of it still fails (it waits), and asks for `want` more tokens
    /// (0: stop here).
    func stepCommand(_ slice: SliceRef, want: Int, confirm: FanoutBatch? = nil, waiting: TokenBatches.Waiting = .init(), width: Int64 = 0,
                     scanned: FanoutScanned? = nil) -> RedisCommand {
        FanoutStepCall(keys: fanoutKeys(slice.key), gen: slice.gen, slice: slice.index, slices: slice.count, want: want,
                       nowMillis: Int64(Date().timeIntervalSince1970 * 1000), leaseMillis: configuration.leaseMillis, confirm: confirm,
                       failing: waiting.tokens, retryAfterMillis: waiting.after.milliseconds, keepSeconds: 3600, width: width, scanned: scanned).command
    }
}
