import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import ActivityCastSettings
import Foundation
import RedisClient

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
    /// `allBudgets`: also the tiers' budgets of keys with no per-token device of that tier (a
    /// critical update decides both tiers on purpose, docs/sending.md); hidden and counted by default.
    public func report(latest: Int = 5, allBudgets: Bool = false) async throws -> InspectReport {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var streams: [InspectReport.Stream] = []
        // The feeds, and the slices of fan-outs under way (finished slices are deleted: its
        // length is the slices not yet finished, its pending ones are in some worker's hands).
        let read = settings.inputStreams.map { ($0.stream, $0.kind.rawValue, $0.shard?.feed) } + settings.keys.sliceStreams.map { ($0, "slices", nil) }
        for (name, kind, feed) in read {
            do {
                var s = try await stream(name, kind: kind)
                s.retention = settings.retention.description
                s.oldestEntryAgeMillis = s.firstID.flatMap(StreamID.init).map { max(0, now - Int64($0.ms)) }
                s.feed = feed
                streams.append(s)
            } catch {
                let why = try await sectionError(error, key: name, expected: "stream")
                streams.append(.init(name: name, kind: kind, exists: true, length: 0, firstID: nil, lastID: nil,
                                     groups: [], error: why, feed: feed))
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
        var report = InspectReport(redis: settings.redisURL.description, generatedAtMillis: now, streams: streams,
                             deadLetterStream: dlq, deadLetterCount: deadLetterError == nil ? dlqReplies[0].int ?? 0 : 0,
                             latestDeadLetters: latestDead, deadLetterError: deadLetterError, registrations: try await registrations(),
                             counters: try await counters(), channels: channels,
                             budgets: try await budgets(now: now, channels: channels, all: allBudgets))
        report.nodes = try await nodes()
        report.apnsUnusable = try await apnsUnusable()
        return report
    }

    /// Each node serving data (every primary of a cluster): its keys and memory, one round trip
    /// per node. A node that can't be read says why; the others are read.
    private func nodes() async throws -> [InspectReport.Node] {
        var out: [InspectReport.Node] = []
        for node in try await redis.primaries() {
            var n = InspectReport.Node(address: "\(node)")
            do {
                let replies = try await redis.pipeline([RedisCommand("DBSIZE"), RedisCommand("INFO", "memory")], on: node)
                if let e = replies[0].errorMessage ?? replies[1].errorMessage {
                    n.error = e
                } else {
                    n.keys = replies[0].int
                    let memory = replies[1].string.flatMap(RedisMemory.init(info:))
                    n.usedMemory = memory?.used
                    n.maxMemory = memory?.max
                }
            } catch let e as RedisError where e.kind == .server || e.kind == .unexpectedReply {
                n.error = "\(e)"
            }
            out.append(n)
        }
        return out
    }

    /// The budget hashes of the keys CHANNELS looks at (the live keys index and the ended keys
    /// whose channels await deletion, each as bounded), each refilled to `now` with its audience's
    /// policy from the settings, and the schedule of due flushes. A channel's policy is its
    /// storage policy on record (`channels`); failing that, the routes' for the key's feed.
    private func budgets(now local: Int64, channels: InspectReport.Channels, all: Bool) async throws -> InspectReport.Budgets {
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
        var hidden = 0
        if !all {
            let tiers = try await tiersWithDevices(Array(Set(out.filter { $0.policy == "standard" || $0.policy == "frequent" }.map(\.key))))
            let before = out.count
            out.removeAll { b in
                guard b.policy == "standard" || b.policy == "frequent", let has = tiers[b.key] else { return false }
                return !has.contains(b.audience) && b.pendingMillis == nil
            }
            hidden = before - out.count
        }
        // When each waiting state is due: its member `<key>|<audience>` in the schedule.
        let waiting = out.indices.filter { out[$0].pendingMillis != nil }
        let scores = try await redis.pipeline(waiting.map { RedisCommand("ZSCORE", schedule, "\(out[$0].key)|\(out[$0].audience)") })
        for (i, score) in zip(waiting, scores) {
            out[i].dueAtMillis = score.string.flatMap(Double.init).map { Int64($0) }
        }
        return .init(nowMillis: now, redisClock: redisNow != nil, budgets: out, truncated: (index[1].int ?? 0) > Int64(countLimit) || (index[3].int ?? 0) > Int64(countLimit),
                     schedule: schedule, scheduled: index[4].int ?? 0, overdue: index[5].int ?? 0, hiddenWithoutDevices: hidden,
                     error: errors.isEmpty ? nil : errors.joined(separator: "; "))
    }

    /// Keys with at most this many per-token devices have their tiers read (`HVALS` of
    /// `{key}:direct`); a larger key's tiers are all shown.
    static let tierScanLimit = 2000

    /// The tiers (raw values) with at least one per-token device, for each key whose per-token
    /// audience is known and small enough to read (`tierScanLimit`); a key missing from the answer
    /// has every tier shown. A registration without its own tier takes its device's (standard
    /// when that has none), as the send path does.
    private func tiersWithDevices(_ names: [String]) async throws -> [String: Set<String>] {
        let keys = settings.keys
        let parsed = names.compactMap { name in ActivityKey(parsing: name).map { (name, $0) } }
        let lengths = try await redis.pipeline(parsed.map { RedisCommand("HLEN", keys.direct($0.1)) })
        let small = zip(parsed, lengths).filter { ($0.1.int ?? 0) >= 1 && ($0.1.int ?? 0) <= Int64(Self.tierScanLimit) + 1 }.map(\.0)
        let values = try await redis.pipeline(small.map { RedisCommand("HGETALL", keys.direct($0.1)) })
        var out: [String: Set<String>] = [:]
        var askDevice: [(key: String, device: String)] = []
        for ((name, _), reply) in zip(small, values) {
            guard let items = reply.array, items.count % 2 == 0 else { continue }
            var kept = false, tiers = Set<String>()
            for i in stride(from: 0, to: items.count, by: 2) {
                guard let field = items[i].bytes, let value = items[i + 1].bytes else { continue }
                if field == Array("_".utf8) { kept = true; continue }
                guard let meta = RegistrationMeta(value) else { continue }
                if let tier = meta.tier { tiers.insert(tier.rawValue) } else { askDevice.append((name, meta.device)) }
            }
            if kept { out[name] = tiers }  // no `_`: registered before the hash was kept, audience unknown
        }
        let unique = Array(Set(askDevice.filter { out[$0.key] != nil }.map(\.device)))
        let deviceTiers = try await redis.pipeline(unique.map { RedisCommand("HGET", keys.device($0), "tier") })
        let byDevice = Dictionary(uniqueKeysWithValues: zip(unique, deviceTiers.map { $0.string.flatMap(Tier.init(rawValue:)) ?? .standard }))
        for ask in askDevice where out[ask.key] != nil {
            out[ask.key]?.insert((byDevice[ask.device] ?? .standard).rawValue)
        }
        return out
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

    /// What workers say about APNs being out of their reach (`RedisKeys.apnsUnusable`).
    private func apnsUnusable() async throws -> [InspectReport.APNsUnusable] {
        let reply = try await redis.pipeline([RedisCommand("HGETALL", settings.keys.apnsUnusable)])[0]
        let items = reply.array ?? []
        var out: [InspectReport.APNsUnusable] = []
        var i = 0
        while i + 1 < items.count {
            defer { i += 2 }
            let field = VisibleText.prefix(items[i].bytes ?? [], maxBytes: 300).text
            let value = String(decoding: items[i + 1].bytes ?? [], as: UTF8.self)
            let head = value.split(separator: "|", maxSplits: 1)
            let words = head.first?.split(separator: " ", maxSplits: 2) ?? []
            guard words.count == 3, let refreshed = Int64(words[0]), let since = Int64(words[1]) else { continue }
            let names = field.split(separator: " ", maxSplits: 1)
            out.append(.init(consumer: String(names.first ?? ""), endpoint: String(names.dropFirst().first ?? ""), sinceMillis: since,
                             refreshedMillis: refreshed, why: String(words[2]),
                             error: VisibleText.prefix(Array((head.dropFirst().first ?? "").utf8), maxBytes: 300).text))
        }
        return out.sorted { ($0.consumer, $0.endpoint) < ($1.consumer, $1.endpoint) }
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
