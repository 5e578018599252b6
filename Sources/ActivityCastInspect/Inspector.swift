import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import ActivityCastSettings
import Foundation
import RedisClient

/// What `activitycast inspect` shows. Read-only: only XINFO, XPENDING (the first
/// `Inspector.pendingSample` entries), XLEN, XREVRANGE (the latest few), ZCARD, SCARD, HLEN,
/// SMEMBERS/ZRANGE on small index sets, one HSCAN of the counters hash, HGETALL of small per-key
/// hashes (channels, budgets), ZSCORE/ZCOUNT of the budget schedule, TIME, and TYPE to explain a
/// key of the wrong type.
public struct InspectReport: Codable, Sendable {
    public struct Consumer: Codable, Sendable {
        public var name: String
        public var pending: Int64
        public var idleMillis: Int64
    }

    public struct Group: Codable, Sendable {
        public var name: String
        public var consumers: [Consumer]
        public var pending: Int64
        /// The lowest pending id: the entry that has been pending the longest, by id.
        public var oldestPendingID: String?
        /// How long the longest-waiting pending entry has gone since it was last delivered: the
        /// largest idle time among the first `Inspector.pendingSample` pending entries (by id). Not
        /// the age of the id: an entry added long ago but delivered a moment ago shows that moment.
        /// Compare it with `worker.visibility_timeout_ms`: past it, another worker claims the entry
        /// (which delivers it again and restarts this clock).
        public var oldestPendingAgeMillis: Int64?
        /// Entries not yet delivered to the group (`lag` from XINFO GROUPS); nil when Redis can't
        /// tell (after deletions).
        public var lag: Int64?
        public var lastDeliveredID: String
        /// Entries delivered to the group since it was created (`entries-read`, Redis 7); nil when
        /// Redis can't tell. `activitycast top` shows its rate.
        public var entriesRead: Int64? = nil
    }

    public struct Stream: Codable, Sendable {
        public var name: String
        public var kind: String
        public var exists: Bool
        public var length: Int64
        public var firstID: String?
        public var lastID: String?
        public var groups: [Group]
        /// Why the stream could not be read (a key of another type, a refused command); the other
        /// fields are then empty. Nil when it was read.
        public var error: String?
        /// Entries ever added to the stream (`entries-added`, Redis 7), trimmed ones included:
        /// `activitycast top` shows its rate. Nil when Redis doesn't say.
        public var entriesAdded: Int64? = nil
        /// What the workers keep of it once acknowledged (`StreamRetention`, the settings').
        public var retention: String? = nil
        /// The age of its first entry, by its id's time: with trimming on, about the retention
        /// (more while a group lags or an entry stays pending). Nil when it is empty.
        public var oldestEntryAgeMillis: Int64? = nil
    }

    /// One dead letter's `reason`, `stream` and `id` fields, each cut to its first
    /// `Inspector.deadLetterTextBytes` bytes (its original fields are not read).
    public struct DeadLetter: Codable, Sendable {
        public var id: String
        public var reason: String
        /// The size of the whole `reason` field: more than `reason` holds when it was cut.
        public var reasonBytes: Int
        public var stream: String
        public var entryID: String
    }

    public struct Registrations: Codable, Sendable {
        public var activityKeys: Int64
        public var activityTokens: Int64
        public var pushToStartTokens: Int64
        public var follows: Int64
        /// True when the key or target index was larger than what was counted.
        public var truncated: Bool
        /// Why some counts could not be read (an index or a per-key set of another type); those
        /// counts are 0 or too low. Nil when everything was counted.
        public var error: String?
    }

    /// The fleet-wide counters hash (`RedisKeys.counters`) that workers `HINCRBY`.
    public struct Counters: Codable, Sendable {
        public var key: String
        /// Every field with an integer value (`registrations_stale` → 12).
        public var values: [String: Int64]
        /// True when the hash had more fields than `Inspector.counterLimit`, which were read.
        public var truncated: Bool
        /// Why the hash, or some of its fields, could not be read. Nil when all were.
        public var error: String?
    }

    /// A key's broadcast channel in one environment.
    public struct Channel: Codable, Sendable {
        public var key: String
        public var environment: String
        /// nil for a key on per-token fallback (Apple's channel limit was reached).
        public var id: String?
        public var storagePolicy: Int?
        public var ageMillis: Int64?
        public var broadcasts: Int64
        /// `live`, `ending` (the activity ended; deleted at `deleteAtMillis`), or `fallback`.
        public var state: String
        public var deleteAtMillis: Int64?
    }

    public struct Channels: Codable, Sendable {
        public var channels: [Channel]
        /// Keys looked at: the live keys index and the channels due for deletion (each bounded).
        public var truncated: Bool
        /// Permanent send failures recorded in `<prefix>:send-failures` (capped stream).
        public var sendFailures: Int64
        public var latestSendFailures: [String]
        public var error: String?
    }

    /// One (key, audience)'s budget hash, `<prefix>:{key}:budget:<audience>` (docs/budgets.md).
    public struct Budget: Codable, Sendable {
        public var key: String
        /// `standard`, `frequent` or `channel`: the last part of the hash's name.
        public var audience: String
        /// The settings that size it (`budgets.<policy>.*`): `standard`, `frequent`,
        /// `channel_no_storage` or `channel_latest_message`.
        public var policy: String
        /// False for a channel whose storage policy is not on record any more (its channels were
        /// deleted): the policy is then the routes' for the key's feed.
        public var policyKnown: Bool
        /// Tokens left, refilled to `Budgets.nowMillis` with the policy (`TokenBucket.refill`):
        /// `ticks` / `BudgetState.ticksPerToken`.
        public var tokens: Double
        public var ticks: Int64
        public var capacity: Int
        public var priority10: Int
        public var priority5: Int
        public var downgraded: Int
        public var coalesced: Int
        public var flushed: Int
        public var stale: Int
        public var idleFlushes: Int
        /// Tokens given back: decided at 10, the push never went out.
        public var refunded: Int = 0
        /// Updates and flushes not sent: the audience already showed their state.
        public var unchanged: Int = 0
        /// The event time (ms) of the coalesced state waiting for a flush; nil when none waits.
        public var pendingMillis: Int64?
        /// When the waiting state is due: its score in the schedule (`RedisKeys.budgetDue`), nil
        /// when it is not scheduled.
        public var dueAtMillis: Int64?
        /// The time of the end sent for the key, if any.
        public var endedMillis: Int64?
    }

    public struct Budgets: Codable, Sendable {
        /// The time the tokens are refilled to and due times are measured from: Redis's clock
        /// (`TIME`), the one the decisions and the schedule use, or this machine's when Redis
        /// refused `TIME` (`redisClock` false).
        public var nowMillis: Int64
        public var redisClock: Bool
        public var budgets: [Budget]
        /// True when the key index was larger than what was read.
        public var truncated: Bool
        /// The fleet's schedule of coalesced states (`RedisKeys.budgetDue`).
        public var schedule: String
        /// Due flushes in the schedule (every key, not only those listed).
        public var scheduled: Int64
        /// Of those, how many were due before `nowMillis`.
        public var overdue: Int64
        public var error: String?
    }

    public var redis: String
    public var generatedAtMillis: Int64
    public var streams: [Stream]
    public var deadLetterStream: String
    public var deadLetterCount: Int64
    public var latestDeadLetters: [DeadLetter]
    /// Why the dead-letter stream could not be read; the count is then 0 and the list empty.
    public var deadLetterError: String?
    public var registrations: Registrations
    public var counters: Counters
    public var channels: Channels
    public var budgets: Budgets

    /// Every section's error, in the order of the report. A report with errors is still a report:
    /// each section says what went wrong with it, and the others are complete.
    public var errors: [String] {
        streams.compactMap(\.error)
            + [deadLetterError, registrations.error, counters.error, channels.error, budgets.error].compactMap { $0 }
    }
}

public struct Inspector: Sendable {
    let settings: Settings
    let redis: RedisConnection
    /// Index sets larger than this are not counted in full (inspect must stay cheap).
    let countLimit = 10_000
    /// How many pending entries per group (the lowest ids) are read for the oldest pending age.
    public static let pendingSample = 100
    /// How much of a dead letter's `reason`, `stream` and `id` the report keeps (bytes).
    public static let deadLetterTextBytes = 4096
    /// At most this many of the latest dead letters are read (`XREVRANGE … COUNT`).
    public static let maxDeadLetters = 100
    /// About this many counter fields are read (`HSCAN … COUNT`); a hash this large is a bug.
    public static let counterLimit = 1000

    public init(settings: Settings, redis: RedisConnection) {
        self.settings = settings
        self.redis = redis
    }

    /// Reads everything. A section that Redis refuses (a key of another type: `SET ac:feed:transit
    /// x`) carries its error and the others are read as usual; only a failure to talk to Redis at
    /// all (no connection, timeout) throws.
    public func report(latest: Int = 5) async throws -> InspectReport {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var streams: [InspectReport.Stream] = []
        // The feeds, and the slices of fan-outs under way (finished slices are deleted: its
        // length is the slices not yet finished, its pending ones are in some worker's hands).
        for (name, kind) in settings.inputStreams.map({ ($0.stream, $0.kind.rawValue) }) + [(settings.keys.slices, "slices")] {
            do {
                var s = try await stream(name, kind: kind)
                s.retention = settings.retention.description
                s.oldestEntryAgeMillis = s.firstID.flatMap(StreamID.init).map { max(0, now - Int64($0.ms)) }
                streams.append(s)
            } catch {
                let why = try await sectionError(error, key: name, expected: "stream")
                streams.append(.init(name: name, kind: kind, exists: true, length: 0, firstID: nil, lastID: nil,
                                     groups: [], error: why))
            }
        }
        let dlq = settings.deadLetterStream
        // Only the latest few entries: a dead-letter stream can hold 100,000 of them.
        let latest = min(max(latest, 0), Self.maxDeadLetters)
        let dlqReplies = try await redis.pipeline([RedisCommand("XLEN", dlq), RedisCommand("XREVRANGE", dlq, "+", "-", "COUNT", max(latest, 1))])
        var latestDead: [InspectReport.DeadLetter] = []
        var deadLetterError: String?
        if let message = dlqReplies[0].errorMessage ?? dlqReplies[1].errorMessage {
            deadLetterError = try await explain(message, key: dlq, expected: "stream")
        } else {
            for item in (dlqReplies[1].array ?? []).prefix(latest) {
                guard let entry = try? StreamReplies.entry(item), let fields = entry.fields else { continue }
                let map = pairs(fields, only: ["reason", "stream", "id"])
                func text(_ name: String) -> (text: String, bytes: Int) {
                    VisibleText.prefix(map[name] ?? [], maxBytes: Self.deadLetterTextBytes)
                }
                let reason = text("reason")
                latestDead.append(.init(id: entry.id, reason: reason.text, reasonBytes: reason.bytes, stream: text("stream").text,
                                        entryID: text("id").text))
            }
        }
        let channels = try await channels(now: now)
        return InspectReport(redis: settings.redisURL.description, generatedAtMillis: now, streams: streams,
                             deadLetterStream: dlq, deadLetterCount: deadLetterError == nil ? dlqReplies[0].int ?? 0 : 0,
                             latestDeadLetters: latestDead, deadLetterError: deadLetterError, registrations: try await registrations(),
                             counters: try await counters(), channels: channels,
                             budgets: try await budgets(now: now, channels: channels))
    }

    /// The budget hashes of the keys CHANNELS looks at (the live keys index and the ended keys
    /// whose channels await deletion, each as bounded), each refilled to `now` with its audience's
    /// policy from the settings, and the schedule of due flushes. A channel's policy is its
    /// storage policy on record (`channels`); failing that, the routes' for the key's feed.
    private func budgets(now local: Int64, channels: InspectReport.Channels) async throws -> InspectReport.Budgets {
        let keys = settings.keys
        // Redis's clock: the one the decisions and the schedule use.
        let time = try await redis.pipeline([RedisCommand("TIME")])[0].array?.compactMap(\.int) ?? []
        let redisNow = time.count == 2 ? time[0] * 1000 + time[1] / 1000 : nil
        let now = redisNow ?? local
        let schedule = keys.budgetDue, expiring = "\(keys.prefix):channels:expiring"
        let index = try await redis.pipeline([
            RedisCommand("ZRANGE", keys.keysIndex, 0, countLimit - 1), RedisCommand("ZCARD", keys.keysIndex),
            RedisCommand("ZRANGE", expiring, 0, countLimit - 1), RedisCommand("ZCARD", expiring),
            RedisCommand("ZCARD", schedule), RedisCommand("ZCOUNT", schedule, "-inf", "(\(now)"),
        ])
        var errors: [String] = []
        for (i, reply) in index.enumerated() {
            guard let message = reply.errorMessage else { continue }
            let why = try await explain(message, key: [keys.keysIndex, expiring, schedule][i / 2], expected: "zset")
            if !errors.contains(why) { errors.append(why) }
        }
        let names = Set(((index[0].array ?? []) + (index[2].array ?? [])).compactMap(\.string)).compactMap(ActivityKey.init(parsing:))
            .sorted { $0.description < $1.description }
        let audiences: [BudgetAudience] = [.tier(.standard), .tier(.frequent), .channel(.noStorage)]
        let hashes = names.flatMap { key in audiences.map { (key: key, audience: $0) } }
        let replies = try await redis.pipeline(hashes.map { RedisCommand("HGETALL", keys.budget($0.key, $0.audience)) })

        var recorded: [String: ChannelStoragePolicy] = [:]
        for c in channels.channels {
            if recorded[c.key] == nil, let p = c.storagePolicy.flatMap(ChannelStoragePolicy.init(rawValue:)) { recorded[c.key] = p }
        }
        var routes: RouteSet?  // read only when a channel's policy is not on record
        func guessed(_ key: ActivityKey) -> ChannelStoragePolicy {
            let set = routes ?? (try? settings.loadRoutes()) ?? RouteSet.shipped
            routes = set
            return (key.kind == .match ? set.sports : set.transit).storagePolicy
        }

        var out: [InspectReport.Budget] = []
        // Hashes that could not be read: counted, and the first explained (one TYPE, not one each).
        var unread: [(name: String, message: String)] = []
        for (hash, reply) in zip(hashes, replies) {
            let name = keys.budget(hash.key, hash.audience)
            if let message = reply.errorMessage {
                unread.append((name, message))
                continue
            }
            guard reply.array?.isEmpty == false else { continue }  // no budget for this audience
            guard let state = BudgetScripts.state(fromHash: reply) else {
                unread.append((name, "not a budget (no ticks or refilled_at)"))
                continue
            }
            var audience = hash.audience, known = true
            if case .channel = audience {
                if let p = recorded[hash.key.description] {
                    audience = .channel(p)
                } else {
                    audience = .channel(guessed(hash.key))
                    known = false
                }
            }
            let policy = settings.budgets.audience(audience)
            var bucket = state.bucket
            bucket.refill(to: now, policy.bucket)
            let c = state.counters
            out.append(.init(key: hash.key.description, audience: hash.audience.name, policy: Self.policyName(audience), policyKnown: known,
                             tokens: Double(bucket.ticks) / Double(BudgetState.ticksPerToken), ticks: bucket.ticks,
                             capacity: policy.bucket.capacity,
                             priority10: c.priority10, priority5: c.priority5, downgraded: c.downgraded, coalesced: c.coalesced,
                             flushed: c.flushed, stale: c.stale, idleFlushes: c.idleFlushes, refunded: c.refunded, unchanged: c.unchanged, pendingMillis: state.pendingMillis,
                             dueAtMillis: nil, endedMillis: state.endedMillis))
        }
        if let first = unread.first {
            let why = first.message.hasPrefix("not a budget") ? "\(first.name): \(first.message)"
                : try await explain(first.message, key: first.name, expected: "hash")
            errors.append(unread.count == 1 ? "not read: \(why)" : "\(unread.count) budgets not read, the first: \(why)")
        }
        // When each waiting state is due: its member `<key>|<audience>` in the schedule.
        let waiting = out.indices.filter { out[$0].pendingMillis != nil }
        let scores = try await redis.pipeline(waiting.map { RedisCommand("ZSCORE", schedule, "\(out[$0].key)|\(out[$0].audience)") })
        for (i, score) in zip(waiting, scores) {
            out[i].dueAtMillis = score.string.flatMap(Double.init).map { Int64($0) }
        }
        return .init(nowMillis: now, redisClock: redisNow != nil, budgets: out, truncated: (index[1].int ?? 0) > Int64(countLimit) || (index[3].int ?? 0) > Int64(countLimit),
                     schedule: schedule, scheduled: index[4].int ?? 0, overdue: index[5].int ?? 0,
                     error: errors.isEmpty ? nil : errors.joined(separator: "; "))
    }

    /// The settings' name of an audience's policy (`budgets.<name>.*`).
    static func policyName(_ audience: BudgetAudience) -> String {
        switch audience {
        case .tier(let tier): tier.rawValue
        case .channel(.noStorage): "channel_no_storage"
        case .channel(.latestMessage): "channel_latest_message"
        }
    }

    /// Channels of the live keys and of the keys whose channels await deletion.
    private func channels(now: Int64) async throws -> InspectReport.Channels {
        let keys = settings.keys
        let expiring = "\(keys.prefix):channels:expiring", failures = "\(keys.prefix):send-failures"
        let index = try await redis.pipeline([
            RedisCommand("ZRANGE", keys.keysIndex, 0, countLimit - 1),
            RedisCommand("ZRANGE", expiring, 0, countLimit - 1, "WITHSCORES"),
            RedisCommand("ZCARD", keys.keysIndex), RedisCommand("ZCARD", expiring),
            RedisCommand("XLEN", failures), RedisCommand("XREVRANGE", failures, "+", "-", "COUNT", 5),
        ])
        if let message = index.lazy.compactMap(\.errorMessage).first {
            return .init(channels: [], truncated: false, sendFailures: 0, latestSendFailures: [], error: "channels: \(message)")
        }
        // Scores are ms (RESP2 sends them as strings).
        let deleteAt = dictionary(index[1]).mapValues { Int64($0.string.flatMap(Double.init) ?? 0) }
        let names = Set((index[0].array ?? []).compactMap(\.string)).union(deleteAt.keys).sorted()
        let replies = try await redis.pipeline(names.map { RedisCommand("HGETALL", "\(keys.prefix):{\($0)}:channels") })
        var out: [InspectReport.Channel] = []
        for (name, reply) in zip(names, replies) {
            let fields = dictionary(reply).compactMapValues(\.string)
            for env in ["development", "production"] {
                let broadcasts = Int64(fields["\(env):broadcasts"] ?? "") ?? 0
                if let value = fields[env] {
                    let parts = value.split(separator: " ")
                    let created = parts.count > 2 ? Int64(parts[2]) : nil
                    out.append(.init(key: name, environment: env, id: parts.first.map(String.init), storagePolicy: parts.count > 1 ? Int(parts[1]) : nil,
                                     ageMillis: created.map { now - $0 }, broadcasts: broadcasts,
                                     state: deleteAt[name] != nil ? "ending" : "live", deleteAtMillis: deleteAt[name]))
                } else if fields["\(env):fallback"] == "1" {
                    out.append(.init(key: name, environment: env, id: nil, storagePolicy: nil, ageMillis: nil, broadcasts: broadcasts,
                                     state: "fallback", deleteAtMillis: nil))
                }
            }
        }
        let latest = (index[5].array ?? []).compactMap { try? StreamReplies.entry($0) }.map { entry -> String in
            let map = pairs(entry.fields ?? [], only: ["key", "kind", "reason"])
            let text = { (n: String) in VisibleText.prefix(map[n] ?? [], maxBytes: 300).text }
            return "\(text("key")) \(text("kind")): \(text("reason"))"
        }
        return .init(channels: out, truncated: (index[2].int ?? 0) > Int64(countLimit) || (index[3].int ?? 0) > Int64(countLimit),
                     sendFailures: index[4].int ?? 0, latestSendFailures: latest, error: nil)
    }

    private func counters() async throws -> InspectReport.Counters {
        let key = settings.keys.counters
        let replies = try await redis.pipeline([RedisCommand("HLEN", key), RedisCommand("HSCAN", key, 0, "COUNT", Self.counterLimit)])
        if let message = replies[0].errorMessage ?? replies[1].errorMessage {
            return .init(key: key, values: [:], truncated: false, error: try await explain(message, key: key, expected: "hash"))
        }
        let items = (replies[1].array ?? []).dropFirst().first?.array ?? []
        var values: [String: Int64] = [:]
        var notIntegers: [String] = []
        var i = 0
        while i + 1 < items.count {
            let name = String(decoding: items[i].bytes ?? [], as: UTF8.self)
            if let value = items[i + 1].int { values[name] = value } else { notIntegers.append(name) }
            i += 2
        }
        let read = Int64(values.count + notIntegers.count)
        let error = notIntegers.isEmpty ? nil
            : "\(key): not an integer, left out: " + notIntegers.sorted().map { "'\($0)'" }.joined(separator: ", ")
        return .init(key: key, values: values, truncated: (replies[0].int ?? 0) > read, error: error)
    }

    /// The message for a section that failed with `error`, or `error` rethrown when it is not about
    /// the section (the connection failed, a timeout): then there is no report to show.
    private func sectionError(_ error: any Error, key: String, expected: String) async throws -> String {
        guard let redisError = error as? RedisError, redisError.kind == .server || redisError.kind == .unexpectedReply else {
            throw error
        }
        return try await explain(redisError.message, key: key, expected: expected)
    }

    /// A reply error about `key` in words: `WRONGTYPE: ac:feed:transit is a string, not a stream`,
    /// else Redis's message after the key.
    private func explain(_ message: String, key: String, expected: String) async throws -> String {
        guard message.contains("WRONGTYPE") else { return "\(key): \(message)" }
        let type = try await redis.pipeline([RedisCommand("TYPE", key)])[0].string ?? "?"
        let names = ["string": "a string", "list": "a list", "set": "a set", "zset": "a sorted set", "hash": "a hash",
                     "stream": "a stream", "none": "gone (deleted meanwhile)"]
        return "WRONGTYPE: \(key) is \(names[type] ?? "of type \(type)"), not \(names[expected] ?? expected)"
    }

    /// The values of the fields named in `only`, as bytes (a dead letter's `f:*` copies of the
    /// original entry can be large and are not needed here).
    private func pairs(_ fields: [[UInt8]], only names: Set<String>) -> [String: [UInt8]] {
        var map: [String: [UInt8]] = [:]
        var i = 0
        while i + 1 < fields.count {
            if fields[i].count <= 16, case let name = String(decoding: fields[i], as: UTF8.self), names.contains(name) {
                map[name] = fields[i + 1]
            }
            i += 2
        }
        return map
    }

    private func dictionary(_ value: RESPValue) -> [String: RESPValue] {
        var map: [String: RESPValue] = [:]
        let items = value.array ?? []
        var i = 0
        while i + 1 < items.count { if let k = items[i].string { map[k] = items[i + 1] }; i += 2 }
        return map
    }

    private func stream(_ name: String, kind: String) async throws -> InspectReport.Stream {
        let info = try await redis.pipeline([RedisCommand("XINFO", "STREAM", name), RedisCommand("XINFO", "GROUPS", name)])
        if let error = info[0].errorMessage {
            if error.contains("no such key") {
                return .init(name: name, kind: kind, exists: false, length: 0, firstID: nil, lastID: nil, groups: [])
            }
            throw RedisError(.server, "XINFO STREAM \(name): \(error)")
        }
        let s = dictionary(info[0])
        let firstID = s["first-entry"].flatMap { try? StreamReplies.entry($0) }?.id
        let lastID = s["last-entry"].flatMap { try? StreamReplies.entry($0) }?.id
        var groups: [InspectReport.Group] = []
        for g in (try info[1].orThrow("XINFO GROUPS")).array ?? [] {
            let gd = dictionary(g)
            guard let groupName = gd["name"]?.string else { continue }
            let more = try await redis.pipeline([RedisCommand("XINFO", "CONSUMERS", name, groupName),
                                                 .xpending(stream: name, group: groupName, count: Self.pendingSample)])
            let consumers = (try more[0].orThrow("XINFO CONSUMERS")).array?.map { c -> InspectReport.Consumer in
                let cd = dictionary(c)
                return .init(name: cd["name"]?.string ?? "?", pending: cd["pending"]?.int ?? 0, idleMillis: cd["idle"]?.int ?? 0)
            } ?? []
            // The idle time (since the last delivery), not the id's time: an entry added long ago
            // (or with an explicit old id) but delivered just now has not been waiting long.
            let pending = try StreamReplies.pending(more[1])
            groups.append(.init(name: groupName, consumers: consumers, pending: gd["pending"]?.int ?? 0,
                                oldestPendingID: pending.first?.id, oldestPendingAgeMillis: pending.map(\.idleMillis).max(),
                                lag: gd["lag"].flatMap { $0.isNull ? nil : $0.int },
                                lastDeliveredID: gd["last-delivered-id"]?.string ?? "",
                                entriesRead: gd["entries-read"].flatMap { $0.isNull ? nil : $0.int }))
        }
        return .init(name: name, kind: kind, exists: true, length: s["length"]?.int ?? 0, firstID: firstID, lastID: lastID, groups: groups,
                     entriesAdded: s["entries-added"]?.int)
    }

    private func registrations() async throws -> InspectReport.Registrations {
        let keys = settings.keys
        let indexKeys: [(key: String, type: String)] = [(keys.keysIndex, "zset"), (keys.keysIndex, "zset"), (keys.activityTypes, "set"),
                                                        (keys.targets, "set"), (keys.targets, "set")]
        var index = try await redis.pipeline([
            RedisCommand("ZCARD", keys.keysIndex),
            RedisCommand("ZRANGE", keys.keysIndex, 0, countLimit - 1),
            RedisCommand("SMEMBERS", keys.activityTypes),
            RedisCommand("SCARD", keys.targets),
            RedisCommand("SRANDMEMBER", keys.targets, countLimit),
        ])
        // An index of another type leaves its counts at 0 and says so; the others still count.
        var errors: [String] = []
        for i in index.indices {
            guard let message = index[i].errorMessage else { continue }
            index[i] = .null
            let why = try await explain(message, key: indexKeys[i].key, expected: indexKeys[i].type)
            if !errors.contains(why) { errors.append(why) }
        }
        let keyCount = index[0].int ?? 0
        let keyNames = (index[1].array ?? []).compactMap(\.string).compactMap(ActivityKey.init(parsing:))
        let types = (index[2].array ?? []).compactMap(\.string)
        let targetCount = index[3].int ?? 0
        let targets = (index[4].array ?? []).compactMap(\.string).compactMap(FollowTarget.init(parsing:))
        var counted: [(key: String, type: String)] = keyNames.map { (keys.tokens($0), "hash") }
        counted += types.map { (keys.startTokens(activityType: $0), "set") }
        counted += targets.map { (keys.followers($0), "set") }
        let replies = try await redis.pipeline(counted.map { RedisCommand($0.type == "hash" ? "HLEN" : "SCARD", $0.key) })
        // A per-key hash or set of another type is left out of the sums; the first is named.
        let wrong = replies.indices.filter { replies[$0].errorMessage != nil }
        if let first = wrong.first, let message = replies[first].errorMessage {
            let why = try await explain(message, key: counted[first].key, expected: counted[first].type)
            errors.append(wrong.count == 1 ? "not counted: \(why)" : "\(wrong.count) keys not counted, the first: \(why)")
        }
        func sum(_ r: ArraySlice<RESPValue>) -> Int64 { r.reduce(0) { $0 + ($1.int ?? 0) } }
        let k = keyNames.count, t = types.count
        return .init(activityKeys: keyCount,
                     activityTokens: sum(replies[0..<k]),
                     pushToStartTokens: sum(replies[k..<(k + t)]),
                     follows: sum(replies[(k + t)...]),
                     truncated: keyCount > Int64(keyNames.count) || targetCount > Int64(targets.count),
                     error: errors.isEmpty ? nil : errors.joined(separator: "; "))
    }
}

extension InspectReport {
    /// Characters a table cell shows of a name, id or reason before it is cut (`… (N bytes)`).
    public static let cellLimit = 200
    /// Rows a table shows before `… and N more`; `--json` lists everything.
    public static let rowLimit = 100

    /// A human-readable table. Everything that came from Redis is shown through
    /// `VisibleText.escaped` and cut at `cellLimit` characters, and each table at `rowLimit` rows,
    /// so the output stays small and holds no control character but its own newlines, whatever
    /// the keys contain.
    public func rendered() -> String {
        var out = "ActivityCast at \(cell(redis))\n"
        let errors = errors
        if !errors.isEmpty {
            out += "\n\(errors.count) section\(errors.count == 1 ? "" : "s") could not be read: see the 'error:' lines\n"
        }
        out += "\nSTREAMS\n"
        var rows = [["stream", "kind", "length", "oldest", "first id", "last id", "retention"]]
        for s in streams {
            rows.append([cell(s.name), s.kind, s.error != nil ? "ERROR" : s.exists ? "\(s.length)" : "missing",
                         s.oldestEntryAgeMillis.map { formatAge($0) } ?? "-", cell(s.firstID ?? "-"), cell(s.lastID ?? "-"), s.retention ?? "-"])
        }
        out += table(rows)
        for s in streams { if let error = s.error { out += errorLine(error) } }
        out += "\nGROUPS\n"
        rows = [["stream", "group", "consumers", "pending", "oldest pending", "lag", "last delivered"]]
        for s in streams {
            for g in s.groups {
                rows.append([cell(s.name), cell(g.name), "\(g.consumers.count)", "\(g.pending)",
                             g.oldestPendingAgeMillis.map { formatAge($0) } ?? "-", g.lag.map(String.init) ?? "?", cell(g.lastDeliveredID)])
            }
        }
        out += table(rows)
        out += "\nCONSUMERS\n"
        rows = [["stream", "group", "consumer", "pending", "idle"]]
        for s in streams {
            for g in s.groups {
                for c in g.consumers { rows.append([cell(s.name), cell(g.name), cell(c.name), "\(c.pending)", formatAge(c.idleMillis)]) }
            }
        }
        out += table(rows)
        out += "\nDEAD LETTERS  \(cell(deadLetterStream)): \(deadLetterError == nil ? "\(deadLetterCount)" : "ERROR")\n"
        if let deadLetterError { out += errorLine(deadLetterError) }
        if !latestDeadLetters.isEmpty {
            rows = [["id", "source", "reason"]]
            for d in latestDeadLetters {
                rows.append([cell(d.id), cell("\(d.stream)/\(d.entryID)"),
                             VisibleText.escaped(d.reason, limit: Self.cellLimit, totalBytes: d.reasonBytes)])
            }
            out += table(rows)
        }
        let r = registrations
        out += "\nREGISTRATIONS\(r.truncated ? " (partial counts: large index)" : "")\n"
        out += table([["activity keys", "activity tokens", "push-to-start tokens", "follows"],
                      ["\(r.activityKeys)", "\(r.activityTokens)", "\(r.pushToStartTokens)", "\(r.follows)"]])
        if let error = r.error { out += errorLine(error) }
        out += "\nCOUNTERS  \(cell(counters.key))\(counters.truncated ? " (partial: a large hash)" : "")\n"
        out += table([["counter", "value"]] + counters.values.sorted { $0.key < $1.key }.map { [cell($0.key), "\($0.value)"] })
        if let error = counters.error { out += errorLine(error) }
        out += "\nCHANNELS\(channels.truncated ? " (partial: many keys)" : "")\n"
        out += table([["key", "env", "id", "policy", "age", "broadcasts", "state"]] + channels.channels.map { c in
            [cell(c.key), c.environment, cell(c.id ?? "-"), c.storagePolicy.map(String.init) ?? "-", c.ageMillis.map { formatAge($0) } ?? "-",
             "\(c.broadcasts)", c.state == "ending" ? "ending, deleted in \(formatAge(max(0, (c.deleteAtMillis ?? 0) - generatedAtMillis)))" : c.state]
        })
        if let error = channels.error { out += errorLine(error) }
        out += "\nSEND FAILURES: \(channels.sendFailures)\n"
        for line in channels.latestSendFailures { out += "  \(cell(line))\n" }
        out += "\nBUDGETS\(budgets.truncated ? " (partial: many keys)" : "")  tokens refilled to now with budgets.*"
            + "\(budgets.redisClock ? "" : " (this machine's clock: Redis refused TIME)")\n"
        out += table([["key", "audience", "tokens", "capacity", "p10", "p5", "downgraded", "coalesced", "flushed", "stale", "unchanged", "waiting"]]
            + budgets.budgets.map { b in
                [cell(b.key), Self.audienceLabel(b), Self.tokensText(ticks: b.ticks), "\(b.capacity)", "\(b.priority10)", "\(b.priority5)",
                 "\(b.downgraded)", "\(b.coalesced)", "\(b.flushed)", "\(b.stale)", "\(b.unchanged)", waiting(b)]
            })
        if let error = budgets.error { out += errorLine(error) }
        out += "  due flushes in \(cell(budgets.schedule)): \(budgets.scheduled), overdue \(budgets.overdue)\n"
        return out
    }

    /// `standard`, `frequent`, or the channel with its storage policy as route files name it
    /// (`channel (no-storage)`); `?` when the policy is not on record but taken from the routes.
    static func audienceLabel(_ b: Budget) -> String {
        let storage: String
        switch b.policy {
        case "channel_no_storage": storage = "no-storage"
        case "channel_latest_message": storage = "latest-message"
        default: return b.audience
        }
        return "\(b.audience) (\(storage)\(b.policyKnown ? "" : "?"))"
    }

    /// Tokens to one decimal, rounded down (in integer ticks, exactly): 0.96 shows 0.9, not a
    /// whole token that a critical update could not spend.
    static func tokensText(ticks: Int64) -> String {
        let tenths = max(0, ticks) / (BudgetState.ticksPerToken / 10)
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// Whether a coalesced state waits, and when it is due: `due in 12 s` (rounded up), `due now`
    /// (within the second), `overdue 3 s` (rounded down), or `not scheduled` (nothing in the
    /// schedule will flush it); `-` when nothing waits.
    func waiting(_ b: Budget) -> String {
        guard b.pendingMillis != nil else { return "-" }
        guard let due = b.dueAtMillis else { return "not scheduled" }
        let ms = due - budgets.nowMillis
        if ms > 0 { return "due in \((ms + 999) / 1000) s" }
        return ms > -1000 ? "due now" : "overdue \(-ms / 1000) s"
    }

    private func cell(_ text: String) -> String { VisibleText.escaped(text, limit: Self.cellLimit) }

    private func errorLine(_ message: String) -> String { "  error: \(VisibleText.escaped(message, limit: 4 * Self.cellLimit))\n" }

    private func formatAge(_ ms: Int64) -> String {
        if ms < 1000 { return "\(ms)ms" }
        if ms < 120_000 { return String(format: "%.1fs", Double(ms) / 1000) }
        if ms < 7_200_000 { return "\(ms / 60_000)m" }
        return "\(ms / 3_600_000)h"
    }

    /// Columns padded to their widest cell. Cells must already be escaped and cut: every cell is
    /// padded to the widest one in its column, so one long cell would be multiplied by the rows
    /// (a 100 KB consumer name made every consumer row 100 KB wide). The last column is not padded.
    private func table(_ rows: [[String]]) -> String {
        guard let header = rows.first else { return "" }
        if rows.count == 1 { return "  (none)\n" }
        let shown = rows.prefix(Self.rowLimit + 1)
        // Widths in Unicode scalars, the unit the cells were cut in.
        var widths = header.map { _ in 0 }
        for row in shown { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.unicodeScalars.count) } }
        var out = ""
        for row in shown {
            var line = " "
            for (i, cell) in row.enumerated() {
                line += " " + cell
                if i < row.count - 1 { line += String(repeating: " ", count: widths[i] - cell.unicodeScalars.count + 1) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        if rows.count > shown.count { out += "  … and \(rows.count - shown.count) more (inspect --json lists them all)\n" }
        return out
    }

    /// The report as JSON (sorted keys, indented). JSON already escapes C0 controls in strings;
    /// DEL, C1 controls and the invisible formatting characters are escaped here as well
    /// (`\u009b`), which JSON allows for any character, so no byte of the output can steer a terminal.
    public func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let text = String(decoding: try encoder.encode(self), as: UTF8.self)
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            // Newlines outside strings are the indentation's; inside strings JSON wrote `\n`.
            if scalar != "\n" && VisibleText.needsEscape(scalar) {
                let digits = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
