import ActivityCastCore
import APNsCore
import Foundation
import RedisClient

struct CoalescedFlusher: SendRole {
    let ctx: SendContext
    let fanouts: Fanouts
    let slices: SliceRunner

    /// Sends the newest state of `key` to `audience` at priority 5 if the budget says its
    /// coalesced state is due (`BudgetEvent.flush`). A tier's flush is a fan-out to that tier's
    /// devices (the other tier's are skipped), which waits while another fan-out of the key is
    /// under way; a channel's is a broadcast.
    func flush(_ key: ActivityKey, _ audienceName: String) async throws -> FlushResult {
        let tier = Tier(rawValue: audienceName)
        guard tier != nil || audienceName == "channel" else { throw SendFailure("flush: unknown audience \(audienceName)") }
        let stateKey = keys.state(key)
        // Read first: the key's state, its channels, and whether a fan-out is under way.
        let envs = apns.environments
        let replies = try await redis.pipeline([
            RedisCommand("HGETALL", stateKey), channels.statesCommand(key, envs), RedisCommand("HGET", keys.fanoutGen(key), "name"),
        ])
        // An error reply read as "no state" would settle the flush with nothing sent: the waiting
        // state lost. Thrown, the flush stays due and is tried again.
        for (reply, name) in zip(replies, ["HGETALL", "HMGET channels", "HGET fan-out"]) { _ = try reply.orThrow("flush \(key): \(name)") }
        if tier != nil, let current = replies[2].string {
            let fan = try await redis.send(RedisCommand("HMGET", keys.fanout(key, current), "left", "n", "q")).array ?? []
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
            let trail = configuration.trailMaxRecords == 0 ? nil
                : EventTrail(key, entry: "flush:channel:\(newestMillis)", first: TrailRecord(.flush, ["audience": "channel", "ms": String(newestMillis), "pr": "5"]))
            await write(trail)
            do {
                for (env, record) in channelsLive { _ = try await broadcast(plan, bytes, priority: 5, env: env, record: record, trail: trail) }
                await write(trail)
            } catch {
                // Not sent: the state waits again (its member is rescheduled by the caller).
                await write(trail)
                await undo()
                throw error
            }
            return .sent
        }
        return try await fanOut(plan, bytes, tier: tier, live: channelsLive.map(\.0), newest: replies[2].string, undo: undo)
    }

    /// A tier's flush: a fan-out to that tier's devices, whose slice 0 goes out from here. `undo`
    /// puts the budget back when it doesn't start.
    private func fanOut(_ plan: Plan, _ bytes: [UInt8], tier: Tier, live: [APNsEnvironment], newest: String?,
                        undo: () async -> Void) async throws -> FlushResult {
        let key = plan.key
        let tiers = tier == .standard ? AudiencePriorities(standard: 5) : AudiencePriorities(frequent: 5)
        let gen = "flush:\(tier.rawValue):\(plan.timestampMillis):\(Int64(Date().timeIntervalSince1970 * 1000))"
        let created: FanoutStart
        do {
            created = try await fanouts.createFanout(key: key, gen: gen, millis: plan.timestampMillis, payload: bytes, quiet: bytes, tiers: tiers,
                                                     live: live, entry: "", flush: true, newest: newest)
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
            await trail(key, [TrailRecord(.flush, ["e": gen, "audience": tier.rawValue, "ms": String(plan.timestampMillis), "pr": "5", "of": String(slices)])])
            // From here the fan-out exists: whatever happens to slice 0 here, the fleet finishes it
            // (a flush has no entry to be delivered again; if even handing slice 0 back fails, the
            // key's next flush finishes it: `helpFlush`).
            let first = SliceRef(key: key, gen: gen, index: 0, count: slices, priority: tiers.highest)
            var summary = SendSummary()
            var handBack = false
            do {
                let result = try await self.slices.runSlice(first, summary: &summary, acknowledges: false, known: head, firstStep: step, waits: false,
                                                            shouldStop: { [self] in ctx.stopping.load(ordering: .relaxed) })
                handBack = result == .busy || result == .paused
            } catch {
                logger.warning("a flush's first slice failed; it goes to the slices stream", metadata: ["key": "\(key)", "error": "\(error)"])
                handBack = true
            }
            if handBack { _ = try await redis.send(fanouts.queueCommand(first)) }
            return .sent
        }
    }

    /// A flush's fan-out found still under way when the key's next flush comes due. It has no
    /// entry to be delivered again: if its worker couldn't hand slice 0 back to the stream, or
    /// queue the other slices (Redis failing at that moment), nobody else would finish it, and it
    /// would hold the key's flushes back for good. So the next flush queues the slices that never
    /// were and sends slice 0 alongside whoever has it: its batches are handed out once and
    /// leased (a batch in flight elsewhere answers `busy`), so helping re-sends nothing.
    func helpFlush(_ key: ActivityKey, gen: String, slices n: Int, queued: Bool) async throws {
        // A flush is at 5 (`fanOut`).
        let slice = SliceRef(key: key, gen: gen, index: 0, count: n, priority: 5)
        if n > 1, !queued { try await fanouts.queueOthers(slice) }
        var summary = SendSummary()
        if try await slices.runSlice(slice, summary: &summary, acknowledges: false, waits: false,
                                     shouldStop: { [self] in ctx.stopping.load(ordering: .relaxed) }) == .paused {
            _ = try await redis.send(fanouts.queueCommand(slice))
        }
    }
}
