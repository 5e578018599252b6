import ActivityCastSettings
import Foundation
import Logging
import RedisClient
import Synchronization

enum TrimScripts {
    /// KEYS[1] = stream. ARGV: retention ms, retention entries, now ms ('' : Redis's clock).
    /// Removes what every group has acknowledged: ids below every group's last-delivered id and
    /// below every group's oldest pending entry, never past either, older than the retention and
    /// never more than leaves the retention's entries (`XTRIM MINID ~ … LIMIT`: whole stream nodes
    /// only, so it may keep a little more). A stream no group reads is left alone.
    /// Returns {removed, cut id ('' when none), length after}.
    static let trim = RedisScript("""
    local len = redis.call('XLEN', KEYS[1])
    local keep = tonumber(ARGV[2])
    if len <= keep then return {0, '', len} end
    local function parse(id)
      local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
      return tonumber(ms or '0'), tonumber(seq or '0')
    end
    local function less(a, b)
      local am, as = parse(a)
      local bm, bs = parse(b)
      return am < bm or (am == bm and as < bs)
    end
    local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
    if #groups == 0 then return {0, '', len} end
    local cut
    for _, g in ipairs(groups) do
      local name, last, pending
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i + 1]
        elseif g[i] == 'last-delivered-id' then last = g[i + 1]
        elseif g[i] == 'pending' then pending = tonumber(g[i + 1]) end
      end
      last = last or '0-0'
      if not cut or less(last, cut) then cut = last end
      if pending and pending > 0 then
        local p = redis.call('XPENDING', KEYS[1], name)
        if p[2] and less(p[2], cut) then cut = p[2] end
      end
    end
    local now = tonumber(ARGV[3])
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local horizon = string.format('%.0f', math.max(0, now - tonumber(ARGV[1]))) .. '-0'
    if less(horizon, cut) then cut = horizon end
    local removed = redis.call('XTRIM', KEYS[1], 'MINID', '~', cut, 'LIMIT', len - keep)
    return {removed, cut, len - removed}
    """)

    static func command(stream: String, retention: StreamRetention, nowMillis: Int64? = nil) -> RedisCommand {
        .script(trim, keys: [stream], args: [retention.millis, retention.entries, nowMillis.map { String($0) } ?? ""])
    }
}

/// Trims the streams a worker reads (feeds, registrations, the slices stream) to what the
/// retention keeps, every `retention.interval`, and takes keys whose state has expired (no event
/// or registration for `activity_ttl`: an activity that never had its end) out of the index of
/// keys. Every worker does it: each command is atomic and idempotent, so N workers cost N small
/// scripts an interval, and one that stops leaves no gap.
final class StreamTrimmer: Sendable {
    let redis: RedisConnection
    let streams: [String]
    let retention: StreamRetention
    let keysIndex: String
    let activityTTLMillis: Int64
    let logger: Logger
    /// Entries removed, per stream (metrics).
    let removed: Mutex<[String: Int]>

    init(redis: RedisConnection, streams: [String], retention: StreamRetention, keysIndex: String, activityTTLSeconds: Int, logger: Logger) {
        self.redis = redis
        self.streams = streams
        self.retention = retention
        self.keysIndex = keysIndex
        self.activityTTLMillis = Int64(activityTTLSeconds) * 1000
        self.logger = logger
        self.removed = Mutex(Dictionary(uniqueKeysWithValues: streams.map { ($0, 0) }))
    }

    /// One pass over every stream, in one round trip. A stream that can't be trimmed (Redis
    /// refusing, a key of another type) is logged and tried again next time.
    func trimOnce() async {
        let replies: [RESPValue]
        let expired = Int64(Date().timeIntervalSince1970 * 1000) - activityTTLMillis
        do {
            replies = try await redis.pipeline(streams.map { TrimScripts.command(stream: $0, retention: retention) }
                + [RedisCommand("ZREMRANGEBYSCORE", keysIndex, "-inf", "(\(expired)")])
        } catch {
            logger.debug("trimming streams: Redis unavailable", metadata: ["error": "\(error)"])
            return
        }
        for (stream, reply) in zip(streams, replies) {
            if let e = reply.errorMessage {
                logger.warning("could not trim a stream", metadata: ["stream": "\(stream)", "error": "\(e)"])
                continue
            }
            let parts = reply.array ?? []
            let n = Int(parts.first?.int ?? 0)
            if n > 0 {
                removed.withLock { $0[stream, default: 0] += n }
                logger.debug("trimmed", metadata: ["stream": "\(stream)", "removed": "\(n)",
                                                   "below": "\(parts.count > 1 ? parts[1].string ?? "" : "")",
                                                   "length": "\(parts.count > 2 ? parts[2].int ?? 0 : 0)"])
            }
        }
    }
}
