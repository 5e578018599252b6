import ActivityCastCore
import RedisClient

/// The Redis side of fan-outs. Per key, in its hash slot:
/// - `<prefix>:{key}:gen` (hash): `name`, `millis` of the newest fan-out: an older one still
///   running is superseded;
/// - `<prefix>:{key}:fan:<gen>` (hash): `left` slices without a final outcome, `n` slices, `p`
///   the payload, `pri`, `live` (environments whose channel had the push), `stream`/`entry` of
///   the event to acknowledge, `b` broadcast done, `q` slices queued, `s<j>` each slice's progress:
///   `<place>` (done below it), `<from> <to> <last>` (a batch in flight), `w <round>` (its range
///   is sent; tokens still failing wait in `w<j>` until `wd<j>`), `wf <round>` (those tokens in
///   flight, the round-th time) or `done`;
/// - `<prefix>:{key}:inflight` (sorted set): `<gen>|<j>` of every batch in flight, scored by the
///   time its lease ends. A batch of a newer fan-out waits until no older batch is in flight, so
///   no device gets an older state after a newer one.
public enum FanoutScripts {
    static let common = """
    local TWO32 = 4294967296
    local function rev32(x)
      local r = 0
      for _ = 1, 32 do r = r * 2 + (x % 2); x = math.floor(x / 2) end
      return r
    end
    local function lowbit(x)
      local b = 1
      while x % (b * 2) == 0 do b = b * 2 end
      return b
    end
    -- The Redis process: each one seeds its hash function anew, so HSCAN's order (the slices)
    -- holds only within one process (a restart or a failover gives another).
    local function runid()
      return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
    end
    -- Every slice of the fan-out is final. A flush's record (it has no entry) goes at once. An
    -- event's loses its payloads and keeps what a redelivery needs to send nothing (`left` 0,
    -- `b`, each slice `done`, where its entry is) until the entry is acknowledged, which deletes
    -- it; `keep` s if that never happens (Redis failing at the acknowledgement).
    local function over(fan, keep)
      if (redis.call('HGET', fan, 'entry') or '') == '' then redis.call('DEL', fan) return end
      redis.call('HDEL', fan, 'p', 'p5', 't', 'live')
      redis.call('EXPIRE', fan, keep)
    end
    """

    /// KEYS: gen hash (`{key}:gen`), fan hash, meta, and for a flush that read a newest fan-out
    /// of the key, that one's fan hash. ARGV: gen, millis, slice size, max slices,
    /// ttl s, payload, priority, live envs, stream, entry id, payload at 5 ('' when the same),
    /// the tiers' priorities (`AudiencePriorities.encodedTiers`), '1' for a flush (yields to a
    /// fan-out of the same time under way), the key's newest fan-out as the flush read it ('' for
    /// none), `b` ('0': the broadcast isn't answered yet; the caller records it and the final `live`).
    /// Returns {'new', n, tokens} | {'exists', left, n, b, q} | {'older'} | {'none'} (the key has
    /// no tokens: the fan-out is named the key's newest, and no record is written).
    public static let create = RedisScript(common + """

    local cur = redis.call('HMGET', KEYS[1], 'name', 'millis')
    if cur[1] == ARGV[1] then
      local f = redis.call('HMGET', KEYS[2], 'left', 'n', 'b', 'q')
      if not f[1] then return {'exists', 0, 0, '1', '1'} end
      return {'exists', tonumber(f[1]), tonumber(f[2]), f[3] or '', f[4] or ''}
    end
    if cur[2] and tonumber(ARGV[2]) < tonumber(cur[2]) then return {'older'} end
    -- A flush (ARGV[13] = '1') yields to a fan-out of the same time still under way: it may be
    -- another audience's, whose devices it would otherwise take over. Only declared keys are
    -- read (Redis Cluster): the caller names the newest fan-out it read (ARGV[14], its record
    -- KEYS[4]); one that became the newest since is not looked at, and the flush yields to it
    -- (it is due again shortly).
    if ARGV[13] == '1' and cur[1] and cur[2] and tonumber(ARGV[2]) <= tonumber(cur[2]) then
      if cur[1] ~= ARGV[14] or not KEYS[4] then return {'older'} end
      local running = tonumber(redis.call('HGET', KEYS[4], 'left') or '0')
      if running > 0 then return {'older'} end
    end
    -- This fan-out began before and another has been the key's newest since (its entry, claimed
    -- again, is now stale): starting it anew would take the key over from the newer one and run on
    -- its old progress. The newer one's payload was merged after this one's: nothing to send.
    if redis.call('EXISTS', KEYS[2]) == 1 then return {'older'} end
    local tokens = redis.call('HLEN', KEYS[3])
    local ttl = tonumber(ARGV[5])
    redis.call('HSET', KEYS[1], 'name', ARGV[1], 'millis', ARGV[2])
    redis.call('EXPIRE', KEYS[1], ttl)
    -- Nobody to send to per token: no record (the key's newest fan-out is named above, so an
    -- older one still running is superseded all the same).
    if tokens == 0 then return {'none'} end
    local n = 1
    if tokens > 0 and redis.call('OBJECT', 'ENCODING', KEYS[3]) == 'hashtable' then
      local size, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
      while n * size < tokens and n < limit do n = n * 2 end
    end
    redis.call('HSET', KEYS[2], 'left', n, 'n', n, 'p', ARGV[6], 'pri', ARGV[7], 'live', ARGV[8], 'stream', ARGV[9], 'entry', ARGV[10],
               'millis', ARGV[2], 'b', ARGV[15] or '1', 'rid', runid(), 't', ARGV[12] or '')
    if ARGV[11] and ARGV[11] ~= '' then redis.call('HSET', KEYS[2], 'p5', ARGV[11]) end
    redis.call('EXPIRE', KEYS[2], ttl)
    return {'new', n, tokens}
    """)

    /// Sets fields of a fan-out's record only while it exists: a record finished and deleted
    /// meanwhile (its entry acknowledged) must not come back as a stray hash without a TTL.
    /// KEYS: fan hash. ARGV: field, value, … Returns 1, or 0 when the record is gone.
    public static let mark = RedisScript("""
    if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
    redis.call('HSET', KEYS[1], unpack(ARGV))
    return 1
    """)

    /// Gives a slice its final outcome without sending it (its attempts ran out).
    /// KEYS: fan hash, inflight zset. ARGV: gen, j, keep s. Returns the slices left, or -1 when
    /// the slice was already final.
    public static let abandon = RedisScript(common + """

    if not redis.call('HGET', KEYS[1], 'left') then return -1 end
    local f = 's' .. ARGV[2]
    if redis.call('HGET', KEYS[1], f) == 'done' then return -1 end
    redis.call('HSET', KEYS[1], f, 'done')
    redis.call('HDEL', KEYS[1], 'w' .. ARGV[2], 'wd' .. ARGV[2])
    redis.call('ZREM', KEYS[2], ARGV[1] .. '|' .. ARGV[2])
    local left = redis.call('HINCRBY', KEYS[1], 'left', -1)
    if left <= 0 then over(KEYS[1], tonumber(ARGV[3])) end
    return left
    """)

    /// Renews a batch's lease (while it is sent, and before its worker retries it), only while the
    /// lease is still there, and never to an earlier end.
    /// KEYS: inflight zset. ARGV: member, lease end (ms). Returns 1, or 0 when the lease is gone.
    public static let renew = RedisScript("""
    if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
    redis.call('ZADD', KEYS[1], 'GT', ARGV[2], ARGV[1])
    return 1
    """)

    /// One step of a slice: confirms the caller's last batch, then hands out the next one.
    /// KEYS: gen hash, fan hash, inflight zset, meta. ARGV: gen, j, n (0: the fan-out's), want, now ms,
    /// lease ms, confirm (`<from> <to>` of the caller's batch, `w<round>` of a batch of waiting
    /// tokens, or ''), keep s (fan hash after the end), width (from the caller's last `send`, or 0),
    /// the confirmed batch's tokens still failing (`FanoutWaiting.encoded`: `<activity>`, `?` before
    /// it to go without the alert, a word `!<n>` after it for tries that don't count; space-separated),
    /// ms before they may go again, and the caller's own scan of the next batch
    /// (`<from> <to> <ended> <count>`, or ''): `FanoutScan`, made with top-level `HSCAN`s while the
    /// last batch was being sent. It is taken when it starts where the slice stands and ends
    /// where a scan ends (its tokens stay with the caller: reply's 8th element 1); else the script
    /// scans as always.
    /// A confirmed batch's failing tokens wait: the slice goes on, and once its range is sent they
    /// go again (a batch `w<round>`, the tokens still registered, each one's entry listed apart) when due
    /// (`later` until then), round after round until none is left; the caller records what still
    /// fails in its last round as failed.
    /// Returns {status, left, confirm, resent, width, {{activity1, meta1, …}, …}, {entry…}, scanned}
    /// (resent: 1 after a takeover, which hands out exactly the lost batch, 2 after a Redis
    /// restart, else 0); status is `send`, `later` (waiting tokens not due; left = ms until they are),
    /// `finished` (this call ended the slice), `done` (ended before), `superseded`, `busy`
    /// (another worker's batch of this slice is in flight; left = ms until its lease ends), `wait`
    /// (an older fan-out's batch is in flight), `gone` (the fan-out is over and cleared),
    /// `relaid` (Redis restarted since the fan-out began: every slice starts again; left = the
    /// slice count; the caller queues the others again) or `paused` (want 0). Typed:
    /// `FanoutStepCall`, `FanoutStepReply`; modelled by `FanoutModel.step`.
    public static let step = RedisScript(common + """

    local gen, j, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
    local want, now, lease = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
    local member = gen .. '|' .. j
    local f = 's' .. j
    local wf, wdf = 'w' .. j, 'wd' .. j
    local meta = redis.call('HMGET', KEYS[2], 'left', f, 'rid', 'n', 'r', wf, wdf)
    if not meta[1] then return {'gone', 0} end
    -- n 0: the fan-out's own count (a step pipelined behind the create, which decides it).
    if n == 0 then n = tonumber(meta[4]) end
    local left, st = tonumber(meta[1]), meta[2]
    if left > 0 and meta[3] ~= runid() and redis.call('HGET', KEYS[1], 'name') == gen then
      -- Redis restarted (or failed over) since the fan-out began: the scan order is another one,
      -- so every slice's progress now names other tokens. Every slice starts again (its batches
      -- counted as re-sent) and is queued again by the caller: nothing is lost.
      local all = tonumber(meta[4])
      for k = 0, all - 1 do redis.call('HDEL', KEYS[2], 's' .. k, 'w' .. k, 'wd' .. k) end
      redis.call('HDEL', KEYS[2], 'q')
      redis.call('HSET', KEYS[2], 'left', all, 'rid', runid(), 'r', 1)
      return {'relaid', all}
    end
    if st == 'done' then return {'done', left} end
    local function final()
      redis.call('HSET', KEYS[2], f, 'done')
      redis.call('HDEL', KEYS[2], wf, wdf)
      redis.call('ZREM', KEYS[3], member)
      left = redis.call('HINCRBY', KEYS[2], 'left', -1)
      if left <= 0 then over(KEYS[2], tonumber(ARGV[8])) end
      return left
    end
    local width = TWO32 / n
    local lo, hi = j * width, (j + 1) * width
    local pos, from, to, last = lo, nil, nil, nil
    -- The range is sent and tokens wait (`round` batches of them sent), or a batch of them is out.
    local round, out
    if st then
      local a, b, c = string.match(st, '^(%d+) (%d+) (%d)$')
      if a then from, to, last = tonumber(a), tonumber(b), c
      elseif string.sub(st, 1, 3) == 'wf ' then out = tonumber(string.sub(st, 4))
      elseif string.sub(st, 1, 2) == 'w ' then round = tonumber(string.sub(st, 3))
      else pos = tonumber(st) end
    end
    local waiting, due = meta[6] or '', tonumber(meta[7] or '0')
    local failing, after = ARGV[10] or '', tonumber(ARGV[11] or '0') or 0
    local function wait_for(list, at)
      waiting, due = list, at
      if list == '' then redis.call('HDEL', KEYS[2], wf, wdf) else redis.call('HSET', KEYS[2], wf, list, wdf, at) end
    end
    if from and ARGV[7] == (from .. ' ' .. to) then
      redis.call('ZREM', KEYS[3], member)
      if failing ~= '' then wait_for(waiting == '' and failing or (waiting .. ' ' .. failing), math.max(due, now + after)) end
      if last == '1' then
        if waiting == '' then return {'finished', final()} end
        redis.call('HSET', KEYS[2], f, 'w 0')
        round = 0
      else
        redis.call('HSET', KEYS[2], f, to)
        pos = to
      end
      from = nil
    elseif out and ARGV[7] == ('w' .. out) then
      redis.call('ZREM', KEYS[3], member)
      wait_for(failing, now + after)
      if waiting == '' then return {'finished', final()} end
      redis.call('HSET', KEYS[2], f, 'w ' .. out)
      round, out = out, nil
    end
    if want == 0 then return {'paused', left} end
    -- Another worker's batch in flight keeps its lease, superseded or not: a newer fan-out waits
    -- for it (ending the slice here would drop the lease while that batch is still being sent).
    if from or out then
      local lease_end = redis.call('ZSCORE', KEYS[3], member)
      if lease_end and tonumber(lease_end) > now then return {'busy', tonumber(lease_end) - now} end
    end
    if redis.call('HGET', KEYS[1], 'name') ~= gen then return {'superseded', final()} end
    local resent = 0
    if from then resent = 1 end
    -- Started again after a Redis restart: any token may have had this state before it.
    if resent == 0 and meta[5] == '1' then resent = 2 end
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], now, '+inf')) do
      if string.sub(m, 1, #gen + 1) ~= gen .. '|' then return {'wait', left} end
    end
    -- The waiting tokens as a batch: those still registered (as a scan gives them), and apart the
    -- ones that go without their alert.
    local hint = tonumber(ARGV[9] or '') or 0
    local function waiting_batch(n_round, again)
      if not again and now < due then return {'later', due - now} end
      -- Each as it waits (`FanoutWaiting.encoded`: `?` quiet, then `!<n>` its uncounted tries as a
      -- word of its own), and the names.
      local names, entries = {}, {}
      for w in string.gmatch(waiting, '%S+') do
        entries[#entries + 1] = w
        if string.sub(w, 1, 1) ~= '!' then
          if string.sub(w, 1, 1) == '?' then w = string.sub(w, 2) end
          names[#names + 1] = w
        end
      end
      local rows = {}
      -- In chunks: unpack takes a few thousand values at most.
      for c = 1, #names, 1000 do
        local part = {unpack(names, c, math.min(#names, c + 999))}
        local values = redis.call('HMGET', KEYS[4], unpack(part))
        for i, name in ipairs(part) do
          if values[i] then rows[#rows + 1] = name rows[#rows + 1] = values[i] end
        end
      end
      -- Nothing of them is registered any more: the slice has sent everything.
      if #rows == 0 then return {'finished', final()} end
      redis.call('HSET', KEYS[2], f, 'wf ' .. n_round)
      redis.call('ZADD', KEYS[3], now + lease, member)
      redis.call('PEXPIRE', KEYS[3], lease + 3600000)
      return {'send', left, 'w' .. n_round, again and 1 or resent, hint, {rows}, entries}
    end
    -- Its worker stopped with waiting tokens in flight: those again, as re-sent.
    if out then return waiting_batch(out, true) end
    if round then return waiting_batch(round + 1, false) end
    -- Scans from pos up to stop (the slice's end, or a lost batch's) for about want tokens. A call
    -- with COUNT c visits at most 20c+1 buckets (Redis doubles a hash's COUNT, a field and its
    -- value, and stops at ten times that); est (the lowest bit of the places seen, never below a
    -- bucket's width) bounds c so that no call runs past stop. Near stop, COUNT 1 stops at the
    -- first non-empty bucket (within 21): if a scan from stop itself reaches the same bucket, that
    -- bucket is beyond it (the next slice's, or the next batch's).
    -- The caller passes the width its last step saw (ARGV[9]), so a step starts with a wide COUNT
    -- instead of COUNT 1. It comes from an earlier call: if the table shrank since, a wide call may
    -- run past stop, and then its tokens are kept (sent again later: duplicates, never a loss).
    local est
    local function scan(pos, stop, want)
      local chunks, n_out, ended = {}, 0, false
      while true do
        if pos >= stop then ended = true break end
        if n_out >= want then break end
        local count = 1
        local width = est or (hint > 0 and hint or nil)
        if width then
          local c = math.floor(((stop - pos) / width - 1) / 20)
          if c > want - n_out then c = want - n_out end
          if c > 1 then count = c end
        end
        local r = redis.call('HSCAN', KEYS[4], rev32(pos), 'COUNT', count)
        local nc = tonumber(r[1])
        local place = TWO32
        if nc ~= 0 then
          place = rev32(nc)
          local lb = lowbit(place)
          if not est or lb < est then est = lb end
        end
        local keep = true
        if place > stop then
          ended = true
          if count == 1 then
            local probe = redis.call('HSCAN', KEYS[4], rev32(stop), 'COUNT', 1)
            if tonumber(probe[1]) == nc then keep = false end
          end
        elseif place == stop then
          ended = true
        end
        if keep then
          local e = r[2]
          if #e > 0 then
            chunks[#chunks + 1] = e
            n_out = n_out + #e / 2
          end
        end
        pos = place
        if ended then break end
      end
      return chunks, n_out, pos, ended
    end
    local start, chunks, n_out, ended, scanned = pos, nil, 0, false, 0
    if from then
      -- Its worker stopped with a batch in flight: that batch again, exactly, whatever this
      -- caller's batch size (APNs may have had any of it: all of it goes as re-sent, and nothing
      -- beyond it does).
      chunks, n_out = scan(from, math.min(to, hi), math.huge)
      start, pos, ended = from, to, last == '1'
      if n_out == 0 and not ended then
        -- Nothing of it is left (its registrations gone): the slice goes on from its end.
        resent = meta[5] == '1' and 2 or 0
        start = to
        chunks, n_out, pos, ended = scan(to, hi, want)
      end
    else
      local pf, pt, pe, pn = string.match(ARGV[12] or '', '^(%d+) (%d+) ([01]) (%d+)$')
      pf, pt, pn = tonumber(pf), tonumber(pt), tonumber(pn)
      if pf == pos and pt > pos and (pe == '1') == (pt >= hi) and (pn > 0 or pe == '1') then
        -- The caller scanned from here itself (a top-level HSCAN costs Redis half of one from
        -- Lua, and its tokens needn't come back through this reply): its range is the batch.
        chunks, n_out, pos, ended, scanned = {}, pn, pt, pe == '1', 1
      else
        chunks, n_out, pos, ended = scan(pos, hi, want)
      end
    end
    if n_out == 0 and ended then
      if waiting == '' then return {'finished', final()} end
      redis.call('HSET', KEYS[2], f, 'w 0')
      return waiting_batch(1, false)
    end
    local range = start .. ' ' .. pos
    redis.call('HSET', KEYS[2], f, range .. ' ' .. (ended and '1' or '0'))
    redis.call('ZADD', KEYS[3], now + lease, member)
    redis.call('PEXPIRE', KEYS[3], lease + 3600000)
    -- The scan's own replies go back as they came (activity, meta, …): meta ends with the token,
    -- so nothing else is read per token.
    return {'send', left, range, resent, est or hint, chunks, {}, scanned}
    """)
}

// MARK: - The keys

/// The keys of one activity key's fan-outs, all in its hash slot (`{key}`), so a script that
/// declares them can run on any Redis Cluster node that owns the key.
public struct FanoutKeys: Sendable, Equatable {
    /// `<prefix>:{key}:gen`: the key's newest fan-out (`name`, `millis`).
    public var gen: String
    /// `<prefix>:{key}:inflight`: the leases of the batches in flight.
    public var inflight: String
    /// `<prefix>:{key}:meta`: the key's registrations, the audience a fan-out scans.
    public var meta: String
    /// `<prefix>:{key}:fan:`: before a fan-out's name, its record.
    public var fanPrefix: String

    public init(_ keys: RedisKeys, _ key: ActivityKey) {
        gen = keys.fanoutGen(key)
        inflight = keys.inflight(key)
        meta = keys.meta(key)
        fanPrefix = keys.fanoutPrefix(key)
    }

    /// The record of the fan-out named `gen`.
    public func fan(_ gen: String) -> String { fanPrefix + gen }
}

// MARK: - The calls

/// A batch's place in its slice's range of the scan order: `[from, to)` of `SliceMath` places
/// (`to` may pass the slice's end: the last batch of a slice ends at the next cursor the scan
/// met). The step script hands it out as `"<from> <to>"` and takes the same text back to confirm
/// it; Lua prints these integers (below 2^33) in full, so `description` is that text.
public struct FanoutBatchRange: Hashable, Sendable, CustomStringConvertible {
    public var from: UInt64
    public var to: UInt64

    public init(from: UInt64, to: UInt64) {
        self.from = from
        self.to = to
    }

    /// From the script's text; nil when it isn't two places.
    public init?(_ text: String) {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 2, let from = UInt64(parts[0]), let to = UInt64(parts[1]) else { return nil }
        self.init(from: from, to: to)
    }

    public var description: String { "\(from) \(to)" }
}

/// A batch a step hands out: a range of the slice's scan order, or the slice's waiting tokens
/// (those of its confirmed batches that were still failing) sent again, the `round`-th time.
/// The step script takes `description` back to confirm it.
public enum FanoutBatch: Hashable, Sendable, CustomStringConvertible {
    case range(FanoutBatchRange)
    case waiting(round: Int)

    /// From the script's text; nil when it is neither.
    public init?(_ text: String) {
        if text.hasPrefix("w") {
            guard let round = Int(text.dropFirst()), round >= 1 else { return nil }
            self = .waiting(round: round)
        } else {
            guard let range = FanoutBatchRange(text) else { return nil }
            self = .range(range)
        }
    }

    public var description: String {
        switch self {
        case .range(let range): range.description
        case .waiting(let round): "w\(round)"
        }
    }
}

/// A token of a confirmed batch that is still failing: it waits for the end of its slice's range
/// and goes again then. `quiet`: its alert may have shown already (its request got no answer, or
/// its batch was itself sent again after a takeover), so it goes again without it; a refused
/// request (429, 5xx) of a first send goes again as it was. `uncounted`: its tries that met an
/// APNs outage, which don't count against its `fanout.token_attempts` (its attempt in round `r`
/// of waiting tokens is `r + 1 - uncounted`).
public struct FanoutWaiting: Hashable, Sendable {
    public var activity: String
    public var quiet: Bool
    public var uncounted: Int

    public init(activity: String, quiet: Bool, uncounted: Int = 0) {
        self.activity = activity
        self.quiet = quiet
        self.uncounted = max(0, uncounted)
    }

    /// As the record keeps it, in a space-separated list: `?` before a quiet one, then ` !<n>`
    /// after it when it has uncounted tries (activity ids hold neither, nor a space:
    /// `ValueParsing.isIdentifier`). The count is a word of its own so that a worker older than
    /// it, which reads every word as an activity, finds no registration under `!<n>` and skips
    /// it, instead of dropping the token.
    public var encoded: String { (quiet ? "?" : "") + activity + (uncounted > 0 ? " !\(uncounted)" : "") }

    /// The tokens of a list of `encoded` words (`w<j>`), in order; nil when a word is neither an
    /// activity nor a count after one.
    public static func list<Word: StringProtocol>(_ words: some Sequence<Word>) -> [FanoutWaiting]? {
        var out: [FanoutWaiting] = []
        for word in words {
            if word.first == "!" {
                guard let n = Int(word.dropFirst()), n >= 0, !out.isEmpty else { return nil }
                out[out.count - 1].uncounted = n
                continue
            }
            let quiet = word.first == "?"
            let activity = word.dropFirst(quiet ? 1 : 0)
            guard !activity.isEmpty else { return nil }
            out.append(FanoutWaiting(activity: String(activity), quiet: quiet))
        }
        return out
    }

    public static func list(_ text: String) -> [FanoutWaiting]? { list(text.split(separator: " ")) }

    /// The same token going without its alert.
    public var quietly: FanoutWaiting { FanoutWaiting(activity: activity, quiet: true, uncounted: uncounted) }
}

/// `FanoutScripts.create`: a fan-out of an event (or a budget flush) for one key, or the one of
/// that name already there.
public struct FanoutCreate: Sendable {
    public var keys: FanoutKeys
    /// The fan-out's name (`<stream>/<entry id>` of its event; `flush:<tier>:<state ms>:<now ms>`).
    public var gen: String
    /// The time of the state it sends (the event's): an older one than the key's newest is refused.
    public var millis: Int64
    /// Tokens per slice (about), and the most slices (`SliceMath`).
    public var sliceSize: Int
    public var maxSlices: Int
    /// How long the record and the key's `gen` live (s).
    public var ttlSeconds: Int
    /// The push at 10 (with its alert), and at 5 when it differs (without it).
    public var payload: [UInt8]
    public var quiet: [UInt8]
    /// The highest priority of any tier (`pri`), and each tier's (`AudiencePriorities.encodedTiers`).
    public var priority: Int
    public var tiers: String
    /// The environments whose channel had the push (their devices get nothing per token).
    public var live: [APNsEnvironment]
    /// The entry to acknowledge once every slice is final ('' for a flush: its record goes then).
    public var stream: String
    public var entryID: String
    /// A flush yields to a fan-out of the same time under way (it may be another audience's, whose
    /// devices it would otherwise take over).
    public var flush: Bool
    /// A flush: the key's newest fan-out as the caller read it (`{key}:gen`'s `name`) before
    /// deciding; nil when there was none. The script reads that one's record (declared), and
    /// yields to any other that is the newest by then.
    public var newest: String?
    /// The broadcast isn't answered yet: `b` 0 (the caller records it, and the final `live`).
    public var broadcastPending: Bool

    public init(keys: FanoutKeys, gen: String, millis: Int64, sliceSize: Int, maxSlices: Int = SliceMath.maxSlices, ttlSeconds: Int,
                payload: [UInt8], quiet: [UInt8], priority: Int, tiers: String, live: [APNsEnvironment], stream: String,
                entryID: String, flush: Bool, newest: String? = nil, broadcastPending: Bool) {
        self.keys = keys
        self.gen = gen
        self.millis = millis
        self.sliceSize = sliceSize
        self.maxSlices = maxSlices
        self.ttlSeconds = ttlSeconds
        self.payload = payload
        self.quiet = quiet
        self.priority = priority
        self.tiers = tiers
        self.live = live
        self.stream = stream
        self.entryID = entryID
        self.flush = flush
        self.newest = newest
        self.broadcastPending = broadcastPending
    }

    /// Every key the script reads or writes: the key's `gen`, this fan-out's record, the audience,
    /// and for a flush the record of the newest fan-out it read.
    public var declaredKeys: [String] {
        var declared = [keys.gen, keys.fan(gen), keys.meta]
        if flush, let newest { declared.append(keys.fan(newest)) }
        return declared
    }

    public var command: RedisCommand {
        .script(FanoutScripts.create, keys: declaredKeys, args: [
            gen, millis, sliceSize, maxSlices, ttlSeconds, payload, priority, live.map(\.rawValue).joined(separator: " "), stream, entryID,
            quiet == payload ? [] : quiet, tiers, flush ? "1" : "0", flush ? newest ?? "" : "", broadcastPending ? "0" : "1",
        ])
    }
}

/// What `FanoutScripts.create` answered.
public enum FanoutCreateReply: Equatable, Sendable {
    /// Created with `slices` slices for an audience of `tokens` registrations.
    case new(slices: Int, tokens: Int)
    /// It exists (the entry delivered again): `left` slices without a final outcome (0: over, or
    /// its record is gone), whether its broadcast is recorded (`b`) and its slices queued (`q`).
    case exists(left: Int, slices: Int, broadcastDone: Bool, queued: Bool)
    /// A newer fan-out of the key is under way (or, for a flush, one of the same time; or this one
    /// was superseded before and is never started again).
    case older
    /// The key has no tokens: the fan-out is named the key's newest, and no record is written.
    case none

    public init(_ reply: RESPValue) throws {
        if let e = reply.errorMessage { throw RedisError(.server, "fan-out create: \(e)") }
        guard let parts = reply.array, let status = parts.first?.string else {
            throw RedisError(.unexpectedReply, "fan-out create: unexpected reply \(reply)")
        }
        func int(_ i: Int) -> Int { i < parts.count ? Int(parts[i].int ?? 0) : 0 }
        switch status {
        case "new": self = .new(slices: max(1, int(1)), tokens: int(2))
        case "exists": self = .exists(left: int(1), slices: max(1, int(2)), broadcastDone: parts.count > 3 && parts[3].string == "1",
                                      queued: parts.count > 4 && parts[4].string == "1")
        case "older": self = .older
        case "none": self = .none
        default: throw RedisError(.unexpectedReply, "fan-out create: unexpected status \(status)")
        }
    }
}

/// `FanoutScripts.step`: one step of one slice — confirm the caller's last batch, hand out the next.
public struct FanoutStepCall: Sendable {
    public var keys: FanoutKeys
    public var gen: String
    /// The slice, and the fan-out's slice count (0: the record's, for a step pipelined behind the
    /// create that decides it).
    public var slice: Int
    public var slices: Int
    /// Tokens to hand out (about: a batch ends with the scan call that reaches it); 0: confirm
    /// only, the caller stops here (`paused`).
    public var want: Int
    /// The caller's clock (ms): leases are compared with it.
    public var nowMillis: Int64
    /// How long the batch handed out is the caller's.
    public var leaseMillis: Int
    /// The caller's last batch, sent: recorded as done. nil: none.
    public var confirm: FanoutBatch?
    /// Tokens of the confirmed batch still failing: they wait (`FanoutScripts.step`).
    public var failing: [FanoutWaiting]
    /// How long they wait at least (ms).
    public var retryAfterMillis: Int64
    /// How long the record is kept once over (s), for its entry's acknowledgement.
    public var keepSeconds: Int
    /// The bucket width the caller's last `send` saw (0: none), so the scan starts wide.
    public var width: Int64
    /// The caller's own scan of the next batch (`FanoutScan`), taken when it starts where the
    /// slice stands.
    public var scanned: FanoutScanned?

    public init(keys: FanoutKeys, gen: String, slice: Int, slices: Int, want: Int, nowMillis: Int64, leaseMillis: Int,
                confirm: FanoutBatch? = nil, failing: [FanoutWaiting] = [], retryAfterMillis: Int64 = 0, keepSeconds: Int = 3600, width: Int64 = 0,
                scanned: FanoutScanned? = nil) {
        self.keys = keys
        self.gen = gen
        self.slice = slice
        self.slices = slices
        self.want = want
        self.nowMillis = nowMillis
        self.leaseMillis = leaseMillis
        self.confirm = confirm
        self.failing = failing
        self.retryAfterMillis = retryAfterMillis
        self.keepSeconds = keepSeconds
        self.width = width
        self.scanned = scanned
    }

    public var command: RedisCommand {
        .script(FanoutScripts.step, keys: [keys.gen, keys.fan(gen), keys.inflight, keys.meta], args: [
            gen, slice, slices, want, nowMillis, leaseMillis, confirm?.description ?? "", keepSeconds, width,
            failing.map(\.encoded).joined(separator: " "), retryAfterMillis, scanned?.description ?? "",
        ])
    }
}

/// Why a batch handed out may have reached its devices before.
public enum FanoutResent: Int, Sendable, Equatable {
    /// It is new.
    case fresh = 0
    /// Its worker stopped with it in flight (the lease ended): APNs may have had some of it.
    case afterTakeover = 1
    /// The slice started again after a Redis restart: any token may have had this state.
    case afterRestart = 2
}

/// What `FanoutScripts.step` answered.
public enum FanoutStepReply: Sendable {
    /// A batch to send (`batch`, to confirm at the next step), `resent` when it may have gone out
    /// before; `width` the bucket width seen (for the next step); `rows` each token's registration
    /// (`{key}:meta` value, ending with the token); `waiting`: in a batch of waiting tokens, each
    /// one as it waited (whether it goes without the alert, its uncounted tries), by activity.
    /// `left`: slices of the fan-out not final.
    case send(left: Int, batch: FanoutBatch, resent: FanoutResent, width: Int64, rows: [(activity: String, meta: [UInt8])],
              waiting: [String: FanoutWaiting])
    /// The slice's range is sent and its waiting tokens may go again in `msLeft`.
    case later(msLeft: Int64)
    /// This call ended the slice (the confirmed batch was its last, or nothing was left).
    case finished(left: Int)
    /// The slice had ended before.
    case done(left: Int)
    /// A newer fan-out is the key's: this slice ended without sending.
    case superseded(left: Int)
    /// Another worker's batch of this slice is in flight, its lease ending in `msLeft`.
    case busy(msLeft: Int64)
    /// An older fan-out's batch is in flight: this one waits (within that lease).
    case wait(left: Int)
    /// The fan-out is over and cleared (or never had a record).
    case gone
    /// Redis restarted since the fan-out began: every slice starts again (`slices` of them; the
    /// caller queues the others again, and goes on with this one without a confirm).
    case relaid(slices: Int)
    /// `want` 0: confirmed, nothing handed out.
    case paused(left: Int)

    /// Slices of the fan-out not final, as the reply says (`relaid`: all; `busy`, `gone`, `later`: 0).
    public var left: Int {
        switch self {
        case .send(let left, _, _, _, _, _), .finished(let left), .done(let left), .superseded(let left), .wait(let left), .paused(let left): left
        case .relaid(let slices): slices
        case .busy, .gone, .later: 0
        }
    }

    /// `scan`: the caller's own scan that the call carried; its rows are the batch's when the
    /// script took it.
    public init(_ reply: RESPValue, scan: FanoutScan? = nil) throws {
        if let e = reply.errorMessage { throw RedisError(.server, "fan-out step: \(e)") }
        guard let parts = reply.array, parts.count >= 2, let status = parts[0].string, let second = parts[1].int else {
            throw RedisError(.unexpectedReply, "fan-out step: unexpected reply \(reply)")
        }
        let left = Int(second)
        switch status {
        case "send":
            guard parts.count >= 7, let text = parts[2].string, let batch = FanoutBatch(text), let entries = parts[6].array,
                  let resent = parts[3].int.flatMap({ FanoutResent(rawValue: Int($0)) }), let width = parts[4].int, let chunks = parts[5].array else {
                throw RedisError(.unexpectedReply, "fan-out step: a send without its batch: \(String(describing: reply).prefix(300))")
            }
            if parts.count > 7, parts[7].int == 1 {
                guard let scan, case .range(let range) = batch, range == FanoutBatchRange(from: scan.scanned.from, to: scan.scanned.to) else {
                    throw RedisError(.unexpectedReply, "fan-out step: took a scan the call didn't carry: \(text)")
                }
                self = .send(left: left, batch: batch, resent: resent, width: width, rows: scan.rows, waiting: [:])
                return
            }
            // The scan's own replies, as they came: activity, meta, activity, meta, …
            var rows: [(activity: String, meta: [UInt8])] = []
            for chunk in chunks {
                guard let pairs = chunk.array, pairs.count % 2 == 0 else { throw RedisError(.unexpectedReply, "fan-out step: a batch's chunk: \(String(describing: chunk).prefix(300))") }
                FanoutScan.appendRows(pairs, to: &rows)
            }
            let words = entries.compactMap(\.string)
            guard words.count == entries.count, let list = FanoutWaiting.list(words) else {
                throw RedisError(.unexpectedReply, "fan-out step: waiting tokens: \(String(describing: parts[6]).prefix(200))")
            }
            let waiting = Dictionary(list.map { ($0.activity, $0) }, uniquingKeysWith: { _, b in b })
            self = .send(left: left, batch: batch, resent: resent, width: width, rows: rows, waiting: waiting)
        case "finished": self = .finished(left: left)
        case "done": self = .done(left: left)
        case "superseded": self = .superseded(left: left)
        case "busy": self = .busy(msLeft: Int64(left))
        case "later": self = .later(msLeft: Int64(left))
        case "wait": self = .wait(left: left)
        case "gone": self = .gone
        case "relaid": self = .relaid(slices: left)
        case "paused": self = .paused(left: left)
        default: throw RedisError(.unexpectedReply, "fan-out step: unexpected status \(status)")
        }
    }
}

/// `FanoutScripts.abandon`: a slice whose attempts ran out gets its final outcome unsent.
public struct FanoutAbandon: Sendable {
    public var keys: FanoutKeys
    public var gen: String
    public var slice: Int
    /// How long the record is kept once over (s).
    public var keepSeconds: Int

    public init(keys: FanoutKeys, gen: String, slice: Int, keepSeconds: Int = 3600) {
        self.keys = keys
        self.gen = gen
        self.slice = slice
        self.keepSeconds = keepSeconds
    }

    public var command: RedisCommand {
        .script(FanoutScripts.abandon, keys: [keys.fan(gen), keys.inflight], args: [gen, slice, keepSeconds])
    }
}

/// What `FanoutScripts.abandon` answered.
public enum FanoutAbandonReply: Equatable, Sendable {
    /// The slice is final now; `left` slices of the fan-out are not.
    case abandoned(left: Int)
    /// It was final already (or the record is gone): nothing changed.
    case alreadyFinal

    public init(_ reply: RESPValue) throws {
        if let e = reply.errorMessage { throw RedisError(.server, "fan-out abandon: \(e)") }
        guard let n = reply.int else { throw RedisError(.unexpectedReply, "fan-out abandon: unexpected reply \(reply)") }
        self = n < 0 ? .alreadyFinal : .abandoned(left: Int(n))
    }
}

/// `FanoutScripts.renew`: a batch's lease extended (never shortened) while it is still there.
public struct FanoutRenew: Sendable {
    public var inflightKey: String
    public var gen: String
    public var slice: Int
    /// The lease's new end (ms, the caller's clock).
    public var leaseEndMillis: Int64

    public init(inflightKey: String, gen: String, slice: Int, leaseEndMillis: Int64) {
        self.inflightKey = inflightKey
        self.gen = gen
        self.slice = slice
        self.leaseEndMillis = leaseEndMillis
    }

    /// The batch's member in `{key}:inflight`.
    public var member: String { "\(gen)|\(slice)" }

    public var command: RedisCommand { .script(FanoutScripts.renew, keys: [inflightKey], args: [member, leaseEndMillis]) }
}

/// What `FanoutScripts.renew` answered.
public enum FanoutRenewReply: Equatable, Sendable {
    case renewed
    /// The lease is gone (confirmed, taken over, or dropped once it ended): the batch isn't the caller's.
    case gone

    public init(_ reply: RESPValue) throws {
        if let e = reply.errorMessage { throw RedisError(.server, "renewing a slice's lease: \(e)") }
        switch reply.int {
        case 1: self = .renewed
        case 0: self = .gone
        default: throw RedisError(.unexpectedReply, "renewing a slice's lease: unexpected reply \(reply)")
        }
    }
}

/// `FanoutScripts.mark`: fields of a fan-out's record set, only while it exists.
public struct FanoutMark: Sendable {
    public enum Field: Sendable, Equatable {
        /// `b` 1 and `live`: the broadcast is answered, delivered in these environments.
        case broadcast(live: [APNsEnvironment])
        /// `q` 1: slices 1…n-1 are on the slices stream.
        case queued
        /// `spent`: the tiers (raw values) whose budget decision took a token; none once settled.
        case spent(tiers: [String])
        /// `s10:<tier>` 1: a device of each of these tiers (raw values) was sent the push at 10.
        case sentAtTen(tiers: [String])
    }

    public var record: String
    public var field: Field

    public init(record: String, _ field: Field) {
        self.record = record
        self.field = field
    }

    public var command: RedisCommand {
        let args: [any RedisArgument]
        switch field {
        case .broadcast(let live): args = ["b", 1, "live", live.map(\.rawValue).joined(separator: " ")]
        case .queued: args = ["q", 1]
        case .spent(let tiers): args = ["spent", tiers.joined(separator: " ")]
        case .sentAtTen(let tiers): args = tiers.flatMap { ["s10:\($0)", "1"] }
        }
        return .script(FanoutScripts.mark, keys: [record], args: args)
    }
}

/// What `FanoutScripts.mark` answered.
public enum FanoutMarkReply: Equatable, Sendable {
    case marked
    /// The record is gone (finished and deleted meanwhile): nothing was written.
    case gone

    public init(_ reply: RESPValue) throws {
        if let e = reply.errorMessage { throw RedisError(.server, "marking a fan-out: \(e)") }
        switch reply.int {
        case 1: self = .marked
        case 0: self = .gone
        default: throw RedisError(.unexpectedReply, "marking a fan-out: unexpected reply \(reply)")
        }
    }
}
