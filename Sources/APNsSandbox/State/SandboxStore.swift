import ActivityCastCore
import APNsCore

/// The configuration, pre-digested for the hot path. Immutable; a class so that the hot path
/// reads its fields through one reference instead of copying a large struct.
final class SandboxSettings: Sendable {
    let configuration: SandboxConfiguration
    /// `<bundle>.push-type.liveactivity` → bundle: a short list scanned linearly (one or two
    /// apps is the norm, and comparing strings is cheaper than hashing one), or a dictionary.
    let topicList: [(topic: String, bundle: String)]
    let topicTable: [String: String]
    let bundles: Set<String>
    let broadcastBundles: Set<String>
    let maxTokenAgeMillis: Int64
    let refreshMinimumMillis: Int64
    let clockSkewMillis: Int64
    let development: Bool
    let keyRestrictions: [String: SandboxConfiguration.KeyRestriction]
    let maxConcurrentStreams: Int
    let startBudgetPerHour: Int
    let tokenCacheCapacity: Int
    let maxTrackedDevices: Int

    init(_ c: SandboxConfiguration) {
        configuration = c
        topicTable = Dictionary(c.bundleIDs.map { ($0 + ".push-type.liveactivity", $0) }, uniquingKeysWith: { a, _ in a })
        topicList = topicTable.count <= 8 ? topicTable.map { (topic: $0.key, bundle: $0.value) } : []
        bundles = Set(c.bundleIDs)
        broadcastBundles = Set(c.broadcastBundleIDs ?? c.bundleIDs).intersection(bundles)
        maxTokenAgeMillis = c.maxTokenAge.milliseconds
        refreshMinimumMillis = c.tokenRefreshMinimum.milliseconds
        clockSkewMillis = c.clockSkew.milliseconds
        development = c.environment == .development
        keyRestrictions = c.keyRestrictions
        maxConcurrentStreams = c.maxConcurrentStreams
        startBudgetPerHour = c.startBudgetPerHour
        tokenCacheCapacity = max(1, c.tokenCacheCapacity)
        maxTrackedDevices = max(1, c.maxTrackedDevices)
    }

    /// The app of an allowed device topic.
    @inline(__always) func bundle(forTopic topic: String) -> String? {
        if topicTable.count <= 8 {
            for entry in topicList where entry.topic == topic { return entry.bundle }
            return nil
        }
        return topicTable[topic]
    }
}

extension Duration {
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}

/// Per-connection state: stream count, provider token in use, GOAWAY sent. A class so that the
/// hot path finds it with one hash lookup and updates it in place; only touched under the lock.
final class ConnectionRecord {
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

/// A device token's view, by reference (see `ConnectionRecord`).
final class DeviceRecord {
    var view: DeviceView
    init(_ view: DeviceView) { self.view = view }
}

/// Connection-level and timing side effects that ride along with a response.
struct Effects: Sendable {
    var delay: Duration?
    var connectionFault: ConnectionFault?
    var maxConcurrentStreams: Int?
}

/// What a locked step decided.
struct Outcome: Sendable {
    var status: Int
    var reason: APNsReason?
    /// The 410 body's `timestamp`.
    var timestamp: Int64?
    var effects = Effects()
    var channelID: String?
    var storagePolicy: Int?
    var channelIDs: [String]?
    /// Values the locked step replaced (the evicted log entry, the previous content state and the
    /// body it points into): carried out so that they are freed after the lock is released.
    var garbage: (Delivery?, RawJSON?)

    init(status: Int, reason: APNsReason? = nil, timestamp: Int64? = nil) {
        self.status = status; self.reason = reason; self.timestamp = timestamp
    }

    init(_ reason: APNsReason, timestamp: Int64? = nil) {
        self.init(status: reason.status, reason: reason, timestamp: timestamp)
    }
}

/// The result of a locked step: either an answer, or a provider token to verify outside the
/// lock before trying again.
enum Locked: Sendable {
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
    var devices: [TokenKey: DeviceRecord] = [:]
    var channels: [String: ChannelRecord] = [:]
    /// Bundle → channels not deleted.
    var activeChannels: [String: Int] = [:]
    var channelSequence = 0
    var tierOverrides: [TokenKey: Tier]
    /// `faults.unregisteredTokens` and `faults.expiredTokens` by key, for the hot path.
    var unregistered: [TokenKey: Int64] = [:]
    var expired: Set<TokenKey> = []
    var deliveries: Ring<Delivery>
    /// Everything but `byStatus`, which is kept in `statusCounts` (an array is cheaper to bump).
    var counters = SandboxStats()
    /// Responses by status code (0..<600).
    var statusCounts = [Int](repeating: 0, count: 600)

    static let shutdownDebugData: [UInt8] = Array(#"{"reason":"Shutdown"}"#.utf8)

    init(_ settings: SandboxSettings) {
        let c = settings.configuration
        faults = SandboxFaults()
        rng = SplitMix64()
        tierOverrides = Dictionary(c.tierOverrides.compactMap { k, v in TokenKey(hex: k).map { ($0, v) } }, uniquingKeysWith: { a, _ in a })
        deliveries = Ring(capacity: c.deliveryLogCapacity)
        setFaults(c.faults)
    }

    var stats: SandboxStats {
        var s = counters
        for (status, n) in statusCounts.enumerated() where n > 0 { s.byStatus[status] = n }
        return s
    }

    mutating func setFaults(_ new: SandboxFaults) {
        faults = new.normalized()
        unregistered = Dictionary(faults.unregisteredTokens.compactMap { k, v in TokenKey(hex: k).map { ($0, v) } },
                                  uniquingKeysWith: { a, _ in a })
        expired = Set(faults.expiredTokens.compactMap { TokenKey(hex: $0) })
        if let seed = new.seed { rng = SplitMix64(seed: seed) }
    }

    mutating func markUnregistered(_ key: TokenKey, timestampMillis: Int64) {
        faults.unregisteredTokens[key.hex] = timestampMillis
        unregistered[key] = timestampMillis
    }

    @inline(__always) mutating func countStatus(_ status: Int) {
        if status >= 0 && status < statusCounts.count { statusCounts[status] += 1 }
    }

    // MARK: The prelude every APNs endpoint runs under the lock

    /// Counts the request and stream, applies GOAWAY and per-request faults, refuses duplicate
    /// headers, then checks the provider token and the connection's token rules. `bundle` is the
    /// app the request is for, when known and allowed (for keys limited to some apps).
    ///
    /// Returns `.verify` before counting anything when the token has never been seen: the caller
    /// verifies it outside the lock and calls again with `verified`.
    mutating func gate(_ settings: SandboxSettings, connection id: UInt64, duplicate: Bool, authorization: String?,
                       bundle: String?, verified: ProviderTokenCheck?, nowMillis now: Int64, effects: inout Effects) -> Gate {
        let conn: ConnectionRecord
        if let existing = connections[id] {
            conn = existing
        } else {
            conn = ConnectionRecord()
            connections[id] = conn
        }

        // The verdict on the token, without side effects yet.
        var check: ProviderTokenCheck?
        var current = false
        if let authorization, !authorization.isEmpty {
            if let inUse = conn.authorization, inUse == authorization {
                current = true
            } else if let cached = tokenCache[authorization] {
                check = cached
            } else if let verified {
                check = verified
                if tokenCache.count >= settings.tokenCacheCapacity { tokenCache.removeAll(keepingCapacity: true) }
                tokenCache[authorization] = verified
                counters.tokenVerifications += 1
            } else {
                return .verify(authorization)
            }
        }

        counters.requests += 1
        conn.streams += 1
        if conn.goneAway { return .stop(Outcome(.shutdown)) }
        if let limit = faults.goAwayAfterStreams, conn.streams >= limit {
            conn.goneAway = true
            effects.connectionFault = .goAway(debugData: Self.shutdownDebugData)
            counters.goAways += 1
        }

        if faults.drawsPerRequest, let fault = drawFaults(&effects) { return .stop(fault) }

        if duplicate { return .stop(Outcome(.duplicateHeaders)) }

        guard let authorization, !authorization.isEmpty else { return .stop(Outcome(.missingProviderToken)) }
        let keyID: String, issuedAt: Int64
        if current {
            keyID = conn.keyID
            issuedAt = conn.issuedAt
        } else {
            guard case .valid(let k, let iat)? = check else { return .stop(Outcome(.invalidProviderToken)) }
            keyID = k
            issuedAt = iat
        }
        let age = now - issuedAt * 1000
        if age > settings.maxTokenAgeMillis { return .stop(Outcome(.expiredProviderToken)) }
        if -age > settings.clockSkewMillis { return .stop(Outcome(.invalidProviderToken)) }
        if !settings.keyRestrictions.isEmpty, let restriction = settings.keyRestrictions[keyID] {
            if let env = restriction.environment, env != settings.configuration.environment {
                return .stop(Outcome(.badEnvironmentKeyIdInToken))
            }
            if let allowed = restriction.bundleIDs, let bundle, !allowed.contains(bundle) { return .stop(Outcome(.forbidden)) }
        }
        if current { return .pass }
        switch Self.adopt(conn, authorization: authorization, keyID: keyID, issuedAt: issuedAt, nowMillis: now,
                          refreshMinimumMillis: settings.refreshMinimumMillis) {
        case .refused(let reason): return .stop(Outcome(reason))
        case .first: effects.maxConcurrentStreams = settings.maxConcurrentStreams
        case .changed: break
        }
        return .pass
    }

    /// Per-request faults, in the documented order: reset, then one draw shared by 429/500/503,
    /// then slow. Returns the outcome that stops the request, if any.
    private mutating func drawFaults(_ effects: inout Effects) -> Outcome? {
        if faults.resetRate > 0, rng.nextUnit() < faults.resetRate {
            counters.faultsInjected += 1
            counters.connectionResets += 1
            effects.connectionFault = .reset
            return Outcome(status: 0)
        }
        var fault: APNsReason?
        let r429 = faults.tooManyRequestsRate, r500 = faults.internalErrorRate, r503 = faults.unavailableRate
        if r429 + r500 + r503 > 0 {
            let u = rng.nextUnit()
            if u < r429 {
                fault = .tooManyRequests
            } else if u < r429 + r500 {
                fault = .internalServerError
            } else if u < r429 + r500 + r503 {
                fault = .serviceUnavailable
            }
        }
        if faults.slowResponseRate > 0, rng.nextUnit() < faults.slowResponseRate {
            effects.delay = .milliseconds(faults.slowResponseDelayMillis)
            counters.slowResponses += 1
        }
        guard let fault else { return nil }
        counters.faultsInjected += 1
        return Outcome(fault)
    }

    enum Adoption: Equatable { case first, changed, refused(APNsReason) }

    /// The connection's provider-token rules for a token other than the one in use: the first
    /// valid token is adopted; a different one later must use the same key as the first
    /// (`UnrelatedKeyIdInToken`) and may not follow the previous change by less than the refresh
    /// minimum (`TooManyProviderTokenUpdates`). The first adoption is not a change, so a
    /// connection that starts with a token minted a while ago may switch to a fresh one at once.
    static func adopt(_ conn: ConnectionRecord, authorization: String, keyID: String, issuedAt: Int64, nowMillis: Int64,
                      refreshMinimumMillis: Int64) -> Adoption {
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
    @inline(__always) mutating func finish(_ o: Outcome, effects: Effects) -> Locked {
        var o = o
        o.effects = effects
        if effects.connectionFault != .reset { countStatus(o.status) }
        if let reason = o.reason {
            counters.rejected += 1
            counters.byReason[reason.rawValue, default: 0] += 1
        }
        return .done(o)
    }

    /// Counts a request that matched no route (404) or used the wrong method (405).
    mutating func unrouted(_ reason: APNsReason, connection id: UInt64) {
        counters.requests += 1
        if let conn = connections[id] { conn.streams += 1 } else {
            let conn = ConnectionRecord()
            conn.streams = 1
            connections[id] = conn
        }
        countStatus(reason.status)
        counters.rejected += 1
        counters.byReason[reason.rawValue, default: 0] += 1
    }

    // MARK: Views

    /// The record of a device token, created (bound to `bundle`) if new; nil if the token is
    /// bound to another app (`DeviceTokenNotForTopic`: a token belongs to one app).
    mutating func deviceRecord(_ token: TokenKey, bundle: String, settings: SandboxSettings, nowMillis: Int64) -> DeviceRecord? {
        if let record = devices[token] { return record.view.bundleID == bundle ? record : nil }
        if devices.count >= settings.maxTrackedDevices { devices.remove(at: devices.startIndex) }
        let c = settings.configuration
        let tier = tierOverrides.isEmpty ? c.defaultTier : tierOverrides[token] ?? c.defaultTier
        let record = DeviceRecord(DeviceView(kind: .device, id: token.hex, bundleID: bundle, tier: tier, budgetPerHour: c.budget(for: tier),
                                             nowMillis: nowMillis))
        devices[token] = record
        return record
    }

    mutating func setTier(_ tier: Tier, token: TokenKey, settings: SandboxSettings) {
        tierOverrides[token] = tier
        if let record = devices[token] {
            record.view.tier = tier
            record.view.budgetPerHour = settings.configuration.budget(for: tier)
        }
    }
}
