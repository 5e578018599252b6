import ActivityCastCore
import APNs
import APNsCore
import Foundation
import HTTP2Kit
import Logging
import RedisClient

/// Broadcast channels per key and environment: created once across the fleet when a device on
/// broadcast needs one (`want`: a registration on broadcast, or a fan-out or start that met such
/// a device), never for keys nobody follows; announced on `<prefix>:channels`, recreated after
/// `ChannelNotRegistered`, replaced by per-token sends when Apple's channel limit is reached,
/// deleted after the end.
public final class ChannelRegistry: Sendable {
    let redis: RedisConnection
    let apns: APNsRouter
    let keys: RedisKeys
    let bundleID: String
    let logger: Logger
    let stats: SendStats
    let ttlSeconds: Int
    /// Channels refused for a key limited to the other environment, logged at most once a minute.
    private let conditions: ConditionLog

    public init(redis: RedisConnection, apns: APNsRouter, keys: RedisKeys, bundleID: String, ttlSeconds: Int, logger: Logger, stats: SendStats) {
        self.redis = redis
        self.apns = apns
        self.keys = keys
        self.bundleID = bundleID
        self.ttlSeconds = ttlSeconds
        self.logger = logger
        self.stats = stats
        self.conditions = ConditionLog(logger: logger, interval: .seconds(60))
    }

    func hashKey(_ key: ActivityKey) -> String { keys.channels(key) }
    var announcements: String { keys.channelAnnouncements }
    var expiring: String { keys.channelsExpiring }
    /// Every channel on record (`<env> <key>`, scored by its creation, ms) and every key on
    /// per-token fallback (scored by when it fell back): counts for the metrics without a scan.
    var index: String { keys.channelsIndex }
    var fallbacks: String { keys.channelsFallback }

    /// What the key has in `env`: a channel, the fallback to per-token sends (channel limit), or nothing yet.
    public enum State: Sendable, Equatable {
        case live(ChannelRecord)
        case fallback
        case none
    }

    public func state(_ key: ActivityKey, _ env: APNsEnvironment) async throws -> State {
        try states(try await redis.send(statesCommand(key, [env])), [env])[env] ?? State.none
    }

    /// Reads the key's channel in each of `envs`, and whether one is wanted (one HMGET; it can
    /// share a pipeline).
    func statesCommand(_ key: ActivityKey, _ envs: [APNsEnvironment]) -> RedisCommand {
        RedisCommand("HMGET", [hashKey(key)] + envs.flatMap { [$0.rawValue, "\($0.rawValue):fallback"] } + ["want"])
    }

    /// Whether the reply to `statesCommand(key, envs)` says a device on broadcast wants a channel.
    func wanted(_ reply: RESPValue, _ envs: [APNsEnvironment]) -> Bool {
        (reply.array ?? []).count > 2 * envs.count && reply.array?[2 * envs.count].string == "1"
    }

    /// Records that a device on broadcast needs the key's channel: the key's next event makes it.
    func wantCommands(_ key: ActivityKey) -> [RedisCommand] {
        [RedisCommand("HSET", hashKey(key), "want", 1), RedisCommand("EXPIRE", hashKey(key), ttlSeconds)]
    }

    /// The states in the reply to `statesCommand(key, envs)`.
    func states(_ reply: RESPValue, _ envs: [APNsEnvironment]) throws -> [APNsEnvironment: State] {
        let values = try reply.orThrow("HMGET").array ?? []
        var out: [APNsEnvironment: State] = [:]
        for (i, env) in envs.enumerated() {
            if values.count > 2 * i, let text = values[2 * i].string, let record = ChannelRecord(text) {
                out[env] = .live(record)
            } else {
                out[env] = values.count > 2 * i + 1 && values[2 * i + 1].string == "1" ? State.fallback : State.none
            }
        }
        return out
    }

    /// The key's channel in `env`, creating it if the key has none: one worker of the fleet
    /// creates it (a short lock), the others wait for its id. `known`: the state just read.
    public func ensure(_ key: ActivityKey, _ env: APNsEnvironment, policy: ChannelStoragePolicy, known: State? = nil) async throws -> State {
        let current: State
        if let known { current = known } else { current = try await state(key, env) }
        guard current == .none else { return current }
        guard let client = apns.channels(env) else { return .fallback }
        let lock = keys.channelLock(key, env: env.rawValue)
        let won = try await redis.send(RedisCommand("SET", lock, "1", "NX", "PX", 10_000)) == .status("OK")
        guard won else {
            // Another worker is creating it: wait for its id (a few seconds at most).
            for _ in 0..<100 {
                try await Task.sleep(for: .milliseconds(30))
                let s = try await state(key, env)
                if s != .none { return s }
            }
            return .none
        }
        defer { Task { [redis] in _ = try? await redis.send(RedisCommand("DEL", lock)) } }
        return try await create(key, env, policy: policy, client: client)
    }

    private func create(_ key: ActivityKey, _ env: APNsEnvironment, policy: ChannelStoragePolicy, client: APNsClient) async throws -> State {
        let body = Array(#"{"message-storage-policy":\#(policy.rawValue),"push-type":"LiveActivity"}"#.utf8)
        var attempt = 0
        let watch = APNsOutageWatch(client, .channelManagement, bundleID: bundleID)
        while true {
            let result = await client.request(method: "POST", path: "/1/apps/\(bundleID)/channels", headers: [], body: body)
            stats.count(.channelCreate, result)
            if case .response(let r) = result, r.status == 201, let id = r.channelID {
                let record = ChannelRecord(id: id, policy: policy, createdMillis: Int64(Date().timeIntervalSince1970 * 1000))
                _ = try await redis.pipeline([
                    RedisCommand("HSET", hashKey(key), env.rawValue, record.stored),
                    RedisCommand("HDEL", hashKey(key), "\(env.rawValue):fallback"),
                    RedisCommand("EXPIRE", hashKey(key), ttlSeconds),
                    RedisCommand("ZADD", index, record.createdMillis, "\(env.rawValue) \(key)"),
                    RedisCommand("ZREM", fallbacks, "\(env.rawValue) \(key)"),
                    RedisCommand("XADD", announcements, "MAXLEN", "~", 100_000, "*", "event", "created", "key", key.description,
                                 "env", env.rawValue, "channel", id, "policy", policy.rawValue),
                ])
                logger.info("channel created", metadata: ["key": "\(key)", "env": "\(env.rawValue)", "channel": "\(id)", "policy": "\(policy.rawValue)"])
                conditions.clear("environment:\(env.rawValue)", "APNs key takes this environment again: channels are made", ["env": "\(env.rawValue)"])
                return .live(record)
            }
            if result.response?.reason == .cannotCreateChannelConfig {
                // Apple's limit (10,000 channels per app and environment): this key's devices get
                // per-token sends instead. Loud, because ops can free channels.
                _ = try await redis.pipeline([
                    RedisCommand("HSET", hashKey(key), "\(env.rawValue):fallback", "1"),
                    RedisCommand("EXPIRE", hashKey(key), ttlSeconds),
                    RedisCommand("HINCRBY", keys.counters, "channels_fallback", 1),
                    RedisCommand("ZADD", fallbacks, Int64(Date().timeIntervalSince1970 * 1000), "\(env.rawValue) \(key)"),
                ])
                stats.channelFallbacks.add(1, ordering: .relaxed)
                logger.error("CHANNEL LIMIT REACHED (CannotCreateChannelConfig): this key's devices get per-token pushes instead of a broadcast",
                             metadata: ["key": "\(key)", "env": "\(env.rawValue)"])
                return .fallback
            }
            if result.response?.reason == .badEnvironmentKeyIdInToken {
                // The key is limited to the other environment (a setting): no channel here. The
                // key's devices in this environment get per-token pushes, which fail with the same
                // reason and are recorded; the other environment goes on. Not kept: once the key
                // is changed, the next event makes the channel.
                conditions.report("environment:\(env.rawValue)", level: .warning,
                                  "APNs key limited to the other environment: no channel, per-token pushes instead (they fail)",
                                  ["key": "\(key)", "env": "\(env.rawValue)", "reason": "BadEnvironmentKeyIdInToken"])
                return .fallback
            }
            attempt += 1
            switch result.action {
            case .retryAfter(let d) where attempt < 5: try await Task.sleep(for: d)
            case .retryWithBackoff where attempt < 5, .refreshProviderToken where attempt < 5:
                try await Task.sleep(for: .milliseconds(100 << attempt))
            default:
                throw SendFailure("creating the channel for \(key) (\(env.rawValue)) failed: \(describe(result))",
                                  apnsOutage: await watch.isOutage(unusable: result.apnsUnusable))
            }
        }
    }

    /// Forgets a channel APNs no longer knows (`ChannelNotRegistered`) if it is still the one
    /// stored, so the next `ensure` creates a new one.
    public func forget(_ key: ActivityKey, _ env: APNsEnvironment, id: String) async throws {
        if try await redis.send(.script(ChannelScripts.forgetIfCurrent, keys: [hashKey(key)], args: [env.rawValue, id])).int == 1 {
            _ = try await redis.send(RedisCommand("ZREM", index, "\(env.rawValue) \(key)"))
        }
        logger.warning("channel not registered at APNs; a new one is created", metadata: ["key": "\(key)", "env": "\(env.rawValue)", "channel": "\(id)"])
    }

    /// Schedules the key's channels for deletion at `atMillis` (the end plus its dismissal window).
    public func scheduleDeletion(_ key: ActivityKey, atMillis: Int64) async throws {
        _ = try await redis.send(RedisCommand("ZADD", expiring, atMillis, key.description))
    }

    /// Deletes the channels whose time has come; any worker may run it, each key is taken by one.
    /// Returns how many channels were deleted.
    @discardableResult
    public func deleteDue(nowMillis: Int64, limit: Int = 50) async throws -> Int {
        // Channels whose hash expired (no end ever came) leave the counts: the hash lives
        // `ttlSeconds` after its last write.
        _ = try await redis.pipeline([RedisCommand("ZREMRANGEBYSCORE", index, "-inf", nowMillis - Int64(ttlSeconds) * 1000),
                                      RedisCommand("ZREMRANGEBYSCORE", fallbacks, "-inf", nowMillis - Int64(ttlSeconds) * 1000)])
        let due = try await redis.send(RedisCommand("ZRANGEBYSCORE", expiring, "-inf", nowMillis, "LIMIT", 0, limit))
        var deleted = 0
        for name in (due.array ?? []).compactMap(\.string) {
            guard let key = ActivityKey(parsing: name) else { _ = try await redis.send(RedisCommand("ZREM", expiring, name)); continue }
            // Whoever removes it from the schedule deletes it.
            guard try await redis.send(RedisCommand("ZREM", expiring, name)).int == 1 else { continue }
            let all = try await redis.send(RedisCommand("HGETALL", hashKey(key)))
            var items = (all.array ?? []).compactMap(\.string)[...]
            while items.count >= 2 {
                let field = items.removeFirst(), value = items.removeFirst()
                guard let env = APNsEnvironment(rawValue: field), let record = ChannelRecord(value), let client = apns.channels(env) else { continue }
                let result = await client.request(method: "DELETE", path: "/1/apps/\(bundleID)/channels",
                                                  headers: [HTTP2Header("apns-channel-id", record.id)])
                stats.count(.channelDelete, result)
                if result.action == .delivered || result.response?.reason == .channelNotRegistered {
                    deleted += 1
                    _ = try await redis.pipeline([
                        .script(ChannelScripts.forgetIfCurrent, keys: [hashKey(key)], args: [env.rawValue, record.id]),
                        RedisCommand("ZREM", index, "\(env.rawValue) \(key)"),
                        RedisCommand("XADD", announcements, "MAXLEN", "~", 100_000, "*", "event", "deleted", "key", key.description,
                                     "env", env.rawValue, "channel", record.id),
                    ])
                    logger.info("channel deleted", metadata: ["key": "\(key)", "env": "\(env.rawValue)", "channel": "\(record.id)"])
                } else {
                    // Try again later.
                    _ = try await redis.send(RedisCommand("ZADD", expiring, nowMillis + 60_000, name))
                    logger.warning("deleting a channel failed; retrying in a minute", metadata: ["key": "\(key)", "channel": "\(record.id)", "error": "\(describe(result))"])
                }
            }
        }
        return deleted
    }
}

enum ChannelScripts {
    /// KEYS[1] = the key's channels hash. ARGV = env, id. Removes the env's channel if it is
    /// still `id`. Returns 1 if removed. (One slot: the caller takes it out of the index.)
    static let forgetIfCurrent = RedisScript("""
    local cur = redis.call('HGET', KEYS[1], ARGV[1])
    if cur and string.sub(cur, 1, #ARGV[2] + 1) == ARGV[2] .. ' ' then
      redis.call('HDEL', KEYS[1], ARGV[1])
      return 1
    end
    return 0
    """)
}

func describe(_ result: APNsResult) -> String {
    switch result {
    case .failed(let e): return "no answer: \(e)"
    case .response(let r): return "\(r.status)\(r.reason.map { " \($0.rawValue)" } ?? "")"
    }
}
