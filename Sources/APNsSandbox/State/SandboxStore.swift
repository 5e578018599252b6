import ActivityCastCore
import APNsCore

/// All mutable sandbox state, guarded by `SandboxState`'s mutex. Methods are short and do no I/O
/// and no ECDSA.
struct SandboxStore {
    var faults: SandboxFaults
    var rng: SplitMix64
    var connections: [UInt64: ConnectionRecord] = [:]
    /// Verdicts by `authorization` value bytes.
    var tokenCache: [[UInt8]: ProviderTokenCheck] = [:]
    var devices: [TokenKey: DeviceRecord] = [:]
    /// The tracked tokens in the order their views were made, a ring of `maxTrackedDevices`
    /// (`deviceOrderNext` is the oldest once it is full): past the limit the oldest view is
    /// forgotten, in O(1). (Forgetting `devices.startIndex` instead piled the remaining entries
    /// up at the end of the hash table: past a few hundred thousand tokens each new one cost
    /// tens of µs of probing, under the lock.)
    var deviceOrder: [TokenKey] = []
    var deviceOrderNext = 0
    var channels: [String: ChannelRecord] = [:]
    /// Bundle → channels not deleted.
    var activeChannels: [String: Int] = [:]
    var channelSequence = 0
    var tierOverrides: [TokenKey: Tier]
    /// `faults.unregisteredTokens` and `faults.expiredTokens` by key, for the hot path.
    var unregistered: [TokenKey: Int64] = [:]
    var expired: Set<TokenKey> = []
    var failing: Set<TokenKey> = []
    var deliveries: Ring<DeliveryRecord>
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
        // Room for every view it keeps, made now: a dictionary that doubles rehashes all its
        // entries at once, under the lock, and every request waited (about 15 ms at 100,000
        // tokens, the largest wait a priority-10 probe saw during a flood). Entries are a token and
        // a reference, so 100,000 take a few MB; past a million the rest grows as needed.
        let room = min(settings.maxTrackedDevices, Self.reservedViews)
        devices.reserveCapacity(room)
        deviceOrder.reserveCapacity(room)
        setFaults(c.faults)
    }

    /// Device views made room for at start at most.
    static let reservedViews = 1_000_000

    var stats: SandboxStats {
        var s = counters
        for (status, n) in statusCounts.enumerated() where n > 0 { s.byStatus[status] = n }
        return s
    }

    /// Puts `new` in force; a seed restarts the fault sequence unless `restartingSequence` is false.
    mutating func setFaults(_ new: SandboxFaults, restartingSequence: Bool = true) {
        faults = new.normalized()
        unregistered = Dictionary(faults.unregisteredTokens.compactMap { k, v in TokenKey(hex: k).map { ($0, v) } },
                                  uniquingKeysWith: { a, _ in a })
        expired = Set(faults.expiredTokens.compactMap { TokenKey(hex: $0) })
        failing = Set(faults.failingTokens.compactMap { TokenKey(hex: $0) })
        if restartingSequence, let seed = new.seed { rng = SplitMix64(seed: seed) }
    }

    mutating func markUnregistered(_ key: TokenKey, timestampMillis: Int64) {
        faults.unregisteredTokens[key.hex] = timestampMillis
        unregistered[key] = timestampMillis
    }

    @inline(__always) mutating func countStatus(_ status: Int) {
        if status >= 0 && status < statusCounts.count { statusCounts[status] += 1 }
    }

    // MARK: The prelude every APNs endpoint runs under the lock

    /// Counts the request and stream, applies GOAWAY and per-request faults (those for `kind`), refuses duplicate
    /// headers, then checks the provider token and the connection's token rules. `bundle` is the
    /// app the request is for, when known and allowed (for keys limited to some apps).
    ///
    /// Returns `.verify` before counting anything when the token has never been seen (ECDSA is
    /// too slow to run under the lock): the caller verifies it outside and calls again with
    /// `verified`.
    mutating func gate(_ settings: SandboxSettings, _ kind: SandboxFaults.RequestKind, connection id: UInt64, duplicate: Bool,
                       authorization: ArraySlice<UInt8>?, bundle: Int?, verified: ProviderTokenCheck?, nowMillis now: Int64,
                       effects: inout Effects) -> Gate {
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
            if let inUse = conn.authorization, Bytes.equal(inUse, authorization) {
                current = true
            } else {
                let key = Array(authorization)
                if let cached = tokenCache[key] {
                    check = cached
                } else if let verified {
                    check = verified
                    if tokenCache.count >= settings.tokenCacheCapacity { tokenCache.removeAll(keepingCapacity: true) }
                    tokenCache[key] = verified
                    counters.tokenVerifications += 1
                } else {
                    return .verify(key)
                }
            }
        }

        counters.requests += 1
        conn.streams += 1
        if conn.goneAway { return .stop(Outcome(.shutdown)) }
        if let limit = faults.goAwayAfterStreams, conn.streams >= limit {
            conn.goneAway = true
            effects.fault = .goAway
            counters.goAways += 1
        }

        if faults.drawsPerRequest(kind), let fault = drawFaults(&effects) { return .stop(fault) }

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
        // A signed but absurd `iat` (beyond what milliseconds can hold) is invalid, not a crash.
        let (issuedMillis, overflow) = issuedAt.multipliedReportingOverflow(by: 1000)
        let (age, underflow) = now.subtractingReportingOverflow(issuedMillis)
        if overflow || underflow { return .stop(Outcome(.invalidProviderToken)) }
        if age > settings.maxTokenAgeMillis { return .stop(Outcome(.expiredProviderToken)) }
        if age < -settings.clockSkewMillis { return .stop(Outcome(.invalidProviderToken)) }
        if !settings.keyRestrictions.isEmpty, let restriction = settings.keyRestrictions[keyID] {
            if let env = restriction.environment, env != settings.configuration.environment {
                return .stop(Outcome(.badEnvironmentKeyIdInToken))
            }
            if let allowed = restriction.bundleIDs, let bundle, !allowed.contains(settings.bundleNames[bundle]) {
                return .stop(Outcome(.forbidden))
            }
        }
        if current { return .pass }
        switch Self.adopt(conn, authorization: Array(authorization), keyID: keyID, issuedAt: issuedAt, nowMillis: now,
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
            effects.fault = .reset
            return Outcome(status: 0)
        }
        if faults.lostAnswerRate > 0, rng.nextUnit() < faults.lostAnswerRate { effects.loseAnswer = true }
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
    static func adopt(_ conn: ConnectionRecord, authorization: [UInt8], keyID: String, issuedAt: Int64, nowMillis: Int64,
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
    @inline(__always) mutating func finish(_ o: consuming Outcome, effects: Effects) -> Locked {
        o.effects = effects
        if effects.fault != .reset { countStatus(o.status) }
        if effects.loseAnswer {
            counters.faultsInjected += 1
            counters.answersLost += 1
        }
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
    mutating func deviceRecord(_ token: TokenKey, bundle: Int, settings: SandboxSettings, nowMillis: Int64) -> DeviceRecord? {
        if let record = devices[token] { return record.bundle == bundle ? record : nil }
        if devices.count >= settings.maxTrackedDevices, !deviceOrder.isEmpty {
            devices.removeValue(forKey: deviceOrder[deviceOrderNext])
            deviceOrder[deviceOrderNext] = token
            deviceOrderNext = deviceOrderNext + 1 == deviceOrder.count ? 0 : deviceOrderNext + 1
        } else {
            deviceOrder.append(token)
        }
        let c = settings.configuration
        let tier = tierOverrides.isEmpty ? c.defaultTier : tierOverrides[token] ?? c.defaultTier
        let record = DeviceRecord(DeviceView(kind: .device, id: token.hex, bundleID: settings.bundleNames[bundle], tier: tier,
                                             budgetPerHour: c.budget(for: tier), nowMillis: nowMillis), bundle: bundle)
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
