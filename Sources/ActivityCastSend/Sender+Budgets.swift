import ActivityCastCore
import APNsCore
import Foundation
import RedisClient

extension Sender {
    /// Now on the budget's clock: nil for Redis's.
    public func budgetNow() -> Int64? {
        configuration.budgetClock.map { $0.now(wallMillis: Int64(Date().timeIntervalSince1970 * 1000)) }
    }

    /// A real duration on the budget's clock (ms): leases and reschedules on the fleet's schedule.
    public func budgetSpan(_ real: Duration) -> Int64 { configuration.budgetClock?.span(real) ?? real.milliseconds }

    /// The budget's decision for each audience `plan` reaches — the key's channel (when it has
    /// one) and each per-token tier — in one round trip, on Redis's clock (one clock for the
    /// fleet). A coalesced state goes on the fleet's schedule of due flushes. `entry` names the
    /// event's entry: decided again after a crash before its fan-out was recorded, it isn't
    /// charged twice.
    /// The audiences an update decided in its merge's round trip is decided for, in order.
    private func guardedAudiences(_ plan: Plan) -> [BudgetAudience] {
        [.channel(plan.storagePolicy), .tier(.standard), .tier(.frequent)]
    }

    /// An update's decisions for `guardedAudiences`, to pipeline behind its merge (see
    /// `BudgetScripts.decide`'s guards); none for other events (a start isn't decided, an end
    /// waits for its settle time).
    func decideCommands(_ plan: Plan, entry: String, redelivered: Bool) -> [RedisCommand] {
        guard plan.event == .update, let event = BudgetEvent(plan) else { return [] }
        let envs = apns.environments.map(\.rawValue)
        return guardedAudiences(plan).map { audience in
            var guards = BudgetGuards(state: stateKey(plan.key), fanout: fanKey(plan.key, entry))
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

    /// What `plan`'s push would show, for the budget to send nothing to an audience that shows it
    /// already (`Shown`). A redelivered entry is never taken for unchanged: its first delivery
    /// may have recorded the state as shown and died before the push went out.
    func shown(_ plan: Plan, redelivered: Bool) -> (state: String, quiet: Bool, refreshMillis: Int64?) {
        (stateKey(plan.key), plan.alert == nil && !redelivered, plan.staleAfterSeconds.map { $0 * 500 })
    }

    /// `decided`: the replies to `decideCommands` (made with the merge): a tier skipped there is
    /// stale for this event (a newer one was merged meanwhile, and carries its state); a channel
    /// skipped there while the tiers weren't had none live then (the key's first event made it
    /// since), and is decided now.
    /// A tier with nobody to reach per token there (every device on a live channel) isn't
    /// decided: `nobody` lists them. `tiersOnly`: the channel was decided already.
    /// Returns each audience's priority, and the audiences whose decision took a token (given
    /// back with `refund` if their push doesn't go out).
    func decideBudgets(_ plan: Plan, entry: String, redelivered: Bool, channel: Bool, decided: [RESPValue]? = nil, tiersOnly: Bool = false) async throws
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
        for audience in audiences where !nobody.contains(audience) {
            // Skipped in the merge's round trip: a newer event carries this one's state.
            guard let decision = known[audience]?.decision else {
                decisions[audience] = .stale
                continue
            }
            decisions[audience] = decision
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
        return (AudiencePriorities(decisions), audiences.filter { known[$0]?.spent == true }, !nobody.isEmpty)
    }

    /// A flush's fan-out found still under way when the key's next flush comes due. It has no
    /// entry to be delivered again: if its worker couldn't hand slice 0 back to the stream, or
    /// queue the other slices (Redis failing at that moment), nobody else would finish it, and it
    /// would hold the key's flushes back for good. So the next flush queues the slices that never
    /// were and sends slice 0 alongside whoever has it: its batches are handed out once and
    /// leased (a batch in flight elsewhere answers `busy`), so helping re-sends nothing.
    func helpFlush(_ key: ActivityKey, gen: String, slices n: Int, queued: Bool) async throws {
        if n > 1, !queued {
            let replies = try await redis.pipeline(queueOthers(key, gen: gen, slices: n))
            if let bad = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "queueing a flush's slices: \(bad)") }
        }
        var summary = SendSummary()
        let slice = SliceRef(key: key, gen: gen, index: 0, count: n)
        if try await runSlice(slice, summary: &summary, acknowledges: false, shouldStop: { [self] in stopping.load(ordering: .relaxed) }) == .paused {
            _ = try await redis.send(queueCommand(slice))
        }
    }

    /// A fan-out whose last slice is final: the tiers whose decision took a token (`spent` on the
    /// record) and none of whose devices was sent the push at 10 (`s10:<tier>` never set:
    /// superseded by a newer fan-out first, or no device of that tier) give it back. Run by the
    /// one worker that ended the fan-out; a failure here leaves the token spent (logged).
    func refundUnsent(_ key: ActivityKey, _ fan: String) async {
        do {
            let v = try await redis.send(RedisCommand("HMGET", fan, "spent", "s10:standard", "s10:frequent")).array ?? []
            guard let spent = v.first?.string, !spent.isEmpty else { return }
            let unsent = spent.split(separator: " ").compactMap { Tier(rawValue: String($0)) }.filter { tier in
                (tier == .standard ? v[1] : v[2]).string != "1"
            }
            _ = try await redis.send(.script(FanoutScripts.mark, keys: [fan], args: ["spent", ""]))
            try await refund(key, unsent.map { .tier($0) })
        } catch {
            logger.warning("giving back a superseded fan-out's budget tokens failed", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }

    /// Gives back the tokens `audiences`' decisions took for pushes at 10 that didn't go out.
    func refund(_ key: ActivityKey, _ audiences: [BudgetAudience]) async throws {
        guard !audiences.isEmpty else { return }
        let replies = try await redis.pipeline(audiences.map { audience in
            .script(BudgetScripts.refund, keys: [keys.budget(key, audience)], args: [configuration.budgets.audience(audience).bucket.capacityTicks])
        })
        if let e = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "giving a budget token back: \(e)") }
        for audience in audiences { stats.countDecision(audience, "refunded") }
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

extension Sender {
    /// Sends the newest state of `key` to `audience` at priority 5 if the budget says its
    /// coalesced state is due (`BudgetEvent.flush`). A tier's flush is a fan-out to that tier's
    /// devices (the other tier's are skipped), which waits while another fan-out of the key is
    /// under way; a channel's is a broadcast.
    public func flush(_ key: ActivityKey, _ audienceName: String) async throws -> FlushResult {
        let tier = Tier(rawValue: audienceName)
        guard tier != nil || audienceName == "channel" else { throw SendFailure("flush: unknown audience \(audienceName)") }
        let stateKey = stateKey(key)
        // Read first: the key's state, its channels, and whether a fan-out is under way.
        let envs = apns.environments
        let replies = try await redis.pipeline([
            RedisCommand("HGETALL", stateKey), channels.statesCommand(key, envs), RedisCommand("HGET", genKey(key), "name"),
        ])
        if tier != nil, let current = replies[2].string {
            let fan = try await redis.send(RedisCommand("HMGET", fanKey(key, current), "left", "n", "q")).array ?? []
            if fan.count == 3, let left = fan[0].string.flatMap(Int.init), left > 0 {
                // Another flush's fan-out still under way: helped along first (see `helpFlush`).
                if current.hasPrefix("flush:"), let n = fan[1].string.flatMap(Int.init) {
                    try await helpFlush(key, gen: current, slices: n, queued: fan[2].string == "1")
                }
                return .busy
            }
        }
        guard let state = KeyStateScripts.read(replies[0]) else { return .nothing }
        let newestMillis = state.newestMillis
        let known = try channels.states(replies[1], envs)
        let channelsLive = envs.compactMap { env -> (APNsEnvironment, ChannelRecord)? in
            if case .live(let record)? = known[env] { return (env, record) } else { return nil }
        }
        let policy: ChannelStoragePolicy = channelsLive.first?.1.policy ?? .noStorage
        let audience: BudgetAudience = tier.map { .tier($0) } ?? .channel(policy)
        if tier == nil, channelsLive.isEmpty { return .nothing }
        // What the hash says before the decision, so a push that doesn't go out can be undone.
        let budgetKey = keys.budget(key, audience)
        let replies2 = try await redis.pipeline([
            RedisCommand("HMGET", budgetKey, "sent_at", "last_ms", "shown_sig", "shown_ms"),
            BudgetScripts.decideCommand(budgetKey: budgetKey, event: .flush, nowMillis: budgetNow(), policy: configuration.budgets.audience(audience),
                                        ttlSeconds: configuration.stateTTLSeconds,
                                        shown: (stateKey, true, state.staleAfterSeconds.map { $0 * 500 })),
        ])
        let before = replies2[0].array ?? []
        let reply = try BudgetScripts.parse(replies2[1])
        switch reply.decision {
        case .stale: return .nothing
        case .unchanged:
            stats.countDecision(audience, "unchanged")
            return .nothing
        case .coalesce(let due): return .later(dueAtMillis: due)
        case .priority10, .priority5: break
        }
        let undo = { [redis] in
            let was = (0..<4).map { $0 < before.count ? before[$0].string ?? "" : "" }
            _ = try? await redis.send(.script(BudgetScripts.undoFlush, keys: [budgetKey], args: [newestMillis, reply.nowMillis] + was))
        }
        stats.countDecision(audience, "flushed")
        // The newest state, quietly: no alert at 5.
        var plan = Plan(key: key, event: state.newestEvent == .end ? .end : .update, priority: .routine, timestampMillis: newestMillis,
                        audience: .activity(key), contentState: [:], storagePolicy: policy)
        // The presentation of the newest event that gave one (stale date, relevance).
        plan.staleAfterSeconds = state.staleAfterSeconds
        plan.relevanceScore = state.relevanceScore
        let bytes: [UInt8]
        switch PushBuilder.encoded(PushBuilder.payload(plan, contentState: state.contentState), limit: PayloadLimits.device, what: "a flush") {
        case .success(let b): bytes = b
        case .failure(let rejection):
            try await recordFailures(key, kind: "flush", [(audienceName, rejection.description)], entry: "")
            return .nothing
        }
        guard let tier else {
            do {
                for (env, record) in channelsLive { _ = try await broadcast(plan, bytes, priority: 5, env: env, record: record) }
            } catch {
                // Not sent: the state waits again (its member is rescheduled by the caller).
                await undo()
                throw error
            }
            return .sent
        }
        let tiers = tier == .standard ? AudiencePriorities(standard: 5) : AudiencePriorities(frequent: 5)
        let gen = "flush:\(tier.rawValue):\(newestMillis):\(Int64(Date().timeIntervalSince1970 * 1000))"
        let created: FanoutStart
        do {
            created = try await createFanout(key: key, gen: gen, millis: newestMillis, payload: bytes, quiet: bytes, tiers: tiers,
                                             live: channelsLive.map(\.0), entry: "", flush: true, newest: replies[2].string)
        } catch {
            await undo()
            throw error
        }
        switch created {
        case .older:
            // A fan-out of the same time began meanwhile (another tier's flush, or an event): the
            // state waits again, due at once.
            await undo()
            return .busy
        case .over, .noAudience:
            return .sent
        case .firstSlice(let slices, let head, let step, _):
            // From here the fan-out exists: whatever happens to slice 0 here, the fleet finishes it
            // (a flush has no entry to be delivered again; if even handing slice 0 back fails, the
            // key's next flush finishes it: `helpFlush`).
            let first = SliceRef(key: key, gen: gen, index: 0, count: slices)
            var summary = SendSummary()
            var handBack = false
            do {
                let result = try await runSlice(first, summary: &summary, acknowledges: false, known: head, firstStep: step,
                                                shouldStop: { [self] in stopping.load(ordering: .relaxed) })
                handBack = result == .busy || result == .paused
            } catch {
                logger.warning("a flush's first slice failed; it goes to the slices stream", metadata: ["key": "\(key)", "error": "\(error)"])
                handBack = true
            }
            if handBack { _ = try await redis.send(queueCommand(first)) }
            return .sent
        }
    }
}
