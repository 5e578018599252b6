import RedisClient

/// Consumer-group upkeep that must be atomic across workers.
enum GroupScripts {
    /// KEYS[1] = stream. ARGV = group, id.
    /// Creates the group (and the stream) reading after `id`; if another worker created it first,
    /// moves its last-delivered id forward to `id` when that is further, never back. Returns 1
    /// (created), 2 (moved forward) or 0 (already there).
    static let createOrAdvance = RedisScript("""
    local ok = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
    if type(ok) == 'table' and ok.err then
      if string.sub(ok.err, 1, 9) ~= 'BUSYGROUP' then return ok end
      local function parse(id)
        local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
        return tonumber(ms or '0'), tonumber(seq or '0')
      end
      for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
        local name, last
        for i = 1, #g, 2 do
          if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
        end
        if name == ARGV[1] then
          local ams, aseq = parse(last)
          local bms, bseq = parse(ARGV[2])
          if bms > ams or (bms == ams and bseq > aseq) then
            redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], ARGV[2])
            return 2
          end
          return 0
        end
      end
      return 0
    end
    return 1
    """)

    /// KEYS[1] = the positions hash. ARGV = stream, id.
    /// Records that the group has delivered `stream` up to `id` unless a further id is recorded:
    /// where to recreate the group if it is destroyed. Returns 1 if moved forward.
    static let advancePosition = RedisScript("""
    local function parse(id)
      local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
      return tonumber(ms or '0'), tonumber(seq or '0')
    end
    local cur = redis.call('HGET', KEYS[1], ARGV[1])
    if cur then
      local ams, aseq = parse(cur)
      local bms, bseq = parse(ARGV[2])
      if not (bms > ams or (bms == ams and bseq > aseq)) then return 0 end
    end
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    return 1
    """)
}

extension GroupScripts {
    /// `group`'s entry in an `XINFO GROUPS` reply: nil when the stream has no such group.
    static func group(_ group: String, inXInfoGroups reply: RESPValue) -> (name: String, lastDelivered: String?)? {
        for g in reply.array ?? [] {
            let items = g.array ?? []
            var name: String?, last: String?
            var i = 0
            while i + 1 < items.count {
                if items[i].string == "name" { name = items[i + 1].string }
                if items[i].string == "last-delivered-id" { last = items[i + 1].string }
                i += 2
            }
            if name == group { return (group, last) }
        }
        return nil
    }
}
