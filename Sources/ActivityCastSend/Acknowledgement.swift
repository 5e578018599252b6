import ActivityCastCore
import RedisClient
import Synchronization

/// The one pipeline that gives stream entries their final outcome, wherever that happens (a
/// feed or registration batch, a fan-out's last slice, a slice entry): `XACK` for the group, the
/// entries' attempt counts and last errors cleared (`RedisKeys.errors`), and for entries nothing
/// reads again (slices) `XDEL`. Records that tell a redelivery the work is over may be written in
/// the same pipeline, before the `XACK` (`before`: whenever the acknowledgement is done, they
/// are too); they go only after the acknowledgement's answer (`unlinkAfter`), never beside it:
/// with a `RecordSweep`, by its next sweep (one round trip for every record acknowledged since).
public struct Acknowledgement: Sendable {
    public var stream: String
    public var group: String
    public var ids: [String]
    public var errors: String
    /// Delete the entries from the stream too (slices: nothing reads them again).
    public var delete = false
    /// Clear the entries' attempt counts and last errors (false: fresh entries have none).
    public var clearErrors = true
    /// Extra commands for the same pipeline, after the acknowledgement's own.
    public var also: [RedisCommand] = []
    /// Commands for the same pipeline before the acknowledgement (records a redelivery reads).
    public var before: [RedisCommand] = []

    public init(stream: String, group: String, ids: [String], keys: RedisKeys, delete: Bool = false, also: [RedisCommand] = []) {
        self.stream = stream
        self.group = group
        self.ids = ids
        self.errors = keys.errors(stream)
        self.delete = delete
        self.also = also
    }

    public var commands: [RedisCommand] {
        guard !ids.isEmpty else { return before + also }
        var out: [RedisCommand] = before + [.xack(stream: stream, group: group, ids: ids)]
        if delete { out.append(RedisCommand("XDEL", [stream] + ids)) }
        if clearErrors { out.append(RedisCommand("HDEL", [errors] + EntryErrorFields.all(ids))) }
        return out + also
    }

    /// How many entries the reply to `commands` says were acknowledged; a Redis error's
    /// message when the `XACK` failed (the entries stay pending and are done again).
    public func acknowledged(_ replies: [RESPValue]) -> Result<Int, RedisError> {
        guard !ids.isEmpty else { return .success(0) }
        guard replies.count > before.count else { return .failure(RedisError(.unexpectedReply, "XACK \(stream): no reply")) }
        let first = replies[before.count]
        if let message = first.errorMessage { return .failure(RedisError(.server, message)) }
        return .success(Int(first.int ?? 0))
    }

    /// Runs it (through `queue`: together with other batches' acknowledgements); then, once the
    /// entries are acknowledged, hands `unlinkAfter` to `sweep` (deleted by its next sweep).
    @discardableResult
    public func run(_ redis: RedisConnection, unlinkAfter records: [String] = [], sweep: RecordSweep? = nil,
                    queue: AcknowledgementQueue? = nil) async throws -> Result<Int, RedisError> {
        precondition(records.isEmpty || sweep != nil, "records to delete need the sweep that deletes them")
        let replies = if let queue { try await queue.pipeline(commands) } else { try await redis.pipeline(commands) }
        let result = acknowledged(replies)
        if case .success = result, !records.isEmpty { sweep?.add(records) }
        return result
    }

    /// Records why entries failed (`<id>` → message) beside their attempt counts, for a week.
    public static func failures(_ keys: RedisKeys, stream: String, _ messages: [(id: String, message: String)]) -> [RedisCommand] {
        guard !messages.isEmpty else { return [] }
        let errors = keys.errors(stream)
        return [RedisCommand("HSET", [errors] + messages.flatMap { [EntryErrorFields.lastError($0.id), String($0.message.prefix(300))] }),
                RedisCommand("EXPIRE", errors, 7 * 86_400)]
    }
}

/// Acknowledgements that wait up to `delay` for others to share their round trip: every batch
/// settled meanwhile goes in one pipeline, each reading its own replies. A broadcast-only event
/// is a batch of its own at a steady feed (one entry per read), and its acknowledgement was a
/// quarter of Redis's round trips (docs/benchmarks.md: 3.9 → 3.2 per event; fewer packets and
/// syscalls on both sides, though Redis's CPU on the loopback test machine did not measurably
/// move). Nothing a device sees waits for it: the
/// pushes are out before their entry is acknowledged, and the key's next event doesn't wait
/// either. What it costs: entries stay pending up to `delay` longer, and a worker killed
/// meanwhile leaves them to be claimed and done again, like a worker killed before its
/// acknowledgement's answer. A failed pipeline fails every batch in it (each is retried as
/// before); an error reply is its own batch's.
public final class AcknowledgementQueue: Sendable {
    private struct Waiting {
        var commands: [RedisCommand]
        var done: CheckedContinuation<[RESPValue], Error>
    }

    private let waiting = Mutex<(batches: [Waiting], scheduled: Bool)>(([], false))
    private let redis: RedisConnection
    public let delay: Duration

    public init(_ redis: RedisConnection, delay: Duration) {
        self.redis = redis
        self.delay = delay
    }

    /// `commands`' replies, sent within `delay` with every other batch queued meanwhile.
    public func pipeline(_ commands: [RedisCommand]) async throws -> [RESPValue] {
        guard delay > .zero else { return try await redis.pipeline(commands) }
        return try await withCheckedThrowingContinuation { done in
            // The first batch since the last flush schedules the next one.
            let first = waiting.withLock { w in
                w.batches.append(Waiting(commands: commands, done: done))
                defer { w.scheduled = true }
                return !w.scheduled
            }
            guard first else { return }
            Task { [self] in
                try? await Task.sleep(for: delay)
                await flush()
            }
        }
    }

    private func flush() async {
        let batches = waiting.withLock { w in
            defer { w = ([], false) }
            return w.batches
        }
        let all = batches.flatMap(\.commands)
        do {
            let replies = try await redis.pipeline(all)
            guard replies.count == all.count else {
                throw RedisError(.unexpectedReply, "\(replies.count) replies to a pipeline of \(all.count) commands")
            }
            var at = 0
            for batch in batches {
                batch.done.resume(returning: Array(replies[at..<at + batch.commands.count]))
                at += batch.commands.count
            }
        } catch {
            for batch in batches { batch.done.resume(throwing: error) }
        }
    }
}

/// Records whose entries are acknowledged (fan-out records that told a redelivery the work was
/// done), deleted together by the next sweep: one round trip for all of them instead of one per
/// entry (a broadcast-only event's acknowledgement was two round trips: ack, then the record's
/// `UNLINK`). The worker sweeps every 100 ms, through its drain, and once more at the end; a
/// record still found meanwhile says its fan-out is over, which is true. What a sweep can't
/// delete (Redis away, an error reply) is kept for the next one, up to `limit` names; past that
/// (counted in `dropped`), and when the worker dies, records go by their own TTL (an hour).
public final class RecordSweep: Sendable {
    private let pending = Mutex<[String]>([])
    private let droppedCount = Atomic<Int>(0)
    public let limit: Int

    public init(limit: Int = 100_000) { self.limit = limit }

    /// Records to delete once the entries they describe are acknowledged.
    public func add(_ records: [String]) {
        let dropped = pending.withLock { names in
            let room = max(0, limit - names.count)
            names.append(contentsOf: records.prefix(room))
            return records.count - min(room, records.count)
        }
        if dropped > 0 { droppedCount.add(dropped, ordering: .relaxed) }
    }

    public var count: Int { pending.withLock { $0.count } }

    /// Records that found the list full (left to their TTL).
    public var dropped: Int { droppedCount.load(ordering: .relaxed) }

    /// Deletes every pending record in one pipeline; returns how many went. A failed pipeline,
    /// or a command of it answered with an error, keeps those for the next sweep.
    @discardableResult
    public func sweep(_ redis: RedisConnection) async -> Int {
        var names: [String] = []
        pending.withLock { swap(&names, &$0) }
        guard !names.isEmpty else { return 0 }
        do {
            // One `UNLINK` each: each may be in another slot of a cluster.
            let replies = try await redis.pipeline(names.map { RedisCommand("UNLINK", $0) })
            let failed = zip(names, replies).filter { $0.1.errorMessage != nil }.map(\.0)
            if !failed.isEmpty { add(failed) }
            return names.count - failed.count
        } catch {
            add(names)
            return 0
        }
    }
}
