import Logging
import RedisClient
import Synchronization

/// Tells apart why a consumer group lost track of entries a worker had in flight, and says it
/// once per incident:
///
/// - **Redis restarted without its data** (no persistence, or its last writes lost): the group
///   no longer knows the entries it had delivered — without persistence the group and the stream
///   are gone, and the next read recreates the group. The acknowledgements of entries in flight
///   find nothing. Seen as: the worker's Redis connection reconnected since the entries were
///   read, and Redis's `uptime_in_seconds` (`INFO server`) is shorter than the time since.
///   Logged once per Redis process (`run_id`), whether a missed acknowledgement or a group's
///   recreation (`NOGROUP`) sees it first.
/// - **The group was destroyed and recreated** (`XGROUP DESTROY`, the stream deleted) with
///   Redis running on: this worker recreated it since the entries were read (after `NOGROUP`),
///   or the group is missing now. Once per recreation.
/// - Otherwise **another worker acknowledged them**: it claimed them after the visibility
///   timeout (this worker took longer than that to finish them).
///
/// Before, every missed acknowledgement was put down to another worker, also after a Redis
/// restart, once per batch in flight.
final class GroupLoss: Sendable {
    /// What a batch's processing started from: when, and how often the processing connection had
    /// connected by then.
    struct Baseline: Sendable {
        var at: ContinuousClock.Instant
        var connects: Int
    }

    private struct State {
        /// Per stream: when this worker last recreated its group after `NOGROUP`.
        var recreated: [String: ContinuousClock.Instant] = [:]
        /// Incidents already logged.
        var reported: Set<String> = []
    }

    private let state = Mutex(State())
    /// When a read through the group last succeeded (ms since `born`): the groups existed then;
    /// and how often the worker's connections had connected by then.
    private let born = ContinuousClock.now
    private let lastReadMillis = Atomic<Int64>(0)
    private let lastReadConnects = Atomic<Int>(0)

    /// A read of the input streams through the group succeeded; the worker's connections had
    /// connected `connects` times (summed).
    func noteRead(connects: Int) {
        let d = (ContinuousClock.now - born).components
        lastReadMillis.store(d.seconds * 1000 + d.attoseconds / 1_000_000_000_000_000, ordering: .relaxed)
        lastReadConnects.store(connects, ordering: .relaxed)
    }

    /// How long ago the groups were last seen to exist (a successful read).
    private var sinceGroupsSeen: Duration {
        (ContinuousClock.now - born) - .milliseconds(lastReadMillis.load(ordering: .relaxed))
    }

    /// `INFO server`'s `run_id` and `uptime_in_seconds`.
    struct RedisProcess: Sendable {
        var runID: String
        var uptimeSeconds: Int64

        init?(info: String) {
            var runID: String?, uptime: Int64?
            for line in info.split(whereSeparator: \.isNewline) {  // "\r\n" is one Character
                if line.hasPrefix("run_id:") { runID = String(line.dropFirst(7)) }
                if line.hasPrefix("uptime_in_seconds:") { uptime = Int64(line.dropFirst(18)) }
            }
            guard let runID, let uptime else { return nil }
            self.runID = runID
            uptimeSeconds = uptime
        }

        /// Whether this Redis process started less than `duration` ago. `uptime_in_seconds`
        /// is whole seconds, rounded down: below `duration` it may still have started a little
        /// before; callers also require a reconnect since.
        func startedWithin(_ duration: Duration) -> Bool { Double(uptimeSeconds) < duration.seconds }
    }

    static func redisProcess(_ redis: RedisConnection) async -> RedisProcess? {
        guard let reply = try? await redis.pipeline([RedisCommand("INFO", "server")])[0] else { return nil }
        return reply.string.flatMap(RedisProcess.init(info:))
    }

    /// The message for a Redis that came back without its data.
    static let lostDataMessage = "REDIS RESTARTED WITHOUT ITS DATA (no persistence, or its last writes lost): the consumer group "
        + "no longer knows the entries it had delivered; without persistence the streams and their group were lost, and the group "
        + "is recreated on each stream where reading had reached. Entries the workers had in flight are finished (their registrations written to "
        + "the restarted Redis, their pushes sent), but their acknowledgements find nothing, since the new group never delivered "
        + "them: they are not delivered again (no other worker took them). Entries the streams held that no worker had read are gone"

    /// Logs `lostDataMessage` (`stream`: where this worker noticed) unless it was logged for this
    /// Redis process: once per restart, not per stream or batch.
    private func reportLostData(_ stream: String, _ redis: RedisProcess, logger: Logger, _ metadata: Logger.Metadata) {
        guard state.withLock({ $0.reported.insert("lost|\(redis.runID)").inserted }) else { return }
        var meta = metadata
        meta["stream"] = "\(stream)"
        meta["redis_run_id"] = "\(redis.runID)"
        meta["redis_uptime_s"] = "\(redis.uptimeSeconds)"
        logger.error("\(Self.lostDataMessage)", metadata: meta)
    }

    /// The worker recreated `stream`'s group after `NOGROUP` (`restoring`). `connects`: how often
    /// its connections have connected (summed, as for `noteRead`). Returns true if it logged why
    /// (Redis came back without its data: a connection reconnected since the last read through
    /// the group, and Redis started since); false leaves the caller to say the group was destroyed.
    func groupRecreated(_ stream: String, group: String, from position: String?, connects: Int, redis: RedisConnection,
                        logger: Logger) async -> Bool {
        let since = sinceGroupsSeen
        state.withLock { $0.recreated[stream] = .now }
        guard connects > lastReadConnects.load(ordering: .relaxed),
              let process = await Self.redisProcess(redis), process.startedWithin(since) else { return false }
        reportLostData(stream, process, logger: logger, ["group": "\(group)", "from_id": "\(position ?? "0-0")"])
        return true
    }

    /// An acknowledgement of `acknowledged` entries of `stream` (processing began at `baseline`)
    /// found `missed` of them no longer pending: says why (see above).
    func explainMissedAcknowledgements(stream: String, group: String, missed: Int, acknowledged: Int, since baseline: Baseline,
                                       redis: RedisConnection, logger: Logger) async {
        let elapsed = ContinuousClock.now - baseline.at
        let reconnected = redis.stats.connects > baseline.connects
        let replies = try? await redis.pipeline([RedisCommand("INFO", "server"), RedisCommand("XINFO", "GROUPS", stream)])
        let process = replies?[0].string.flatMap(RedisProcess.init(info:))
        let counts: Logger.Metadata = ["group": "\(group)", "unacknowledged": "\(missed)", "of": "\(acknowledged)"]
        if reconnected, let process, process.startedWithin(elapsed) {
            reportLostData(stream, process, logger: logger, counts)
            return
        }
        var groupMissing = false
        if let reply = replies?[1] {
            if let e = reply.errorMessage { groupMissing = e.contains("no such key") }
            else { groupMissing = !(reply.array ?? []).contains { Self.name(ofGroup: $0) == group } }
        }
        let recreated = state.withLock { $0.recreated[stream] }
        if groupMissing || (recreated.map { $0 > baseline.at } ?? false) {
            let key = "recreated|\(stream)|\(recreated.map { "\($0)" } ?? "missing")"
            guard state.withLock({ $0.reported.insert(key).inserted }) else { return }
            var meta = counts
            meta["stream"] = "\(stream)"
            logger.error("entries finished here could not be acknowledged: the consumer group was destroyed (and is recreated) since they were read, and the new group never delivered them, so they are not delivered again (no other worker took them)", metadata: meta)
            return
        }
        var meta = counts
        meta["stream"] = "\(stream)"
        logger.warning("entries were already acknowledged by another worker: it claimed them after the visibility timeout, before this worker finished them", metadata: meta)
    }

    private static func name(ofGroup reply: RESPValue) -> String? {
        let items = reply.array ?? []
        var i = 0
        while i + 1 < items.count {
            if items[i].string == "name" { return items[i + 1].string }
            i += 2
        }
        return nil
    }
}
