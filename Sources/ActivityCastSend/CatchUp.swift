import ActivityCastCore
import APNsCore
import RedisClient
import Synchronization

/// An activity token registered for a key (`activity.token`), to be shown the key's current
/// state if it hasn't seen it: an activity whose token reaches us mid-match (a push-started one
/// whose user allowed updates late, an app opened at half time, a rotated token) would otherwise
/// show its old state until the key's next event, which can be 20 minutes away.
public struct CatchUp: Sendable, Equatable {
    public var key: ActivityKey
    public var activity: String
    /// The `ts` of the state the activity shows (`state_ts`), when the registration says; nil:
    /// unknown, the current state is sent once.
    public var stateMillis: Int64?

    public init(key: ActivityKey, activity: String, stateMillis: Int64?) {
        self.key = key; self.activity = activity; self.stateMillis = stateMillis
    }
}

/// How a round of catch-ups went.
public struct CatchUpSummary: Sendable, Equatable {
    /// Tokens sent the key's current state (or its end).
    public var sent = 0
    /// Tokens that already show it (`state_ts` no older than the key's newest event), on broadcast
    /// (the channel's next broadcast reaches them), or of a key without a state to show yet.
    public var skipped = 0
    public var failed = 0
}

/// Late tokens caught up (`Sender.catchUpSoon`): a role of the send path.
final class CatchUpSender: SendRole {
    let ctx: SendContext
    let tokens: TokenBatches
    /// Rounds of catch-ups under way.
    let catchUpsRunning = Atomic<Int>(0)

    init(ctx: SendContext, tokens: TokenBatches) {
        self.ctx = ctx
        self.tokens = tokens
    }

    /// At most this many rounds of catch-ups run at once; a round beyond them is skipped (logged
    /// and counted): its tokens get the key's next push.
    static let catchUpRounds = 8

    /// `catchUp` on a task of its own: registrations are never held up by APNs (an outage makes
    /// a send wait through its retries).
    func catchUpSoon(_ items: [CatchUp]) {
        guard catchUpsRunning.wrappingAdd(1, ordering: .relaxed).newValue <= Self.catchUpRounds else {
            catchUpsRunning.wrappingSubtract(1, ordering: .relaxed)
            stats.catchUpsSkipped.add(items.count, ordering: .relaxed)
            logger.warning("too many catch-ups under way: these tokens get their key's next push instead", metadata: ["tokens": "\(items.count)"])
            return
        }
        Task {
            _ = await catchUp(items)
            catchUpsRunning.wrappingSubtract(1, ordering: .relaxed)
        }
    }

    /// Sends each newly registered token the current state of its key, at once: at priority 5,
    /// without an alert (the moment is past), spending no budget (a half-time wave of
    /// registrations can't drain a tier's), at the state's own time (a device that has it, or a
    /// newer one, ignores it). A key that has ended sends its end. A device on broadcast is not
    /// caught up per token. One read and one batch per key and environment.
    func catchUp(_ items: [CatchUp]) async -> CatchUpSummary {
        var summary = CatchUpSummary()
        var byKey: [ActivityKey: [CatchUp]] = [:]
        for item in items { byKey[item.key, default: []].append(item) }
        for (key, items) in byKey {
            do {
                try await catchUp(key, items, &summary)
            } catch {
                summary.failed += items.count
                logger.warning("catching up newly registered tokens failed: they get the key's next push", metadata: [
                    "key": "\(key)", "tokens": "\(items.count)", "error": "\(error)",
                ])
            }
        }
        if summary.sent > 0 { stats.caughtUp.add(summary.sent, ordering: .relaxed) }
        return summary
    }

    private func catchUp(_ key: ActivityKey, _ items: [CatchUp], _ summary: inout CatchUpSummary) async throws {
        let replies = try await redis.pipeline([
            RedisCommand("HGETALL", keys.state(key)),
            RedisCommand("HMGET", [keys.meta(key)] + items.map(\.activity)),
        ])
        for reply in replies { _ = try reply.orThrow("catching up \(key)") }
        // A key without a state yet, or whose state shows nothing (a scheduled match): nothing to catch up.
        guard let state = KeyStateScripts.read(replies[0]), !state.contentState.isEmpty else {
            summary.skipped += items.count
            return
        }
        let metas = replies[1].array ?? []
        var pairs: [(activity: String, meta: [UInt8])] = []
        for (item, meta) in zip(items, metas) {
            if let shown = item.stateMillis, shown >= state.newestMillis { summary.skipped += 1; continue }
            guard let bytes = meta.bytes else { summary.skipped += 1; continue }
            pairs.append((item.activity, bytes))
        }
        // A device on broadcast gets the key's pushes from its channel, never per token (its
        // activity subscribed when it started): the channel's next broadcast reaches it.
        let rows = try await tokens.tokenRows(key, pairs).filter { row in
            if row.onBroadcast { summary.skipped += 1; return false }
            return true
        }
        guard !rows.isEmpty else { return }
        var plan = Plan(key: key, event: state.newestEvent == .end ? .end : .update, priority: .routine, timestampMillis: state.newestMillis,
                        audience: .activity(key))
        plan.staleAfterSeconds = state.staleAfterSeconds
        plan.relevanceScore = state.relevanceScore
        let bytes: [UInt8]
        switch PushBuilder.encoded(PushBuilder.payload(plan, contentState: state.contentState), limit: PayloadLimits.device, what: "a catch-up") {
        case .success(let b): bytes = b
        case .failure(let rejection): throw SendFailure(rejection.description)
        }
        // On the key's trail before it goes: which activities get which state.
        let name = "catch-up:\(state.newestMillis)"
        await trail(key, TokenBatches.chunked(rows.map(\.activity), ["e": name, "ms": String(state.newestMillis), "pr": "5", "ev": plan.event!.rawValue])
            .map { TrailRecord(.catchUp, $0.fields) })
        for env in Set(rows.map(\.env)).sorted(by: { $0.rawValue < $1.rawValue }) {
            let mine = rows.filter { $0.env == env }
            var sent = SendSummary()
            try await tokens.sendBatch(plan, bytes, quiet: bytes, priority: 5, env: env, rows: mine, kind: .token, entry: name, summary: &sent)
            summary.sent += sent.tokens
            summary.failed += sent.failed
        }
        logger.info("caught up newly registered tokens", metadata: [
            "key": "\(key)", "tokens": "\(rows.count)", "event": "\(plan.event!.rawValue)", "state_ms": "\(state.newestMillis)",
        ])
    }
}

extension Sender {
    /// Sends each newly registered token its key's current state, on a task of its own
    /// (`CatchUpSender.catchUp`).
    public func catchUpSoon(_ items: [CatchUp]) { catchUps.catchUpSoon(items) }

    /// The same, awaited.
    public func catchUp(_ items: [CatchUp]) async -> CatchUpSummary { await catchUps.catchUp(items) }
}
