/// How a key's registrations are kept for its pushes (docs/schema.md): `{key}:meta` holds every
/// activity's `ts device env tier broadcast token` (`ts -` once unregistered) and is what a
/// fan-out scans; `{key}:direct` (`RedisKeys.direct`) holds the same values for the live ones
/// whose own `broadcast` flag isn't `1` — the devices a broadcast doesn't reach by their
/// registration — so an event whose every channel is live learns in one `HLEN` that nobody
/// needs a per-token push. Every script that writes `meta` keeps `direct` beside it.
public enum AudienceLayout {
    /// Lua for the scripts that write `meta`: `direct_keep(meta, direct, activity, value)` after
    /// writing `value` for `activity`. A key whose `direct` isn't kept yet (no `_` field:
    /// registered before it existed) gets it filled from `meta` first, once, so it never
    /// misses a device registered earlier.
    public static let directLua = """
    local function direct_live(v)
      local n, flag = 0, nil
      for w in string.gmatch(v, '%S+') do
        n = n + 1
        if n == 5 then flag = w end
      end
      return n >= 5 and flag ~= '1'
    end
    local function direct_keep(meta, direct, activity, value)
      if redis.call('HEXISTS', direct, '_') == 0 then
        local all = redis.call('HGETALL', meta)
        for i = 1, #all, 2 do
          if all[i] ~= activity and direct_live(all[i + 1]) then redis.call('HSET', direct, all[i], all[i + 1]) end
        end
        redis.call('HSET', direct, '_', '1')
      end
      if direct_live(value) then redis.call('HSET', direct, activity, value) else redis.call('HDEL', direct, activity) end
    end

    """
}
