import ActivityCastSettings
import Foundation
import RedisClient
import Synchronization

/// Watches Redis for the ops endpoints on a connection of its own (so a check never queues
/// behind the worker's pipelines, and a frozen Redis holds up nothing of the worker's):
///
/// - every second: `PING` and `XINFO GROUPS` of each input stream, with a 1 s timeout — is Redis
///   reachable, does the consumer group exist (`/readyz`);
/// - every 5 s at most, whatever the scrape rate: the group's lag and pending count of every
///   stream the worker reads (`XINFO GROUPS`), and the age of the oldest pending entry
///   (`XPENDING` summary: the lowest pending id, against Redis's clock from `TIME`) — `/metrics`.
final class GroupMonitor: Sendable {
    struct Readiness: Sendable {
        /// nil: ready.
        var problem: String?
        var checkedAt: ContinuousClock.Instant
    }

    struct StreamView: Sendable, Equatable {
        /// nil when Redis can't tell (`lag` is null after some deletions).
        var lag: Int64?
        var pending: Int64
        /// Seconds since the oldest pending entry was added (its id's time, Redis's clock); 0 with
        /// nothing pending.
        var oldestPendingSeconds: Double
    }

    let connection: RedisConnection
    let group: String
    /// Streams whose group must exist for the worker to be ready (its input streams).
    let required: [String]
    /// Every stream whose group is watched for metrics (the input streams and the slices streams).
    let watched: [String]
    let checkInterval: Duration
    let viewInterval: Duration
    private let readiness = Mutex<Readiness?>(nil)
    private let views = Mutex<(at: ContinuousClock.Instant, streams: [String: StreamView])?>(nil)
    /// The fleet's schedule of coalesced states (`RedisKeys.budgetDue`): members, and how many are
    /// past due on Redis's clock; refreshed with the views.
    private let schedule = Mutex<(due: Int64, overdue: Int64)?>(nil)
    let budgetDue: String
    /// Channels by state (`ChannelRegistry`'s index, fallbacks and deletion schedule), refreshed
    /// with the views: `open` channels on record, keys whose channels are `ending` (scheduled
    /// for deletion), keys on per-token `fallback`.
    private let channels = Mutex<[(state: String, count: Int64)]?>(nil)
    /// Redis's memory (`INFO memory`), refreshed with the views.
    private let memory = Mutex<RedisMemory?>(nil)
    let channelSets: [(state: String, key: String)]

    init(settings: Settings, consumer: String, watched: [String], checkInterval: Duration = .seconds(1), viewInterval: Duration = .seconds(5)) {
        var config = settings.redisConfiguration
        config.clientName = "activitycast-ops-\(consumer)"
        // Short: a check that can't answer within a second means "not ready", not "wait".
        config.connectTimeout = min(config.connectTimeout, .seconds(1))
        config.commandTimeout = .seconds(1)
        config.backoff = .init(initial: .milliseconds(50), maximum: .milliseconds(500))
        self.connection = RedisConnection(configuration: config)
        self.group = settings.group
        self.required = settings.inputStreams.map(\.stream)
        self.watched = watched
        self.checkInterval = checkInterval
        self.viewInterval = viewInterval
        self.budgetDue = settings.keys.budgetDue
        let prefix = settings.keys.prefix
        channelSets = [("open", "\(prefix):channels:index"), ("ending", "\(prefix):channels:expiring"), ("fallback", "\(prefix):channels:fallback")]
    }

    deinit { connection.close() }

    var lastReadiness: Readiness? { readiness.withLock { $0 } }
    var lastViews: (at: ContinuousClock.Instant, streams: [String: StreamView])? { views.withLock { $0 } }
    var lastSchedule: (due: Int64, overdue: Int64)? { schedule.withLock { $0 } }
    var lastChannels: [(state: String, count: Int64)]? { channels.withLock { $0 } }
    var lastMemory: RedisMemory? { memory.withLock { $0 } }

    /// Checks until cancelled.
    func run() async {
        var nextView = ContinuousClock.now
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let withViews = started >= nextView
            await check(withViews: withViews)
            if withViews { nextView = started + viewInterval }
            try? await Task.sleep(until: started + checkInterval, clock: .continuous)
        }
    }

    /// One round: readiness always, the stream views when asked.
    func check(withViews: Bool) async {
        let streams = withViews ? watched : required
        var commands = [RedisCommand("PING")] + streams.map { RedisCommand("XINFO", "GROUPS", $0) }
        if withViews {
            commands.append(RedisCommand("TIME"))
            commands += streams.map { RedisCommand("XPENDING", $0, group) }
        }
        let replies: [RESPValue]
        do {
            replies = try await connection.pipeline(commands)
        } catch {
            let message = (error as? RedisError).map { "\($0.message)" } ?? "\(error)"
            readiness.withLock { $0 = Readiness(problem: "Redis unreachable: \(message.prefix(200))", checkedAt: .now) }
            return
        }
        if let e = replies[0].errorMessage {
            readiness.withLock { $0 = Readiness(problem: "Redis answers PING with \(e.prefix(200))", checkedAt: .now) }
            return
        }
        var groups: [String: [String: RESPValue]] = [:]
        for (stream, reply) in zip(streams, replies[1..<(1 + streams.count)]) {
            if let g = GroupMonitor.group(group, in: reply) { groups[stream] = g }
        }
        var missing: [String] = []
        for stream in required {
            // A key of the wrong type is the worker's own degraded mode (it reads the others);
            // only a stream without the group, or no stream at all, makes it unready.
            if let reply = replies[1 + streams.firstIndex(of: stream)!].errorMessage, reply.contains("WRONGTYPE") { continue }
            if groups[stream] == nil { missing.append(stream) }
        }
        let problem = missing.isEmpty ? nil : "consumer group \(group) missing on \(missing.joined(separator: ", "))"
        readiness.withLock { $0 = Readiness(problem: problem, checkedAt: .now) }

        guard withViews else { return }
        let timeIndex = 1 + streams.count
        let time = replies[timeIndex].array ?? []
        let nowMillis: Int64? = time.count == 2 ? time[0].string.flatMap { Int64($0) }.map { s in s * 1000 + (time[1].string.flatMap { Int64($0) } ?? 0) / 1000 } : nil
        var result: [String: StreamView] = [:]
        for (i, stream) in streams.enumerated() {
            guard let g = groups[stream] else { continue }
            let lag = g["lag"].flatMap { $0.isNull ? nil : $0.int }
            let pending = g["pending"]?.int ?? 0
            var oldest = 0.0
            let summary = replies[timeIndex + 1 + i].array ?? []
            if pending > 0, summary.count >= 2, let id = summary[1].string, let now = nowMillis,
               let ms = id.split(separator: "-").first.flatMap({ Int64($0) }) {
                oldest = max(0, Double(now - ms) / 1000)
            }
            result[stream] = StreamView(lag: lag, pending: pending, oldestPendingSeconds: oldest)
        }
        views.withLock { $0 = (.now, result) }
        guard let nowMillis, let counts = try? await connection.pipeline(
            [RedisCommand("ZCARD", budgetDue), RedisCommand("ZCOUNT", budgetDue, "-inf", nowMillis)]
                + channelSets.map { RedisCommand("ZCARD", $0.key) })
        else { return }
        if let due = counts[0].int, let overdue = counts[1].int { schedule.withLock { $0 = (due, overdue) } }
        let sets = zip(channelSets, counts.dropFirst(2)).compactMap { set, reply in reply.int.map { (set.state, $0) } }
        if sets.count == channelSets.count { channels.withLock { $0 = sets } }
        // Every primary's memory (one node on a single Redis): the fullest is the first to refuse.
        var nodes: [RedisMemory] = []
        for node in (try? await connection.primaries()) ?? [] {
            if let text = try? await connection.pipeline([RedisCommand("INFO", "memory")], on: node)[0].string, let m = RedisMemory(info: text) {
                nodes.append(m)
            }
        }
        if let m = RedisMemory.fullest(nodes) { memory.withLock { $0 = m } }
    }

    /// The fields of `group` in an `XINFO GROUPS` reply; nil if the group (or the key) is missing.
    static func group(_ name: String, in reply: RESPValue) -> [String: RESPValue]? {
        for g in reply.array ?? [] {
            let items = g.array ?? []
            var map: [String: RESPValue] = [:]
            var i = 0
            while i + 1 < items.count {
                if let k = items[i].string { map[k] = items[i + 1] }
                i += 2
            }
            if map["name"]?.string == name { return map }
        }
        return nil
    }
}
