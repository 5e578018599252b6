import ActivityCastCore
import APNsCore

/// The configuration, pre-digested for the hot path. Immutable.
struct SandboxSettings: Sendable {
    let configuration: SandboxConfiguration
    /// `<bundle>.push-type.liveactivity` → bundle.
    let allowedTopics: [String: String]
    let bundles: Set<String>
    let broadcastBundles: Set<String>
    let maxTokenAgeMillis: Int64
    let refreshMinimumMillis: Int64
    let clockSkewMillis: Int64

    init(_ c: SandboxConfiguration) {
        configuration = c
        allowedTopics = Dictionary(c.bundleIDs.map { ($0 + ".push-type.liveactivity", $0) }, uniquingKeysWith: { a, _ in a })
        bundles = Set(c.bundleIDs)
        broadcastBundles = Set(c.broadcastBundleIDs ?? c.bundleIDs).intersection(bundles)
        maxTokenAgeMillis = c.maxTokenAge.milliseconds
        refreshMinimumMillis = c.tokenRefreshMinimum.milliseconds
        clockSkewMillis = c.clockSkew.milliseconds
    }
}

extension Duration {
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}

/// Per-connection state: stream count, provider token in use, GOAWAY sent.
struct ConnectionRecord {
    var streams = 0
    /// The `authorization` value currently in use (verified), with its key id and `iat`.
    var authorization: String?
    var keyID = ""
    var issuedAt: Int64 = 0
    /// The key id of the connection's first token (`UnrelatedKeyIdInToken`).
    var firstKeyID: String?
    /// When the connection last switched from one token to another (not the first adoption).
    var lastChangeMillis: Int64?
    var goneAway = false
}

/// Connection-level and timing side effects that ride along with a response.
struct Effects {
    var delay: Duration?
    var connectionFault: ConnectionFault?
    var maxConcurrentStreams: Int?
}

/// What a locked step decided.
struct Outcome {
    var status: Int
    var reason: APNsReason?
    /// The 410 body's `timestamp`.
    var timestamp: Int64?
    var effects = Effects()
    var channelID: String?
    var storagePolicy: Int?
    var channelIDs: [String]?

    init(status: Int, reason: APNsReason? = nil, timestamp: Int64? = nil) {
        self.status = status; self.reason = reason; self.timestamp = timestamp
    }

    init(_ reason: APNsReason, timestamp: Int64? = nil) {
        self.init(status: reason.status, reason: reason, timestamp: timestamp)
    }
}

/// The result of a locked step: either an answer, or a provider token to verify outside the
/// lock before trying again.
enum Locked {
    case verify(String)
    case done(Outcome)
}

/// What the shared prelude (streams, faults, duplicate headers, provider token) decided.
enum Gate {
    case verify(String)
    case stop(Outcome)
    case pass
}

struct ChannelRecord {
    var sequence: Int
    var view: DeviceView
}

/// All mutable sandbox state, guarded by `SandboxState`'s mutex. Methods are short and do no I/O
/// and no ECDSA.
struct SandboxStore {
    var faults: SandboxFaults
    var rng: SplitMix64
    var connections: [UInt64: ConnectionRecord] = [:]
    var tokenCache: [String: ProviderTokenCheck] = [:]
    var devices: [String: DeviceView] = [:]
    var channels: [String: ChannelRecord] = [:]
    /// Bundle → channels not deleted.
    var activeChannels: [String: Int] = [:]
    var channelSequence = 0
    var tierOverrides: [String: Tier]
    var deliveries: Ring<Delivery>
    var stats = SandboxStats()

    static let shutdownDebugData: [UInt8] = Array(#"{"reason":"Shutdown"}"#.utf8)

    init(_ settings: SandboxSettings) {
        let c = settings.configuration
        faults = c.faults.normalized()
        rng = c.faults.seed.map(SplitMix64.init(seed:)) ?? SplitMix64()
        tierOverrides = Dictionary(c.tierOverrides.map { (DeviceToken.normalize(Substring($0.key)) ?? $0.key, $0.value) },
                                   uniquingKeysWith: { a, _ in a })
        deliveries = Ring(capacity: c.deliveryLogCapacity)
    }

    mutating func setFaults(_ new: SandboxFaults) {
        faults = new.normalized()
        if let seed = new.seed { rng = SplitMix64(seed: seed) }
    }

    // MARK: The prelude every APNs endpoint runs under the lock

    /// Counts the request and stream, applies GOAWAY and per-request faults, refuses duplicate
    /// headers, then checks the provider token and the connection's token rules. `bundle` is the
    /// app the request is for, when known and allowed (for keys limited to some apps).
    ///
    /// Returns `.verify` before touching anything when the token has never been seen: the caller
    /// verifies it outside the lock and calls again with `verified`.
    mutating func gate(_ settings: SandboxSettings, connection id: UInt64, duplicate: Bool, authorization: String?,
                       bundle: String?, verified: ProviderTokenCheck?, nowMillis now: Int64, effects: inout Effects) -> Gate {
        // The verdict on the token, without side effects yet.
        var check: ProviderTokenCheck?
        var cacheMiss = false
        if let authorization, !authorization.isEmpty {
            if let current = connections[id], current.authorization == authorization {
                check = .valid(keyID: current.keyID, issuedAt: current.issuedAt)
            } else if let cached = tokenCache[authorization] {
                check = cached
            } else if let verified {
                check = verified
                cacheMiss = true
            } else {
                return .verify(authorization)
            }
        }
        if cacheMiss, let authorization, let check {
            if tokenCache.count >= max(1, settings.configuration.tokenCacheCapacity) { tokenCache.removeAll(keepingCapacity: true) }
            tokenCache[authorization] = check
            stats.tokenVerifications += 1
        }

        stats.requests += 1
        switch Self.countStream(&connections[id, default: ConnectionRecord()], goAwayAfter: faults.goAwayAfterStreams) {
        case .shutdown:
            return .stop(Outcome(.shutdown))
        case .goAway:
            effects.connectionFault = .goAway(debugData: Self.shutdownDebugData)
            stats.goAways += 1
        case .open:
            break
        }

        if faults.drawsPerRequest {
            if faults.resetRate > 0, rng.nextUnit() < faults.resetRate {
                stats.faultsInjected += 1
                stats.connectionResets += 1
                effects.connectionFault = .reset
                return .stop(Outcome(status: 0))
            }
            var fault: APNsReason?
            let r429 = faults.tooManyRequestsRate, r500 = faults.internalErrorRate, r503 = faults.unavailableRate
            if r429 + r500 + r503 > 0 {
                let u = rng.nextUnit()
                if u < r429 { fault = .tooManyRequests } else if u < r429 + r500 { fault = .internalServerError } else if u < r429 + r500 + r503 { fault = .serviceUnavailable }
            }
            if faults.slowResponseRate > 0, rng.nextUnit() < faults.slowResponseRate {
                effects.delay = .milliseconds(faults.slowResponseDelayMillis)
                stats.slowResponses += 1
            }
            if let fault {
                stats.faultsInjected += 1
                return .stop(Outcome(fault))
            }
        }

        if duplicate { return .stop(Outcome(.duplicateHeaders)) }

        guard let authorization, !authorization.isEmpty, let check else { return .stop(Outcome(.missingProviderToken)) }
        guard case .valid(let keyID, let issuedAt) = check else { return .stop(Outcome(.invalidProviderToken)) }
        let age = now - issuedAt * 1000
        if age > settings.maxTokenAgeMillis { return .stop(Outcome(.expiredProviderToken)) }
        if -age > settings.clockSkewMillis { return .stop(Outcome(.invalidProviderToken)) }
        if let restriction = settings.configuration.keyRestrictions[keyID] {
            if let env = restriction.environment, env != settings.configuration.environment {
                return .stop(Outcome(.badEnvironmentKeyIdInToken))
            }
            if let allowed = restriction.bundleIDs, let bundle, !allowed.contains(bundle) { return .stop(Outcome(.forbidden)) }
        }
        let adoption = Self.adopt(&connections[id, default: ConnectionRecord()], authorization: authorization, keyID: keyID,
                                  issuedAt: issuedAt, nowMillis: now, refreshMinimumMillis: settings.refreshMinimumMillis)
        switch adoption {
        case .refused(let reason): return .stop(Outcome(reason))
        case .first: effects.maxConcurrentStreams = settings.configuration.maxConcurrentStreams
        case .same, .changed: break
        }
        return .pass
    }

    enum StreamState { case open, goAway, shutdown }

    /// Counts one stream on the connection: past a GOAWAY it is refused (`Shutdown`); the stream
    /// that reaches `goAwayAfter` is answered and followed by a GOAWAY.
    static func countStream(_ conn: inout ConnectionRecord, goAwayAfter limit: Int?) -> StreamState {
        conn.streams += 1
        if conn.goneAway { return .shutdown }
        if let limit, conn.streams >= limit {
            conn.goneAway = true
            return .goAway
        }
        return .open
    }

    enum Adoption: Equatable { case same, first, changed, refused(APNsReason) }

    /// The connection's provider-token rules: the first valid token is adopted; a different one
    /// later must use the same key as the first (`UnrelatedKeyIdInToken`) and may not follow the
    /// previous change by less than the refresh minimum (`TooManyProviderTokenUpdates`). The
    /// first adoption is not a change, so a connection that starts with a token minted a while
    /// ago may switch to a fresh one at once.
    static func adopt(_ conn: inout ConnectionRecord, authorization: String, keyID: String, issuedAt: Int64, nowMillis: Int64,
                      refreshMinimumMillis: Int64) -> Adoption {
        if conn.authorization == authorization { return .same }
        let result: Adoption
        if conn.authorization == nil {
            conn.firstKeyID = keyID
            result = .first
        } else {
            if conn.firstKeyID != keyID { return .refused(.unrelatedKeyIdInToken) }
            if let last = conn.lastChangeMillis, nowMillis - last < refreshMinimumMillis { return .refused(.tooManyProviderTokenUpdates) }
            conn.lastChangeMillis = nowMillis
            result = .changed
        }
        conn.authorization = authorization
        conn.keyID = keyID
        conn.issuedAt = issuedAt
        return result
    }

    /// Counts the outcome in the stats and attaches the prelude's effects.
    mutating func finish(_ o: Outcome, effects: Effects) -> Locked {
        var o = o
        o.effects = effects
        if effects.connectionFault != .reset { stats.byStatus[o.status, default: 0] += 1 }
        if let reason = o.reason {
            stats.rejected += 1
            stats.byReason[reason.rawValue, default: 0] += 1
        }
        return .done(o)
    }

    /// Counts a request that matched no route (404) or used the wrong method (405).
    mutating func unrouted(_ reason: APNsReason, connection id: UInt64) {
        stats.requests += 1
        connections[id, default: ConnectionRecord()].streams += 1
        stats.byStatus[reason.status, default: 0] += 1
        stats.rejected += 1
        stats.byReason[reason.rawValue, default: 0] += 1
    }

    // MARK: Views

    /// Makes sure a device token has a view, bound to `bundle` if new. False if it is bound to
    /// another app (`DeviceTokenNotForTopic`: a token belongs to one app).
    mutating func bindDevice(_ token: String, bundle: String, settings: SandboxSettings, nowMillis: Int64) -> Bool {
        if let bound = devices[token]?.bundleID { return bound == bundle }
        let c = settings.configuration
        if devices.count >= max(1, c.maxTrackedDevices) { devices.remove(at: devices.startIndex) }
        let tier = tierOverrides[token] ?? c.defaultTier
        devices[token] = DeviceView(kind: .device, id: token, bundleID: bundle, tier: tier, budgetPerHour: c.budget(for: tier),
                                    nowMillis: nowMillis)
        return true
    }

    mutating func setTier(_ tier: Tier, token: String, settings: SandboxSettings) {
        tierOverrides[token] = tier
        if devices[token] != nil {
            devices[token]!.tier = tier
            devices[token]!.budgetPerHour = settings.configuration.budget(for: tier)
        }
    }
}
