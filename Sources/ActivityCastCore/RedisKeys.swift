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

    /// Hash, per stream, of its pending entries' attempts and last errors (fields:
    /// `EntryErrorFields`): `ac:errors:ac:feed:sports`.
    public func errors(_ stream: String) -> String { "\(prefix):errors:\(stream)" }

    /// Stream of fan-out slices that every worker of the group takes: `ac:slices` for fan-outs
    /// with an audience at priority 10, `ac:slices:5` for those wholly at 5 (routine updates,
    /// budget flushes). Each stream has its own slices in hand per worker, so a priority-10
    /// fan-out's slices never queue behind a priority-5 one's.
    public func slices(priority: Int) -> String { priority >= 10 ? "\(prefix):slices" : "\(prefix):slices:5" }
    /// The priority-10 slices stream (and where slices of a fan-out of unknown priority go).
    public var slices: String { slices(priority: 10) }
    /// The priorities with a slices stream of their own, 10 first.
    public static let slicePriorities = [10, 5]
    /// Both slices streams, priority 10 first.
    public var sliceStreams: [String] { Self.slicePriorities.map(slices(priority:)) }

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

    // MARK: Per activity key (one hash slot: `{key}`)

    /// The key's merged state (hash): `f:<name>` → `ts json` per content-state field, `_ts`,
    /// `_ev`, `_pts`, `_stale`, `_rel`, `_sig`, `_rej`, `_end`, `_endby` (`KeyStateScripts`): `ac:{match:4711}:state`.
    public func state(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:state" }
    /// The key's tombstone (string: the ms its end was sent at), written when the key ends and
    /// kept for `ttl.activity_s` after its data expires, so a late event doesn't start the key
    /// over: `ac:{match:4711}:ended`.
    public func ended(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:ended" }
    /// The key's newest fan-out (hash `name`, `millis`): `ac:{match:4711}:gen`.
    public func fanoutGen(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:gen" }
    /// A fan-out's record (hash, `FanoutScripts`): `ac:{match:4711}:fan:<gen>`.
    public func fanout(_ key: ActivityKey, _ gen: String) -> String { "\(fanoutPrefix(key))\(gen)" }
    /// What every fan-out record of the key starts with.
    public func fanoutPrefix(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:fan:" }
    /// The key's batches in flight (sorted set `<gen>|<slice>` by lease end): `ac:{match:4711}:inflight`.
    public func inflight(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:inflight" }
    /// Devices that got a push-to-start for the key (set): `ac:{match:4711}:starts`.
    public func starts(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:starts" }
    /// The key's start as a relaunch needs it (hash, only with `worker.relaunch_past_lifetime`):
    /// `_type` → the `attributes-type`, `a:<name>` → each attribute as JSON.
    public func startAttributes(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:start" }
    /// The activities of the key started again after their lifetime (set of activity ids): each once.
    /// The key's trail (stream, capped, `trace.*`): what was decided and sent for it (`TrailRecord`).
    public func trail(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:trail" }
    public func relaunched(_ key: ActivityKey) -> String { "\(prefix):{\(key)}:relaunched" }
    /// One (key, audience)'s budget hash: `ac:{match:4711}:budget:standard` (`standard`,
    /// `frequent`, `channel`).
    public func budget(_ key: ActivityKey, audience name: String) -> String { "\(prefix):{\(key)}:budget:\(name)" }
    /// Held (10 s) by the worker creating the key's channel in `env`: `ac:{match:4711}:channel-lock:production`.
    public func channelLock(_ key: ActivityKey, env: String) -> String { "\(prefix):{\(key)}:channel-lock:\(env)" }

    // MARK: Fleet-wide

    /// Every channel on record (sorted set `<env> <key>` by creation ms): `ac:channels:index`.
    public var channelsIndex: String { "\(prefix):channels:index" }
    /// Keys on per-token fallback (Apple's channel limit), by when they fell back: `ac:channels:fallback`.
    public var channelsFallback: String { "\(prefix):channels:fallback" }
    /// Channels due for deletion after their activity's end (sorted set by due ms): `ac:channels:expiring`.
    public var channelsExpiring: String { "\(prefix):channels:expiring" }
    /// Channels created and deleted (stream, for app backends): `ac:channels`.
    public var channelAnnouncements: String { "\(prefix):channels" }
    /// Permanent send failures (stream, capped): `ac:send-failures`.
    public var sendFailures: String { "\(prefix):send-failures" }
    /// What app backends are told (stream, capped): tokens forgotten, starts delivered, … (`Outcome`).
    public var outcomes: String { "\(prefix):outcomes" }
    /// The fleet's schedule of coalesced states (sorted set): member `<key>|<audience>`, scored by
    /// when it is due (ms): `ac:budget-due`.
    public var budgetDue: String { "\(prefix):budget-due" }
    /// A device's push-to-start bucket, in the device's slot: `ac:device:{d1}:start-budget`.
    public func startBudget(device id: String) -> String { "\(self.device(id)):start-budget" }
    /// The fleet's send-rate guard for one app: `ac:rate:com.example.app`.
    public func rateGuard(bundleID: String) -> String { "\(prefix):rate:\(bundleID)" }
    /// How far each stream's group had read (hash stream → id), to recreate a lost group there:
    /// `ac:positions:activitycast`.
    public func positions(group: String) -> String { "\(prefix):positions:\(group)" }
    /// Workers that can't use APNs now (hash): `<consumer> <endpoint>` → `<refreshed ms> <since
    /// ms> <why>|<last error>`, refreshed every 5 s while it lasts and deleted when it ends
    /// (`inspect`, `top`); the hash expires an hour after its last write: `ac:apns-unusable`.
    public var apnsUnusable: String { "\(prefix):apns-unusable" }
    /// Set of activity types with at least one push-to-start token: `ac:activity-types`.
    public var activityTypes: String { "\(prefix):activity-types" }
}
