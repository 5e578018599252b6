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
    /// Each key: when it was set, and its value.
    public var fields: [String: Field]

    public struct Field: Equatable, Sendable {
        public var millis: Int64
        public var value: JSONValue
        public init(millis: Int64, value: JSONValue) { self.millis = millis; self.value = value }
    }

    public init(newestMillis: Int64? = nil, fields: [String: Field] = [:]) {
        self.newestMillis = newestMillis
        self.fields = fields
    }

    /// Merges an event's content-state: each of its keys is taken unless a newer event set it.
    /// Returns whether the event is stale — older than the newest event already applied; a stale
    /// event's values still fill keys no newer event set, but it is not sent.
    @discardableResult
    public mutating func merge(millis: Int64, contentState: [String: JSONValue]) -> Bool {
        for (key, value) in contentState where millis >= (fields[key]?.millis ?? .min) {
            fields[key] = Field(millis: millis, value: value)
        }
        let stale = newestMillis.map { millis < $0 } ?? false
        if !stale { newestMillis = millis }
        return stale
    }

    /// The content-state a push carries.
    public var contentState: [String: JSONValue] { fields.mapValues(\.value) }
}

/// The outcome of merging one event into its key's state in Redis.
public struct MergeResult: Sendable, Equatable {
    public var stale: Bool
    /// The whole content-state after the merge, values as encoded JSON.
    public var contentState: [String: JSONValue]
    /// The newest event applied to the key, after the merge (ms).
    public var newestMillis: Int64
}

/// The Redis side of `KeyState`: one hash per key (`<prefix>:{key}:state`), `_ts` the newest
/// event, `f:<name>` = `<ms> <json>` per content-state key.
public enum KeyStateScripts {
    /// KEYS[1] = state hash. ARGV = ms, ttl seconds, then name/json pairs.
    /// Returns {stale 0|1, newest ms, name1, json1, name2, json2, …} (the whole state).
    public static let merge = RedisScript("""
    local ts = tonumber(ARGV[1])
    for i = 3, #ARGV, 2 do
      local f = 'f:' .. ARGV[i]
      local cur = redis.call('HGET', KEYS[1], f)
      local t = cur and tonumber(string.match(cur, '^(-?%d+) ')) or nil
      if t == nil or ts >= t then redis.call('HSET', KEYS[1], f, ARGV[1] .. ' ' .. ARGV[i + 1]) end
    end
    local newest = tonumber(redis.call('HGET', KEYS[1], '_ts') or '')
    local stale = 0
    if newest ~= nil and ts < newest then stale = 1 else newest = ts; redis.call('HSET', KEYS[1], '_ts', ARGV[1]) end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    local out = {stale, newest}
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

    public static func mergeCommand(stateKey: String, millis: Int64, ttlSeconds: Int, contentState: [String: JSONValue]) -> RedisCommand {
        var args: [any RedisArgument] = [millis, ttlSeconds]
        for key in contentState.keys.sorted() {
            args.append(key)
            args.append(contentState[key]!.encoded())
        }
        return .script(merge, keys: [stateKey], args: args)
    }

    public static func parse(_ reply: RESPValue) throws -> MergeResult {
        if let e = reply.errorMessage { throw RedisError(.server, "key state merge: \(e)") }
        guard let items = reply.array, items.count >= 2, let stale = items[0].int, let newest = items[1].int else {
            throw RedisError(.unexpectedReply, "key state merge: unexpected reply")
        }
        var state: [String: JSONValue] = [:]
        var i = 2
        while i + 1 < items.count {
            if let name = items[i].string, let json = items[i + 1].bytes { state[name] = .encoded(json) }
            i += 2
        }
        return MergeResult(stale: stale == 1, contentState: state, newestMillis: newest)
    }
}
