import ActivityCastCore
import APNs
import APNsCore
import Foundation
import RedisClient

/// The fleet's send rate per app: a token bucket in Redis (`<prefix>:rate:<bundle id>`) that
/// every worker takes from before each batch of requests, so N workers together stay under
/// `perSecond`. A 429 from APNs halves the rate for `tightenFor` (any worker's 429 tightens it
/// for the fleet). Off when `perSecond` is 0.
public struct RateGuardPolicy: Sendable, Equatable {
    /// Requests per second for the whole fleet, per app (0: no guard).
    public var perSecond: Int
    /// Requests the bucket holds: a burst (at least one batch).
    public var burst: Int
    /// How long a 429 halves the rate.
    public var tightenFor: Duration

    public init(perSecond: Int = 0, burst: Int? = nil, tightenFor: Duration = .seconds(30)) {
        self.perSecond = max(0, perSecond)
        self.burst = max(1, burst ?? max(1, perSecond))
        self.tightenFor = tightenFor
    }

    public var isOn: Bool { perSecond > 0 }
}

public enum RateGuardScripts {
    /// Takes `n` requests' worth, or says how long to wait. One request is 1,000 ticks, so R per
    /// second is R ticks per ms (exact integers, as in `BudgetScripts.decide`).
    /// KEYS[1] = guard hash (`ticks`, `refilled_at`, `tight_until`, counters `waits`, `tightened`).
    /// ARGV: n, per second, burst, now ms (`-`: Redis's clock), ttl s.
    /// Returns 0 when taken, else the ms to wait before asking again.
    public static let take = RedisScript(BudgetScripts.bucketLua + """
    local n, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
    local now = clock(ARGV[4])
    local cap = burst * 1000
    if n > burst then n = burst end
    local h = redis.call('HMGET', KEYS[1], 'ticks', 'refilled_at', 'tight_until')
    local tight = tonumber(h[3]) or 0
    -- Tightened after a 429: half the rate (at least one request per second).
    local eff = rate
    if tight > now then eff = math.max(1, math.floor(rate / 2)) end
    local ticks, at = refill(tonumber(h[1]), tonumber(h[2]), now, cap, eff)
    local wait = 0
    if ticks >= n * 1000 then
      ticks = ticks - n * 1000
    else
      wait = math.ceil((n * 1000 - ticks) / eff)
      redis.call('HINCRBY', KEYS[1], 'waits', 1)
    end
    redis.call('HSET', KEYS[1], 'ticks', fmt(ticks), 'refilled_at', fmt(at))
    redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
    return wait
    """)

    /// A 429: the fleet's rate is halved until `now + for`. KEYS[1] = guard hash. ARGV: for ms,
    /// now ms (`-`: Redis's clock). Returns 1.
    public static let tighten = RedisScript(BudgetScripts.bucketLua + """
    local until_ = clock(ARGV[2]) + tonumber(ARGV[1])
    local cur = tonumber(redis.call('HGET', KEYS[1], 'tight_until') or '0')
    if until_ > cur then redis.call('HSET', KEYS[1], 'tight_until', fmt(until_)) end
    redis.call('HINCRBY', KEYS[1], 'tightened', 1)
    return 1
    """)
}

extension SendRole {
    /// Waits until the fleet's rate allows `count` more requests (in pieces of at most the burst).
    func admit(_ count: Int) async throws {
        let policy = configuration.rateGuard
        guard policy.isOn, count > 0 else { return }
        let key = keys.rateGuard(bundleID: configuration.bundleID)
        var left = count
        while left > 0 {
            let n = min(left, policy.burst)
            let reply = try await redis.send(.script(RateGuardScripts.take, keys: [key], args: [n, policy.perSecond, policy.burst, "-", 3600]))
            if let e = reply.errorMessage { throw RedisError(.server, "send-rate guard: \(e)") }
            let wait = reply.int ?? 0
            if wait <= 0 { left -= n; continue }
            stats.rateWaits.add(1, ordering: .relaxed)
            try await Task.sleep(for: .milliseconds(min(wait, 1000)))
        }
    }

    /// Sends `tokens` as the fleet's rate allows: each piece (at most the burst) goes out as soon
    /// as it is admitted, so what APNs receives follows the rate too.
    func sendAdmitted(_ client: APNsClient, _ payload: [UInt8], _ tokens: [String], priority: Int) async throws -> [APNsResult] {
        let policy = configuration.rateGuard
        guard policy.isOn else {
            return await client.sendLiveActivity(payload: payload, to: tokens, bundleID: configuration.bundleID, priority: priority,
                                                 successIDs: false)
        }
        var results: [APNsResult] = []
        results.reserveCapacity(tokens.count)
        var start = 0
        while start < tokens.count {
            let end = min(start + policy.burst, tokens.count)
            try await admit(end - start)
            results += await client.sendLiveActivity(payload: payload, to: Array(tokens[start..<end]), bundleID: configuration.bundleID,
                                                     priority: priority, successIDs: false)
            start = end
        }
        return results
    }

    /// APNs answered 429: the fleet slows down for a while.
    func tightenRate() async {
        let policy = configuration.rateGuard
        guard policy.isOn else { return }
        _ = try? await redis.send(.script(RateGuardScripts.tighten, keys: [keys.rateGuard(bundleID: configuration.bundleID)],
                                          args: [policy.tightenFor.milliseconds, "-"]))
    }
}
