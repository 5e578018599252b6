/// Typed stream commands and reply parsers (`XREADGROUP`, `XAUTOCLAIM`, `XPENDING`, groups).

/// One stream entry as Redis returns it: binary-safe field/value pairs in order.
public struct StreamEntry: Sendable, Equatable {
    public var id: String
    /// Alternating names and values; nil when the entry was deleted while pending. Empty when
    /// the entry was over the read limits (`oversize` says how big it was).
    public var fields: [[UInt8]]?
    /// Set when the entry was over the reply limits it was read with and was not kept.
    public var oversize: Oversize?

    public init(id: String, fields: [[UInt8]]?, oversize: Oversize? = nil) {
        self.id = id
        self.fields = fields
        self.oversize = oversize
    }

    /// What is known of an entry too big to read.
    public struct Oversize: Sendable, Equatable {
        /// Its number of fields (name/value pairs).
        public var fields: Int
        /// The bytes of its names and values (all of them, or at least this many).
        public var bytes: Int
        /// When the fields were kept but one value was not: that field's name and value size.
        public var longValue: (name: [UInt8], bytes: Int)?

        public init(fields: Int, bytes: Int, longValue: (name: [UInt8], bytes: Int)? = nil) {
            self.fields = fields
            self.bytes = bytes
            self.longValue = longValue
        }

        public static func == (a: Oversize, b: Oversize) -> Bool {
            a.fields == b.fields && a.bytes == b.bytes && a.longValue?.name == b.longValue?.name && a.longValue?.bytes == b.longValue?.bytes
        }
    }
}

/// Entries read from one stream.
public struct StreamRead: Sendable, Equatable {
    public var stream: String
    public var entries: [StreamEntry]
}

/// A pending entry from extended `XPENDING`.
public struct PendingEntry: Sendable, Equatable {
    public var id: String
    public var consumer: String
    public var idleMillis: Int64
    public var deliveries: Int64
}

public struct AutoClaim: Sendable, Equatable {
    public var nextCursor: String
    public var entries: [StreamEntry]
    /// Ids that were pending but no longer exist in the stream (trimmed or deleted); Redis
    /// removed them from the pending list.
    public var deleted: [String]
}

public enum StreamReplies {
    static func unexpected(_ what: String, _ reply: RESPValue) -> RedisError {
        let text = String(reply.description.prefix(200))
        return RedisError(.unexpectedReply, "unexpected \(what) reply: \(text)")
    }

    public static func entry(_ value: RESPValue) throws -> StreamEntry {
        guard let pair = value.array, pair.count == 2, let id = pair[0].string else { throw unexpected("stream entry", value) }
        if pair[1].isNull { return StreamEntry(id: id, fields: nil) }
        if case .oversized(let elements?, let bytes) = pair[1] {
            return StreamEntry(id: id, fields: [], oversize: .init(fields: elements / 2, bytes: bytes))
        }
        guard let items = pair[1].array else { throw unexpected("stream entry", value) }
        var fields: [[UInt8]] = []
        fields.reserveCapacity(items.count)
        var longValue: (name: [UInt8], bytes: Int)?
        var oversizedBytes = 0
        for (index, item) in items.enumerated() {
            switch item {
            case .bulk(let b):
                fields.append(b)
            case .oversized(nil, let bytes):
                // A name or value over the string limit: keep the first such field's name.
                if longValue == nil {
                    longValue = (index % 2 == 1 ? fields[index - 1] : Array("(a field name)".utf8), bytes)
                }
                oversizedBytes += bytes
                fields.append([])
            default:
                throw unexpected("stream field", value)
            }
        }
        if let longValue {
            let bytes = fields.reduce(oversizedBytes) { $0 + $1.count }
            return StreamEntry(id: id, fields: [], oversize: .init(fields: items.count / 2, bytes: bytes, longValue: longValue))
        }
        return StreamEntry(id: id, fields: fields)
    }

    /// `XREAD`/`XREADGROUP`: null on timeout, else one element per stream.
    public static func read(_ reply: RESPValue) throws -> [StreamRead] {
        if reply.isNull { return [] }
        if let e = reply.errorMessage { throw RedisError(.server, "XREADGROUP: \(e)") }
        guard let streams = reply.array else { throw unexpected("XREADGROUP", reply) }
        return try streams.map { s in
            guard let pair = s.array, pair.count == 2, let name = pair[0].string, let entries = pair[1].array else {
                throw unexpected("XREADGROUP", reply)
            }
            return StreamRead(stream: name, entries: try entries.map(entry))
        }
    }

    public static func autoclaim(_ reply: RESPValue) throws -> AutoClaim {
        if let e = reply.errorMessage { throw RedisError(.server, "XAUTOCLAIM: \(e)") }
        guard let parts = reply.array, parts.count >= 2, let cursor = parts[0].string, let entries = parts[1].array else {
            throw unexpected("XAUTOCLAIM", reply)
        }
        let deleted = parts.count > 2 ? (parts[2].array ?? []).compactMap(\.string) : []
        return AutoClaim(nextCursor: cursor, entries: try entries.map(entry), deleted: deleted)
    }

    public static func pending(_ reply: RESPValue) throws -> [PendingEntry] {
        if let e = reply.errorMessage { throw RedisError(.server, "XPENDING: \(e)") }
        guard let rows = reply.array else { throw unexpected("XPENDING", reply) }
        return try rows.map { row in
            guard let r = row.array, r.count == 4, let id = r[0].string, let consumer = r[1].string,
                  let idle = r[2].int, let deliveries = r[3].int else { throw unexpected("XPENDING", reply) }
            return PendingEntry(id: id, consumer: consumer, idleMillis: idle, deliveries: deliveries)
        }
    }
}

extension RedisCommand {
    /// `XREADGROUP GROUP g c COUNT n [BLOCK ms] STREAMS k1 k2 … id1 id2 …`
    public static func xreadgroup(group: String, consumer: String, count: Int, block: Duration?, streams: [(key: String, id: String)]) -> RedisCommand {
        var args: [any RedisArgument] = ["GROUP", group, consumer, "COUNT", count]
        if let block { args += ["BLOCK", Int(block.milliseconds)] }
        args.append("STREAMS")
        args += streams.map(\.key) as [any RedisArgument]
        args += streams.map(\.id) as [any RedisArgument]
        return RedisCommand("XREADGROUP", args)
    }

    public static func xack(stream: String, group: String, ids: [String]) -> RedisCommand {
        RedisCommand("XACK", [stream, group] + ids)
    }

    public static func xautoclaim(stream: String, group: String, consumer: String, minIdle: Duration, start: String, count: Int) -> RedisCommand {
        RedisCommand("XAUTOCLAIM", stream, group, consumer, Int(minIdle.milliseconds), start, "COUNT", count)
    }

    /// Extended `XPENDING key group [IDLE ms] start end count [consumer]`.
    public static func xpending(stream: String, group: String, minIdle: Duration? = nil, start: String = "-", end: String = "+", count: Int, consumer: String? = nil) -> RedisCommand {
        var args: [any RedisArgument] = [stream, group]
        if let minIdle { args += ["IDLE", Int(minIdle.milliseconds)] }
        args += [start, end, count]
        if let consumer { args.append(consumer) }
        return RedisCommand("XPENDING", args)
    }
}

extension RedisConnection {
    /// Creates `group` on `stream` (and the stream itself) if missing. Reading starts at `startID`
    /// (`0`: everything already in the stream; `$`: only new entries).
    public func ensureGroup(stream: String, group: String, startID: String = "0") async throws {
        let reply = try await pipeline([RedisCommand("XGROUP", "CREATE", stream, group, startID, "MKSTREAM")])[0]
        if let e = reply.errorMessage, !e.hasPrefix("BUSYGROUP") {
            throw RedisError(.server, "XGROUP CREATE \(stream) \(group): \(e)")
        }
    }

    public func readGroup(group: String, consumer: String, count: Int, block: Duration?, streams: [(key: String, id: String)]) async throws -> [StreamRead] {
        let reply = try await pipeline([.xreadgroup(group: group, consumer: consumer, count: count, block: block, streams: streams)],
                                       blocking: block ?? .zero)[0]
        return try StreamReplies.read(reply)
    }
}
