/// Faults the sandbox injects, changeable at run time (`SandboxState.updateFaults`, or
/// `POST /sandbox/faults` with this type as JSON: keys as below, any omitted key takes its
/// default, so `{"tooManyRequestsRate":0.1}` alone is valid).
///
/// Per-request faults are decided with one random draw each, after routing and before any
/// validation, in this order: `resetRate`; then one draw split between 429, 500 and 503 (so each
/// rate is that outcome's share of requests, as long as they sum to at most 1; past 1 the later
/// ones get what is left); then `slowResponseRate`, which delays whatever the answer is. A rate
/// of 0 never fires and 1 always does. `only` limits the per-request faults to some kinds of
/// request (`{"slowResponseRate":1,"slowResponseDelayMillis":300,"only":["broadcast"]}`).
public struct SandboxFaults: Sendable, Codable, Equatable {
    /// The kinds of request per-request faults can be limited to.
    public enum RequestKind: String, Sendable, Codable, CaseIterable {
        /// Pushes to device tokens (updates, ends, push-to-start).
        case device
        /// Broadcasts to channels.
        case broadcast
        /// Channel management (create, list, read, delete).
        case channels
    }

    /// Share of requests answered 429 `TooManyRequests`.
    public var tooManyRequestsRate: Double
    /// Share answered 500 `InternalServerError`.
    public var internalErrorRate: Double
    /// Share answered 503 `ServiceUnavailable`.
    public var unavailableRate: Double
    /// Share answered only after `slowResponseDelayMillis`.
    public var slowResponseRate: Double
    public var slowResponseDelayMillis: Int64
    /// After this many streams on a connection, the last one's response carries a GOAWAY
    /// (`{"reason":"Shutdown"}`); streams after that on the same connection answer 503 `Shutdown`.
    public var goAwayAfterStreams: Int?
    /// Share of requests that reset the connection instead of being answered.
    public var resetRate: Double
    /// Device tokens (hex; stored lowercase) that answer 410 `Unregistered` with this timestamp
    /// (ms since 1970): the app was uninstalled or the token otherwise died.
    public var unregisteredTokens: [String: Int64]
    /// Device tokens that answer 410 `ExpiredToken`.
    public var expiredTokens: Set<String>
    /// Seeds the fault generator when set, so a run's faults repeat (single-threaded callers).
    /// Each `updateFaults` with a seed restarts the sequence.
    public var seed: UInt64?
    /// The kinds of request that draw per-request faults (reset, 429/500/503, slow); empty: all.
    public var only: Set<RequestKind>

    public init(tooManyRequestsRate: Double = 0, internalErrorRate: Double = 0, unavailableRate: Double = 0,
                slowResponseRate: Double = 0, slowResponseDelayMillis: Int64 = 0, goAwayAfterStreams: Int? = nil,
                resetRate: Double = 0, unregisteredTokens: [String: Int64] = [:], expiredTokens: Set<String> = [],
                seed: UInt64? = nil, only: Set<RequestKind> = []) {
        self.tooManyRequestsRate = tooManyRequestsRate; self.internalErrorRate = internalErrorRate
        self.unavailableRate = unavailableRate; self.slowResponseRate = slowResponseRate
        self.slowResponseDelayMillis = slowResponseDelayMillis; self.goAwayAfterStreams = goAwayAfterStreams
        self.resetRate = resetRate; self.unregisteredTokens = unregisteredTokens; self.expiredTokens = expiredTokens
        self.seed = seed
        self.only = only
    }

    private enum CodingKeys: String, CodingKey {
        case tooManyRequestsRate, internalErrorRate, unavailableRate, slowResponseRate, slowResponseDelayMillis
        case goAwayAfterStreams, resetRate, unregisteredTokens, expiredTokens, seed, only
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            tooManyRequestsRate: try c.decodeIfPresent(Double.self, forKey: .tooManyRequestsRate) ?? 0,
            internalErrorRate: try c.decodeIfPresent(Double.self, forKey: .internalErrorRate) ?? 0,
            unavailableRate: try c.decodeIfPresent(Double.self, forKey: .unavailableRate) ?? 0,
            slowResponseRate: try c.decodeIfPresent(Double.self, forKey: .slowResponseRate) ?? 0,
            slowResponseDelayMillis: try c.decodeIfPresent(Int64.self, forKey: .slowResponseDelayMillis) ?? 0,
            goAwayAfterStreams: try c.decodeIfPresent(Int.self, forKey: .goAwayAfterStreams),
            resetRate: try c.decodeIfPresent(Double.self, forKey: .resetRate) ?? 0,
            unregisteredTokens: try c.decodeIfPresent([String: Int64].self, forKey: .unregisteredTokens) ?? [:],
            expiredTokens: try c.decodeIfPresent(Set<String>.self, forKey: .expiredTokens) ?? [],
            seed: try c.decodeIfPresent(UInt64.self, forKey: .seed),
            only: try c.decodeIfPresent(Set<RequestKind>.self, forKey: .only) ?? [])
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(tooManyRequestsRate, forKey: .tooManyRequestsRate)
        try c.encode(internalErrorRate, forKey: .internalErrorRate)
        try c.encode(unavailableRate, forKey: .unavailableRate)
        try c.encode(slowResponseRate, forKey: .slowResponseRate)
        try c.encode(slowResponseDelayMillis, forKey: .slowResponseDelayMillis)
        try c.encodeIfPresent(goAwayAfterStreams, forKey: .goAwayAfterStreams)
        try c.encode(resetRate, forKey: .resetRate)
        try c.encode(unregisteredTokens, forKey: .unregisteredTokens)
        try c.encode(expiredTokens.sorted(), forKey: .expiredTokens)
        try c.encodeIfPresent(seed, forKey: .seed)
        try c.encode(only.map(\.rawValue).sorted(), forKey: .only)
    }

    /// Why these faults can't be used, or nil: rates must be within 0…1, the delay and the
    /// GOAWAY stream count non-negative and positive, tokens hex.
    public var problem: String? {
        let rates = [("tooManyRequestsRate", tooManyRequestsRate), ("internalErrorRate", internalErrorRate),
                     ("unavailableRate", unavailableRate), ("slowResponseRate", slowResponseRate), ("resetRate", resetRate)]
        for (name, rate) in rates where !(rate >= 0 && rate <= 1) {
            return "\(name) must be between 0 and 1, got \(rate)"
        }
        if slowResponseDelayMillis < 0 { return "slowResponseDelayMillis must not be negative" }
        if let n = goAwayAfterStreams, n < 1 { return "goAwayAfterStreams must be at least 1" }
        for token in unregisteredTokens.keys where DeviceToken.normalize(Substring(token)) == nil {
            return "unregisteredTokens: '\(token.prefix(80))' is not a device token"
        }
        for token in expiredTokens where DeviceToken.normalize(Substring(token)) == nil {
            return "expiredTokens: '\(token.prefix(80))' is not a device token"
        }
        return nil
    }

    /// The same faults with device tokens lowercase (the form the sandbox looks them up in).
    func normalized() -> SandboxFaults {
        var copy = self
        copy.unregisteredTokens = Dictionary(unregisteredTokens.map { (DeviceToken.normalize(Substring($0.key)) ?? $0.key, $0.value) },
                                             uniquingKeysWith: { a, _ in a })
        copy.expiredTokens = Set(expiredTokens.map { DeviceToken.normalize(Substring($0)) ?? $0 })
        return copy
    }

    /// Whether a request of `kind` draws per-request faults (keeps the fault-free hot path draw-free).
    func drawsPerRequest(_ kind: RequestKind) -> Bool {
        (resetRate > 0 || tooManyRequestsRate > 0 || internalErrorRate > 0 || unavailableRate > 0 || slowResponseRate > 0)
            && (only.isEmpty || only.contains(kind))
    }
}
