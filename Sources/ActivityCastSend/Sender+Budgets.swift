import ActivityCastCore
import RedisClient

extension Sender {
    /// The budget's decision for each audience `plan` reaches — the key's channel (when it has
    /// one) and each per-token tier — in one round trip, on Redis's clock (one clock for the
    /// fleet). A coalesced state goes on the fleet's schedule of due flushes.
    func decideBudgets(_ plan: Plan, channel: Bool) async throws -> AudiencePriorities {
        guard let event = BudgetEvent(plan) else { return AudiencePriorities(all: PushBuilder.priority(plan)) }
        var audiences: [BudgetAudience] = [.tier(.standard), .tier(.frequent)]
        if channel { audiences.insert(.channel(plan.storagePolicy), at: 0) }
        let policy = configuration.budgets
        let replies = try await redis.pipeline(audiences.map { audience in
            BudgetScripts.decideCommand(budgetKey: keys.budget(plan.key, audience), event: event, nowMillis: nil,
                                        policy: policy.audience(audience), ttlSeconds: configuration.stateTTLSeconds)
        })
        var decisions: [BudgetAudience: BudgetDecision] = [:]
        var due: [any RedisArgument] = []
        for (audience, reply) in zip(audiences, replies) {
            let decision = try BudgetScripts.parse(reply).decision
            decisions[audience] = decision
            switch decision {
            case .priority10: stats.countDecision(audience, "p10")
            case .priority5: stats.countDecision(audience, event.isCritical ? "downgraded" : "p5")
            case .coalesce(let at):
                stats.countDecision(audience, "coalesced")
                due += [at, "\(plan.key)|\(audience.name)"]
            case .stale: stats.countDecision(audience, "stale")
            }
        }
        if !due.isEmpty {
            let reply = try await redis.send(RedisCommand("ZADD", [keys.budgetDue] + due))
            if let e = reply.errorMessage { throw RedisError(.server, "scheduling a coalesced state: \(e)") }
        }
        return AudiencePriorities(decisions)
    }
}

extension BudgetEvent {
    /// A critical update or an end: decided at 5, it was downgraded.
    var isCritical: Bool {
        switch self {
        case .update(_, let priority): priority == .critical
        case .end: true
        case .flush: false
        }
    }
}
