import ActivityCastCore
import RedisClient

/// A key's current content-state: every top-level `ContentState` key with the time of the event
/// that set it. Apple replaces an activity's whole state with each push and silently drops a
/// state that doesn't decode as the app's whole `ContentState`, so every push carries the merge
/// of every event so far, in timestamp order. Beside it, the presentation (stale-after offset,
/// relevance) of the newest event that gave one, and the state's `signature`: what a push of the
/// key shows, compared by the budget with what each audience was last sent (`unchanged`).
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
    /// The presentation of the newest event that changed the state (at `presentationMillis`):
    /// stale-after seconds and relevance as the event gave them (nil: none). An event that
    /// changes nothing (a score repeating the goal a moment before) doesn't change how the state
    /// is presented either: the goal's raised relevance stays until the next change.
    public var presentationMillis: Int64?
    public var staleAfter: String?
    public var relevance: String?
    /// The time (ms) the key's end was sent at, once an end was recorded: the key is over. An
    /// end is final: after it, only ends (a redelivery, a corrected final state) are merged;
    /// every other event is refused (`Merge.afterEnd`), because a device ignores pushes to an
    /// ended activity. It outlives the key's data as a tombstone (`expired()`).
    public var endedMillis: Int64?
    /// The entry of the end recorded last: the same entry delivered again goes at the same time.
    public var endedBy: String?

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
        /// It changed the value of at least one key (a stale event can still bring the newest
        /// value of a key that no newer event set: then the state changed and is pushed again as
        /// the newest event). Setting a key to the value it has is no change.
        public var changed: Bool
        /// The merged content-state would encode to this many bytes, over the event's limit:
        /// nothing was merged (the key's state is as it was). nil: merged.
        public var tooLarge: Int?
        /// The key had ended: nothing of this event (not an end) was merged.
        public var afterEnd = false
        /// An end of a key that had ended already (the same end delivered again, or a corrected
        /// one): sent again as the end, without its alert.
        public var endAgain = false

        public init(stale: Bool, changed: Bool, tooLarge: Int? = nil, afterEnd: Bool = false, endAgain: Bool = false) {
            self.stale = stale; self.changed = changed; self.tooLarge = tooLarge; self.afterEnd = afterEnd; self.endAgain = endAgain
        }
    }

    /// The event's part in a merge besides its content-state.
    public struct Event: Equatable, Sendable {
        public var millis: Int64
        public var event: LiveActivityEvent?
        /// `stale-date` as seconds after the event's time, and relevance, as strings (nil: none).
        public var staleAfter: String?
        public var relevance: String?
        /// The most bytes the merged content-state may encode to (the device limit less the rest
        /// of the push); nil: no limit.
        public var stateLimit: Int?
        /// An end merged before its settle time (`SendConfiguration.endSettle`): its fields are
        /// taken (also after the key's end, as an end's are) but it is not yet recorded as the
        /// key's end, nor does it move the key's newest time. `event` is nil then.
        public var settlingEnd = false
        /// The stream entry that carried it (`<stream>/<id>`; '' for none).
        public var entry = ""

        public init(millis: Int64, event: LiveActivityEvent?, staleAfter: String? = nil, relevance: String? = nil, stateLimit: Int? = nil,
                    settlingEnd: Bool = false, entry: String = "") {
            self.millis = millis; self.event = event; self.staleAfter = staleAfter; self.relevance = relevance; self.stateLimit = stateLimit
            self.settlingEnd = settlingEnd; self.entry = entry
        }
    }

    /// Merges an event's content-state: each of its keys is taken unless a newer event set it;
    /// nothing is taken when the merged state would be over the event's limit.
    @discardableResult
    public mutating func merge(millis: Int64, event: LiveActivityEvent?, contentState: [String: JSONValue]) -> Merge {
        merge(Event(millis: millis, event: event), contentState: contentState)
    }

    @discardableResult
    public mutating func merge(_ e: Event, contentState: [String: JSONValue]) -> Merge {
        let isEnd = e.event == .end
        // An end is final: only an end's fields are taken after it.
        if endedMillis != nil, !isEnd, !e.settlingEnd { return Merge(stale: false, changed: false, afterEnd: true) }
        var next = fields
        var changed = false
        for (key, value) in contentState where e.millis >= (next[key]?.millis ?? .min) {
            if next[key]?.value.encoded() != value.encoded() { changed = true }
            next[key] = Field(millis: e.millis, value: value)
        }
        let older = newestMillis.map { e.millis < $0 } ?? false
        // An end is never stale: whatever its time, it ends the key.
        let stale = older && !isEnd
        if let limit = e.stateLimit {
            let size = Self.encodedSize(next.mapValues { $0.value.encoded() })
            if size > limit { return Merge(stale: stale, changed: false, tooLarge: size) }
        }
        fields = next
        var again = false
        if isEnd {
            again = endedMillis != nil
            newestMillis = Self.endMillis(e.millis, entry: e.entry, newest: newestMillis, endedMillis: endedMillis, endedBy: endedBy)
            newestEvent = .end
            endedMillis = newestMillis
            endedBy = e.entry
        } else if !older, !e.settlingEnd {
            newestMillis = e.millis
            if let event = e.event { newestEvent = event == .start ? .update : event }
        }
        if changed, e.millis >= (presentationMillis ?? .min) {
            presentationMillis = e.millis
            staleAfter = e.staleAfter
            relevance = e.relevance
        }
        return Merge(stale: stale, changed: changed, endAgain: again)
    }

    /// The time an end is sent at: its own, unless the key has a newer (or as new) event than it
    /// — clocks of a feed's sources disagree, or an update was processed first — then just after
    /// the newest, so that the end is the key's newest push (a device ignores an older timestamp,
    /// and an older fan-out yields to it). The same end delivered again keeps its time.
    public static func endMillis(_ millis: Int64, entry: String, newest: Int64?, endedMillis: Int64?, endedBy: String?) -> Int64 {
        if let endedMillis, !entry.isEmpty, endedBy == entry { return endedMillis }
        guard let newest, millis <= newest else { return millis }
        return newest + 1
    }

    /// What stays of the key once its data expired after its end: a tombstone with the end's
    /// time, so that a late event doesn't start the key over as a new activity.
    public func expired() -> KeyState {
        guard let endedMillis else { return KeyState() }
        var tomb = KeyState(newestMillis: endedMillis, newestEvent: .end)
        tomb.endedMillis = endedMillis
        return tomb
    }

    /// The content-state a push carries.
    public var contentState: [String: JSONValue] { fields.mapValues(\.value) }

    /// What `KeyStateScripts.merge` hashes (SHA-1) into the state's `_sig`: each key and its
    /// JSON in byte order of the keys, then the presentation. Two states show the same on a
    /// device exactly when their signatures are equal.
    public var signatureSource: String {
        var out = ""
        for name in fields.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            out += name + "\u{0}" + String(decoding: fields[name]!.value.encoded(), as: UTF8.self) + "\u{0}"
        }
        return out + "\u{1}" + (staleAfter ?? "") + "\u{0}" + (relevance ?? "")
    }

    /// Bytes of `{"name":json,…}`, the content-state object a push carries (JSONValue's
    /// encoding: names escaped per RFC 8259).
    public static func encodedSize(_ state: [String: [UInt8]]) -> Int {
        guard !state.isEmpty else { return 2 }
        return state.reduce(1 + state.count) { sum, item in
            sum + JSONValue.string(item.key).encoded().count + 1 + item.value.count
        }
    }
}

/// The outcome of merging one event into its key's state in Redis.
public struct MergeResult: Sendable, Equatable {
    public var stale: Bool
    /// The event changed the value of at least one key.
    public var changed: Bool
    /// The newest event's Live Activity event (`update` or `end`), if any was recorded.
    public var newestEvent: LiveActivityEvent?
    /// The whole content-state after the merge, values as encoded JSON.
    public var contentState: [String: JSONValue]
    /// The newest event applied to the key, after the merge (ms).
    public var newestMillis: Int64
    /// The presentation of the newest event that had one (`KeyState.staleAfter`, `relevance`):
    /// what a push sent later on the key's behalf (a budget flush) carries. Only from `read`.
    public var staleAfterSeconds: Int64?
    public var relevanceScore: Double?
    /// The merged content-state would have been this many bytes, over the event's limit: nothing
    /// was merged, and `contentState` is the key's state as it was.
    public var tooLarge: Int?
    /// The key had ended and this event isn't an end: nothing was merged (`contentState` is empty).
    public var afterEnd = false
    /// An end of a key that had ended already: sent again without its alert.
    public var endAgain = false
    /// When the key's end was sent (ms), if it ended. Only from `read`.
    public var endedMillis: Int64?
}

/// The Redis side of `KeyState`: one hash per key (`<prefix>:{key}:state`), `_ts` the newest
/// event, `_ev` its Live Activity event, `f:<name>` = `<ms> <json>` per content-state key, `_pts`,
/// `_stale`, `_rel` the newest event's presentation, `_sig` the SHA-1 of `KeyState.signatureSource`
/// (the budget compares it with what each audience was last sent), `_rej` the last entry
/// refused as too large (its budget decisions are skipped: nothing spent), and `_end`, `_endby`
/// the time the key's end was sent at and the entry that carried it (`KeyState.endedMillis`).
public enum KeyStateScripts {
    /// KEYS[1] = state hash, KEYS[2] (optional) = the key's tombstone (`RedisKeys.ended`), read
    /// when the hash is empty. ARGV = ms, ttl seconds, event (`update`, `end`, `settling`: an end
    /// before its settle time, `-`), entry ('' for none), state limit (bytes of the merged
    /// content-state JSON; 0: none), stale-after and relevance ('' for none), then name/json pairs.
    /// Returns {stale 0|1, changed 0|1, newest ms, newest event, too large (bytes, 0: merged),
    /// flags (1: refused, the key ended; 2: an end of a key that had ended), name1, json1, …}
    /// (the whole state, as it is after the merge; none when refused after the end).
    public static let merge = RedisScript("""
    local ts = tonumber(ARGV[1])
    local kind = ARGV[3]
    local limit = tonumber(ARGV[5])
    local function fmt(n) return string.format('%.0f', n) end
    -- Byte order, whatever Redis's locale (Lua's string < uses strcoll).
    local function before(a, b)
      local n = math.min(#a, #b)
      for i = 1, n do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
      end
      return #a < #b
    end
    -- Bytes of a name as JSONValue encodes it (quoted, RFC 8259 escapes).
    local function quoted(name)
      -- Nearly every name has nothing to escape.
      if not string.find(name, '[%z\\1-\\31\\34\\92\\226]') then return #name + 2 end
      local n = #name + 2
      n = n + select(2, string.gsub(name, '[\\34\\92\\8\\9\\10\\12\\13]', ''))
      n = n + 5 * select(2, string.gsub(name, '[%z\\1-\\7\\11\\14-\\31]', ''))
      n = n + 3 * select(2, string.gsub(name, '\\226\\128[\\168\\169]', ''))
      return n
    end
    local all = redis.call('HGETALL', KEYS[1])
    local cur, meta = {}, {}
    for i = 1, #all, 2 do
      local f, v = all[i], all[i + 1]
      if string.sub(f, 1, 2) == 'f:' then
        local sp = string.find(v, ' ', 1, true)
        cur[string.sub(f, 3)] = {tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1)}
      else
        meta[f] = v
      end
    end
    -- The key's data expired after its end: its tombstone says it ended.
    local tomb = nil
    if #all == 0 and KEYS[2] then
      tomb = redis.call('GET', KEYS[2])
      if tomb then meta['_ts'], meta['_ev'], meta['_end'] = tomb, 'end', tomb end
    end
    local isEnd = kind == 'end'
    -- An end is final: only an end's fields are taken after it.
    if meta['_end'] and not isEnd and kind ~= 'settling' then
      return {0, 0, tonumber(meta['_ts']), meta['_ev'] or '-', 0, 1}
    end
    local changed, writes = 0, {}
    for i = 8, #ARGV, 2 do
      local name, json = ARGV[i], ARGV[i + 1]
      local c = cur[name]
      if c == nil or ts >= c[1] then
        if c == nil or c[2] ~= json then changed = 1 end
        cur[name] = {ts, json}
        writes[#writes + 1] = 'f:' .. name
        writes[#writes + 1] = ARGV[1] .. ' ' .. json
      end
    end
    local names = {}
    for name in pairs(cur) do names[#names + 1] = name end
    table.sort(names, before)
    local newest = tonumber(meta['_ts'] or '')
    local older = newest ~= nil and ts < newest
    -- An end is never stale: whatever its time, it ends the key.
    local stale = (older and not isEnd) and 1 or 0
    if limit > 0 then
      local size = 1 + #names
      if #names == 0 then size = 2 end
      for _, name in ipairs(names) do size = size + quoted(name) + 1 + #cur[name][2] end
      if size > limit then
        if tomb then redis.call('HSET', KEYS[1], '_ts', tomb, '_ev', 'end', '_end', tomb) end
        redis.call('HSET', KEYS[1], '_rej', ARGV[4])
        redis.call('EXPIRE', KEYS[1], ARGV[2])
        local out = {stale, 0, newest or ts, meta['_ev'] or '-', size, 0}
        for i = 1, #all, 2 do
          if string.sub(all[i], 1, 2) == 'f:' then
            local v = all[i + 1]
            out[#out + 1] = string.sub(all[i], 3)
            out[#out + 1] = string.sub(v, string.find(v, ' ', 1, true) + 1)
          end
        end
        return out
      end
    end
    -- Every write in one HSET (and one HDEL): each call into Redis costs more than the Lua around it.
    local del = {}
    local function put(f, v) writes[#writes + 1] = f writes[#writes + 1] = v end
    if tomb then put('_ts', tomb) put('_ev', 'end') put('_end', tomb) end
    local flags = 0
    if isEnd then
      -- Sent at its own time, or just after the key's newest (`KeyState.endMillis`).
      local ended = tonumber(meta['_end'] or '')
      if ended then flags = 2 end
      local at = ts
      if ended and ARGV[4] ~= '' and meta['_endby'] == ARGV[4] then at = ended
      elseif newest ~= nil and ts <= newest then at = newest + 1 end
      newest = at
      put('_ts', fmt(at)) put('_ev', 'end') put('_end', fmt(at)) put('_endby', ARGV[4])
      meta['_ev'] = 'end'
    elseif not older and kind ~= 'settling' then
      newest = ts
      put('_ts', ARGV[1])
      if kind ~= '-' then put('_ev', kind) meta['_ev'] = kind end
    end
    local pts = tonumber(meta['_pts'] or '')
    if changed == 1 and (pts == nil or ts >= pts) then
      put('_pts', ARGV[1])
      if ARGV[6] == '' then del[#del + 1] = '_stale' else put('_stale', ARGV[6]) end
      if ARGV[7] == '' then del[#del + 1] = '_rel' else put('_rel', ARGV[7]) end
      meta['_stale'], meta['_rel'] = ARGV[6], ARGV[7]
    end
    local out = {stale, changed, newest or ts, meta['_ev'] or '-', 0, flags}
    local source = {}
    for _, name in ipairs(names) do
      out[#out + 1] = name
      out[#out + 1] = cur[name][2]
      source[#source + 1] = name .. '\\0' .. cur[name][2] .. '\\0'
    end
    source[#source + 1] = '\\1' .. (meta['_stale'] or '') .. '\\0' .. (meta['_rel'] or '')
    put('_sig', redis.sha1hex(table.concat(source)))
    redis.call('HSET', KEYS[1], unpack(writes))
    if #del > 0 then redis.call('HDEL', KEYS[1], unpack(del)) end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return out
    """)

    /// The merge of one event. `entry`: the stream entry that carried it (`<stream>/<id>`), named
    /// in `_rej` when it is refused as too large.
    /// `tombstoneKey`: the key's `RedisKeys.ended`, read when its state is gone.
    public static func mergeCommand(stateKey: String, tombstoneKey: String? = nil, _ e: KeyState.Event, entry: String, ttlSeconds: Int,
                                    contentState: [String: JSONValue]) -> RedisCommand {
        let recorded = e.settlingEnd ? "settling" : e.event.map { $0 == .start ? "update" : $0.rawValue } ?? "-"
        var args: [any RedisArgument] = [e.millis, ttlSeconds, recorded, entry, e.stateLimit ?? 0, e.staleAfter ?? "", e.relevance ?? ""]
        for key in contentState.keys.sorted() {
            args.append(key)
            args.append(contentState[key]!.encoded())
        }
        return .script(merge, keys: [stateKey] + (tombstoneKey.map { [$0] } ?? []), args: args)
    }

    public static func mergeCommand(stateKey: String, millis: Int64, ttlSeconds: Int, event: LiveActivityEvent?,
                                    contentState: [String: JSONValue]) -> RedisCommand {
        mergeCommand(stateKey: stateKey, KeyState.Event(millis: millis, event: event), entry: "", ttlSeconds: ttlSeconds, contentState: contentState)
    }

    /// The key's state as stored (`HGETALL` of its hash), without merging anything; nil when
    /// the key has none.
    public static func read(_ reply: RESPValue) -> MergeResult? {
        guard let items = reply.array, !items.isEmpty else { return nil }
        var newest: Int64?, event: LiveActivityEvent?, stale: Int64?, relevance: Double?, ended: Int64?
        var state: [String: JSONValue] = [:]
        var i = 0
        while i + 1 < items.count {
            defer { i += 2 }
            guard let name = items[i].string else { continue }
            if name == "_ts" { newest = items[i + 1].int; continue }
            if name == "_ev" { event = items[i + 1].string.flatMap(LiveActivityEvent.init(rawValue:)); continue }
            if name == "_stale" { stale = items[i + 1].string.flatMap { Int64($0) }; continue }
            if name == "_rel" { relevance = items[i + 1].string.flatMap { Double($0) }; continue }
            if name == "_end" { ended = items[i + 1].int; continue }
            guard name.hasPrefix("f:"), let value = items[i + 1].bytes, let space = value.firstIndex(of: UInt8(ascii: " ")) else { continue }
            state[String(name.dropFirst(2))] = .encoded(Array(value[(space + 1)...]))
        }
        guard let newest else { return nil }
        return MergeResult(stale: false, changed: false, newestEvent: event, contentState: state, newestMillis: newest,
                           staleAfterSeconds: stale, relevanceScore: relevance, endedMillis: ended)
    }

    public static func parse(_ reply: RESPValue) throws -> MergeResult {
        if let e = reply.errorMessage { throw RedisError(.server, "key state merge: \(e)") }
        guard let items = reply.array, items.count >= 6, let stale = items[0].int, let changed = items[1].int, let newest = items[2].int,
              let tooLarge = items[4].int, let flags = items[5].int else {
            throw RedisError(.unexpectedReply, "key state merge: unexpected reply")
        }
        var state: [String: JSONValue] = [:]
        var i = 6
        while i + 1 < items.count {
            if let name = items[i].string, let json = items[i + 1].bytes { state[name] = .encoded(json) }
            i += 2
        }
        return MergeResult(stale: stale == 1, changed: changed == 1, newestEvent: items[3].string.flatMap(LiveActivityEvent.init(rawValue:)),
                           contentState: state, newestMillis: newest, tooLarge: tooLarge > 0 ? Int(tooLarge) : nil,
                           afterEnd: flags == 1, endAgain: flags == 2)
    }
}
