import ActivityCastSettings
import Foundation
import RedisClient

/// One entry of the dead-letter stream (`streams.dead_letter`), as the worker wrote it: why,
/// where the entry came from, and a copy of its fields (`f:<name>`; `truncated` when the copy is
/// not whole). docs/schema.md, "Dead letters".
public struct DeadLetter: Codable, Sendable, Equatable {
    public struct Field: Codable, Sendable, Equatable {
        public var name: String
        public var value: String
    }

    /// When it was replayed, and the entry the replay added.
    public struct Replay: Codable, Sendable, Equatable {
        public var atMillis: Int64
        public var entryID: String
    }

    /// The dead letter's own entry id.
    public var id: String
    public var reason: String
    /// The stream and entry id it came from.
    public var stream: String
    public var entryID: String
    public var deliveries: Int64?
    public var consumer: String?
    public var atMillis: Int64?
    /// The entry's fields, in their order.
    public var fields: [Field]
    /// Why the copy is not whole (the entry was too large to read, or had more or longer fields
    /// than the limits): such a letter cannot be replayed.
    public var truncated: String?
    public var replayed: Replay?

    /// Read from a stream entry of the dead-letter stream; nil for a deleted entry.
    init?(_ entry: StreamEntry, replayed: Replay?) {
        guard let raw = entry.fields else { return nil }
        id = entry.id
        var reason = "", stream = "", entryID = "", fields: [Field] = []
        var deliveries: Int64?, consumer: String?, at: Int64?, truncated: String?
        var i = 0
        while i + 1 < raw.count {
            defer { i += 2 }
            let name = String(decoding: raw[i], as: UTF8.self), value = String(decoding: raw[i + 1], as: UTF8.self)
            switch name {
            case "reason": reason = value
            case "stream": stream = value
            case "id": entryID = value
            case "deliveries": deliveries = Int64(value)
            case "consumer": consumer = value
            case "at": at = Int64(value)
            case "truncated": truncated = value
            default: if name.hasPrefix("f:") { fields.append(Field(name: String(name.dropFirst(2)), value: value)) }
            }
        }
        (self.reason, self.stream, self.entryID, self.fields) = (reason, stream, entryID, fields)
        (self.deliveries, self.consumer, self.atMillis, self.truncated, self.replayed) = (deliveries, consumer, at, truncated, replayed)
    }

    /// Why it cannot be replayed as it is, or nil.
    public var unreplayable: String? {
        if let truncated { return "its entry was not copied whole (\(truncated)): replaying it would not be the entry that failed" }
        if fields.isEmpty { return "no fields were copied" }
        return nil
    }
}

/// `activitycast deadletters`: list, show, replay and discard dead letters.
public struct DeadLetterTool: Sendable {
    let settings: Settings
    let redis: RedisConnection
    /// Entries read per `XREVRANGE` while listing or filtering.
    static let page = 500

    public init(settings: Settings, redis: RedisConnection) {
        self.settings = settings
        self.redis = redis
    }

    var stream: String { settings.deadLetterStream }
    /// `<dead-letter stream>:replayed` (hash): letter id → `<ms> <entry id of the replay>`.
    public var replayedKey: String { "\(settings.deadLetterStream):replayed" }

    /// What a bounded scan found: the letters that matched (newest first), how many entries it
    /// read, and whether it read them all.
    public struct Listing: Codable, Sendable {
        public var stream: String
        public var total: Int64
        public var scanned: Int
        public var complete: Bool
        public var reasonFilter: String?
        public var letters: [DeadLetter]
        /// The last entry read, when the scan stopped before the stream's start: a next page
        /// (`before`) goes on from there.
        public var lastScannedID: String? = nil
    }

    /// The newest letters, or those whose reason contains `reason` (case-insensitive), at most
    /// `limit` of them, reading at most `scan` entries (a stream has no index: the listing says
    /// how far it looked).
    /// `before`: start below this letter id (the next page of a listing).
    public func list(reason: String? = nil, limit: Int = 20, scan: Int = 10_000, before: String? = nil) async throws -> Listing {
        let total = try await redis.send(RedisCommand("XLEN", stream)).orThrow("XLEN \(stream)").int ?? 0
        var found: [StreamEntry] = [], scanned = 0, end = before.flatMap { StreamID($0) != nil ? "(\($0)" : nil } ?? "+", complete = false
        var lastRead: String?
        let needle = reason?.lowercased()
        while found.count < limit, scanned < scan {
            let want = min(Self.page, scan - scanned)
            let reply = try await redis.send(RedisCommand("XREVRANGE", stream, end, "-", "COUNT", want))
            let entries = try (reply.orThrow("XREVRANGE \(stream)").array ?? []).map(StreamReplies.entry)
            scanned += entries.count
            for e in entries where found.count < limit {
                lastRead = e.id
                guard let needle else { found.append(e); continue }
                if let r = e.fields.flatMap({ Self.value("reason", in: $0) }), r.lowercased().contains(needle) { found.append(e) }
            }
            guard let last = entries.last, entries.count == want else { complete = true; break }
            end = "(\(last.id)"
        }
        let whole = complete || (before == nil && Int64(scanned) >= total)
        return Listing(stream: stream, total: total, scanned: scanned, complete: whole,
                       reasonFilter: reason, letters: try await letters(found), lastScannedID: whole ? nil : lastRead)
    }

    /// One letter by its id; nil when there is none.
    public func show(_ id: String) async throws -> DeadLetter? {
        try await letters(try await entry(id).map { [$0] } ?? []).first
    }

    private func entry(_ id: String) async throws -> StreamEntry? {
        guard StreamID(id) != nil else { return nil }
        let reply = try await redis.send(RedisCommand("XRANGE", stream, id, id))
        return try (reply.orThrow("XRANGE \(stream)").array ?? []).map(StreamReplies.entry).first { $0.fields != nil }
    }

    public enum ReplayOutcome: Equatable, Sendable {
        /// Added to `stream` as `entryID`.
        case replayed(stream: String, entryID: String)
        case refused(String)
    }

    /// Adds each letter's fields, as they were, to the stream it came from, with
    /// `x-replayed-from <letter id>`, and marks it replayed; a letter replayed before is refused
    /// unless `force`. Only streams this fleet reads take replays.
    public func replay(_ ids: [String], force: Bool = false) async throws -> [(id: String, outcome: ReplayOutcome)] {
        var out: [(String, ReplayOutcome)] = []
        let readable = Set(settings.inputStreams.map(\.stream))
        for id in ids {
            guard let raw = try await entry(id), let letter = try await letters([raw]).first else {
                out.append((id, .refused("no dead letter \(id) in \(stream)")))
                continue
            }
            if let why = letter.unreplayable {
                out.append((id, .refused(why)))
                continue
            }
            guard readable.contains(letter.stream) else {
                out.append((id, .refused("it came from \(letter.stream), which this configuration does not read (streams.feeds, streams.registrations)")))
                continue
            }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            // Claimed first, so two operators replaying at once add it once.
            let claim = RedisCommand(force ? "HSET" : "HSETNX", replayedKey, id, "\(now) -")
            if try await redis.send(claim).orThrow("HSETNX \(replayedKey)").int == 0, !force {
                let at = letter.replayed.map { " at \(Self.utc($0.atMillis)) as \($0.entryID)" } ?? ""
                out.append((id, .refused("already replayed\(at); --force replays it again")))
                continue
            }
            // The copied fields byte for byte, in their order (text shown as text may not be).
            var args: [any RedisArgument] = [letter.stream, "*"]
            let fields = raw.fields ?? []
            for i in stride(from: 0, to: fields.count - 1, by: 2) where fields[i].starts(with: "f:".utf8) {
                args += [Array(fields[i].dropFirst(2)), fields[i + 1]]
            }
            args += ["x-replayed-from", id]
            do {
                let added = try await redis.send(RedisCommand("XADD", args)).orThrow("XADD \(letter.stream)").string ?? "?"
                _ = try await redis.send(RedisCommand("HSET", replayedKey, id, "\(now) \(added)"))
                out.append((id, .replayed(stream: letter.stream, entryID: added)))
            } catch {
                _ = try? await redis.send(RedisCommand("HDEL", replayedKey, id))
                throw error
            }
        }
        try await forgetTrimmedReplays()
        return out
    }

    /// Deletes letters by id; returns the ids that were not there.
    public func discard(_ ids: [String]) async throws -> [String] {
        var missing: [String] = []
        for id in ids {
            let n = try await redis.pipeline([RedisCommand("XDEL", stream, id), RedisCommand("HDEL", replayedKey, id)])
            if try n[0].orThrow("XDEL \(stream)").int == 0 { missing.append(id) }
        }
        return missing
    }

    /// The letters of `entries`, each with its replay if any.
    private func letters(_ entries: [StreamEntry]) async throws -> [DeadLetter] {
        guard !entries.isEmpty else { return [] }
        let marks = try await redis.send(RedisCommand("HMGET", [replayedKey] + entries.map(\.id))).orThrow("HMGET \(replayedKey)").array ?? []
        return zip(entries, marks + Array(repeating: .null, count: max(0, entries.count - marks.count))).compactMap { entry, mark in
            let parts = mark.string?.split(separator: " ", maxSplits: 1).map(String.init) ?? []
            let replay = parts.count == 2 ? Int64(parts[0]).map { DeadLetter.Replay(atMillis: $0, entryID: parts[1]) } : nil
            return DeadLetter(entry, replayed: replay)
        }
    }

    /// Replay marks of letters the stream no longer holds (trimmed or discarded) are dropped,
    /// so the hash stays within the stream's own bound.
    private func forgetTrimmedReplays() async throws {
        let first = try await redis.send(RedisCommand("XRANGE", stream, "-", "+", "COUNT", 1)).array?.first.flatMap { try? StreamReplies.entry($0) }?.id
        guard let first, let oldest = StreamID(first) else { return }
        let count = try await redis.send(RedisCommand("HLEN", replayedKey)).int ?? 0
        let length = try await redis.send(RedisCommand("XLEN", stream)).int ?? 0
        guard count > length else { return }
        let ids = try await redis.send(RedisCommand("HKEYS", replayedKey)).array?.compactMap(\.string) ?? []
        let gone = ids.filter { StreamID($0).map { $0 < oldest } ?? true }
        if !gone.isEmpty { _ = try await redis.send(RedisCommand("HDEL", [replayedKey] + gone)) }
    }

    static func value(_ name: String, in fields: [[UInt8]]) -> String? {
        var i = 0
        while i + 1 < fields.count {
            if fields[i].elementsEqual(name.utf8) { return String(decoding: fields[i + 1], as: UTF8.self) }
            i += 2
        }
        return nil
    }

    /// `2026-12-01 23:56:04Z`.
    public static func utc(_ ms: Int64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd HH:mm:ss'Z'"
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
