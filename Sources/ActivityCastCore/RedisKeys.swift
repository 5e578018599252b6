/// Names of the Redis keys that hold registrations (docs/schema.md, "How registrations are kept in
/// Redis"). Data about one activity key or one follow target sits under a Cluster hash tag
/// (`{match:4711}`) so one script touches one slot. Ids are identifiers (no `{`, `}` or `:`), which
/// the decoder guarantees, so a name can't escape its hash tag.
public struct RedisKeys: Sendable, Equatable {
    /// The common prefix, `ac` by default.
    public var prefix: String

    public init(prefix: String = "ac") {
        self.prefix = prefix
    }

    /// Hash `activity` → update token: `ac:{match:4711}:tokens`.
    public func tokens(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:tokens" }

    /// Hash `activity` → `ts device env tier broadcast token` of that activity's token (`ts -` once unregistered): `ac:{match:4711}:meta`.
    public func meta(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:meta" }
    /// The key's per-token audience (hash): `activity` → its `meta` value, for every live
    /// registration not on broadcast by its own `broadcast` flag, and `_` → `1` once the hash is
    /// kept (a key registered before it existed has none: its audience is unknown). An event whose
    /// every environment has a live channel and whose key has nobody here is one broadcast, no
    /// fan-out: `ac:{match:4711}:direct`.
    public func direct(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:direct" }
    /// token → activity (hash): which activity of the key holds each token, so one token
    /// registered by two devices (a reinstall, a restored backup) is stored, and pushed, once.
    public func tokenOwners(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:by-token" }
    /// The key's broadcast channels (hash): `<env>` → `<id> <policy> <created ms>`, `<env>:fallback`
    /// 1 (Apple's channel limit), `want` 1 (a device on broadcast needs one: created at the next event).
    public func channels(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:channels" }

    /// Hash, per stream, of its pending entries' attempts (`<id>#n`: deliveries that started
    /// processing it) and last errors (`<id>`): `ac:errors:ac:feed:sports`.
    public func errors(_ stream: String) -> String { "\(prefix):errors:\(stream)" }

    /// Stream of fan-out slices that every worker of the group takes: `ac:slices`.
    public var slices: String { "\(prefix):slices" }

    /// Sorted set of live activity keys, scored by last write (ms): `ac:keys`.
    public var keysIndex: String { "\(prefix):keys" }

    /// Hash of one device's settings, start tokens and activities: `ac:device:{d-1}`.
    public func device(_ id: String) -> String { "\(prefix):device:{\(id)}" }

    /// Set of the devices following a target: `ac:{team:ars}:followers`.
    public func followers(_ target: FollowTarget) -> String { "\(prefix):{\(target)}:followers" }

    /// Hash `device` → `ts 1|0`: when each device last followed or unfollowed the target, so
    /// concurrent workers apply follow changes in timestamp order: `ac:{team:ars}:followers-ts`.
    public func followerTimes(_ target: FollowTarget) -> String { "\(prefix):{\(target)}:followers-ts" }

    /// Set of the devices with a push-to-start token for an activity type:
    /// `ac:{starttokens:MatchActivityAttributes}:devices`.
    public func startTokens(activityType: String) -> String { "\(prefix):{starttokens:\(activityType)}:devices" }

    /// Hash `device` → `ts 1|0` beside `startTokens`, for timestamp order.
    public func startTokenTimes(activityType: String) -> String { "\(prefix):{starttokens:\(activityType)}:devices-ts" }

    /// Set of the targets with at least one follower: `ac:targets`.
    public var targets: String { "\(prefix):targets" }

    /// Hash of fleet-wide counters, field → integer, that every worker increments with `HINCRBY`
    /// (for example `registrations_stale`: registrations ignored because a newer one was stored):
    /// `ac:counters`. They only grow; `activitycast inspect` shows every field. Not under a hash
    /// tag: one small key, written by every worker.
    public var counters: String { "\(prefix):counters" }
}
