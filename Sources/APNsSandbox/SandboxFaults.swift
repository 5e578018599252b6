/// Faults the sandbox injects, changeable at run time: `SandboxState.updateFaults`, or
/// `POST /sandbox/faults` with this type as JSON (keys as below), which replaces the whole set —
/// any omitted key takes its default, so `{"tooManyRequestsRate":0.1}` alone is valid and turns
/// every other fault off; or `PATCH /sandbox/faults`, which changes only the keys given (`null`
/// resets one to its default) and keeps the others (`SandboxState.patchFaults`). Both answer
/// with the whole set now in force, every key named.
///
/// Per-request faults are decided with one random draw each, after routing and before any
/// validation, in this order: `resetRate`; then `lostAnswerRate` (the request goes on, its answer
/// is dropped at the end); then one draw split between 429, 500 and 503 (so each
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
    /// Share of requests that are processed as usual — an accepted push is delivered and shown —
    /// and whose answer is then lost: the connection is reset instead of answering. What a real
    /// network does when it fails after APNs acted: the sender can't know the push went out.
    public var lostAnswerRate: Double
    /// Device tokens (hex; stored lowercase) that answer 410 `Unregistered` with this timestamp
    /// (ms since 1970): the app was uninstalled or the token otherwise died.
    public var unregisteredTokens: [String: Int64]
    /// Device tokens that answer 410 `ExpiredToken`.
    public var expiredTokens: Set<String>
    /// Device tokens (hex) whose pushes answer 500 `InternalServerError`, and channel ids (as
    /// created) whose broadcasts do: APNs failing a request for itself alone while it answers
    /// the others.
    public var failingTokens: Set<String>
    public var failingChannels: Set<String>
    /// Seeds the fault generator when set, so a run's faults repeat (single-threaded callers).
    /// Each `updateFaults` with a seed restarts the sequence.
    public var seed: UInt64?
    /// The kinds of request that draw per-request faults (reset, 429/500/503, slow); empty: all.
    public var only: Set<RequestKind>

    public init(tooManyRequestsRate: Double = 0, internalErrorRate: Double = 0, unavailableRate: Double = 0,
                slowResponseRate: Double = 0, slowResponseDelayMillis: Int64 = 0, goAwayAfterStreams: Int? = nil,
                resetRate: Double = 0, lostAnswerRate: Double = 0, unregisteredTokens: [String: Int64] = [:], expiredTokens: Set<String> = [],
                failingTokens: Set<String> = [], failingChannels: Set<String> = [], seed: UInt64? = nil, only: Set<RequestKind> = []) {
        self.tooManyRequestsRate = tooManyRequestsRate; self.internalErrorRate = internalErrorRate
        self.unavailableRate = unavailableRate; self.slowResponseRate = slowResponseRate
        self.slowResponseDelayMillis = slowResponseDelayMillis; self.goAwayAfterStreams = goAwayAfterStreams
        self.resetRate = resetRate; self.lostAnswerRate = lostAnswerRate; self.unregisteredTokens = unregisteredTokens; self.expiredTokens = expiredTokens
        self.failingTokens = failingTokens; self.failingChannels = failingChannels
        self.seed = seed
        self.only = only
    }

    private enum CodingKeys: String, CodingKey {
        case tooManyRequestsRate, internalErrorRate, unavailableRate, slowResponseRate, slowResponseDelayMillis
        case goAwayAfterStreams, resetRate, lostAnswerRate, unregisteredTokens, expiredTokens, failingTokens, failingChannels, seed, only
    }

    /// The JSON keys, as `POST`/`PATCH /sandbox/faults` take them.
    public static let keys: Set<String> = [
        "tooManyRequestsRate", "internalErrorRate", "unavailableRate", "slowResponseRate", "slowResponseDelayMillis",
        "goAwayAfterStreams", "resetRate", "lostAnswerRate", "unregisteredTokens", "expiredTokens", "failingTokens", "failingChannels", "seed", "only",
    ]

    /// Decoding starts from `SandboxFaults.patchBase` in the decoder's `userInfo` (a `PATCH`:
    /// the faults in force), else from the defaults (a `POST`). A key given replaces the base's
    /// value; `null` resets it to its default; a key not given keeps the base's.
    public static let patchBase = CodingUserInfoKey(rawValue: "SandboxFaults.patchBase")!

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let base = decoder.userInfo[Self.patchBase] as? SandboxFaults ?? SandboxFaults()
        let defaults = SandboxFaults()
        func value<T: Decodable>(_ type: T.Type, _ key: CodingKeys, _ keep: T, _ reset: T) throws -> T {
            guard c.contains(key) else { return keep }
            return try c.decodeIfPresent(type, forKey: key) ?? reset
        }
        func optional<T: Decodable>(_ type: T.Type, _ key: CodingKeys, _ keep: T?) throws -> T? {
            c.contains(key) ? try c.decodeIfPresent(type, forKey: key) : keep
        }
        self.init(
            tooManyRequestsRate: try value(Double.self, .tooManyRequestsRate, base.tooManyRequestsRate, defaults.tooManyRequestsRate),
            internalErrorRate: try value(Double.self, .internalErrorRate, base.internalErrorRate, defaults.internalErrorRate),
            unavailableRate: try value(Double.self, .unavailableRate, base.unavailableRate, defaults.unavailableRate),
            slowResponseRate: try value(Double.self, .slowResponseRate, base.slowResponseRate, defaults.slowResponseRate),
            slowResponseDelayMillis: try value(Int64.self, .slowResponseDelayMillis, base.slowResponseDelayMillis,
                                               defaults.slowResponseDelayMillis),
            goAwayAfterStreams: try optional(Int.self, .goAwayAfterStreams, base.goAwayAfterStreams),
            resetRate: try value(Double.self, .resetRate, base.resetRate, defaults.resetRate),
            lostAnswerRate: try value(Double.self, .lostAnswerRate, base.lostAnswerRate, defaults.lostAnswerRate),
            unregisteredTokens: try value([String: Int64].self, .unregisteredTokens, base.unregisteredTokens, defaults.unregisteredTokens),
            expiredTokens: try value(Set<String>.self, .expiredTokens, base.expiredTokens, defaults.expiredTokens),
            failingTokens: try value(Set<String>.self, .failingTokens, base.failingTokens, defaults.failingTokens),
            failingChannels: try value(Set<String>.self, .failingChannels, base.failingChannels, defaults.failingChannels),
            seed: try optional(UInt64.self, .seed, base.seed),
            only: try value(Set<RequestKind>.self, .only, base.only, defaults.only))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(tooManyRequestsRate, forKey: .tooManyRequestsRate)
        try c.encode(internalErrorRate, forKey: .internalErrorRate)
        try c.encode(unavailableRate, forKey: .unavailableRate)
        try c.encode(slowResponseRate, forKey: .slowResponseRate)
        try c.encode(slowResponseDelayMillis, forKey: .slowResponseDelayMillis)
        // Every key, unset ones as null: an answer names the whole set in force.
        try c.encode(goAwayAfterStreams, forKey: .goAwayAfterStreams)
        try c.encode(resetRate, forKey: .resetRate)
        try c.encode(lostAnswerRate, forKey: .lostAnswerRate)
        try c.encode(unregisteredTokens, forKey: .unregisteredTokens)
        try c.encode(expiredTokens.sorted(), forKey: .expiredTokens)
        try c.encode(failingTokens.sorted(), forKey: .failingTokens)
        try c.encode(failingChannels.sorted(), forKey: .failingChannels)
        try c.encode(seed, forKey: .seed)
        try c.encode(only.map(\.rawValue).sorted(), forKey: .only)
    }

    /// Why these faults can't be used, or nil: rates must be within 0…1, the delay and the
    /// GOAWAY stream count non-negative and positive, tokens hex.
    public var problem: String? {
        let rates = [("tooManyRequestsRate", tooManyRequestsRate), ("internalErrorRate", internalErrorRate),
                     ("unavailableRate", unavailableRate), ("slowResponseRate", slowResponseRate), ("resetRate", resetRate),
                     ("lostAnswerRate", lostAnswerRate)]
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
        for token in failingTokens where DeviceToken.normalize(Substring(token)) == nil {
            return "failingTokens: '\(token.prefix(80))' is not a device token"
        }
        return nil
    }

    /// The same faults with device tokens lowercase (the form the sandbox looks them up in).
    func normalized() -> SandboxFaults {
        var copy = self
        copy.unregisteredTokens = Dictionary(unregisteredTokens.map { (DeviceToken.normalize(Substring($0.key)) ?? $0.key, $0.value) },
                                             uniquingKeysWith: { a, _ in a })
        copy.expiredTokens = Set(expiredTokens.map { DeviceToken.normalize(Substring($0)) ?? $0 })
        copy.failingTokens = Set(failingTokens.map { DeviceToken.normalize(Substring($0)) ?? $0 })
        return copy
    }

    /// Whether a request of `kind` draws per-request faults (keeps the fault-free hot path draw-free).
    func drawsPerRequest(_ kind: RequestKind) -> Bool {
        (resetRate > 0 || lostAnswerRate > 0 || tooManyRequestsRate > 0 || internalErrorRate > 0 || unavailableRate > 0 || slowResponseRate > 0)
            && (only.isEmpty || only.contains(kind))
    }
}

/// Why a fault set can't be used (`SandboxFaults.problem`).
public struct SandboxFaultsProblem: Error, CustomStringConvertible {
    public var description: String
}
