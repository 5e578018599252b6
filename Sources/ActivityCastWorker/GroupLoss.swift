import Logging
import RedisClient
import Synchronization

/// Tells apart why a consumer group lost track of entries a worker had in flight, and says it
/// once per incident:
///
/// - **Redis restarted without its data** (no persistence, or its last writes lost): the group
///   no longer knows the entries it had delivered — without persistence the group and the stream
///   are gone, and the next read recreates the group. The acknowledgements of entries in flight
///   find nothing. Seen as: the worker's connections reconnected since the entries were read,
///   and Redis's `run_id` (`INFO server`) is not the one it had then. Logged once per Redis
///   process, whether a missed acknowledgement or the group's recreation (`NOGROUP`) sees it
///   first.
/// - **The group was destroyed and recreated** (`XGROUP DESTROY`, the stream deleted) with
///   Redis running on: this worker recreated it since the entries were read (after `NOGROUP`),
///   or the group is missing now. Once per recreation.
/// - Otherwise **another worker acknowledged them**: it claimed them after the visibility
///   timeout (this worker took longer than that to finish them).
///
/// Before, every missed acknowledgement was put down to another worker, also after a Redis
/// restart, once per batch in flight.
///
/// Which Redis process served the worker when: `observe` records the `run_id` each time the
/// worker's connections have connected a new number of times (at start, then after a read that
/// follows a reconnect: one `INFO server` per reconnect). A reconnect since a batch began, and a
/// `run_id` other than the one recorded for the connection count it began at, is a restart.
/// (`uptime_in_seconds` alone can't say it: Redis counts it in whole seconds of the wall clock,
/// so 0.2 s after a start it may say 1.)
final class GroupLoss: Sendable {
    /// What a batch's processing started from: when, and how often the worker's connections had
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
        /// `run_id` by the connections' connect count it was seen at (the last few).
        var runIDs: [(connects: Int, runID: String)] = []
        /// When a read through the group last succeeded (the groups existed then), and the
        /// connect count then.
        var lastRead: (at: ContinuousClock.Instant, connects: Int)?
    }

    private let state = Mutex(State())
    /// The worker's connections (reading, processing): their connect counts, summed, grow when
    /// Redis restarts under the worker.
    private let connections: [RedisConnection]

    init(connections: [RedisConnection]) {
        self.connections = connections
    }

    var connectsSoFar: Int { connections.reduce(0) { $0 + $1.stats.connects } }

    func baseline() -> Baseline { Baseline(at: .now, connects: connectsSoFar) }

    /// A read of the input streams through the group succeeded.
    func noteRead() {
        let connects = connectsSoFar
        state.withLock { $0.lastRead = (.now, connects) }
    }

    /// Whether `observe` has something to learn: no `run_id` known for the current connect count.
    var needsObservation: Bool {
        let connects = connectsSoFar
        return state.withLock { s in !s.runIDs.contains { $0.connects == connects } }
    }

    /// Records which Redis process (`run_id`) serves the current connect count.
    func observe(_ redis: RedisConnection) async {
        let before = connectsSoFar
        guard let process = await Self.redisProcess(redis), connectsSoFar == before else { return }
        state.withLock { s in
            guard !s.runIDs.contains(where: { $0.connects == before }) else { return }
            s.runIDs.append((before, process.runID))
            if s.runIDs.count > 8 { s.runIDs.removeFirst() }
        }
    }

    /// Whether Redis (now `current`) is another process than at connect count `connects`, when
    /// the connections reconnected since. nil when it can't be told (no `run_id` recorded then).
    private func restarted(since connects: Int, current: RedisProcess) -> Bool? {
        guard connectsSoFar > connects else { return false }
        guard let then = state.withLock({ s in s.runIDs.last { $0.connects == connects }?.runID }) else { return nil }
        return then != current.runID
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
    }

    static func redisProcess(_ redis: RedisConnection) async -> RedisProcess? {
        guard let reply = try? await redis.pipeline([RedisCommand("INFO", "server")])[0] else { return nil }
        return reply.string.flatMap(RedisProcess.init(info:))
    }

    /// The message for a Redis that came back without its data.
    static let lostDataMessage = "REDIS RESTARTED WITHOUT ITS DATA (no persistence, or its last writes lost): the consumer group "
        + "no longer knows the entries it had delivered; without persistence the streams and their group were lost, and the group "
        + "is recreated on each stream where reading had reached. Entries the workers had in flight are finished (their "
        + "registrations written to the restarted Redis, their pushes sent), but their acknowledgements find nothing, since the new "
        + "group never delivered them: they are not delivered again (no other worker took them). Entries the streams held that no "
        + "worker had read are gone"

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

    /// The worker recreated `stream`'s group after `NOGROUP` (`restoring`). Returns true if it
    /// logged why (Redis came back without its data since the last read through the group);
    /// false leaves the caller to say the group was destroyed.
    func groupRecreated(_ stream: String, group: String, from position: String?, redis: RedisConnection, logger: Logger) async -> Bool {
        let lastRead = state.withLock { s in
            s.recreated[stream] = .now
            return s.lastRead
        }
        guard let lastRead, let process = await Self.redisProcess(redis), restarted(since: lastRead.connects, current: process) == true else {
            return false
        }
        reportLostData(stream, process, logger: logger, ["group": "\(group)", "from_id": "\(position ?? "0-0")"])
        return true
    }

    /// An acknowledgement of `acknowledged` entries of `stream` (processing began at `baseline`)
    /// found `missed` of them no longer pending: says why (see above).
    func explainMissedAcknowledgements(stream: String, group: String, missed: Int, acknowledged: Int, since baseline: Baseline,
                                       redis: RedisConnection, logger: Logger) async {
        let replies = try? await redis.pipeline([RedisCommand("INFO", "server"), RedisCommand("XINFO", "GROUPS", stream)])
        let counts: Logger.Metadata = ["group": "\(group)", "unacknowledged": "\(missed)", "of": "\(acknowledged)"]
        if let process = replies?[0].string.flatMap(RedisProcess.init(info:)) {
            // Without a run_id recorded then, only an uptime shorter than the time since by more
            // than its rounding says it.
            let elapsed = ContinuousClock.now - baseline.at
            let restart = restarted(since: baseline.connects, current: process)
                ?? (Double(process.uptimeSeconds) + 1 < elapsed.seconds)
            if restart {
                reportLostData(stream, process, logger: logger, counts)
                return
            }
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
