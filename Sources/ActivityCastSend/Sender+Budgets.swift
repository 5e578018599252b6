import ActivityCastCore
import APNsCore
import Foundation
import RedisClient

extension Sender {

    /// The budget's decision for each audience `plan` reaches — the key's channel (when it has
    /// one) and each per-token tier — in one round trip, on Redis's clock (one clock for the
    /// fleet). A coalesced state goes on the fleet's schedule of due flushes. `entry` names the
    /// event's entry: decided again after a crash before its fan-out was recorded, it isn't
    /// charged twice.
    /// The audiences an update decided in its merge's round trip is decided for, in order.
    func guardedAudiences(_ plan: Plan) -> [BudgetAudience] {
        [.channel(plan.storagePolicy), .tier(.standard), .tier(.frequent)]
    }

    /// An update's decisions for `guardedAudiences`, to pipeline behind its merge (see
    /// `BudgetScripts.decide`'s guards); none for other events (a start isn't decided, an end
    /// waits for its settle time).
    /// `tiers` false: the channel's alone (`AudienceMemory`).
    func decideCommands(_ plan: Plan, entry: String, redelivered: Bool, tiers: Bool = true) -> [RedisCommand] {
        guard plan.event == .update, let event = BudgetEvent(plan) else { return [] }
        let envs = apns.environments.map(\.rawValue)
        return guardedAudiences(plan).prefix(tiers ? 3 : 1).map { audience in
            var guards = BudgetGuards(state: keys.state(plan.key), fanout: keys.fanout(plan.key, entry))
            if case .channel = audience {
                guards.channels = (channels.hashKey(plan.key), envs)
            } else {
                guards.audience = (channels.hashKey(plan.key), envs, keys.direct(plan.key))
            }
            return BudgetScripts.decideCommand(budgetKey: keys.budget(plan.key, audience), event: event, entry: entry, nowMillis: budgetNow(),
                                               policy: configuration.budgets.audience(audience), ttlSeconds: configuration.stateTTLSeconds,
                                               guards: guards, shown: shown(plan, redelivered: redelivered))
        }
    }

    /// `decided`: the replies to `decideCommands` (made with the merge): a tier skipped there is
    /// stale for this event (a newer one was merged meanwhile, and carries its state); a channel
    /// skipped there while the tiers weren't had none live then (the key's first event made it
    /// since), and is decided now.
    /// A tier with nobody to reach per token there (every device on a live channel) isn't
    /// decided: `nobody` lists them. `tiersOnly`: the channel was decided already.
    /// Returns each audience's priority, and the audiences whose decision took a token (given
    /// back with `refund` if their push doesn't go out).
    /// `nobodyKnown`: the merge's round trip decided the channel alone and found the key's
    /// per-token audience empty with every channel live: the tiers have nobody to reach.
    func decideBudgets(_ plan: Plan, entry: String, redelivered: Bool, channel: Bool, decided: [RESPValue]? = nil, tiersOnly: Bool = false,
                       nobodyKnown: Bool = false, trail: EventTrail? = nil) async throws
        -> (priorities: AudiencePriorities, spent: [BudgetAudience], nobody: Bool) {
        guard let event = BudgetEvent(plan) else { return (AudiencePriorities(all: PushBuilder.priority(plan)), [], false) }
        var audiences: [BudgetAudience] = [.tier(.standard), .tier(.frequent)]
        if channel, !tiersOnly { audiences.insert(.channel(plan.storagePolicy), at: 0) }
        var known: [BudgetAudience: BudgetReply] = [:]
        var skipped: Set<BudgetAudience> = []
        var nobody: Set<BudgetAudience> = []
        if let decided {
            for (audience, reply) in zip(guardedAudiences(plan), decided) {
                switch try BudgetScripts.parseGuarded(reply) {
                case .decided(let r): known[audience] = r
                case .skipped: skipped.insert(audience)
                case .noAudience: nobody.insert(audience)
                }
            }
            // The channel is decided first: when the standard tier, decided after it, passed the
            // guards they share (a newer `_ts` or a recorded `b` stays), the channel was skipped
            // only for having none live.
            if !skipped.contains(.tier(.standard)) { skipped.remove(.channel(plan.storagePolicy)) }
            // The channel decided alone: the tiers have nobody to reach, or are asked below.
            if decided.count == 1, nobodyKnown { nobody.formUnion([.tier(.standard), .tier(.frequent)]) }
        }
        let policy = configuration.budgets
        let ask = audiences.filter { known[$0] == nil && !skipped.contains($0) && !nobody.contains($0) }
        let asked = try await redis.pipeline(ask.map { audience in
            BudgetScripts.decideCommand(budgetKey: keys.budget(plan.key, audience), event: event, entry: entry, nowMillis: budgetNow(),
                                        policy: policy.audience(audience), ttlSeconds: configuration.stateTTLSeconds,
                                        shown: shown(plan, redelivered: redelivered))
        })
        for (audience, reply) in zip(ask, asked) { known[audience] = try BudgetScripts.parse(reply) }
        var decisions: [BudgetAudience: BudgetDecision] = [:]
        var due: [any RedisArgument] = []
        for audience in audiences {
            let name = audience.trailName
            if nobody.contains(audience) {
                trail?.note { $0.audience(name, "none", why: "no device of it per token (every device is on a live channel)") }
                continue
            }
            // Skipped in the merge's round trip: a newer event carries this one's state.
            guard let reply = known[audience] else {
                decisions[audience] = .stale
                trail?.note { $0.audience(name, "stale", why: "a newer event of the key was decided first and carries this state") }
                continue
            }
            let decision = reply.decision
            decisions[audience] = decision
            trail?.note { $0.audience(name, decision.trailName(critical: event.isCritical), ticks: reply.ticksLeft,
                                      capacity: policy.audience(audience).bucket.capacity, why: decision.why(critical: event.isCritical)) }
            switch decision {
            case .priority10: stats.countDecision(audience, "p10")
            case .priority5: stats.countDecision(audience, event.isCritical ? "downgraded" : "p5")
            case .coalesce(let at):
                stats.countDecision(audience, "coalesced")
                due += [at, "\(plan.key)|\(audience.name)"]
            case .stale: stats.countDecision(audience, "stale")
            case .unchanged: stats.countDecision(audience, "unchanged")
            }
        }
        if !due.isEmpty {
            let reply = try await redis.send(RedisCommand("ZADD", [keys.budgetDue] + due))
            if let e = reply.errorMessage { throw RedisError(.server, "scheduling a coalesced state: \(e)") }
        }
        if !tiersOnly { ctx.nobodyPerToken.note(plan.key, nobody: !nobody.isEmpty) }
        return (AudiencePriorities(decisions), audiences.filter { known[$0]?.spent == true }, !nobody.isEmpty)
    }

}

extension BudgetAudience {
    /// `channel`, `standard` or `frequent`: the trail's name of the audience.
    var trailName: String {
        switch self {
        case .tier(let t): t.rawValue
        case .channel: "channel"
        }
    }
}

extension BudgetDecision {
    /// `p10`, `p5`, `downgraded` (a critical update decided at 5), `coalesced`, `stale`, `unchanged`.
    func trailName(critical: Bool) -> String {
        switch self {
        case .priority10: "p10"
        case .priority5: critical ? "downgraded" : "p5"
        case .coalesce: "coalesced"
        case .stale: "stale"
        case .unchanged: "unchanged"
        }
    }

    /// Why, in words, for the trail.
    func why(critical: Bool) -> String? {
        switch self {
        case .priority10: nil
        case .priority5: critical ? "its priority-10 budget is spent (tokens left at or below the end's reserve): sent at 5 without its alert" : nil
        case .coalesce(let at): "within the spacing of routine updates: the state waits for a flush due at \(at)"
        case .stale: "older than what the audience was sent"
        case .unchanged: "the audience shows this state already: not sent"
        }
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

/// How a flush of one coalesced state ended.
public enum FlushResult: Sendable, Equatable {
    /// Sent at priority 5 (for a tier: its fan-out began; slice 0 was sent here).
    case sent
    /// Nothing to send: another worker flushed it, a newer push carried it, or the activity ended.
    case nothing
    /// Not due yet (a push since moved the spacing on): due then (ms, Redis's clock).
    case later(dueAtMillis: Int64)
    /// A fan-out of the key is under way: try again shortly.
    case busy
}

