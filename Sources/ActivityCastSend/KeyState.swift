import ActivityCastCore
import RedisClient

/// A key's current content-state: every top-level `ContentState` key with the time of the event
/// that set it. Apple replaces an activity's whole state with each push and silently drops a
/// state that doesn't decode as the app's whole `ContentState`, so every push carries the merge
/// of every event so far, in timestamp order.
///
/// This is the pure model; `KeyStateScripts.merge` does the same in Redis, atomically across
/// workers, and tests check the two agree.
public struct KeyState: Equatable, Sendable {
    /// The newest event applied to the key (ms); nil before the first.
    public var newestMillis: Int64?
    /// The Live Activity event of the newest event (`update` or `end`; a start counts as an update).
    public var newestEvent: LiveActivityEvent?
    /// Each key: when it was set, and its value.
    public var fields: [String: Field]

    public struct Field: Equatable, Sendable {
        public var millis: Int64
        public var value: JSONValue
        public init(millis: Int64, value: JSONValue) { self.millis = millis; self.value = value }
    }

    public init(newestMillis: Int64? = nil, newestEvent: LiveActivityEvent? = nil, fields: [String: Field] = [:]) {
        self.newestMillis = newestMillis
        self.newestEvent = newestEvent
        self.fields = fields
    }

    /// What a merge did.
    public struct Merge: Equatable, Sendable {
        /// Older than the newest event already applied: not sent as itself.
        public var stale: Bool
        /// It set at least one key (a stale event can still bring the newest value of a key that
        /// no newer event set: then the state changed and is pushed again as the newest event).
        public var changed: Bool

        public init(stale: Bool, changed: Bool) { self.stale = stale; self.changed = changed }
    }

    /// Merges an event's content-state: each of its keys is taken unless a newer event set it.
    @discardableResult
    public mutating func merge(millis: Int64, event: LiveActivityEvent?, contentState: [String: JSONValue]) -> Merge {
        var changed = false
        for (key, value) in contentState where millis >= (fields[key]?.millis ?? .min) {
            fields[key] = Field(millis: millis, value: value)
            changed = true
        }
        let stale = newestMillis.map { millis < $0 } ?? false
        if !stale {
            newestMillis = millis
            if let event { newestEvent = event == .start ? .update : event }
        }
        return Merge(stale: stale, changed: changed)
    }

    /// The content-state a push carries.
    public var contentState: [String: JSONValue] { fields.mapValues(\.value) }
}

/// The outcome of merging one event into its key's state in Redis.
public struct MergeResult: Sendable, Equatable {
    public var stale: Bool
    /// The event set at least one key.
    public var changed: Bool
    /// The newest event's Live Activity event (`update` or `end`), if any was recorded.
    public var newestEvent: LiveActivityEvent?
    /// The whole content-state after the merge, values as encoded JSON.
    public var contentState: [String: JSONValue]
    /// The newest event applied to the key, after the merge (ms).
    public var newestMillis: Int64
    /// The presentation of the newest event that had one (`KeyStateScripts.presentation`): what a
    /// push sent later on the key's behalf (a budget flush) carries. Only from `read`.
    public var staleAfterSeconds: Int64?
    public var relevanceScore: Double?
}

/// The Redis side of `KeyState`: one hash per key (`<prefix>:{key}:state`), `_ts` the newest
/// event, `_ev` its Live Activity event, `f:<name>` = `<ms> <json>` per content-state key.
public enum KeyStateScripts {
    /// KEYS[1] = state hash. ARGV = ms, ttl seconds, event (`update`, `end`, `-`), then name/json pairs.
    /// Returns {stale 0|1, changed 0|1, newest ms, newest event, name1, json1, …} (the whole state).
    public static let merge = RedisScript("""
    local ts = tonumber(ARGV[1])
    local changed = 0
    for i = 4, #ARGV, 2 do
      local f = 'f:' .. ARGV[i]
      local cur = redis.call('HGET', KEYS[1], f)
      local t = cur and tonumber(string.match(cur, '^(-?%d+) ')) or nil
      if t == nil or ts >= t then
        redis.call('HSET', KEYS[1], f, ARGV[1] .. ' ' .. ARGV[i + 1])
        changed = 1
      end
    end
    local newest = tonumber(redis.call('HGET', KEYS[1], '_ts') or '')
    local stale = 0
    if newest ~= nil and ts < newest then
      stale = 1
    else
      newest = ts
      redis.call('HSET', KEYS[1], '_ts', ARGV[1])
      if ARGV[3] ~= '-' then redis.call('HSET', KEYS[1], '_ev', ARGV[3]) end
    end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    local out = {stale, changed, newest, redis.call('HGET', KEYS[1], '_ev') or '-'}
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'f:' then
        local v = all[i + 1]
        local sp = string.find(v, ' ', 1, true)
        table.insert(out, string.sub(all[i], 3))
        table.insert(out, string.sub(v, sp + 1))
      end
    end
    return out
    """)

    public static func mergeCommand(stateKey: String, millis: Int64, ttlSeconds: Int, event: LiveActivityEvent?,
                                    contentState: [String: JSONValue]) -> RedisCommand {
        let recorded = event.map { $0 == .start ? "update" : $0.rawValue } ?? "-"
        var args: [any RedisArgument] = [millis, ttlSeconds, recorded]
        for key in contentState.keys.sorted() {
            args.append(key)
            args.append(contentState[key]!.encoded())
        }
        return .script(merge, keys: [stateKey], args: args)
    }

    /// The key's state as stored (`HGETALL` of its hash), without merging anything; nil when
    /// the key has none.
    public static func read(_ reply: RESPValue) -> MergeResult? {
        guard let items = reply.array, !items.isEmpty else { return nil }
        var newest: Int64?, event: LiveActivityEvent?, stale: Int64?, relevance: Double?
        var state: [String: JSONValue] = [:]
        var i = 0
        while i + 1 < items.count {
            defer { i += 2 }
            guard let name = items[i].string else { continue }
            if name == "_ts" { newest = items[i + 1].int; continue }
            if name == "_ev" { event = items[i + 1].string.flatMap(LiveActivityEvent.init(rawValue:)); continue }
            if name == "_stale" { stale = items[i + 1].string.flatMap { Int64($0) }; continue }
            if name == "_rel" { relevance = items[i + 1].string.flatMap { Double($0) }; continue }
            guard name.hasPrefix("f:"), let value = items[i + 1].bytes, let space = value.firstIndex(of: UInt8(ascii: " ")) else { continue }
            state[String(name.dropFirst(2))] = .encoded(Array(value[(space + 1)...]))
        }
        guard let newest else { return nil }
        return MergeResult(stale: false, changed: false, newestEvent: event, contentState: state, newestMillis: newest,
                           staleAfterSeconds: stale, relevanceScore: relevance)
    }

    /// Keeps the presentation (stale date offset, relevance) of the key's newest event that gave
    /// one, for pushes sent later on the key's behalf. KEYS[1] = state hash. ARGV: ms, stale-after
    /// seconds ('' for none), relevance ('' for none). Returns 1 when kept, 0 for an older event.
    public static let presentation = RedisScript("""
    local cur = tonumber(redis.call('HGET', KEYS[1], '_pts') or '')
    if cur and tonumber(ARGV[1]) < cur then return 0 end
    redis.call('HSET', KEYS[1], '_pts', ARGV[1])
    if ARGV[2] == '' then redis.call('HDEL', KEYS[1], '_stale') else redis.call('HSET', KEYS[1], '_stale', ARGV[2]) end
    if ARGV[3] == '' then redis.call('HDEL', KEYS[1], '_rel') else redis.call('HSET', KEYS[1], '_rel', ARGV[3]) end
    return 1
    """)

    public static func parse(_ reply: RESPValue) throws -> MergeResult {
        if let e = reply.errorMessage { throw RedisError(.server, "key state merge: \(e)") }
        guard let items = reply.array, items.count >= 4, let stale = items[0].int, let changed = items[1].int, let newest = items[2].int else {
            throw RedisError(.unexpectedReply, "key state merge: unexpected reply")
        }
        var state: [String: JSONValue] = [:]
        var i = 4
        while i + 1 < items.count {
            if let name = items[i].string, let json = items[i + 1].bytes { state[name] = .encoded(json) }
            i += 2
        }
        return MergeResult(stale: stale == 1, changed: changed == 1, newestEvent: items[3].string.flatMap(LiveActivityEvent.init(rawValue:)),
                           contentState: state, newestMillis: newest)
    }
}
