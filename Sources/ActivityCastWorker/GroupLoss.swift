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
/// - **The stream's primary failed over** (a Redis Cluster, or a replica promoted by Sentinel):
///   another node serves the stream's slot than when the entries were read. Deliveries the old
///   primary had not yet replicated were lost with it, so the new primary never delivered those
///   entries: they were finished here, and are not delivered again. Once per stream and node.
/// - Otherwise **another worker acknowledged them**: it claimed them after the visibility
///   timeout (this worker took longer than that to finish them).
///
/// Before, every missed acknowledgement was put down to another worker, also after a Redis
/// restart, once per batch in flight.
///
/// Which Redis process served each stream when: `observe` records, per node serving one of the
/// worker's streams, its address and `run_id` each time the worker's connections have connected
/// a new number of times (at start, then after a read that follows a reconnect: one `INFO
/// server` per node per reconnect; on a single Redis, one). A reconnect since a batch began, the
/// same node serving the stream, and a `run_id` other than the one recorded for the connection
/// count it began at, is a restart; another node serving it is a failover (run_ids of two nodes
/// are never compared).
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
        /// Per stream, the node serving it and its `run_id`, by the connections' connect count
        /// they were seen at (the last few counts).
        var seen: [(connects: Int, stream: String, process: RedisProcess)] = []
        /// When a read through the group last succeeded (the groups existed then), and the
        /// connect count then.
        var lastRead: (at: ContinuousClock.Instant, connects: Int)?
    }

    private let state = Mutex(State())
    /// The worker's connections (reading, processing): their connect counts, summed, grow when
    /// Redis restarts under the worker.
    private let connections: [RedisConnection]
    /// The streams whose nodes `observe` asks (the worker's input streams).
    private let streams: [String]

    init(connections: [RedisConnection], streams: [String]) {
        self.connections = connections
        self.streams = streams
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
        return state.withLock { s in !s.seen.contains { $0.connects == connects } }
    }

    /// Records which node and Redis process (`run_id`) serve each stream at the current connect
    /// count: one `INFO server` per node.
    func observe(_ redis: RedisConnection) async {
        let before = connectsSoFar
        guard let groups = try? await redis.keyGroups(streams) else { return }
        var found: [(String, RedisProcess)] = []
        var byNode: [String: RedisProcess] = [:]
        for group in groups {
            let node = "\(group.node)"
            if byNode[node] == nil {
                guard let process = await Self.redisProcess(redis, on: group.node) else { return }
                byNode[node] = process
            }
            for stream in group.keys { found.append((stream, byNode[node]!)) }
        }
        guard connectsSoFar == before else { return }
        state.withLock { s in
            guard !s.seen.contains(where: { $0.connects == before }) else { return }
            s.seen += found.map { (before, $0.0, $0.1) }
            let counts = Set(s.seen.map(\.connects)).sorted()
            if counts.count > 8 { s.seen.removeAll { $0.connects < counts[counts.count - 8] } }
        }
    }

    /// What became of the node that served `stream` at connect count `connects`, now that
    /// `current` serves it.
    enum Change: Equatable {
        case none
        /// The same node, another process: Redis restarted there.
        case restarted
        /// Another node serves the stream: a failover (or a slot moved).
        case failedOver(from: String)
        /// No node recorded then for the stream: can't be told.
        case unknown
    }

    private func change(of stream: String, since connects: Int, current: RedisProcess) -> Change {
        guard connectsSoFar > connects else { return .none }
        guard let then = state.withLock({ s in s.seen.last { $0.connects == connects && $0.stream == stream }?.process }) else { return .unknown }
        if then.node != current.node { return .failedOver(from: then.node) }
        return then.runID != current.runID ? .restarted : .none
    }

    /// `INFO server`'s `run_id` and `uptime_in_seconds`, and the node that answered.
    struct RedisProcess: Sendable {
        var runID: String
        var uptimeSeconds: Int64
        var node: String

        init?(info: String, node: String) {
            var runID: String?, uptime: Int64?
            for line in info.split(whereSeparator: \.isNewline) {  // "\r\n" is one Character
                if line.hasPrefix("run_id:") { runID = String(line.dropFirst(7)) }
                if line.hasPrefix("uptime_in_seconds:") { uptime = Int64(line.dropFirst(18)) }
            }
            guard let runID, let uptime else { return nil }
            self.runID = runID
            uptimeSeconds = uptime
            self.node = node
        }
    }

    static func redisProcess(_ redis: RedisConnection, on node: RedisNodeAddress) async -> RedisProcess? {
        guard let reply = try? await redis.pipeline([RedisCommand("INFO", "server")], on: node)[0] else { return nil }
        return reply.string.flatMap { RedisProcess(info: $0, node: "\(node)") }
    }

    /// The process serving `stream` now.
    static func redisProcess(_ redis: RedisConnection, serving stream: String) async -> RedisProcess? {
        guard let node = try? await redis.node(forKey: stream) else { return nil }
        return await redisProcess(redis, on: node)
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
        reportOnce("lost|\(redis.runID)", Self.lostDataMessage, logger: logger, metadata.merging([
            "stream": "\(stream)", "redis_run_id": "\(redis.runID)", "redis_uptime_s": "\(redis.uptimeSeconds)",
        ]) { _, new in new })
    }

    /// Logs, once per stream and new node, that the stream's primary failed over since entries
    /// were read, and what that cost.
    private func reportFailover(_ stream: String, from: String, to: String, logger: Logger, _ metadata: Logger.Metadata) {
        reportOnce("failover|\(stream)|\(to)", "the stream's Redis primary failed over since these entries were read: its deliveries that the old primary had not yet replicated were lost with it, so the new primary never delivered them; they were finished here and are not delivered again",
                   logger: logger, metadata.merging(["stream": "\(stream)", "from_node": "\(from)", "to_node": "\(to)"]) { _, new in new })
    }

    /// Logs `message` as an error unless `incident` was logged already.
    private func reportOnce(_ incident: String, _ message: String, logger: Logger, _ metadata: Logger.Metadata) {
        guard state.withLock({ $0.reported.insert(incident).inserted }) else { return }
        logger.error("\(message)", metadata: metadata)
    }

    /// The worker recreated `stream`'s group after `NOGROUP` (`restoring`). Returns true if it
    /// logged why (Redis came back without its data since the last read through the group);
    /// false leaves the caller to say the group was destroyed.
    func groupRecreated(_ stream: String, group: String, from position: String?, redis: RedisConnection, logger: Logger) async -> Bool {
        let lastRead = state.withLock { s in
            s.recreated[stream] = .now
            return s.lastRead
        }
        guard let lastRead, let process = await Self.redisProcess(redis, serving: stream),
              change(of: stream, since: lastRead.connects, current: process) == .restarted else {
            return false
        }
        reportLostData(stream, process, logger: logger, ["group": "\(group)", "from_id": "\(position ?? "0-0")"])
        return true
    }

    /// An acknowledgement of `acknowledged` entries of `stream` (processing began at `baseline`)
    /// found `missed` of them no longer pending: says why (see above).
    func explainMissedAcknowledgements(stream: String, group: String, missed: Int, acknowledged: Int, since baseline: Baseline,
                                       redis: RedisConnection, logger: Logger) async {
        // Both from the node serving the stream (Redis unreachable: neither).
        let node = try? await redis.node(forKey: stream)
        var replies: [RESPValue]?
        if let node { replies = try? await redis.pipeline([RedisCommand("INFO", "server"), RedisCommand("XINFO", "GROUPS", stream)], on: node) }
        let counts: Logger.Metadata = ["group": "\(group)", "unacknowledged": "\(missed)", "of": "\(acknowledged)"]
        if let node, let process = replies?[0].string.flatMap({ RedisProcess(info: $0, node: "\(node)") }) {
            switch change(of: stream, since: baseline.connects, current: process) {
            case .restarted:
                reportLostData(stream, process, logger: logger, counts)
                return
            case .failedOver(let from):
                reportFailover(stream, from: from, to: process.node, logger: logger, counts)
                return
            case .unknown:
                // Without a node recorded then, only an uptime shorter than the time since by
                // more than its rounding says it.
                if Double(process.uptimeSeconds) + 1 < (ContinuousClock.now - baseline.at).seconds {
                    reportLostData(stream, process, logger: logger, counts)
                    return
                }
            case .none:
                break
            }
        }
        var groupMissing = false
        if let reply = replies?[1] {
            if let e = reply.errorMessage { groupMissing = e.contains("no such key") }
            else { groupMissing = !(reply.array ?? []).contains { Self.name(ofGroup: $0) == group } }
        }
        let recreated = state.withLock { $0.recreated[stream] }
        if groupMissing || (recreated.map { $0 > baseline.at } ?? false) {
            reportOnce("recreated|\(stream)|\(recreated.map { "\($0)" } ?? "missing")",
                       "entries finished here could not be acknowledged: the consumer group was destroyed (and is recreated) since they were read, and the new group never delivered them, so they are not delivered again (no other worker took them)",
                       logger: logger, counts.merging(["stream": "\(stream)"]) { _, new in new })
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
