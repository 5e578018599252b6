import ActivityCastCore

/// What the budget decided for one event, per audience: the APNs priority each audience's push
/// goes at, nil where it gets nothing now (its state was coalesced, or is stale for it). A
/// fan-out records the tiers' priorities, so its slices never ask the budget again.
public struct AudiencePriorities: Equatable, Sendable {
    /// The key's broadcast channel.
    public var channel: Int?
    public var standard: Int?
    public var frequent: Int?

    public init(channel: Int? = nil, standard: Int? = nil, frequent: Int? = nil) {
        self.channel = channel
        self.standard = standard
        self.frequent = frequent
    }

    /// The highest priority of the per-token audiences (0: neither has one): a fan-out's.
    public var highest: Int { max(standard ?? 0, frequent ?? 0) }

    /// Every audience at one priority (what a plan means without budgets).
    public init(all priority: Int) { self.init(channel: priority, standard: priority, frequent: priority) }

    /// From the decisions of the audiences asked; an audience not asked gets nothing.
    public init(_ decisions: [BudgetAudience: BudgetDecision]) {
        func priority(_ d: BudgetDecision?) -> Int? {
            switch d {
            case .priority10?: 10
            case .priority5?: 5
            case .coalesce?, .stale?, .unchanged?, nil: nil
            }
        }
        self.init(channel: priority(decisions.first { if case .channel = $0.key { true } else { false } }?.value),
                  standard: priority(decisions[.tier(.standard)]), frequent: priority(decisions[.tier(.frequent)]))
    }

    public func tier(_ tier: Tier) -> Int? { tier == .standard ? standard : frequent }

    /// Some tier's devices get a per-token push now.
    public var anyTokens: Bool { standard != nil || frequent != nil }

    /// The tiers' priorities as the fan-out hash keeps them: `<standard> <frequent>`, 0 for none.
    public var encodedTiers: String { "\(standard ?? 0) \(frequent ?? 0)" }

    /// From `encodedTiers`; nil when it isn't one.
    public init?(encodedTiers: String) {
        let parts = encodedTiers.split(separator: " ").map { Int($0) }
        guard parts.count == 2, let s = parts[0], let f = parts[1], [0, 5, 10].contains(s), [0, 5, 10].contains(f) else { return nil }
        self.init(channel: nil, standard: s == 0 ? nil : s, frequent: f == 0 ? nil : f)
    }
}

extension BudgetEvent {
    /// What a plan asks of the budget: an end, or an update of its priority class; nil for
    /// starts (push-to-start has its own per-device budget).
    public init?(_ plan: Plan) {
        switch plan.event {
        case .end?: self = .end(millis: plan.timestampMillis)
        case .update?: self = .update(millis: plan.timestampMillis, priority: plan.priority)
        case .start?, nil: return nil
        }
    }
}

/// The clock budget decisions use when not Redis's: a compressed one for tests that play hours
/// of a match in seconds. `ACTIVITYCAST_TEST_BUDGET_CLOCK=<epoch ms>x<scale>`: from `epoch` on,
/// each real millisecond counts `scale`; every worker of a test is given the same value.
public struct BudgetClock: Sendable, Equatable {
    public var epochMillis: Int64
    public var scale: Int64

    public init(epochMillis: Int64, scale: Int64) {
        self.epochMillis = epochMillis
        self.scale = scale
    }

    /// From `<epoch ms>x<scale>`; nil when it isn't one.
    public init?(parsing text: String) {
        let parts = text.split(separator: "x")
        guard parts.count == 2, let epoch = Int64(parts[0]), let scale = Int64(parts[1]), epoch > 0, (1...100_000).contains(scale) else { return nil }
        self.init(epochMillis: epoch, scale: scale)
    }

    public func now(wallMillis: Int64) -> Int64 { epochMillis + (wallMillis - epochMillis) * scale }

    /// A real duration on this clock (ms).
    public func span(_ real: Duration) -> Int64 { real.milliseconds * scale }
}
