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
    /// The stream of slices any worker can take (`<prefix>:slices`).
    public var slicesStream: String
    /// About how many tokens one slice holds: an audience larger than this is cut into slices.
    public var sliceSize: Int
    /// Tokens handed out and sent per step of a slice: a worker that dies re-sends at most this
    /// many per slice it was sending (the bound on duplicates).
    public var sliceBatch: Int
    /// How long a batch in flight keeps its slice from other workers (renewed by each batch).
    public var leaseMillis: Int
    /// Priority-10 budgets per audience (docs/budgets.md).
    public var budgets: BudgetPolicy = .default
    /// nil: decisions use Redis's clock (one clock for the fleet); tests give a compressed one.
    public var budgetClock: BudgetClock?
    /// The fleet's send rate per app (off by default).
    public var rateGuard = RateGuardPolicy()

    public init(keys: RedisKeys, bundleID: String, batchSize: Int = 1000, stateTTLSeconds: Int = 43_200, maxAttempts: Int = 6,
                endSettle: Duration = .milliseconds(250), startsPerSecond: Int = 500, group: String = "activitycast",
                sliceSize: Int = 4096, sliceBatch: Int = 256, leaseMillis: Int = 10_000) {
        self.group = group
        self.slicesStream = keys.slices
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
public final class Sender: Sendable {
    let redis: RedisConnection
    let apns: APNsRouter
    let configuration: SendConfiguration
    let channels: ChannelRegistry
    let logger: Logger
    public let stats: SendStats
    /// One key's events go out one at a time from this worker.
    let locks = KeyLocks()
    /// Set when the worker stops: slices stop between batches and hand the rest back.
    let stopping = Atomic<Bool>(false)

    public func beginStopping() { stopping.store(true, ordering: .relaxed) }

    public init(redis: RedisConnection, apns: APNsRouter, configuration: SendConfiguration, logger: Logger, stats: SendStats = SendStats()) {
        self.redis = redis
        self.apns = apns
        self.configuration = configuration
        self.logger = logger
        self.stats = stats
        self.channels = ChannelRegistry(redis: redis, apns: apns, keys: configuration.keys, bundleID: configuration.bundleID,
                                        ttlSeconds: configuration.stateTTLSeconds, logger: logger, stats: stats)
    }

    var keys: RedisKeys { configuration.keys }
    func stateKey(_ key: ActivityKey) -> String { "\(keys.prefix):{\(key)}:state" }
    func genKey(_ key: ActivityKey) -> String { "\(keys.prefix):{\(key)}:gen" }
    func fanKey(_ key: ActivityKey, _ gen: String) -> String { "\(keys.prefix):{\(key)}:fan:\(gen)" }
    func inflightKey(_ key: ActivityKey) -> String { "\(keys.prefix):{\(key)}:inflight" }
    func fanoutKeys(_ key: ActivityKey) -> FanoutKeys { FanoutKeys(keys, key) }
    func startsKey(_ key: ActivityKey) -> String { "\(keys.prefix):{\(key)}:starts" }
    var failuresStream: String { "\(keys.prefix):send-failures" }

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
        switch try await locks.withTicket(ticket, { try await sendLocked(plan, entry: entry, redelivered: redelivered) }) {
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

    private func sendLocked(_ original: Plan, entry: String, redelivered: Bool) async throws -> Locked {
        if redelivered, try await acknowledgedAlready(original.key, entry: entry) {
            logger.info("delivered again after another worker finished it: nothing to send", metadata: ["entry": "\(entry)"])
            return .outcome(.done(SendSummary()))
        }
        var plan = original
        // Key state: merge in timestamp order; a stale event is not sent.
        // An end is recorded as the key's newest event only after its settle time (below), so a
        // start still being processed meanwhile doesn't take the activity for over.
        // The key's channels are read in the same round trip (a broadcast's latency is mostly
        // round trips), and the key goes into the index of keys (`inspect`) unless this ends it.
        // The merge keeps the event's presentation too, for a flush that later sends the state on
        // its behalf, and refuses a content-state that would make the push too large (the key's
        // state stays as it was, and the decisions below spend nothing).
        var commands = [
            mergeCommand(plan, entry: entry, recordEvent: !(plan.event == .end && configuration.endSettle > .zero)),
            channels.statesCommand(plan.key, apns.environments),
            // This entry's fan-out, if an earlier delivery started it (so its broadcast isn't repeated).
            RedisCommand("HMGET", fanKey(plan.key, entry), "left", "b"),
        ]
        if plan.event != .end { commands.append(RedisCommand("ZADD", keys.keysIndex, "GT", plan.timestampMillis, plan.key.description)) }
        // An update's budget decisions, guarded: nothing is spent when the merge just before
        // found a newer event or refused this one, or when a redelivered entry's fan-out recorded
        // its decisions.
        let decide = decideCommands(plan, entry: entry, redelivered: redelivered)
        let replies = try await redis.pipeline(commands + decide)
        if plan.event != .end, let e = replies[3].errorMessage { throw RedisError(.server, "indexing \(plan.key): \(e)") }
        let decided = Array(replies.suffix(decide.count))
        var merged = try KeyStateScripts.parse(replies[0])
        if let size = merged.tooLarge {
            return .outcome(.rejected("the key's content-state with this event's would be \(size) bytes, over the \(stateLimit(plan)) a push of this "
                                      + "event has room for (Apple's limit is \(PayloadLimits.device)); the key's state is left as it was and nothing was sent"))
        }
        let known = try channels.states(replies[1], apns.environments)
        let prior = FanoutPrior(replies[2])
        var summary = SendSummary()
        if merged.stale, plan.event == .start {
            // A start processed after a newer event of its key (another worker was faster): the
            // followers still get their start, with the whole state as of the newest event —
            // unless the activity is already over.
            guard merged.newestEvent != .end else {
                summary.stale = true
                stats.stale.add(1, ordering: .relaxed)
                return .outcome(.done(summary))
            }
            plan.timestampMillis = merged.newestMillis
        } else if merged.stale {
            summary.stale = true
            stats.stale.add(1, ordering: .relaxed)
            if plan.event == .end {
                // Never silent: an end not shown leaves the activity running on its devices.
                logger.warning("an end older than its key's newest event: not sent as an end", metadata: [
                    "key": "\(plan.key)", "entry": "\(entry)", "ts": "\(plan.timestampMillis)", "newest": "\(merged.newestMillis)",
                    "newestEvent": "\(merged.newestEvent?.rawValue ?? "-")",
                ])
            }
            // Processed late (another worker sent a newer event first) but it still brought the
            // newest value of some keys: devices get the merged state again, as the newest event
            // and at its time, quietly (priority 5, no alert), so they end on the complete state.
            guard merged.changed, plan.event != .start, let newestEvent = merged.newestEvent else { return .outcome(.done(summary)) }
            var catchUp = Plan(key: plan.key, event: newestEvent, priority: .routine, timestampMillis: merged.newestMillis,
                               audience: .activity(plan.key), contentState: [:], storagePolicy: plan.storagePolicy)
            catchUp.staleAfterSeconds = plan.staleAfterSeconds
            catchUp.relevanceScore = plan.relevanceScore
            return try await sendToActivity(catchUp, state: merged.contentState, entry: entry, summary: summary, finishEnd: false,
                                            redelivered: redelivered)
        }
        // A channel only for an audience: made at the first event after a device on broadcast
        // needed one (`want`: a scheduled match's channel exists before kick-off if a device on
        // broadcast registered for it); a start makes it for its followers on broadcast (`sendStarts`).
        var channelStates: [APNsEnvironment: ChannelRegistry.State] = [:]
        let wanted = channels.wanted(replies[1], apns.environments)
        for env in apns.environments {
            channelStates[env] = wanted ? try await channels.ensure(plan.key, env, policy: plan.storagePolicy, known: known[env]) : known[env]
        }
        guard let event = plan.event else { return .outcome(.done(summary)) }
        // The settle is for the first delivery: a redelivered end whose fan-out began has nothing to wait for.
        if event == .end, configuration.endSettle > .zero, prior.left == nil {
            try await Task.sleep(for: configuration.endSettle)
            // The same merge again (idempotent): the state now has what other workers merged meanwhile.
            merged = try KeyStateScripts.parse(try await redis.send(mergeCommand(plan, entry: entry, recordEvent: true)))
            if let size = merged.tooLarge {
                return .outcome(.rejected("the key's content-state with this end's would be \(size) bytes, over the \(stateLimit(plan)) its push has "
                                          + "room for; the key's state is left as it was and nothing was sent"))
            }
        }

        switch event {
        case .start:
            do {
                try await sendStarts(plan, state: merged.contentState, channels: channelStates, entry: entry, summary: &summary)
            } catch let e as PushRejectionError {
                return .outcome(.rejected(e.description))
            }
        case .update, .end:
            return try await sendToActivity(plan, state: merged.contentState, entry: entry, summary: summary, finishEnd: true, redelivered: redelivered,
                                            decided: decided.isEmpty ? nil : decided, prior: prior,
                                            channelStates: channelStates)
        }
        return .outcome(.done(summary))
    }

    /// The merge of `plan` into its key's state (`KeyStateScripts.merge`). `recordEvent` false:
    /// an end before its settle time, merged but not yet recorded as the key's newest event.
    func mergeCommand(_ plan: Plan, entry: String, recordEvent: Bool) -> RedisCommand {
        let event = KeyState.Event(millis: plan.timestampMillis, event: recordEvent ? plan.event : nil,
                                   staleAfter: plan.staleAfterSeconds.map { String($0) }, relevance: plan.relevanceScore.map { String($0) },
                                   stateLimit: stateLimit(plan))
        return KeyStateScripts.mergeCommand(stateKey: stateKey(plan.key), event, entry: entry, ttlSeconds: configuration.stateTTLSeconds,
                                            contentState: plan.contentState)
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
                                redelivered: Bool, decided: [RESPValue]? = nil, prior known0: FanoutPrior? = nil,
                                channelStates known: [APNsEnvironment: ChannelRegistry.State]? = nil) async throws -> Locked {
        var summary = summary
        let payload = PushBuilder.payload(plan, contentState: state)
        let bytes: [UInt8]
        switch PushBuilder.encoded(payload, limit: PayloadLimits.device, what: "a device push") {
        case .success(let b): bytes = b
        case .failure(let rejection): return .outcome(.rejected(rejection.description))
        }
        let gen = entry
        let (stream, entryID) = Self.split(entry: entry)
        let fan = fanKey(plan.key, gen)
        var prior = known0
        if prior == nil { prior = FanoutPrior(try await redis.send(RedisCommand("HMGET", fan, "left", "b"))) }
        if prior?.left == 0 {
            summary.finishedRecord = fan
            return .outcome(.done(summary))
        }
        // The broadcast first (its latency is what broadcast devices see), then the fan-out record
        // while it is answered. The budget decides each audience's priority once per event; a
        // fan-out that exists with its broadcast recorded (this entry delivered again) keeps the
        // decisions it recorded.
        var live: [APNsEnvironment] = []
        var broadcasting: Task<[APNsEnvironment], Error>?
        var priorities = AudiencePriorities(all: PushBuilder.priority(plan))
        var spent: [BudgetAudience] = []
        var bytes5 = bytes
        if prior?.broadcastDone != true {
            var channelStates: [APNsEnvironment: ChannelRegistry.State] = known ?? [:]
            if known == nil {
                let envs = apns.environments
                channelStates = try channels.states(try await redis.send(channels.statesCommand(plan.key, envs)), envs)
            }
            let channelsLive = apns.environments.compactMap { env -> (APNsEnvironment, ChannelRecord)? in
                if case .live(let record)? = channelStates[env] { return (env, record) } else { return nil }
            }
            let nobody: Bool
            (priorities, spent, nobody) = try await decideBudgets(plan, entry: entry, redelivered: redelivered, channel: !channelsLive.isEmpty,
                                                                  decided: decided)
            // A push at 5 carries no alert: an alert only makes sense at 10.
            if plan.alert != nil {
                var quiet = plan
                quiet.alert = nil
                bytes5 = PushBuilder.payload(quiet, contentState: state).encoded()
            }
            if let cp = priorities.channel {
                // A redelivered entry's broadcast may have gone out before (the record says so only
                // once it is answered): the state goes again without its alert.
                let cb = cp == 10 && !redelivered ? bytes : bytes5
                if priorities.anyTokens, !channelsLive.isEmpty {
                    // The tokens don't wait for the broadcast's answer: slice 0's devices off the
                    // channel get theirs meanwhile; those on it wait for the answer (a channel whose
                    // broadcast failed has its devices sent per token), and so do slices 1…n-1,
                    // queued once `live` is known. `b` is recorded then too.
                    broadcasting = Task { try await self.broadcast(plan, cb, priority: cp, channels: channelsLive) }
                    live = channelsLive.map(\.0)
                } else {
                    live = try await broadcast(plan, cb, priority: cp, channels: channelsLive)
                    summary.broadcasts += live.count
                    if nobody, live.count < channelsLive.count {
                        // Every device was on a channel, and one channel's broadcast failed: its
                        // devices get the state per token after all (`live` leaves them out).
                        let tiers = try await decideBudgets(plan, entry: entry, redelivered: redelivered, channel: true, tiersOnly: true)
                        priorities.standard = tiers.priorities.standard
                        priorities.frequent = tiers.priorities.frequent
                        spent += tiers.spent
                    }
                }
            } else {
                // The channel's state waits for its flush: its devices get nothing per token either.
                live = channelsLive.map(\.0)
            }
            if !priorities.anyTokens {
                // Every tier's state waits for its flush (or is stale for it): no fan-out now. A
                // finished record of this entry's fan-out says so to a later delivery (no decision
                // or broadcast again).
                var commands = [RedisCommand("HSET", fan, "left", 0, "b", 1), RedisCommand("EXPIRE", fan, 3600)]
                if priorities.channel != nil { commands += live.map { broadcastCounted(plan.key, $0) } }
                _ = try await redis.pipeline(commands)
                if finishEnd, plan.event == .end { try await finish(plan) }
                summary.finishedRecord = fan
                return .outcome(.done(summary))
            }
        }
        // Devices on a channel that had the push (or whose channel's push waits) get nothing per
        // token; `b` records the broadcast so a redelivered entry doesn't broadcast again (0 while
        // it is unanswered: a later delivery broadcasts again, and other workers leave the slices).
        let sent = priorities.channel != nil && broadcasting == nil ? live : []
        // The tiers whose decision took a token, on the record: a fan-out that ends with none of
        // a tier's devices sent at 10 (superseded first, or no device of that tier) gives it back.
        let spentTiers = spent.compactMap { if case .tier(let t) = $0 { t.rawValue } else { nil } }
        var also = sent.map { broadcastCounted(plan.key, $0) }
        if !spentTiers.isEmpty { also.append(.script(FanoutScripts.mark, keys: [fan], args: ["spent", spentTiers.joined(separator: " ")])) }
        let created: FanoutStart
        do {
            created = try await createFanout(key: plan.key, gen: gen, millis: plan.timestampMillis, payload: bytes, quiet: bytes5,
                                             tiers: priorities, live: live, entry: entry, flush: false, broadcastPending: broadcasting != nil,
                                             also: also)
        } catch {
            _ = try? await broadcasting?.value
            throw error
        }
        let slices: Int, head: SliceHead?, step: RESPValue, unqueued: Bool
        switch created {
        case .older, .over, .noAudience:
            if case .over = created { summary.finishedRecord = fan }
            if case .older = created {
                // A newer event's fan-out is already under way: this state is out of date, and the
                // tokens its tiers took at 10 go back (the channel's broadcast went out).
                summary.stale = true
                stats.stale.add(1, ordering: .relaxed)
            }
            if case .over = created {} else {
                // Superseded, or no device to send to: the tokens its tiers took at 10 go back.
                try await refund(plan.key, spent.filter { if case .tier = $0 { true } else { false } })
            }
            if let broadcasting {
                let delivered = try await broadcasting.value
                summary.broadcasts += delivered.count
                _ = try await redis.pipeline(delivered.map { broadcastCounted(plan.key, $0) })
            }
            if case .noAudience = created, finishEnd, plan.event == .end { try await finish(plan) }
            return .outcome(.done(summary))
        case .firstSlice(let n, let h, let s, let u):
            (slices, head, step, unqueued) = (n, h, s, u)
        }
        let slice = SliceRef(key: plan.key, gen: gen, index: 0, count: slices)
        var first = FirstSlice(slice: slice, summary: summary, head: head, step: step,
                               attempts: redelivered ? ("\(keys.prefix):errors:\(stream)", "\(entryID)#n") : nil)
        guard let broadcasting else {
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
            if unqueued { commands += queueOthers(plan.key, gen: gen, slices: slices) }
            let replies = try await redis.pipeline(commands)
            if let bad = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "recording a broadcast: \(bad)") }
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

    /// Broadcasts to every environment's channel at once (a broadcast doesn't wait for the previous
    /// one's answer); returns the environments whose broadcast was delivered.
    private func broadcast(_ plan: Plan, _ bytes: [UInt8], priority: Int, channels live: [(APNsEnvironment, ChannelRecord)]) async throws -> [APNsEnvironment] {
        if live.count == 1 {
            return try await broadcast(plan, bytes, priority: priority, env: live[0].0, record: live[0].1) ? [live[0].0] : []
        }
        return try await withThrowingTaskGroup(of: (APNsEnvironment, Bool).self) { group in
            for (env, record) in live {
                group.addTask { (env, try await self.broadcast(plan, bytes, priority: priority, env: env, record: record)) }
            }
            return try await group.reduce(into: []) { if $1.1 { $0.append($1.0) } }
        }
    }

    enum FanoutStart {
        /// A newer fan-out of the key is under way (or, for a flush, one of the same time).
        case older
        /// It exists and every slice is final.
        case over
        /// The key has no tokens: it is the key's newest fan-out, with no record and no slices.
        case noAudience
        /// Slices 1…n-1 are queued for the fleet (`unqueued`: not yet, the caller queues them);
        /// slice 0 is the caller's (`head`: what the caller knows of it, nil when the fan-out
        /// existed before; `step`: its first step's reply).
        case firstSlice(slices: Int, head: SliceHead?, step: RESPValue, unqueued: Bool)
    }

    /// Creates a fan-out (see `FanoutScripts.create`; an existing one of the same `gen` is taken
    /// up where it is), takes slice 0's first batch in the same round trip (an event's latency is
    /// made of round trips; the step finds nothing to take when the creation didn't happen), and
    /// queues slices 1…n-1. `also`: commands for the same round trip.
    /// `broadcastPending`: the broadcast isn't answered yet: `b` is not recorded, and slices 1…n-1
    /// are left for the caller to queue once `live` is final. `newest`: a flush's read of the key's
    /// newest fan-out (`FanoutCreate.newest`).
    func createFanout(key: ActivityKey, gen: String, millis: Int64, payload: [UInt8], quiet: [UInt8], tiers: AudiencePriorities,
                      live: [APNsEnvironment], entry: String, flush: Bool, newest: String? = nil, broadcastPending: Bool = false,
                      also: [RedisCommand] = []) async throws -> FanoutStart {
        let (stream, entryID) = Self.split(entry: entry)
        let commands = [FanoutCreate(keys: fanoutKeys(key), gen: gen, millis: millis, sliceSize: configuration.sliceSize,
                                     ttlSeconds: configuration.stateTTLSeconds, payload: payload, quiet: quiet,
                                     priority: max(tiers.standard ?? 0, tiers.frequent ?? 0), tiers: tiers.encodedTiers, live: live, stream: stream,
                                     entryID: entryID, flush: flush, newest: newest, broadcastPending: broadcastPending).command] + also + [
            // Slice 0's count is the fan-out's, decided by the create (0: the step reads it).
            stepCommand(SliceRef(key: key, gen: gen, index: 0, count: 0), want: stopping.load(ordering: .relaxed) ? 0 : configuration.sliceBatch),
        ]
        let replies = try await redis.pipeline(commands)
        let step = replies[replies.count - 1]
        let slices: Int
        var queued = false
        var head: SliceHead?
        switch try FanoutCreateReply(replies[0]) {
        case .older:
            return .older
        case .none:
            return .noAudience
        case .exists(let left, let n, _, let q):
            if left == 0 { return .over }
            slices = n
            queued = q
        case .new(let n, _):
            slices = n
            stats.fanouts.add(1, ordering: .relaxed)
            head = SliceHead(payload: payload, payload5: quiet, tiers: tiers, live: Set(live), entry: entry)
        }
        if slices > 1, !queued, broadcastPending { return .firstSlice(slices: slices, head: head, step: step, unqueued: true) }
        if slices > 1, !queued {
            let replies = try await redis.pipeline(queueOthers(key, gen: gen, slices: slices))
            if let bad = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, "queueing slices: \(bad)") }
        }
        return .firstSlice(slices: slices, head: head, step: step, unqueued: false)
    }

    /// Slice 0 of a fan-out, sent by the worker that read its event (outside the key's lock).
    private func sendFirstSlice(_ first: FirstSlice) async throws -> SendOutcome {
        var summary = first.summary
        let slice = first.slice
        let result = try await runSlice(slice, summary: &summary, acknowledges: false, attempts: first.attempts, known: first.head,
                                        firstStep: first.step, broadcast: first.broadcast, shouldStop: { [self] in stopping.load(ordering: .relaxed) })
        switch result {
        case .final(let left) where left <= 0:
            summary.finishedRecord = fanKey(slice.key, slice.gen)
            return .done(summary)
        case .gone: return .done(summary)
        case .final: return .handedOff(summary)
        case .busy, .paused:
            // Slice 0 isn't finished here: it goes to the slices stream like the others.
            _ = try await redis.send(queueCommand(slice))
            return .handedOff(summary)
        }
    }

    // MARK: Broadcast

    /// Broadcasts to the key's channel. False when APNs no longer knows the channel and a new one
    /// couldn't be made for this event (its devices then get nothing from the channel this time).
    func broadcast(_ plan: Plan, _ bytes: [UInt8], priority: Int, env: APNsEnvironment, record: ChannelRecord) async throws -> Bool {
        guard let client = apns.push(env) else { return false }
        var record = record
        var attempt = 0
        var recreated = false
        while true {
            try await admit(1)
            let result = await client.broadcast(payload: bytes, channelID: record.id, bundleID: configuration.bundleID,
                                                priority: priority, storagePolicy: record.policy.rawValue)
            stats.count(.broadcast, result, priority: priority)
            if result.action == .delivered { return true }
            if result.response?.reason == .channelNotRegistered, !recreated {
                recreated = true
                try await channels.forget(plan.key, env, id: record.id)
                guard case .live(let fresh) = try await channels.ensure(plan.key, env, policy: plan.storagePolicy) else { return false }
                record = fresh
                continue
            }
            attempt += 1
            switch TokenOutcome.of(result.action, reason: result.response?.reason, registeredMillis: nil, attempt: attempt) {
            case .retry(let delay, _) where attempt < configuration.maxAttempts:
                try await Task.sleep(for: delay)
            case .retry(_, let reason):
                throw SendFailure("broadcast to \(plan.key) (\(env.rawValue)) kept failing: \(reason)")
            default:
                try await recordFailures(plan.key, kind: "broadcast", [(record.id, describe(result))],
                                         apnsIDs: [result.response?.apnsID ?? result.response?.requestID], entry: "")
                return false
            }
        }
    }

    // MARK: Per-token

    /// One activity token of the key, with what its registration says.
    struct TokenRow {
        var activity: String
        var token: String
        var env: APNsEnvironment
        var onBroadcast: Bool
        var registeredMillis: Int64?
        /// Whose budget its pushes spend.
        var tier: Tier = .standard
    }

    /// Token rows from `(activity, meta)` pairs of `{key}:meta` (its values end with the token),
    /// with the device's own settings where the registration gave none. Meta is read as bytes (a
    /// fan-out reads it for every token). A value written before meta kept the token gets it from
    /// `{key}:tokens`. `tiers`: a registration's tier that is left to its device is looked up
    /// (only needed when the tiers' pushes differ).
    func tokenRows(_ key: ActivityKey, _ pairs: [(activity: String, meta: [UInt8])], tiers: Bool = false) async throws -> [TokenRow] {
        var rows: [TokenRow] = []
        rows.reserveCapacity(pairs.count)
        // Rows whose registration left env or broadcast to the device's settings.
        var needDevice: [(row: Int, device: String, env: Bool, broadcast: Bool, tier: Bool)] = []
        var needToken: [Int] = []
        for p in pairs {
            // A tombstone (`ts -`) has no token: nothing to send.
            guard let m = RegistrationMeta(p.meta) else { continue }
            rows.append(TokenRow(activity: p.activity, token: m.token ?? "", env: m.env ?? .production, onBroadcast: m.broadcast ?? false,
                                 registeredMillis: m.millis, tier: m.tier ?? .standard))
            if m.token == nil { needToken.append(rows.count - 1) }
            if m.env == nil || m.broadcast == nil || (tiers && m.tier == nil) {
                needDevice.append((rows.count - 1, m.device, m.env == nil, m.broadcast == nil, tiers && m.tier == nil))
            }
        }
        if !needToken.isEmpty {
            let reply = try await redis.send(RedisCommand("HMGET", [keys.tokens(key)] + needToken.map { rows[$0].activity }))
            for (row, value) in zip(needToken, reply.array ?? []) { rows[row].token = value.string ?? "" }
        }
        if !needDevice.isEmpty {
            let replies = try await redis.pipeline(needDevice.map { RedisCommand("HMGET", keys.device($0.device), "env", "broadcast", "tier") })
            for (need, reply) in zip(needDevice, replies) {
                let values = reply.array ?? []
                // The device hash keeps its settings as plain values: `env`, `broadcast` ("1"/"0"), `tier`.
                if need.env, let env = values.first?.string.flatMap(APNsEnvironment.init(rawValue:)) { rows[need.row].env = env }
                if need.broadcast, values.count > 1 { rows[need.row].onBroadcast = values[1].string == "1" }
                if need.tier, values.count > 2, let tier = values[2].string.flatMap(Tier.init(rawValue:)) { rows[need.row].tier = tier }
            }
        }
        return rows.filter { !$0.token.isEmpty }
    }

    /// Sends one payload to `rows` and acts on every answer: retries what can be retried,
    /// forgets dead tokens, records permanent failures. Throws when retries run out.
    /// `quiet`: the payload without its alert, for a token retried after no answer (the request
    /// may have reached APNs, and its alert must not show twice); a refused request (429, 5xx)
    /// is retried as it was.
    func sendBatch(_ plan: Plan, _ bytes: [UInt8], quiet: [UInt8]? = nil, priority: Int, env: APNsEnvironment, rows: [TokenRow],
                   kind: SendStats.Kind, entry: String, summary: inout SendSummary, onDelivered: (([TokenRow]) async throws -> Void)? = nil,
                   beforeRetry: ((Duration) async throws -> Void)? = nil) async throws {
        guard let client = apns.push(env) else {
            let reason = "no APNs endpoint is configured for \(env.rawValue) tokens"
            try await recordFailures(plan.key, kind: kind.rawValue, rows.map { ($0.token, reason) }, entry: entry)
            summary.failed += rows.count
            return
        }
        // Each token with whether an earlier request for it went unanswered (it may have gone out).
        var pending = rows.map { (row: $0, unsure: false) }
        var attempt = 0
        while !pending.isEmpty {
            let sure = pending.filter { !$0.unsure || quiet == nil }, unsure = pending.filter { $0.unsure && quiet != nil }
            var results: [APNsResult] = []
            if !sure.isEmpty { results += try await sendAdmitted(client, bytes, sure.map(\.row.token), priority: priority) }
            if !unsure.isEmpty, let quiet { results += try await sendAdmitted(client, quiet, unsure.map(\.row.token), priority: priority) }
            let sent = sure + unsure
            if results.contains(where: { $0.response?.reason == .tooManyRequests }) { await tightenRate() }
            var retry: [(row: TokenRow, unsure: Bool)] = []
            var delay = Duration.zero
            var delivered: [TokenRow] = []
            var deliveredCount = 0
            // Dead tokens and permanent failures of the whole batch: written in one go, not per token.
            var dead: [(row: TokenRow, reason: String, apnsID: String?)] = []
            var failures: [(target: String, reason: String)] = []
            var failureIDs: [String?] = []
            var lastReason = ""
            stats.count(kind, results, priority: priority)
            for ((row, wasUnsure), result) in zip(sent, results) {
                switch TokenOutcome.of(result.action, reason: result.response?.reason, registeredMillis: row.registeredMillis, attempt: attempt) {
                case .delivered:
                    deliveredCount += 1
                    if onDelivered != nil { delivered.append(row) }
                case .forget(let reason):
                    dead.append((row, reason, result.response?.apnsID))
                case .retry(let after, let reason):
                    retry.append((row, wasUnsure || result.response == nil))
                    delay = max(delay, after)
                    lastReason = reason
                case .failed(let reason):
                    failures.append((row.token, reason))
                    failureIDs.append(result.response?.apnsID)
                }
            }
            if !dead.isEmpty {
                summary.forgotten += dead.count
                stats.tokensForgotten.add(dead.count, ordering: .relaxed)
                if kind == .start { try await forgetStartTokens(dead, activityType: plan.attributesType ?? "") }
                else { try await forgetTokens(plan.key, dead) }
            }
            if !failures.isEmpty {
                summary.failed += failures.count
                stats.failedTokens.add(failures.count, ordering: .relaxed)
                try await recordFailures(plan.key, kind: kind.rawValue, failures, apnsIDs: failureIDs, entry: entry)
            }
            switch kind {
            case .start: summary.starts += deliveredCount
            default: summary.tokens += deliveredCount
            }
            if let onDelivered, !delivered.isEmpty { try await onDelivered(delivered) }
            attempt += 1
            if !retry.isEmpty && attempt >= configuration.maxAttempts {
                throw SendFailure("\(retry.count) \(kind.rawValue) pushes for \(plan.key) still failing after \(attempt) attempts: \(lastReason)")
            }
            pending = retry
            if !pending.isEmpty {
                let wait = min(delay, .seconds(30))
                try await beforeRetry?(wait)
                try await Task.sleep(for: wait)
            }
        }
    }

    /// Forgets activity tokens APNs says are dead, unless replaced meanwhile: one pipeline.
    private func forgetTokens(_ key: ActivityKey, _ dead: [(row: TokenRow, reason: String, apnsID: String?)]) async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try await redis.pipeline(dead.map { d in
            .script(TokenScripts.forgetIfSame, keys: [keys.tokens(key), keys.meta(key), keys.tokenOwners(key), keys.direct(key)], args: [d.row.activity, d.row.token, now])
        })
        for d in dead {
            // A failed send, logged once: what APNs said, its apns-id, never the whole token.
            logger.info("token forgotten", metadata: ["key": "\(key)", "kind": "token", "activity": "\(d.row.activity)", "reason": "\(d.reason)",
                                                      "apns_id": "\(d.apnsID ?? "-")", "token": "\(d.row.token.prefix(8))…"])
        }
    }

    // MARK: Push-to-start

    private func sendStarts(_ plan: Plan, state: [String: JSONValue], channels known: [APNsEnvironment: ChannelRegistry.State],
                            entry: String, summary: inout SendSummary) async throws {
        var states = known
        guard case .followers(let targets) = plan.audience, let activityType = plan.attributesType else { return }
        // Devices that already have an activity for the key get no start.
        let metaValues = try await redis.send(RedisCommand("HVALS", keys.meta(plan.key)))
        let haveActivity = Set((metaValues.array ?? []).compactMap { v -> String? in
            let f = v.string?.split(separator: " ") ?? []
            return f.count >= 5 ? String(f[1]) : nil
        })
        var seen = Set<String>()
        let pacing = Pacing(perSecond: configuration.startsPerSecond)
        let withToken: [UInt8]
        switch PushBuilder.encoded(PushBuilder.payload(plan, contentState: state), limit: PayloadLimits.device, what: "a push-to-start") {
        case .success(let b): withToken = b
        case .failure(let r): throw PushRejectionError(r)
        }
        for target in targets {
            var cursor = "0"
            repeat {
                let reply = try await redis.send(RedisCommand("SSCAN", keys.followers(target), cursor, "COUNT", configuration.batchSize))
                guard let parts = reply.array, parts.count == 2, let next = parts[0].string else { throw SendFailure("SSCAN: unexpected reply") }
                cursor = next
                let devices = (parts[1].array ?? []).compactMap(\.string).filter { !haveActivity.contains($0) && seen.insert($0).inserted }
                if devices.isEmpty { continue }
                // Each device gets at most one start per key, across events and workers.
                let already = try await redis.send(RedisCommand("SMISMEMBER", [startsKey(plan.key)] + devices))
                let fresh = zip(devices, already.array ?? []).filter { $0.1.int != 1 }.map(\.0)
                if fresh.isEmpty { continue }
                let settings = try await redis.pipeline(fresh.map { RedisCommand("HMGET", keys.device($0), "start:\(activityType)", "env", "broadcast") })
                var rows: [TokenRow] = []
                for (device, reply) in zip(fresh, settings) {
                    let v = reply.array ?? []
                    guard let start = v.first?.string, let space = start.firstIndex(of: " ") else { continue }
                    let token = String(start[start.index(after: space)...])
                    let env = (v.count > 1 ? v[1].string.flatMap(APNsEnvironment.init(rawValue:)) : nil) ?? .production
                    rows.append(TokenRow(activity: device, token: token, env: env, onBroadcast: v.count > 2 && v[2].string == "1",
                                         registeredMillis: Int64(start[..<space])))
                }
                // Each device's push-to-start budget (across keys and workers): a device over it is
                // skipped and counted; it can be started by a later event.
                rows = try await withinStartBudget(rows)
                // A follower on broadcast starts its activity on the key's channel
                // (`input-push-channel`): the key gets its channels now if it has none (in every
                // environment, as for a registration on broadcast: one key, one set of channels).
                if rows.contains(where: \.onBroadcast) {
                    for env in apns.environments where states[env] == ChannelRegistry.State.none {
                        states[env] = try await channels.ensure(plan.key, env, policy: plan.storagePolicy, known: ChannelRegistry.State.none)
                    }
                }
                var plain: [APNsEnvironment: [TokenRow]] = [:]
                var onChannel: [APNsEnvironment: [TokenRow]] = [:]
                for row in rows {
                    if row.onBroadcast, case .live? = states[row.env] { onChannel[row.env, default: []].append(row) } else { plain[row.env, default: []].append(row) }
                }
                let marks: ([TokenRow]) async throws -> Void = { [redis, startsKey = startsKey(plan.key), ttl = configuration.stateTTLSeconds] rows in
                    _ = try await redis.pipeline([RedisCommand("SADD", [startsKey] + rows.map(\.activity)), RedisCommand("EXPIRE", startsKey, ttl)])
                }
                do {
                    for (env, rows) in plain.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                        for chunk in pacing.chunks(rows) {
                            try await pacing.wait(for: chunk.count)
                            try await sendBatch(plan, withToken, priority: 10, env: env, rows: Array(chunk), kind: .start, entry: entry, summary: &summary, onDelivered: marks)
                        }
                    }
                    for (env, rows) in onChannel.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                        guard case .live(let record)? = states[env] else { continue }
                        let payload = PushBuilder.payload(plan, contentState: state, inputPushChannel: record.id)
                        guard case .success(let bytes) = PushBuilder.encoded(payload, limit: PayloadLimits.device, what: "a push-to-start") else { continue }
                        for chunk in pacing.chunks(rows) {
                            try await pacing.wait(for: chunk.count)
                            try await sendBatch(plan, bytes, priority: 10, env: env, rows: Array(chunk), kind: .start, entry: entry, summary: &summary, onDelivered: marks)
                        }
                    }
                } catch {
                    // The entry will be delivered again: devices that didn't get their start get their
                    // token back, so retries don't spend the budget.
                    await giveBackStartBudget(plan.key, rows)
                    throw error
                }
            } while cursor != "0"
        }
    }

    /// Gives the start-budget token back to each of `rows` whose device didn't get its start.
    private func giveBackStartBudget(_ key: ActivityKey, _ rows: [TokenRow]) async {
        guard !rows.isEmpty,
              let started = try? await redis.send(RedisCommand("SMISMEMBER", [startsKey(key)] + rows.map(\.activity))).array else { return }
        let capacity = configuration.budgets.pushToStart.capacityTicks
        let back = zip(rows, started).filter { $0.1.int != 1 }.map { RedisCommand.script(BudgetScripts.giveBack, keys: [keys.startBudget(device: $0.0.activity)], args: [capacity]) }
        if !back.isEmpty { _ = try? await redis.pipeline(back) }
    }

    /// The rows whose device's push-to-start bucket had a token (one taken each, in one round trip).
    private func withinStartBudget(_ rows: [TokenRow]) async throws -> [TokenRow] {
        guard !rows.isEmpty else { return rows }
        let policy = configuration.budgets.pushToStart
        let now = budgetNow().map { String($0) } ?? "-"
        let replies = try await redis.pipeline(rows.map { row in
            .script(BudgetScripts.take, keys: [keys.startBudget(device: row.activity)],
                    args: [policy.capacityTicks, policy.ticksPerMillisecond, now, configuration.stateTTLSeconds])
        })
        var kept: [TokenRow] = []
        for (row, reply) in zip(rows, replies) {
            if let e = reply.errorMessage { throw RedisError(.server, "push-to-start budget: \(e)") }
            if reply.int == 1 { kept.append(row) } else {
                stats.startsOverBudget.add(1, ordering: .relaxed)
                logger.info("push-to-start skipped: the device's start budget is spent", metadata: ["device": "\(row.activity)"])
            }
        }
        if kept.count < rows.count { _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "starts_over_budget", rows.count - kept.count)) }
        return kept
    }

    /// Forgets a push-to-start token APNs says is dead (unless the device registered a new one
    /// meanwhile): the device no longer counts as able to start this type.
    private func forgetStartTokens(_ dead: [(row: TokenRow, reason: String, apnsID: String?)], activityType: String) async throws {
        // Device hashes and the type's set are in different slots: the set follows the hashes.
        let removed = try await redis.pipeline(dead.map { d in
            .script(TokenScripts.forgetStartIfSame, keys: [keys.device(d.row.activity)], args: ["start:\(activityType)", d.row.token])
        })
        let gone = zip(dead, removed).filter { $0.1.int == 1 }.map { $0.0.row.activity }
        if !gone.isEmpty { _ = try await redis.send(RedisCommand("SREM", [keys.startTokens(activityType: activityType)] + gone)) }
        for d in dead {
            logger.info("push-to-start token forgotten", metadata: ["device": "\(d.row.activity)", "kind": "start", "reason": "\(d.reason)",
                                                                    "apns_id": "\(d.apnsID ?? "-")", "token": "\(d.row.token.prefix(8))…"])
        }
    }

    // MARK: End

    /// After the end went out: the channel is deleted after the dismissal window, and the key's
    /// tokens, state and index entry are forgotten then too — until then a late event (processed
    /// after the end by another worker) can still bring its values to every device.
    func finish(_ plan: Plan) async throws {
        let window = plan.dismissAfterSeconds ?? 4 * 3600
        try await channels.scheduleDeletion(plan.key, atMillis: plan.timestampMillis + window * 1000)
        let keep = Int(window) + 600
        _ = try await redis.pipeline([
            RedisCommand("ZREM", keys.keysIndex, plan.key.description),
            RedisCommand("EXPIRE", keys.tokens(plan.key), keep),
            RedisCommand("EXPIRE", keys.meta(plan.key), keep),
            RedisCommand("EXPIRE", keys.direct(plan.key), keep),
            RedisCommand("EXPIRE", keys.tokenOwners(plan.key), keep),
            RedisCommand("EXPIRE", startsKey(plan.key), keep),
            RedisCommand("EXPIRE", stateKey(plan.key), keep),
        ])
    }

    // MARK: Failures

    /// A permanent failure of one send, where ops can see it: `<prefix>:send-failures` (capped).
    /// Permanent send failures, where ops can see them: `<prefix>:send-failures` (capped) and the
    /// `sends_failed` counter, in one pipeline however many.
    /// `apnsIDs`: APNs's `apns-id` of each failure's answer, where there was one.
    func recordFailures(_ key: ActivityKey, kind: String, _ failures: [(target: String, reason: String)], apnsIDs: [String?] = [],
                        entry: String) async throws {
        func id(_ i: Int) -> String { i < apnsIDs.count ? apnsIDs[i] ?? "-" : "-" }
        var commands = failures.enumerated().map { i, f in
            RedisCommand("XADD", failuresStream, "MAXLEN", "~", 10_000, "*", "key", key.description, "kind", kind,
                         "target", String(f.target.prefix(8)) + "…", "reason", f.reason, "entry", entry, "apns_id", id(i))
        }
        commands.append(RedisCommand("HINCRBY", keys.counters, "sends_failed", failures.count))
        _ = try await redis.pipeline(commands)
        for (i, f) in failures.enumerated() {
            logger.warning("send failed", metadata: ["key": "\(key)", "kind": "\(kind)", "reason": "\(f.reason)", "apns_id": "\(id(i))",
                                                     "target": "\(f.target.prefix(8))…"])
        }
    }
}

/// Spreads sends over time at `perSecond`: before sending `n` more, waits until the ones sent so
/// far are within the rate.
final class Pacing: @unchecked Sendable {
    // Used by one task at a time (one event's start loop).
    private let perSecond: Int
    private let started = ContinuousClock.now
    private var sent = 0

    init(perSecond: Int) { self.perSecond = max(1, perSecond) }

    /// `rows` in pieces of a tenth of a second's worth.
    func chunks<T>(_ rows: [T]) -> [ArraySlice<T>] {
        let size = max(1, perSecond / 10)
        return stride(from: 0, to: rows.count, by: size).map { rows[$0..<min(rows.count, $0 + size)] }
    }

    func wait(for n: Int) async throws {
        let due = started + .seconds(Double(sent) / Double(perSecond))
        if due > .now { try await Task.sleep(until: due, clock: .continuous) }
        sent += n
    }
}

/// A start whose payload is over the limit: the whole event is rejected.
struct PushRejectionError: Error, CustomStringConvertible {
    var rejection: PushRejection
    init(_ r: PushRejection) { rejection = r }
    var description: String { rejection.description }
}

enum TokenScripts {
    /// KEYS[1] = device hash. ARGV = field (`start:<type>`), token. Removes the push-to-start
    /// token if it is still `token` (stored as `ts token`). Returns 1 or 0.
    static let forgetStartIfSame = RedisScript("""
    local cur = redis.call('HGET', KEYS[1], ARGV[1])
    if not cur then return 0 end
    local sp = string.find(cur, ' ', 1, true)
    if not sp or string.sub(cur, sp + 1) ~= ARGV[2] then return 0 end
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 1
    """)

    /// KEYS[1] = `{key}:tokens`, KEYS[2] = `{key}:meta`. ARGV = activity, token, now ms.
    /// Forgets the activity's token if it is still `token` (a rotated token stays). Returns 1 or 0.
    static let forgetIfSame = RedisScript("""
    if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
    redis.call('HDEL', KEYS[1], ARGV[1])
    if redis.call('HGET', KEYS[3], ARGV[2]) == ARGV[1] then redis.call('HDEL', KEYS[3], ARGV[2]) end
    -- A tombstone, so a late registration older than this can't bring the dead token back.
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' -')
    redis.call('HDEL', KEYS[4], ARGV[1])
    return 1
    """)
}
