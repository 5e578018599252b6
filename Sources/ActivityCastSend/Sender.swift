import ActivityCastCore
import APNs
import APNsCore
import Foundation
import Logging
import RedisClient
import Synchronization

/// How one event's sends ended.
public enum SendOutcome: Sendable, Equatable {
    /// Every send has a final outcome (delivered, token forgotten, or a recorded failure):
    /// acknowledge the entry.
    case done(SendSummary)
    /// The event can't be sent as it is (a payload over Apple's limit): dead-letter it.
    case rejected(String)
    /// Its audience was cut into slices that other workers are still sending: leave the entry
    /// pending; the worker that finishes the last slice acknowledges it.
    case handedOff(SendSummary)
}

public struct SendSummary: Sendable, Equatable {
    public var stale = false
    public var broadcasts = 0
    public var tokens = 0
    public var starts = 0
    public var forgotten = 0
    public var failed = 0
    /// The event's fan-out record, final (every slice done): it goes once the entry is
    /// acknowledged (until then a redelivery finds it and sends nothing). nil: no record.
    public var finishedRecord: String?
    /// Writes of that record the acknowledgement's pipeline makes first (`Acknowledgement.before`):
    /// a round trip of their own saved.
    public var beforeAcknowledgement: [RedisCommand] = []
}

public struct SendConfiguration: Sendable {
    public var keys: RedisKeys
    public var bundleID: String
    /// Tokens read from Redis and sent per batch.
    public var batchSize: Int
    /// How long the state of a key lives after its last event.
    public var stateTTLSeconds: Int
    /// Attempts per token for retryable answers (429, 5xx, no answer) before the entry is left
    /// pending for a later retry.
    public var maxAttempts: Int
    /// How long an end waits before it goes out, so that older events of its key still being
    /// processed by other workers (read in the same moment) are merged into the state it carries:
    /// after an end the device takes no more updates.
    public var endSettle: Duration
    /// Push-to-start requests per second one event may send (paced, not burst; the budget work
    /// sets per-device numbers).
    public var startsPerSecond: Int

    /// The consumer group that reads the feeds and the slices stream (the worker that finishes a
    /// fan-out's last slice acknowledges its entry in that group).
    public var group: String
    /// About how many tokens one slice holds: an audience larger than this is cut into slices.
    public var sliceSize: Int
    /// Tokens handed out and sent per step of a slice: a worker that dies re-sends at most this
    /// many per slice it was sending (the bound on duplicates).
    public var sliceBatch: Int
    /// What a slice's step asks for when its worker has no scan of its own to give it (a slice's
    /// first step): a few tokens, scanned by the script, whose places tell the worker the bucket
    /// width it then scans each further batch with itself (`FanoutScan`, at half the script's cost).
    public var firstSliceBatch: Int { min(sliceBatch, 16) }
    /// How long a batch in flight keeps its slice from other workers (renewed by each batch).
    public var leaseMillis: Int
    /// Attempts per token of a fan-out for retryable answers: one in its batch, then in rounds
    /// at its slice's end (back-off growing to 10 s between rounds); what still fails after the
    /// last is recorded as failed.
    public var tokenAttempts = 16
    /// Priority-10 budgets per audience (docs/budgets.md).
    public var budgets: BudgetPolicy = .default
    /// nil: decisions use Redis's clock (one clock for the fleet); tests give a compressed one.
    public var budgetClock: BudgetClock?
    /// The fleet's send rate per app (off by default).
    public var rateGuard = RateGuardPolicy()
    /// A token registered longer ago than this is past its activity's life (Apple ends a Live
    /// Activity after 8 hours active): not sent updates, counted `tokens_past_lifetime` (ms).
    public var activityLifetimeMillis: Int64 = 28_800_000
    /// Whether such an activity is started again by push-to-start, with the key's start
    /// attributes (`Relaunch`), while its key takes updates.
    public var relaunchPastLifetime = false
    /// About how many entries the outcomes stream keeps (`streams.outcomes_max_len`); 0: none written.
    public var outcomesMaxLength = 100_000
    /// Records a key's trail keeps (0: none written) and how long it outlives its last write.
    public var trailMaxRecords = 20_000
    public var trailRetentionSeconds = 86_400

    public init(keys: RedisKeys, bundleID: String, batchSize: Int = 1000, stateTTLSeconds: Int = 43_200, maxAttempts: Int = 6,
                endSettle: Duration = .milliseconds(250), startsPerSecond: Int = 500, group: String = "activitycast",
                sliceSize: Int = 4096, sliceBatch: Int = 256, leaseMillis: Int = 10_000) {
        self.group = group
        self.sliceSize = sliceSize
        self.sliceBatch = sliceBatch
        self.leaseMillis = leaseMillis
        self.endSettle = endSettle
        self.startsPerSecond = startsPerSecond
        self.keys = keys
        self.bundleID = bundleID
        self.batchSize = batchSize
        self.stateTTLSeconds = stateTTLSeconds
        self.maxAttempts = maxAttempts
    }
}

/// The send path of one feed event: plan → key state → targets → requests → outcomes.
/// Decisions are made by the pure parts (`KeyState`, `PushBuilder`, `TokenOutcome`); this type
/// does the Redis and APNs I/O around them. The caller acknowledges the entry on `.done` and
/// dead-letters it on `.rejected`; a thrown error leaves it pending.
public final class Sender: SendRole {
    let ctx: SendContext
    /// One key's events go out one at a time from this worker.
    let locks = KeyLocks()
    /// The send path's parts, by role: per-token batches, fan-out records, slices, starts, flushes.
    let tokens: TokenBatches
    let fanouts: Fanouts
    let slices: SliceRunner
    let starts: StartSender
    let flusher: CoalescedFlusher
    let catchUps: CatchUpSender
    public var stats: SendStats { ctx.stats }
    /// Fan-out records of acknowledged entries, waiting for the worker's next sweep.
    public var recordSweep: RecordSweep { ctx.sweep }

    public func beginStopping() { ctx.stopping.store(true, ordering: .relaxed) }

    /// `recordSweep`: one per worker, shared by its events' sender and its slice taker's.
    public init(redis: RedisConnection, apns: APNsRouter, configuration: SendConfiguration, logger: Logger, stats: SendStats = SendStats(),
                recordSweep: RecordSweep) {
        let channels = ChannelRegistry(redis: redis, apns: apns, keys: configuration.keys, bundleID: configuration.bundleID,
                                       ttlSeconds: configuration.stateTTLSeconds, logger: logger, stats: stats)
        let ctx = SendContext(redis: redis, apns: apns, configuration: configuration, channels: channels, logger: logger, stats: stats, sweep: recordSweep)
        self.ctx = ctx
        tokens = TokenBatches(ctx: ctx)
        fanouts = Fanouts(ctx: ctx)
        slices = SliceRunner(ctx: ctx, tokens: tokens, fanouts: fanouts)
        starts = StartSender(ctx: ctx, tokens: tokens)
        flusher = CoalescedFlusher(ctx: ctx, fanouts: fanouts, slices: slices)
        catchUps = CatchUpSender(ctx: ctx, tokens: tokens)
    }

    public func deleteDueChannels() async throws -> Int {
        try await channels.deleteDue(nowMillis: Int64(Date().timeIntervalSince1970 * 1000))
    }

    /// `redelivered`: the entry was delivered before (its attempts are counted; progress clears them).
    /// A place in the line of `key`'s events on this worker, taken now (in the order the entries
    /// were read) and passed to `send` later. Every ticket taken must be passed to `send`.
    public func ticket(for key: ActivityKey) -> KeyLocks.Ticket { locks.take(key) }

    /// `ticket`: from `ticket(for:)`, when the caller took the event's place in its key's line
    /// when it read it; otherwise the event queues now.
    public func send(_ plan: Plan, entry: String, redelivered: Bool = false, ticket: KeyLocks.Ticket? = nil) async throws -> SendOutcome {
        // The key's lock covers the merge, the broadcast and the fan-out's creation: what orders
        // this worker's events of a key. Slice 0 is sent after it, so the key's next event doesn't
        // wait behind a slice (which may itself wait for an older fan-out's batches in flight):
        // an event held back that long can find a newer one merged before it, and its catch-up
        // then sends the whole audience again.
        let ticket = ticket ?? locks.take(plan.key)
        precondition(ticket.key == plan.key, "a ticket for another key")
        let trail = configuration.trailMaxRecords > 0 ? EventTrail(plan, entry: entry) : nil
        switch try await locks.withTicket(ticket, { try await sendTrailed(plan, entry: entry, redelivered: redelivered, trail: trail) }) {
        case .outcome(let outcome):
            return outcome
        case .firstSlice(let first):
            return try await sendFirstSlice(first)
        case .sending(let first, let broadcasts):
            switch try await first.value {
            case .done(var s):
                s.broadcasts += broadcasts
                return .done(s)
            case .handedOff(var s):
                s.broadcasts += broadcasts
                return .handedOff(s)
            case .rejected(let reason):
                return .rejected(reason)
            }
        }
    }

    /// What the key's lock hands on: an outcome, the fan-out's slice 0 to send, or slice 0 being
    /// sent already (it began while the broadcast was answered) and the broadcasts delivered.
    private enum Locked: Sendable {
        case outcome(SendOutcome)
        case firstSlice(FirstSlice)
        case sending(Task<SendOutcome, Error>, broadcasts: Int)
    }

    private struct FirstSlice: Sendable {
        var slice: SliceRef
        var summary: SendSummary
        var head: SliceHead?
        /// Its first step, made with the fan-out's creation.
        var step: RESPValue
        /// The channels' broadcast, still unanswered: the environments whose broadcast was delivered.
        var broadcast: Task<[APNsEnvironment], Error>?
        var attempts: (key: String, field: String)?
    }

    /// `sendLocked`, and the event's trail written whatever came of it (in the key's turn, so
    /// the key's records are in the order its events were sent): by then written if a push went.
    private func sendTrailed(_ plan: Plan, entry: String, redelivered: Bool, trail: EventTrail?) async throws -> Locked {
        do {
            let locked = try await sendLocked(plan, entry: entry, redelivered: redelivered, trail: trail)
            switch locked {
            case .outcome(.done(var summary)):
                // What is left rides with the acknowledgement (no round trip of its own).
                summary.beforeAcknowledgement += trailCommands(trail)
                return .outcome(.done(summary))
            case .outcome(.rejected(let why)):
                trail?.note { $0.merge("refused"); $0.record.fields["w:merge"] = why }
            default:
                break
            }
            await write(trail)
            return locked
        } catch {
            trail?.note { $0.record.fields["x"] = "failed, the entry stays pending: \(error)" }
            await write(trail)
            throw error
        }
    }

    private func sendLocked(_ original: Plan, entry: String, redelivered: Bool, trail: EventTrail?) async throws -> Locked {
        if redelivered, try await fanouts.acknowledgedAlready(original.key, entry: entry) {
            logger.info("delivered again after another worker finished it: nothing to send", metadata: ["entry": "\(entry)"])
            return .outcome(.done(SendSummary()))
        }
        var plan = original
        var first = try await firstRoundTrip(plan, entry: entry, redelivered: redelivered, trail: trail)
        var merged = first.merged
        if merged.tooLarge != nil, let fitted = try await fitted(&plan, merged, entry: entry, recordEvent: !(plan.event == .end && configuration.endSettle > .zero)) {
            // Merged with its free text trimmed: its decisions in the first round trip were
            // skipped (the merge refused it then), so they are made afresh.
            merged = fitted
            first.decided = []
            trail?.note { $0.record.fields["t"] = "free text trimmed so the state fits a push" }
        }
        if let size = merged.tooLarge {
            return .outcome(.rejected("the key's content-state with this event's would be \(size) bytes, over the \(stateLimit(plan)) a push of this "
                                      + "event has room for (Apple's limit is \(PayloadLimits.device)); the key's state is left as it was and nothing was sent"))
        }
        if merged.afterEnd {
            // The key ended: a device ignores pushes to an ended activity, so nothing goes out.
            trail?.note { $0.merge("after-end"); $0.record.fields["w:merge"] = "the key ended (\(merged.newestMillis)): not sent" }
            stats.afterEnd.add(1, ordering: .relaxed)
            logger.info("an event after its key's end: not sent", metadata: [
                "key": "\(plan.key)", "entry": "\(entry)", "ts": "\(plan.timestampMillis)", "ended": "\(merged.newestMillis)",
            ])
            // Its round trip put the key back in the index of live keys: it isn't. A decision made
            // beside the merge that took a token (the key's state had expired into its tombstone,
            // which the guards don't read) gives it back.
            _ = try await redis.send(RedisCommand("ZREM", keys.keysIndex, plan.key.description)).orThrow("unindexing \(plan.key)")
            let spent = zip(guardedAudiences(plan), first.decided).compactMap { audience, reply -> BudgetAudience? in
                if case .decided(let r)? = try? BudgetScripts.parseGuarded(reply), r.spent { return audience }
                return nil
            }
            try await fanouts.refund(plan.key, spent)
            var summary = SendSummary()
            summary.stale = true
            return .outcome(.done(summary))
        }
        let (known, prior, decided, directEmpty) = (first.channels, first.prior, first.decided, first.directEmpty)
        var summary = SendSummary()
        trail?.note { $0.merge(merged.stale && plan.event != .end ? "stale \(merged.newestMillis)" : merged.changed ? "changed" : "unchanged") }
        if merged.stale, plan.event != .end {
            if plan.event == .start, merged.newestEvent != .end {
                // A start processed after a newer event of its key (another worker was faster): the
                // followers still get their start, with the whole state as of the newest event.
                plan.timestampMillis = merged.newestMillis
            } else {
                return try await sendStale(plan, merged, entry: entry, redelivered: redelivered, trail: trail)
            }
        }
        // A channel only for an audience: made at the first event after a device on broadcast
        // needed one (`want`: a scheduled match's channel exists before kick-off if a device on
        // broadcast registered for it); a start makes it for its followers on broadcast (`sendStarts`).
        var channelStates: [APNsEnvironment: ChannelRegistry.State] = [:]
        let wanted = first.wanted
        for env in apns.environments {
            channelStates[env] = wanted ? try await channels.ensure(plan.key, env, policy: plan.storagePolicy, known: known[env]) : known[env]
        }
        guard let event = plan.event else {
            trail?.note { $0.record.fields["w:merge"] = "nothing to send for this event" }
            return .outcome(.done(summary))
        }
        // The settle is for the first delivery: a redelivered end whose fan-out began has nothing to wait for.
        if event == .end, configuration.endSettle > .zero {
            if prior.left == nil { try await Task.sleep(for: configuration.endSettle) }
            // The same merge again (idempotent), now recorded as the key's end: the state has what
            // other workers merged meanwhile.
            merged = try KeyStateScripts.parse(try await redis.send(mergeCommand(plan, entry: entry, recordEvent: true)))
            if merged.tooLarge != nil, let fitted = try await fitted(&plan, merged, entry: entry, recordEvent: true) { merged = fitted }
            if let size = merged.tooLarge {
                return .outcome(.rejected("the key's content-state with this end's would be \(size) bytes, over the \(stateLimit(plan)) its push has "
                                          + "room for; the key's state is left as it was and nothing was sent"))
            }
        }
        if event == .end {
            // An end is final, whatever its time: it goes out as the key's newest push
            // (`KeyState.endMillis`), and an end sent again carries no alert.
            if merged.newestMillis != plan.timestampMillis {
                logger.info("an end not newer than its key's newest event: sent just after it", metadata: [
                    "key": "\(plan.key)", "entry": "\(entry)", "ts": "\(plan.timestampMillis)", "at": "\(merged.newestMillis)",
                ])
            }
            plan.timestampMillis = merged.newestMillis
            if merged.endAgain { plan.alert = nil }
        }

        switch event {
        case .start:
            do {
                trail?.note { $0.sending("starts", "followers of \(plan.audience)") }
                await write(trail)
                try await starts.sendStarts(plan, state: merged.contentState, channels: channelStates, entry: entry, summary: &summary)
            } catch let e as PushRejectionError {
                return .outcome(.rejected(e.description))
            }
        case .update, .end:
            return try await sendToActivity(plan, state: merged.contentState, entry: entry, summary: summary, finishEnd: true, redelivered: redelivered,
                                            decided: decided.isEmpty ? nil : decided, prior: prior, trail: trail,
                                            channelStates: channelStates,
                                            nobodyKnown: directEmpty && apns.environments.allSatisfy { if case .live? = known[$0] { true } else { false } })
        }
        return .outcome(.done(summary))
    }

    /// What an event's first round trip reads and decides (`sendLocked`).
    private struct FirstRead {
        var merged: MergeResult
        var channels: [APNsEnvironment: ChannelRegistry.State]
        /// A device on broadcast needs the key's channel (`ChannelRegistry.wanted`).
        var wanted: Bool
        var prior: FanoutPrior
        /// The budget's guarded decisions (`decideCommands`).
        var decided: [RESPValue]
        /// `{key}:direct` kept and empty (only its `_`): nobody per token where every channel is live.
        var directEmpty: Bool
    }

    /// Key state: merge in timestamp order; a stale event is not sent. An end is recorded as the
    /// key's newest event only after its settle time, so a start still being processed meanwhile
    /// doesn't take the activity for over. The key's channels are read in the same round trip (a
    /// broadcast's latency is mostly round trips), the entry's fan-out if an earlier delivery
    /// started it (so its broadcast isn't repeated), and the key goes into the index of keys
    /// (`inspect`) unless this ends it. The merge keeps the event's presentation too, for a flush
    /// that later sends the state on its behalf, and refuses a content-state that would make the
    /// push too large (the key's state stays as it was, and the decisions spend nothing). An
    /// update's budget decisions ride along, guarded: nothing is spent when the merge just before
    /// found a newer event or refused this one, or when a redelivered entry's fan-out recorded its
    /// decisions. A key whose last event found nobody per token asks for the channel's decision
    /// alone, with its per-token audience read beside it (`AudienceMemory`).
    private func firstRoundTrip(_ plan: Plan, entry: String, redelivered: Bool, trail: EventTrail?) async throws -> FirstRead {
        var commands = [
            mergeCommand(plan, entry: entry, recordEvent: !(plan.event == .end && configuration.endSettle > .zero)),
            channels.statesCommand(plan.key, apns.environments),
            RedisCommand("HMGET", [keys.fanout(plan.key, entry)] + FanoutPrior.fields),
            RedisCommand("HLEN", keys.direct(plan.key)),
        ]
        if plan.event != .end { commands.append(RedisCommand("ZADD", keys.keysIndex, "GT", plan.timestampMillis, plan.key.description)) }
        let decide = decideCommands(plan, entry: entry, redelivered: redelivered, tiers: !ctx.nobodyPerToken.nobody(plan.key))
        // The event's record, before anything of it can go: written with its merge.
        let replies = try await redis.pipeline(commands + trailCommands(trail) + decide)
        if plan.event != .end, let e = replies[4].errorMessage { throw RedisError(.server, "indexing \(plan.key): \(e)") }
        return FirstRead(merged: try KeyStateScripts.parse(replies[0]), channels: try channels.states(replies[1], apns.environments),
                         wanted: channels.wanted(replies[1], apns.environments), prior: FanoutPrior(replies[2]),
                         decided: Array(replies.suffix(decide.count)), directEmpty: replies[3].int == 1)
    }

    /// An event older than its key's newest (another worker sent a newer one first): not sent as
    /// itself. A start is over when the activity ended. If it still brought the newest value of
    /// some fields, devices get the merged state again, as the newest event and at its time,
    /// quietly (priority 5, no alert), so they end on the complete state.
    private func sendStale(_ plan: Plan, _ merged: MergeResult, entry: String, redelivered: Bool, trail: EventTrail?) async throws -> Locked {
        var summary = SendSummary()
        summary.stale = true
        stats.stale.add(1, ordering: .relaxed)
        guard merged.changed, plan.event != .start, let newestEvent = merged.newestEvent else {
            trail?.note { $0.record.fields["w:merge"] = "a newer event was merged first and carries the state: not sent" }
            return .outcome(.done(summary))
        }
        trail?.note { $0.record.fields["w:merge"] = "a newer event was merged first: its fields go with the newest state, quietly, at its time" }
        var catchUp = Plan(key: plan.key, event: newestEvent, priority: .routine, timestampMillis: merged.newestMillis,
                           audience: .activity(plan.key), contentState: [:], storagePolicy: plan.storagePolicy)
        catchUp.staleAfterSeconds = plan.staleAfterSeconds
        catchUp.relevanceScore = plan.relevanceScore
        return try await sendToActivity(catchUp, state: merged.contentState, entry: entry, summary: summary, finishEnd: false,
                                        redelivered: redelivered, trail: trail)
    }

    /// A merge refused as too large, tried again with the event's free text for people trimmed
    /// (the longest first) by what it was over (`FreeText.fit`): a name never costs a score. nil
    /// when the event has no free text to shed, or when even trimmed it doesn't fit.
    private func fitted(_ plan: inout Plan, _ refused: MergeResult, entry: String, recordEvent: Bool) async throws -> MergeResult? {
        guard let size = refused.tooLarge, !plan.freeText.isEmpty,
              let state = FreeText.fit(plan.contentState, freeText: plan.freeText, shedding: size - stateLimit(plan)) else { return nil }
        var trimmed = plan
        trimmed.contentState = state
        let merged = try KeyStateScripts.parse(try await redis.send(mergeCommand(trimmed, entry: entry, recordEvent: recordEvent)))
        guard merged.tooLarge == nil else { return nil }
        stats.textTrimmedToFit.add(1, ordering: .relaxed)
        logger.info("free text trimmed so that the key's state fits a push", metadata: [
            "key": "\(plan.key)", "entry": "\(entry)", "was": "\(size)", "limit": "\(stateLimit(plan))",
        ])
        plan = trimmed
        return merged
    }

    /// The merge of `plan` into its key's state (`KeyStateScripts.merge`). `recordEvent` false:
    /// an end before its settle time, merged but not yet recorded as the key's newest event.
    func mergeCommand(_ plan: Plan, entry: String, recordEvent: Bool) -> RedisCommand {
        let settling = !recordEvent && plan.event == .end
        let event = KeyState.Event(millis: plan.timestampMillis, event: settling ? nil : plan.event,
                                   staleAfter: plan.staleAfterSeconds.map { String($0) }, relevance: plan.relevanceScore.map { String($0) },
                                   stateLimit: stateLimit(plan), settlingEnd: settling, entry: entry)
        return KeyStateScripts.mergeCommand(stateKey: keys.state(plan.key), tombstoneKey: keys.ended(plan.key), event, entry: entry,
                                            ttlSeconds: configuration.stateTTLSeconds, contentState: plan.contentState)
    }

    /// The most bytes the key's content-state may take in `plan`'s pushes: Apple's device limit
    /// less everything else of the largest push it makes (a start's attributes and the channel
    /// it names; an alert).
    func stateLimit(_ plan: Plan) -> Int {
        let longestChannelID = String(repeating: "x", count: 64)
        let rest = PushBuilder.payload(plan, contentState: [:], inputPushChannel: plan.event == .start ? longestChannelID : nil).encoded().count - 2
        return max(2, PayloadLimits.device - rest)
    }

    /// An update or end to the key's channel and to the tokens of devices not on it: a fan-out
    /// (see `FanoutScripts`) whose first slice this worker sends itself; the others go to the
    /// slices stream for the fleet. `.handedOff` while other slices are still under way: the
    /// worker that finishes the last one acknowledges the entry.
    /// `decided`: the replies to `decideCommands`, made in the merge's round trip.
    private func sendToActivity(_ plan: Plan, state: [String: JSONValue], entry: String, summary: SendSummary, finishEnd: Bool,
                                redelivered: Bool, decided: [RESPValue]? = nil, prior known0: FanoutPrior? = nil, trail: EventTrail? = nil,
                                channelStates known: [APNsEnvironment: ChannelRegistry.State]? = nil, nobodyKnown: Bool = false) async throws -> Locked {
        var summary = summary
        let bytes: [UInt8]
        switch PushBuilder.encoded(PushBuilder.payload(plan, contentState: state), limit: PayloadLimits.device, what: "a device push") {
        case .success(let b): bytes = b
        case .failure(let rejection): return .outcome(.rejected(rejection.description))
        }
        let fan = keys.fanout(plan.key, entry)
        var prior = known0
        if prior == nil { prior = FanoutPrior(try await redis.send(RedisCommand("HMGET", [fan] + FanoutPrior.fields))) }
        if prior?.left == 0 {
            trail?.note { $0.record.fields["w:send"] = "delivered again after its fan-out finished: nothing sent" }
            summary.finishedRecord = fan
            return .outcome(.done(summary))
        }
        // The broadcast first (its latency is what broadcast devices see), then the fan-out record
        // while it is answered. The budget decides each audience's priority once per event; a
        // fan-out that exists with its broadcast recorded (this entry delivered again) keeps the
        // decisions it recorded (and its slices go to the stream of the priority it recorded).
        var audiences = Audiences(priorities: AudiencePriorities(all: prior?.priority ?? PushBuilder.priority(plan)), bytes5: bytes)
        if prior?.broadcastDone != true {
            var channelStates: [APNsEnvironment: ChannelRegistry.State] = known ?? [:]
            if known == nil {
                let envs = apns.environments
                channelStates = try channels.states(try await redis.send(channels.statesCommand(plan.key, envs)), envs)
            }
            audiences = try await decideAndBroadcast(plan, state: state, bytes: bytes, entry: entry, redelivered: redelivered, decided: decided,
                                                     channelStates: channelStates, nobodyKnown: nobodyKnown, trail: trail, summary: &summary)
            if !audiences.priorities.anyTokens {
                // Every tier's state waits for its flush (or is stale for it, or has nobody to
                // reach): no fan-out now. A finished record of this entry's fan-out says so to a
                // later delivery (no decision or broadcast again).
                // Written in the acknowledgement's pipeline, before its XACK: whenever the entry is
                // acknowledged the record is there, and if it isn't, the record may be.
                var commands = [RedisCommand("HSET", fan, "left", 0, "b", 1), RedisCommand("EXPIRE", fan, 3600)]
                if audiences.priorities.channel != nil { commands += audiences.live.map { broadcastCounted(plan.key, $0) } }
                if finishEnd, plan.event == .end { try await finish(plan) }
                summary.finishedRecord = fan
                summary.beforeAcknowledgement = commands
                return .outcome(.done(summary))
            }
        }
        return try await startFanout(plan, audiences, bytes: bytes, entry: entry, summary: summary, finishEnd: finishEnd, redelivered: redelivered,
                                     trail: trail)
    }

    /// What an event's decisions and broadcast leave for its fan-out: the environments whose
    /// channel has the push (or will: `broadcasting`, still unanswered), each audience's
    /// priority, the audiences whose decision took a token, and the push at 5 (no alert).
    private struct Audiences {
        var live: [APNsEnvironment] = []
        var broadcasting: Task<[APNsEnvironment], Error>?
        var priorities: AudiencePriorities
        var spent: [BudgetAudience] = []
        var bytes5: [UInt8]
    }

    /// The budget's decisions, then the broadcast: awaited, unless devices get per-token pushes
    /// too — those don't wait for its answer: slice 0's devices off the channel get theirs
    /// meanwhile; those on it wait for the answer (a channel whose broadcast failed has its
    /// devices sent per token), and so do slices 1…n-1, queued once `live` is known.
    private func decideAndBroadcast(_ plan: Plan, state: [String: JSONValue], bytes: [UInt8], entry: String, redelivered: Bool,
                                    decided: [RESPValue]?, channelStates: [APNsEnvironment: ChannelRegistry.State], nobodyKnown: Bool,
                                    trail: EventTrail? = nil, summary: inout SendSummary) async throws -> Audiences {
        let channelsLive = apns.environments.compactMap { env -> (APNsEnvironment, ChannelRecord)? in
            if case .live(let record)? = channelStates[env] { return (env, record) } else { return nil }
        }
        let (priorities, spent, nobody) = try await decideBudgets(plan, entry: entry, redelivered: redelivered, channel: !channelsLive.isEmpty,
                                                                  decided: decided, nobodyKnown: nobodyKnown, trail: trail)
        trail?.note { n in
            n.record.fields["pts"] = String(plan.timestampMillis / 1000)
            let tiers = [("standard", priorities.standard), ("frequent", priorities.frequent)].compactMap { t, p in p.map { "\(t)=\($0)" } }
            if !tiers.isEmpty { n.sending("tokens", tiers.joined(separator: " ")) }
            if channelsLive.isEmpty { n.sending("channels", "none live") }
        }
        var a = Audiences(priorities: priorities, spent: spent, bytes5: bytes)
        // A push at 5 carries no alert: an alert only makes sense at 10.
        if plan.alert != nil {
            var quiet = plan
            quiet.alert = nil
            a.bytes5 = PushBuilder.payload(quiet, contentState: state).encoded()
        }
        guard let cp = priorities.channel else {
            // The channel's state waits for its flush: its devices get nothing per token either.
            a.live = channelsLive.map(\.0)
            return a
        }
        // A redelivered entry's broadcast may have gone out before (the record says so only once
        // it is answered): the state goes again without its alert.
        let cb = cp == 10 && !redelivered ? bytes : a.bytes5
        trail?.note { $0.record.fields["pts"] = String(plan.timestampMillis / 1000) }
        trail?.note { $0.sending("channel", "\(cp) \(channelsLive.map { "\($0.0.rawValue)=\($0.1.id)" }.joined(separator: " "))\(cb == bytes && plan.alert != nil ? " alert" : "")") }
        // The event's intent went on the trail with its merge: a worker that stops before its
        // decisions are written leaves the event's pushes shown as sent with their fate unknown.
        if priorities.anyTokens, !channelsLive.isEmpty {
            a.broadcasting = Task { [bytes5 = a.bytes5] in
                try await self.broadcast(plan, cb, quiet: bytes5, priority: cp, channels: channelsLive, trail: trail)
            }
            a.live = channelsLive.map(\.0)
            return a
        }
        a.live = try await broadcast(plan, cb, quiet: a.bytes5, priority: cp, channels: channelsLive, trail: trail)
        summary.broadcasts += a.live.count
        if nobody, a.live.count < channelsLive.count {
            // Every device was on a channel, and one channel's broadcast failed: its devices get
            // the state per token after all (`live` leaves them out).
            let tiers = try await decideBudgets(plan, entry: entry, redelivered: redelivered, channel: true, tiersOnly: true)
            a.priorities.standard = tiers.priorities.standard
            a.priorities.frequent = tiers.priorities.frequent
            a.spent += tiers.spent
        }
        return a
    }

    /// The event's fan-out: created with slice 0's first step (`Fanouts.createFanout`); slice 0
    /// goes out from here. Devices on a channel that had the push (or whose channel's push
    /// waits) get nothing per token; `b` records the broadcast so a redelivered entry doesn't
    /// broadcast again (0 while it is unanswered: a later delivery broadcasts again, and other
    /// workers leave the slices).
    private func startFanout(_ plan: Plan, _ a: Audiences, bytes: [UInt8], entry: String, summary: SendSummary, finishEnd: Bool,
                             redelivered: Bool, trail: EventTrail? = nil) async throws -> Locked {
        var summary = summary
        let fan = keys.fanout(plan.key, entry)
        let sent = a.priorities.channel != nil && a.broadcasting == nil ? a.live : []
        // The tiers whose decision took a token, on the record: a fan-out that ends with none of
        // a tier's devices sent at 10 (superseded first, or no device of that tier) gives it back.
        let spentTiers = a.spent.compactMap { if case .tier(let t) = $0 { t.rawValue } else { nil } }
        var also = sent.map { broadcastCounted(plan.key, $0) }
        if !spentTiers.isEmpty { also.append(.script(FanoutScripts.mark, keys: [fan], args: ["spent", spentTiers.joined(separator: " ")])) }
        // The event's record, if no broadcast wrote it: before any token's push goes.
        also += trailCommands(trail)
        let created: FanoutStart
        do {
            created = try await fanouts.createFanout(key: plan.key, gen: entry, millis: plan.timestampMillis, payload: bytes, quiet: a.bytes5,
                                                     tiers: a.priorities, live: a.live, entry: entry, flush: false,
                                                     broadcastPending: a.broadcasting != nil, also: also)
        } catch {
            _ = try? await a.broadcasting?.value
            throw error
        }
        guard case .firstSlice(let slices, let head, let step, let unqueued) = created else {
            if case .over = created { summary.finishedRecord = fan }
            trail?.append(TrailRecord(.fanout, ["e": entry, "r": "\(created)"]))
            if case .older = created {
                // A newer event's fan-out is already under way: this state is out of date.
                summary.stale = true
                stats.stale.add(1, ordering: .relaxed)
            }
            if case .over = created {} else {
                // Superseded, or no device to send to: the tokens its tiers took at 10 go back.
                try await fanouts.refund(plan.key, a.spent.filter { if case .tier = $0 { true } else { false } })
            }
            if let broadcasting = a.broadcasting {
                let delivered = try await broadcasting.value
                summary.broadcasts += delivered.count
                _ = try await redis.pipeline(delivered.map { broadcastCounted(plan.key, $0) })
            }
            if case .noAudience = created, finishEnd, plan.event == .end { try await finish(plan) }
            return .outcome(.done(summary))
        }
        trail?.append(TrailRecord(.fanout, ["r": "created", "of": String(slices), "pri": a.priorities.encodedTiers]))
        let (stream, entryID) = Fanouts.split(entry: entry)
        var first = FirstSlice(slice: SliceRef(key: plan.key, gen: entry, index: 0, count: slices, priority: a.priorities.highest), summary: summary, head: head, step: step,
                               attempts: redelivered ? (keys.errors(stream), EntryErrorFields.attempts(entryID)) : nil)
        guard let broadcasting = a.broadcasting else {
            if finishEnd, plan.event == .end { try await finish(plan) }
            return .firstSlice(first)
        }
        // Slice 0 goes out now; the key's lock is held until the broadcast is answered and
        // recorded (the key's next broadcast goes after this one's answer, as without tokens).
        first.broadcast = broadcasting
        let sending = Task { [first] in try await self.sendFirstSlice(first) }
        do {
            let delivered = try await broadcasting.value
            var commands = [RedisCommand.script(FanoutScripts.mark, keys: [fan], args: ["b", 1, "live", delivered.map(\.rawValue).joined(separator: " ")])]
            commands += delivered.map { broadcastCounted(plan.key, $0) }
            commands += trailCommands(trail)
            let replies = try await redis.pipeline(commands)
            if let bad = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "recording a broadcast: \(bad)") }
            if unqueued { try await fanouts.queueOthers(first.slice) }
            if finishEnd, plan.event == .end { try await finish(plan) }
            return .sending(sending, broadcasts: delivered.count)
        } catch {
            // The entry stays pending; its next delivery broadcasts again (`b` is not 1) and takes
            // the fan-out up where slice 0 got to.
            _ = try? await sending.value
            throw error
        }
    }

    /// Counts a broadcast delivered on the key's channel in `env` (`inspect`).
    private func broadcastCounted(_ key: ActivityKey, _ env: APNsEnvironment) -> RedisCommand {
        RedisCommand("HINCRBY", channels.hashKey(key), "\(env.rawValue):broadcasts", 1)
    }

    /// Slice 0 of a fan-out, sent by the worker that read its event (outside the key's lock).
    private func sendFirstSlice(_ first: FirstSlice) async throws -> SendOutcome {
        var summary = first.summary
        let slice = first.slice
        let result = try await slices.runSlice(slice, summary: &summary, acknowledges: false, attempts: first.attempts, known: first.head,
                                        firstStep: first.step, broadcast: first.broadcast, waits: false,
                                        shouldStop: { [self] in ctx.stopping.load(ordering: .relaxed) })
        switch result {
        case .final(let left, _) where left <= 0:
            summary.finishedRecord = keys.fanout(slice.key, slice.gen)
            return .done(summary)
        case .gone: return .done(summary)
        case .final: return .handedOff(summary)
        case .busy, .paused:
            // Slice 0 isn't finished here (or only tokens waiting for their back-off are left): it
            // goes to the slices stream like the others.
            _ = try await redis.send(fanouts.queueCommand(slice))
            return .handedOff(summary)
        }
    }

    /// After the end went out: the channel is deleted after the dismissal window, and the key's
    /// tokens, state and index entry are forgotten then too — until then a late event (processed
    /// after the end by another worker) can still bring its values to every device.
    func finish(_ plan: Plan) async throws {
        let window = plan.dismissAfterSeconds ?? 4 * 3600
        try await channels.scheduleDeletion(plan.key, atMillis: plan.timestampMillis + window * 1000)
        let keep = Int(window) + 600
        _ = try await redis.pipeline([
            // The tombstone outlives the key's data by `ttl.activity_s`: a late event then finds
            // the key ended instead of starting it over.
            RedisCommand("SET", keys.ended(plan.key), plan.timestampMillis, "EX", keep + configuration.stateTTLSeconds),
            RedisCommand("ZREM", keys.keysIndex, plan.key.description),
            RedisCommand("EXPIRE", keys.tokens(plan.key), keep),
            RedisCommand("EXPIRE", keys.meta(plan.key), keep),
            RedisCommand("EXPIRE", keys.direct(plan.key), keep),
            RedisCommand("EXPIRE", keys.tokenOwners(plan.key), keep),
            RedisCommand("EXPIRE", keys.starts(plan.key), keep),
            RedisCommand("EXPIRE", keys.state(plan.key), keep),
            // The trail outlives the key by its retention: the support ticket comes the next morning.
            RedisCommand("EXPIRE", keys.trail(plan.key), keep + configuration.trailRetentionSeconds),
        ] + [Outcome.keyEnded(key: plan.key, endedMillis: plan.timestampMillis).command(keys, maxLength: configuration.outcomesMaxLength)].compactMap { $0 })
    }
}

struct PushRejectionError: Error, CustomStringConvertible {
    var rejection: PushRejection
    init(_ r: PushRejection) { rejection = r }
    var description: String { rejection.description }
}

/// What the worker asks of the send path's other parts.
extension Sender {
    /// Sends one slice taken from the slices stream (`SliceRunner.runSlice`).
    public func runSlice(_ slice: SliceRef, attempts: (key: String, field: String)? = nil,
                         shouldStop: @Sendable () -> Bool = { false }) async throws -> SliceResult {
        try await slices.runSlice(slice, attempts: attempts, shouldStop: shouldStop)
    }

    /// A slice whose attempts ran out: final without being sent.
    public func abandonSlice(_ slice: SliceRef, reason: String) async throws -> AcknowledgedEntry? {
        try await slices.abandonSlice(slice, reason: reason)
    }

    /// A coalesced state due for `audienceName` (`CoalescedFlusher.flush`).
    public func flush(_ key: ActivityKey, _ audienceName: String) async throws -> FlushResult { try await flusher.flush(key, audienceName) }

    /// Now on the budget's clock: nil for Redis's.
    public func budgetNow() -> Int64? { ctx.budgetNow() }

    /// A real duration on the budget's clock (ms).
    public func budgetSpan(_ real: Duration) -> Int64 { ctx.budgetSpan(real) }
}
