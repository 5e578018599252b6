import ActivityCastCore
import RedisClient

/// Lua scripts that apply registrations in timestamp order. Several workers apply registrations
/// concurrently and streams can be replayed, so every write compares the registration's `ts`
/// with the one stored beside the value and never lets an older registration overwrite a newer
/// one. Each script touches one hash slot (one device, or one activity key).
enum RegistrationScripts {
    /// KEYS[1] = device hash. ARGV = ts, ttl seconds, field, value, and optionally a time before
    /// which the device's `act:` fields are dropped (given with an `act:` field).
    /// Writes `field = "ts value"` unless the stored one is newer or the device was unregistered
    /// later. Returns 1 if written, 0 if ignored as stale.
    ///
    /// `act:<key> <activity>` fields only tell `forgetDevice` which activity tokens to remove, so
    /// an activity's unregister (value `0`) deletes its field rather than keeping a tombstone
    /// (the key's own tombstone in `{key}:meta` keeps a late older registration from bringing
    /// the token back), and writing an `act:` field drops those older than the activity TTL
    /// (their tokens have expired): the hash holds at most the activities registered within one
    /// activity TTL and not ended, however long the device stays active.
    static let deviceField = RedisScript("""
    local ts = tonumber(ARGV[1])
    local gone = tonumber(redis.call('HGET', KEYS[1], 'gone') or '0')
    if ts < gone then return 0 end
    local cur = redis.call('HGET', KEYS[1], ARGV[3])
    if cur then
      local t = tonumber(string.match(cur, '^%d+'))
      if t and t > ts then return 0 end
    end
    if ARGV[4] == '0' and string.sub(ARGV[3], 1, 4) == 'act:' then
      redis.call('HDEL', KEYS[1], ARGV[3])
    else
      redis.call('HSET', KEYS[1], ARGV[3], ARGV[1] .. ' ' .. ARGV[4])
    end
    if ARGV[5] then
      local before = tonumber(ARGV[5])
      local all = redis.call('HGETALL', KEYS[1])
      for i = 1, #all, 2 do
        if string.sub(all[i], 1, 4) == 'act:' then
          local t = tonumber(string.match(all[i + 1], '^%d+'))
          if t and t < before then redis.call('HDEL', KEYS[1], all[i]) end
        end
      end
    end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return 1
    """)

    /// KEYS[1] = device hash. ARGV = ts, ttl seconds, then name/value pairs of the settings given.
    /// Each setting keeps the time it was set (`ts:<name>`; `ts` for hashes written before) and
    /// takes the newest value given for it: a registration setting `env` doesn't make an older
    /// one setting `broadcast` stale. Returns how many settings were written.
    static let deviceSettings = RedisScript("""
    local ts = tonumber(ARGV[1])
    local gone = tonumber(redis.call('HGET', KEYS[1], 'gone') or '0')
    if ts < gone then return 0 end
    local before = tonumber(redis.call('HGET', KEYS[1], 'ts') or '0')
    local n = 0
    for i = 3, #ARGV, 2 do
      local cur = tonumber(redis.call('HGET', KEYS[1], 'ts:' .. ARGV[i]) or before)
      if cur <= ts then
        redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1], 'ts:' .. ARGV[i], ARGV[1])
        n = n + 1
      end
    end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return n
    """)

    /// KEYS[1] = device hash. ARGV = ts, ttl seconds.
    /// Forgets the device as of `ts`: keeps only a `gone` tombstone (so older registrations that
    /// arrive late are ignored) and returns what the device had, for the caller to clean up:
    /// a flat list of field names (`follow:<target>`, `start:<type>`, `act:<key> <activity>`)
    /// whose values were live. Returns -1 if a newer unregister already happened. The list stays
    /// with the tombstone (`cleanup:<ts>`, JSON) until the cleanup is done (the entry's
    /// acknowledgement deletes it): the same unregister applied again — its cleanup interrupted,
    /// its entry delivered again — gets it again instead of an empty hash's nothing.
    static let forgetDevice = RedisScript("""
    local ts = tonumber(ARGV[1])
    local gone = tonumber(redis.call('HGET', KEYS[1], 'gone') or '0')
    if ts < gone then return -1 end
    if ts == gone then
      local saved = redis.call('HGET', KEYS[1], 'cleanup:' .. ARGV[1])
      if saved then return cjson.decode(saved) end
    end
    local all = redis.call('HGETALL', KEYS[1])
    local live = {}
    for i = 1, #all, 2 do
      local f, v = all[i], all[i + 1]
      if f ~= 'gone' and string.sub(f, 1, 8) ~= 'cleanup:' and f ~= 'ts' and f ~= 'env' and f ~= 'tier' and f ~= 'broadcast' and string.sub(f, 1, 3) ~= 'ts:' then
        local t = tonumber(string.match(v, '^%d+')) or 0
        if t <= ts and not string.match(v, ' 0$') then table.insert(live, f) end
      end
    end
    redis.call('DEL', KEYS[1])
    redis.call('HSET', KEYS[1], 'gone', ARGV[1], 'cleanup:' .. ARGV[1], #live == 0 and '[]' or cjson.encode(live))
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return live
    """)

    /// KEYS[1] = a set, KEYS[2] = its `member → "ts 1|0"` hash (same slot). ARGV = member, ts,
    /// 1 (add) or 0 (remove). Adds or removes unless a newer change for the member is recorded,
    /// so two workers applying follow and unfollow (or a device unregister) concurrently end in
    /// the newest state whatever order their writes land in. Returns 1 or 0.
    static let membership = RedisScript("""
    local cur = redis.call('HGET', KEYS[2], ARGV[1])
    if cur then
      local t = tonumber(string.match(cur, '^%d+'))
      if t and t > tonumber(ARGV[2]) then return 0 end
    end
    if ARGV[3] == '1' then redis.call('SADD', KEYS[1], ARGV[1]) else redis.call('SREM', KEYS[1], ARGV[1]) end
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
    return 1
    """)

    /// KEYS[1] = `{key}:tokens`, KEYS[2] = `{key}:meta`, KEYS[3] = `{key}:by-token`, KEYS[4] =
    /// `{key}:direct`. ARGV = activity, token, ts, meta, ttl.
    /// Stores the activity's update token unless a newer token (or a newer unregister) for the
    /// same activity is stored: tokens rotate, and the newest wins. A token is held by one
    /// activity of the key: registered again under another (a second device id for the same
    /// phone), the older registration gives it up (a tombstone in meta); an older one arriving
    /// late is ignored. Returns 0 (ignored), 1 (stored: an activity new to the key) or 2 (stored:
    /// the activity had a token — rotated or registered again —, so it was being kept current).
    static let activityToken = RedisScript(AudienceLayout.directLua + """
    local ts = tonumber(ARGV[3])
    local cur = redis.call('HGET', KEYS[2], ARGV[1])
    if cur then
      local t = tonumber(string.match(cur, '^%d+'))
      if t and t > ts then return 0 end
    end
    local owner = redis.call('HGET', KEYS[3], ARGV[2])
    if owner and owner ~= ARGV[1] and redis.call('HGET', KEYS[1], owner) == ARGV[2] then
      local om = redis.call('HGET', KEYS[2], owner)
      local ot = om and tonumber(string.match(om, '^%d+')) or 0
      if ot > ts then return 0 end
      redis.call('HDEL', KEYS[1], owner)
      redis.call('HSET', KEYS[2], owner, ARGV[3] .. ' -')
      redis.call('HDEL', KEYS[4], owner)
    end
    local previous = redis.call('HGET', KEYS[1], ARGV[1])
    local answer = previous and 2 or 1
    if previous and previous ~= ARGV[2] and redis.call('HGET', KEYS[3], previous) == ARGV[1] then redis.call('HDEL', KEYS[3], previous) end
    redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
    redis.call('EXPIRE', KEYS[3], ARGV[5])
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    -- The token again at the end of meta: a fan-out reads everything it sends from meta alone.
    local value = ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[2]
    redis.call('HSET', KEYS[2], ARGV[1], value)
    direct_keep(KEYS[2], KEYS[4], ARGV[1], value)
    redis.call('EXPIRE', KEYS[1], ARGV[5])
    redis.call('EXPIRE', KEYS[2], ARGV[5])
    redis.call('EXPIRE', KEYS[4], ARGV[5])
    return answer
    """)

    /// KEYS[1] = `{key}:tokens`, KEYS[2] = `{key}:meta`, KEYS[3] = `{key}:by-token`, KEYS[4] =
    /// `{key}:direct`. ARGV = activity, ts, ttl. Removes the activity's token as of `ts`, leaving a tombstone in meta.
    /// Returns 1 or 0.
    static let forgetActivity = RedisScript("""
    local cur = redis.call('HGET', KEYS[2], ARGV[1])
    if cur then
      local t = tonumber(string.match(cur, '^%d+'))
      if t and t > tonumber(ARGV[2]) then return 0 end
    end
    local token = redis.call('HGET', KEYS[1], ARGV[1])
    if token and redis.call('HGET', KEYS[3], token) == ARGV[1] then redis.call('HDEL', KEYS[3], token) end
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' -')
    redis.call('HDEL', KEYS[4], ARGV[1])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
    return 1
    """)
}
