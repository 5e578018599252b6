import ActivityCastCore
import OpenSSLKit

/// What the sandbox accepts and how it models devices. Fixed for the life of a `SandboxState`
/// except `faults` (changed at run time with `updateFaults` or the admin API) and tier overrides.
public struct SandboxConfiguration: Sendable {
    /// The apps whose pushes are accepted: device topics are `<bundle id>.push-type.liveactivity`,
    /// broadcast and channel paths name the bundle id itself.
    public var bundleIDs: [String]
    /// The apps with broadcast enabled (Apple: the "Broadcast capability" of the app id); nil
    /// means all of `bundleIDs`. Others answer broadcast and channel requests with 400
    /// `FeatureNotEnabled`.
    public var broadcastBundleIDs: [String]?
    /// The 10-character team id every provider token's `iss` must equal.
    public var teamID: String
    /// Key id (`kid`) → public half of the `.p8` key.
    public var keys: [String: ES256PublicKey]
    /// Optional per-key limits, like the ones Apple's developer portal can put on a key.
    public var keyRestrictions: [String: KeyRestriction]
    /// `development` adds `apns-unique-id` to device-push responses (as Apple's sandbox host does).
    public var environment: APNsEnvironment
    /// Tokens whose `iat` is older than this answer 403 `ExpiredProviderToken`.
    public var maxTokenAge: Duration
    /// A connection that changes provider token again sooner than this after its previous change
    /// answers 429 `TooManyProviderTokenUpdates`.
    public var tokenRefreshMinimum: Duration
    /// How far in the future an `iat` may be (clock skew) before the token is invalid.
    public var clockSkew: Duration
    /// The tier of a device token not named in `tierOverrides` (the sandbox can't see the
    /// device's Settings).
    public var defaultTier: Tier
    /// Priority-10 updates per device per hour before the device would throttle (APNs still
    /// answers 200; the view counts them as over budget). Apple publishes no figures: the defaults,
    /// 15 standard and 120 frequent, are community estimates (shared/APNS.md), not facts.
    public var deviceBudgetPerHour: [Tier: Int]
    /// Push-to-start budget per token per hour (*unconfirmed*; about 10).
    public var startBudgetPerHour: Int
    /// Device token (lowercase hex) → tier, for tokens that differ from `defaultTier`.
    public var tierOverrides: [String: Tier]
    /// Channels per app (Apple: 10,000 per app per environment).
    public var maxChannels: Int
    /// SETTINGS_MAX_CONCURRENT_STREAMS once a connection has presented a valid provider token
    /// (Apple: about 1000–1500, and it changes).
    public var maxConcurrentStreams: Int
    /// Streams allowed on a new connection until a valid provider token is seen (Apple: one).
    public var streamsBeforeAuthentication: Int
    /// Deliveries kept in the recent-deliveries ring.
    public var deliveryLogCapacity: Int
    /// Device tokens with a view; beyond it, the oldest view is forgotten for each new token.
    public var maxTrackedDevices: Int
    /// Distinct provider tokens whose verification outcome is remembered (each is verified once).
    public var tokenCacheCapacity: Int
    public var faults: SandboxFaults

    /// What a key may be used for. Apple lets a key be limited to one environment and (for
    /// "topic-specific" keys) to some apps.
    public struct KeyRestriction: Sendable, Equatable {
        /// A key for the other environment answers 403 `BadEnvironmentKeyIdInToken`.
        public var environment: APNsEnvironment?
        /// A key used for an app outside this list answers 403 `Forbidden`.
        public var bundleIDs: [String]?
        public init(environment: APNsEnvironment? = nil, bundleIDs: [String]? = nil) {
            self.environment = environment; self.bundleIDs = bundleIDs
        }
    }

    public init(bundleIDs: [String], teamID: String, keys: [String: ES256PublicKey], environment: APNsEnvironment = .development,
                broadcastBundleIDs: [String]? = nil, keyRestrictions: [String: KeyRestriction] = [:],
                maxTokenAge: Duration = .seconds(3600), tokenRefreshMinimum: Duration = .seconds(20 * 60),
                clockSkew: Duration = .seconds(60), defaultTier: Tier = .standard,
                deviceBudgetPerHour: [Tier: Int] = [.standard: 15, .frequent: 120], startBudgetPerHour: Int = 10,
                tierOverrides: [String: Tier] = [:], maxChannels: Int = 10_000, maxConcurrentStreams: Int = 1000,
                streamsBeforeAuthentication: Int = 1, deliveryLogCapacity: Int = 10_000, maxTrackedDevices: Int = 100_000,
                tokenCacheCapacity: Int = 1024, faults: SandboxFaults = SandboxFaults()) {
        self.bundleIDs = bundleIDs; self.teamID = teamID; self.keys = keys; self.environment = environment
        self.broadcastBundleIDs = broadcastBundleIDs; self.keyRestrictions = keyRestrictions
        self.maxTokenAge = maxTokenAge; self.tokenRefreshMinimum = tokenRefreshMinimum; self.clockSkew = clockSkew
        self.defaultTier = defaultTier; self.deviceBudgetPerHour = deviceBudgetPerHour
        self.startBudgetPerHour = startBudgetPerHour; self.tierOverrides = tierOverrides; self.maxChannels = maxChannels
        self.maxConcurrentStreams = maxConcurrentStreams; self.streamsBeforeAuthentication = streamsBeforeAuthentication
        self.deliveryLogCapacity = deliveryLogCapacity; self.maxTrackedDevices = maxTrackedDevices
        self.tokenCacheCapacity = tokenCacheCapacity; self.faults = faults
    }

    /// The hourly priority-10 budget of a tier (0 if not configured: every push is over budget).
    public func budget(for tier: Tier) -> Int { deviceBudgetPerHour[tier] ?? 0 }
}
