import ActivityCastCore
import ActivityCastSend
import Foundation
import RedisClient
import Synchronization
import Testing
import TestSupport

/// Budgets: the pure model on plain values, the Redis script checked against it on generated
/// sequences, and four clients contending for one key on a real Redis.
@Suite struct BudgetTests {
    static let token = BudgetState.ticksPerToken

    /// A small policy whose numbers are easy to follow: 4 tokens, 8 per hour (one per 7.5 min),
    /// one kept for the end, routine updates 30 s apart.
    static let small = AudiencePolicy(bucket: BucketPolicy(capacity: 4, refillPerHour: 8), minSpacingMillis: 30_000, endReserve: 1)

    /// Runs events through the model: (event, now) → decisions, and the final state.
    static func run(_ events: [(BudgetEvent, Int64)], policy: AudiencePolicy = small,
                    from state: BudgetState? = nil) -> ([BudgetDecision], BudgetState?) {
        var s = state
        var out: [BudgetDecision] = []
        for (event, now) in events {
            let (d, next) = decide(s, event, nowMillis: now, policy: policy)
            out.append(d)
            s = next
        }
        return (out, s)
    }

    // MARK: - The pure model

    @Test func refillIsContinuousExactAndCapped() {
        let policy = BucketPolicy(capacity: 4, refillPerHour: 8)
        #expect(policy.capacityTicks == 4 * Self.token)
        var bucket = TokenBucket(ticks: 0, refilledAt: 0)
        // 8 per hour is one token per 7.5 minutes, exactly: no fraction lost or gained.
        bucket.refill(to: 450_000, policy)
        #expect(bucket.ticks == Self.token)
        bucket.refill(to: 450_001, policy)
        #expect(bucket.ticks == Self.token + 8)
        // Refilling in many small steps gives what one step gives.
        var stepped = TokenBucket(ticks: 0, refilledAt: 0)
        var t: Int64 = 0
        while t < 1_000_000 { t += 7; stepped.refill(to: t, policy) }
        var once = TokenBucket(ticks: 0, refilledAt: 0)
        once.refill(to: t, policy)
        #expect(stepped == once)
        // A clock that goes back refills nothing, and the time already refilled isn't refilled again.
        var back = once
        back.refill(to: t - 100_000, policy)
        #expect(back == once)
        back.refill(to: t + 1, policy)
        #expect(back.ticks == once.ticks + 8)
        // Capped at the capacity, however long the wait (hours, or an epoch's worth of ms).
        bucket.refill(to: 10 * 3_600_000, policy)
        #expect(bucket.ticks == 4 * Self.token)
        var ancient = TokenBucket(ticks: 0, refilledAt: 0)
        ancient.refill(to: 1_800_000_000_000, BucketPolicy(capacity: 10_000, refillPerHour: 100_000))
        #expect(ancient.ticks == 10_000 * Self.token)
        // A smaller capacity configured since: clamped.
        var big = TokenBucket(ticks: 9 * Self.token, refilledAt: 0)
        big.refill(to: 0, policy)
        #expect(big.ticks == 4 * Self.token)
        // No refill configured: never refills.
        var none = TokenBucket(ticks: 0, refilledAt: 0)
        none.refill(to: 3_600_000, BucketPolicy(capacity: 4, refillPerHour: 0))
        #expect(none.ticks == 0)
    }

    @Test func criticalUpdatesSpendDownToTheReserveThenDowngradeAndTheEndStillGoesAtTen() {
        // Goals at 1 s intervals: 3 at 10 (the 4th token is the end's), then downgraded, not lost.
        var events: [(BudgetEvent, Int64)] = (0..<6).map { (.update(millis: Int64($0) * 1000, priority: .critical), Int64($0) * 1000) }
        events.append((.end(millis: 6000), 6000))
        let (decisions, state) = Self.run(events)
        #expect(decisions == [.priority10, .priority10, .priority10, .priority5, .priority5, .priority5, .priority10])
        #expect(state?.counters.priority10 == 4)
        #expect(state?.counters.priority5 == 3)
        #expect(state?.counters.downgraded == 3)
        #expect(state?.endedMillis == 6000)
        // 6 s of refill at 8 per hour: 6000 × 8 ticks left.
        #expect(state?.bucket.ticks == 48_000)
    }

    @Test func theEndAlwaysGoesAtTenEvenWithoutAReserveAndALaterEndPaysLikeAnUpdate() {
        let noReserve = AudiencePolicy(bucket: BucketPolicy(capacity: 2, refillPerHour: 0), minSpacingMillis: 0, endReserve: 0)
        let (decisions, state) = Self.run([
            (.update(millis: 1, priority: .critical), 0),
            (.update(millis: 2, priority: .critical), 0),
            (.update(millis: 3, priority: .critical), 0),  // spent: downgraded
            (.end(millis: 4), 0),  // still 10, the bucket floors at zero
            (.end(millis: 5), 0),  // a corrected final state: no token, so 5
            (.end(millis: 1), 0),  // older than what was sent
        ], policy: noReserve)
        #expect(decisions == [.priority10, .priority10, .priority5, .priority10, .priority5, .stale])
        #expect(state?.bucket.ticks == 0)
        #expect(state?.endedMillis == 5)
        #expect(state?.counters.downgraded == 2)
        #expect(state?.counters.stale == 1)
        // A routine end is still an end: 10.
        let (routineEnd, _) = Self.run([(.update(millis: 1, priority: .routine), 0), (.end(millis: 2), 1)])
        #expect(routineEnd == [.priority5, .priority10])
    }

    @Test func routineUpdatesAreSpacedAndCoalesceToTheNewestState() {
        let (decisions, state) = Self.run([
            (.update(millis: 100, priority: .routine), 0),        // sent at 5
            (.update(millis: 200, priority: .routine), 10_000),   // inside 30 s: kept, due at 30 s
            (.update(millis: 300, priority: .routine), 20_000),   // the newer one replaces it
            (.update(millis: 250, priority: .routine), 21_000),   // older than the one waiting: absorbed
            (.flush, 25_000),                                     // not due yet
            (.flush, 30_000),                                     // due: sent at 5, as the newest (300)
            (.flush, 30_001),                                     // another worker already flushed it
            (.update(millis: 290, priority: .routine), 40_000),   // older than what was sent: stale
            (.update(millis: 400, priority: .routine), 60_000),   // 30 s after the flush: sent
        ])
        #expect(decisions == [.priority5, .coalesce(dueAtMillis: 30_000), .coalesce(dueAtMillis: 30_000), .coalesce(dueAtMillis: 30_000),
                              .coalesce(dueAtMillis: 30_000), .priority5, .stale, .stale, .priority5])
        #expect(state?.lastMillis == 400)
        #expect(state?.pendingMillis == nil)
        #expect(state?.counters == {
            var c = BudgetState.Counters()
            c.priority5 = 3; c.coalesced = 3; c.flushed = 1; c.stale = 1; c.idleFlushes = 2
            return c
        }())
        // Routine updates never spend the priority-10 budget.
        #expect(state?.bucket.ticks == 4 * Self.token)
    }

    @Test func aCriticalUpdateCarriesAPendingStateNoNewerThanItAndLeavesANewerOneWaiting() {
        let (d1, s1) = Self.run([
            (.update(millis: 100, priority: .routine), 0),
            (.update(millis: 200, priority: .routine), 5_000),   // waits
            (.update(millis: 250, priority: .critical), 6_000),  // goes at once, carrying it
        ])
        #expect(d1 == [.priority5, .coalesce(dueAtMillis: 30_000), .priority10])
        #expect(s1?.pendingMillis == nil)
        #expect(s1?.lastSentAt == 6_000)
        // A critical update older than the waiting state goes at once; the newer state still waits,
        // due 30 s after this send.
        let (d2, s2) = Self.run([
            (.update(millis: 100, priority: .routine), 0),
            (.update(millis: 300, priority: .routine), 5_000),
            (.update(millis: 250, priority: .critical), 6_000),
            (.flush, 30_000),
            (.flush, 36_000),
        ])
        #expect(d2 == [.priority5, .coalesce(dueAtMillis: 30_000), .priority10, .coalesce(dueAtMillis: 36_000), .priority5])
        #expect(s2?.lastMillis == 300)
        // The end drops any waiting state (it carries the merged state) and nothing follows it.
        let (d3, s3) = Self.run([
            (.update(millis: 100, priority: .routine), 0),
            (.update(millis: 300, priority: .routine), 5_000),
            (.end(millis: 200), 6_000),
            (.flush, 60_000),
            (.update(millis: 400, priority: .critical), 60_000),
        ])
        #expect(d3 == [.priority5, .coalesce(dueAtMillis: 30_000), .priority10, .stale, .stale])
        #expect(s3?.pendingMillis == nil)
    }

    @Test func staleIsOlderThanWhatWasSentAndEqualTimesAreNot() {
        let (decisions, _) = Self.run([
            (.update(millis: 1000, priority: .critical), 0),
            (.update(millis: 999, priority: .critical), 1),
            (.update(millis: 999, priority: .routine), 60_000),
            (.update(millis: 1000, priority: .routine), 60_000),  // a redelivery: same time, not stale
        ])
        #expect(decisions == [.priority10, .stale, .stale, .priority5])
    }

    /// A worker that died between the decision and the send: the entry is redelivered and the
    /// same event decided again. It goes at 10 again without a second token (nor a second count);
    /// the same for the end, which would otherwise pay like a corrected end.
    @Test func aRedeliveredEventDecidedAtTenDoesNotSpendTwice() {
        let policy = AudiencePolicy(bucket: BucketPolicy(capacity: 3, refillPerHour: 0), minSpacingMillis: 0, endReserve: 1)
        var state: BudgetState?
        func step(_ e: BudgetEvent, _ entry: String) -> BudgetDecision {
            let (d, next) = decide(state, e, entry: entry, nowMillis: 1_000, policy: policy)
            state = next
            return d
        }
        #expect(step(.update(millis: 100, priority: .critical), "s/1-0") == .priority10)
        #expect(step(.update(millis: 100, priority: .critical), "s/1-0") == .priority10)
        #expect(step(.update(millis: 100, priority: .critical), "s/1-0") == .priority10)
        #expect(state?.bucket.ticks == 2 * BudgetState.ticksPerToken)
        #expect(state?.counters.priority10 == 1)
        // Another entry of the same time (feeds with times in seconds have many) pays.
        #expect(step(.update(millis: 100, priority: .critical), "s/2-0") == .priority10)
        #expect(state?.bucket.ticks == 1 * BudgetState.ticksPerToken)
        // A newer event in between: the old entry is stale, not 10 again.
        #expect(step(.update(millis: 200, priority: .routine), "s/3-0") == .priority5)
        #expect(step(.update(millis: 100, priority: .critical), "s/2-0") == .stale)
        #expect(step(.end(millis: 300), "s/4-0") == .priority10)
        let spent = state?.bucket.ticks
        #expect(step(.end(millis: 300), "s/4-0") == .priority10)
        #expect(state?.bucket.ticks == spent && state?.counters.downgraded == 0 && state?.counters.priority10 == 3)
        // A later, corrected end still pays (the bucket is empty: at 5).
        #expect(step(.end(millis: 400), "s/5-0") == .priority5)
    }

    /// A critical update every 20 s for three hours: in every sliding hour the bucket grants at
    /// most capacity + refill, and the end still goes at 10.
    @Test func noHourEverGrantsMoreThanCapacityPlusRefill() {
        for policy in [BudgetPolicy.default.standard, BudgetPolicy.default.frequent, BudgetPolicy.default.channelNoStorage] {
            var events: [(BudgetEvent, Int64)] = []
            var t: Int64 = 0
            while t < 3 * 3_600_000 { events.append((.update(millis: t, priority: .critical), t)); t += 20_000 }
            events.append((.end(millis: t), t))
            let (decisions, _) = Self.run(events, policy: policy)
            #expect(decisions.last == .priority10)
            let grants = zip(events, decisions).filter { $0.1 == .priority10 }.map(\.0.1)
            let bound = policy.bucket.capacity + policy.bucket.refillPerHour
            for (i, start) in grants.enumerated() {
                let inHour = grants[i...].prefix { $0 < start + 3_600_000 }.count
                #expect(inHour <= bound, "\(inHour) grants in the hour from \(start) ms, bound \(bound)")
            }
            // And the budget is used, not hoarded: the first hour grants capacity − reserve + refill + …
            #expect(grants.count >= policy.bucket.refillPerHour * 3, "\(grants.count) grants in 3 h")
        }
    }

    @Test func theDefaultsAreValidAndErOnTheSafeSide() {
        let p = BudgetPolicy.default
        #expect(p.problems.isEmpty, "\(p.problems)")
        // Community measurements: about 15 priority-10 updates an hour (standard), about 10 starts.
        #expect(p.standard.bucket.capacity + p.standard.bucket.refillPerHour < 15)
        #expect(p.channelNoStorage.bucket.capacity + p.channelNoStorage.bucket.refillPerHour < 15)
        #expect(p.pushToStart.capacity + p.pushToStart.refillPerHour < 10)
        #expect(p.frequent.bucket.refillPerHour > p.standard.bucket.refillPerHour)
        for a in [p.standard, p.frequent, p.channelNoStorage, p.channelLatestMessage] { #expect(a.endReserve >= 1) }
        #expect(p.audience(.tier(.frequent)) == p.frequent)
        #expect(p.audience(.channel(.latestMessage)) == p.channelLatestMessage)

        var bad = p
        bad.standard.endReserve = 4
        bad.frequent.bucket.capacity = 0
        bad.channelNoStorage.bucket.refillPerHour = 100_001
        bad.channelLatestMessage.minSpacingMillis = -1
        bad.pushToStart.capacity = 20_000
        #expect(bad.problems == [
            "budgets.standard.end_reserve must be 0 or more and below the capacity (4), got 4",
            "budgets.frequent.capacity must be 1…10000, got 0",
            "budgets.frequent.end_reserve must be 0 or more and below the capacity (0), got 1",
            "budgets.channel_no_storage.refill_per_hour must be 0…100000, got 100001",
            "budgets.channel_latest_message.spacing_ms must be 0…3600000, got -1",
            "budgets.start.capacity must be 1…10000, got 20000",
        ])
        #expect(RedisKeys().budget(ActivityKey(kind: .match, id: "4711"), .tier(.frequent)) == "ac:{match:4711}:budget:frequent")
        #expect(RedisKeys(prefix: "x").budget(ActivityKey(kind: .trip, id: "t-1"), .channel(.noStorage)) == "x:{trip:t-1}:budget:channel")
    }

    // MARK: - The script against the model

    /// Random events, priorities, clocks (including a clock that goes back) and policies: after
    /// every event the script's decision and the whole hash equal the model's.
    @Test func theScriptAgreesWithTheModelOnGeneratedSequences() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        // Loaded first: a pipeline's EVALSHA that meets NOSCRIPT is re-sent after the HGETALL behind it.
        _ = try await redis.command("SCRIPT", "LOAD", BudgetScripts.decide.source).orThrow()
        _ = try await redis.command("SCRIPT", "LOAD", BudgetScripts.refund.source).orThrow()
        let seed = UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix64(seed: seed)
        var checked = 0
        var mismatch = false
        var seen: [String: Int] = [:]
        var byKind: [String: Int] = [:]
        var entryNumber = 0, redeliveries = 0, refunds = 0
        // Every path is exercised: each outcome of each kind of event (a repeated end over budget
        // is rare). 400 sequences at least, more (up to 2,000) until each path has 20 decisions.
        let paths = ["critical→priority10", "critical→priority5", "critical→stale", "routine→priority5", "routine→coalesce", "routine→stale",
                     "end→priority10", "end→stale", "flush→priority5", "flush→coalesce", "flush→stale",
                     "critical→unchanged", "routine→unchanged", "flush→unchanged"]
        sequences: for round in 0..<2000 {
            if round >= 400, paths.allSatisfy({ byKind[$0, default: 0] >= 20 }), byKind["end→priority5", default: 0] >= 1 { break }
            let capacity = Int.random(in: 1...6, using: &rng)
            let policy = AudiencePolicy(
                bucket: BucketPolicy(capacity: capacity, refillPerHour: [0, 1, 8, 60, 3600, 100_000].randomElement(using: &rng)!),
                minSpacingMillis: [0, 1000, 15_000, 30_000].randomElement(using: &rng)!,
                endReserve: Int.random(in: 0..<capacity, using: &rng))
            let key = "ac:{match:gen\(round)}:budget:standard"
            // What the pushes would show: a signature in the key's state, often the same as before
            // (a moment then its score), sometimes none; half the sequences decide without it.
            let stateKey = "ac:{match:gen\(round)}:state"
            let withShown = Bool.random(using: &rng)
            let refresh: Int64? = [nil, 0, 5000, 60_000].randomElement(using: &rng)!
            var signature = "s0"
            var now = Int64.random(in: 1_700_000_000_000...1_800_000_000_000, using: &rng)
            var base = Int64.random(in: 0...1_000_000, using: &rng)
            var model: BudgetState?
            var previous: (String?, BudgetEvent)?
            var owed = false
            let length = Int.random(in: 1...40, using: &rng)
            for step in 0..<length {
                switch Int.random(in: 0..<100, using: &rng) {
                case 0..<5: break
                case 5..<10: now -= Int64.random(in: 1...3000, using: &rng)  // another worker's clock lags
                case 10..<80: now += Int64.random(in: 1...5000, using: &rng)
                default: now += Int64.random(in: 5000...900_000, using: &rng)
                }
                var millis = base
                switch Int.random(in: 0..<100, using: &rng) {
                case 0..<12: millis -= Int64.random(in: 1...10_000, using: &rng)  // out of order
                case 12..<18: break  // the same time again (another event of that second)
                default: base += Int64.random(in: 1...3000, using: &rng); millis = base
                }
                // Ends come mostly last (everything after an end is stale), sometimes earlier or twice.
                var event: BudgetEvent
                let last = step == length - 1 && Bool.random(using: &rng)
                switch last ? 0 : Int.random(in: 0..<100, using: &rng) {
                case 0..<2: event = .end(millis: millis)
                case 2..<40: event = .update(millis: millis, priority: .critical)
                case 40..<85: event = .update(millis: millis, priority: .routine)
                default: event = .flush
                }
                // Each event its own entry; sometimes the previous entry again (a redelivery).
                var entry: String?
                if let p = previous, Int.random(in: 0..<100, using: &rng) < 12 {
                    (entry, event) = p
                    redeliveries += 1
                } else if event != .flush {
                    entryNumber += 1
                    entry = "feed/\(entryNumber)-0"
                    previous = (entry, event)
                }
                // A token owed back from an earlier decision (its push at 10 didn't go out) is given
                // back now, in both, before this decision: later, a refill may have filled the bucket.
                var refund: [RedisCommand] = []
                if owed, var m = model, Int.random(in: 0..<100, using: &rng) < 50 {
                    m.refund(policy)
                    model = m
                    owed = false
                    refunds += 1
                    refund = [.script(BudgetScripts.refund, keys: [key], args: [policy.bucket.capacityTicks]), RedisCommand("HGETALL", key)]
                }
                var shown: Shown?
                var showing: [RedisCommand] = []
                if withShown {
                    switch Int.random(in: 0..<100, using: &rng) {
                    case 0..<55: break
                    case 55..<95: signature = "s\(Int.random(in: 0...3, using: &rng))"
                    default: signature = ""
                    }
                    shown = Shown(signature: signature, quiet: Int.random(in: 0..<100, using: &rng) < 75, refreshMillis: refresh)
                    showing = [signature.isEmpty ? RedisCommand("HDEL", stateKey, "_sig") : RedisCommand("HSET", stateKey, "_sig", signature)]
                }
                // Whether the model took a token: its bucket, brought up to now, lost one (a redelivery
                // answered from `p10_entry` isn't brought up to now).
                var before = model?.bucket ?? TokenBucket.full(policy.bucket, at: now)
                before.refill(to: now, policy.bucket)
                let (expected, next) = decide(model, event, entry: entry, nowMillis: now, policy: policy, shown: shown)
                let expectedSpent = next.bucket.refilledAt == before.refilledAt && before.ticks - next.bucket.ticks == BudgetState.ticksPerToken
                let replies = try await redis.pipeline(refund + showing + [
                    BudgetScripts.decideCommand(budgetKey: key, event: event, entry: entry, nowMillis: now, policy: policy, ttlSeconds: 60,
                                                shown: shown.map { (stateKey, $0.quiet, $0.refreshMillis) }),
                    RedisCommand("HGETALL", key),
                ])
                if !refund.isEmpty, BudgetScripts.state(fromHash: replies[1]) != model {
                    Issue.record("seed \(seed), sequence \(round), event \(step): after a refund the script has \(String(describing: BudgetScripts.state(fromHash: replies[1]))), the model \(String(describing: model))")
                    mismatch = true
                    break sequences
                }
                let got = try BudgetScripts.parse(replies[refund.count + showing.count])
                let stored = BudgetScripts.state(fromHash: replies[refund.count + showing.count + 1])
                model = next
                // Sometimes the push at 10 doesn't go out: its token is owed back.
                if got.spent, !owed, Int.random(in: 0..<100, using: &rng) < 25 { owed = true }
                seen["\(expected)".prefix { $0 != "(" }.description, default: 0] += 1
                let kindName: String
                switch event { case .update(_, let p): kindName = p.rawValue; case .end: kindName = "end"; case .flush: kindName = "flush" }
                byKind["\(kindName)→\("\(expected)".prefix { $0 != "(" })", default: 0] += 1
                guard got.decision == expected, got.nowMillis == now, got.spent == expectedSpent, stored == next,
                      got.ticksLeft == next.bucket.ticks else {
                    Issue.record("""
                    seed \(seed), sequence \(round), event \(step): \(event) at \(now), policy \(policy)
                      script: \(got.decision) spent \(got.spent), \(String(describing: stored))
                      model:  \(expected) spent \(expectedSpent), \(next)
                    """)
                    mismatch = true
                    break sequences
                }
                checked += 1
            }
        }
        print("BudgetTests: \(checked) decisions agreed (seed \(seed), \(redeliveries) redeliveries, \(refunds) refunds): \(byKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        if mismatch { return }
        for path in paths { #expect(byKind[path, default: 0] >= 20, "\(path): \(byKind)") }
        #expect(refunds >= 20)
        #expect(byKind["end→priority5", default: 0] >= 1, "\(byKind)")
        #expect(seen.count == 5)
    }

    /// Without a clock from the caller the script uses Redis's, and says which it used.
    @Test func theScriptCanUseRedissClock() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let key = "ac:{match:clock}:budget:frequent"
        let policy = BudgetPolicy.default.frequent
        // Redis's clock is this machine's: its reading falls between ours before and after the
        // call, however long a loaded test run makes the call take.
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let reply = try BudgetScripts.parse(try await redis.send(
            BudgetScripts.decideCommand(budgetKey: key, event: .update(millis: 5, priority: .critical), nowMillis: nil, policy: policy, ttlSeconds: 60)))
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(reply.decision == .priority10)
        #expect((before - 1...after + 1).contains(reply.nowMillis), "Redis's clock \(reply.nowMillis), ours \(before)…\(after)")
        let (expected, next) = decide(nil, .update(millis: 5, priority: .critical), nowMillis: reply.nowMillis, policy: policy)
        #expect(expected == .priority10)
        #expect(BudgetScripts.state(fromHash: try await redis.command("HGETALL", key)) == next)
        #expect(try await redis.command("TTL", key).int ?? 0 > 50)
    }

    /// Decided in an update's merge round trip, the script first checks its guards: nothing is
    /// spent or counted (the budget hash isn't even made) when the key's state has a newer event,
    /// when the entry's fan-out recorded its broadcast, or, for a channel, when no environment
    /// given has a live channel; otherwise it decides as usual.
    @Test func guardedDecisionsSkipWithoutSpending() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let budget = "ac:{match:g}:budget:channel", state = "ac:{match:g}:state", fan = "ac:{match:g}:fan:s/1-0", channels = "ac:{match:g}:channels"
        let policy = BudgetPolicy.default.standard
        func decide(_ ms: Int64, channel: Bool) async throws -> BudgetReply? {
            let reply = try BudgetScripts.parseGuarded(try await redis.send(BudgetScripts.decideCommand(
                budgetKey: budget, event: .update(millis: ms, priority: .critical), entry: "s/1-0", nowMillis: 1_000_000, policy: policy,
                ttlSeconds: 60, guards: BudgetGuards(state: state, fanout: fan, channels: channel ? (channels, ["development", "production"]) : nil))))
            if case .decided(let r) = reply { return r }
            #expect(reply == .skipped)
            return nil
        }
        _ = try await redis.command("HSET", state, "_ts", "2000")
        #expect(try await decide(1000, channel: false) == nil, "an event older than the merged state's newest")
        #expect(try await redis.command("EXISTS", budget).int == 0)
        _ = try await redis.command("HSET", fan, "b", "1")
        #expect(try await decide(2000, channel: false) == nil, "a fan-out whose broadcast is recorded")
        _ = try await redis.command("HSET", fan, "b", "0")
        _ = try await redis.command("HSET", channels, "development:fallback", "1")
        #expect(try await decide(2000, channel: true) == nil, "no live channel")
        #expect(try await redis.command("EXISTS", budget).int == 0)
        #expect(try await decide(2000, channel: false)?.decision == .priority10)
        _ = try await redis.command("HSET", channels, "production", "c0ffee 0 1700000000000")
        #expect(try await decide(3000, channel: true)?.decision == .priority10)
        #expect(BudgetScripts.state(fromHash: try await redis.command("HGETALL", budget))?.counters.priority10 == 2)
        // Without guards (`decideCommand` as before), the same call decides.
        _ = try await redis.command("HSET", state, "_ts", "9000")
        #expect(try BudgetScripts.parse(try await redis.send(BudgetScripts.decideCommand(
            budgetKey: budget, event: .update(millis: 4000, priority: .critical), nowMillis: 1_000_000, policy: policy, ttlSeconds: 60))).decision == .priority10)
    }

    /// A tier's guard: nobody to reach per token — the key's per-token audience (`direct`) kept
    /// and empty, and every environment's channel live — answers `none`, spending nothing; a
    /// device off broadcast, a channel not live in one environment, or an audience not kept yet
    /// (a key from before it was) decides as usual.
    @Test func aTierWithNobodyOffBroadcastIsNotDecided() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let budget = "ac:{match:n}:budget:standard", state = "ac:{match:n}:state", fan = "ac:{match:n}:fan:s/1-0"
        let channels = "ac:{match:n}:channels", direct = "ac:{match:n}:direct"
        var ms: Int64 = 1000
        func decide() async throws -> BudgetScripts.Guarded {
            ms += 1000
            return try BudgetScripts.parseGuarded(try await redis.send(BudgetScripts.decideCommand(
                budgetKey: budget, event: .update(millis: ms, priority: .critical), entry: "s/1-0", nowMillis: 1_000_000,
                policy: BudgetPolicy.default.standard, ttlSeconds: 60,
                guards: BudgetGuards(state: state, fanout: fan, audience: (channels, ["development", "production"], direct)))))
        }
        func decided(_ g: BudgetScripts.Guarded) -> Bool { if case .decided = g { true } else { false } }
        _ = try await redis.command("HSET", channels, "development", "c1 0 1700000000000", "production", "c2 0 1700000000000")
        #expect(decided(try await decide()), "an audience not kept yet is unknown: decided")
        _ = try await redis.command("HSET", direct, "_", "1", "A", "1000 a development standard 0 \(String(repeating: "a", count: 64))")
        #expect(decided(try await decide()), "a device off broadcast")
        _ = try await redis.command("HDEL", direct, "A")
        let spent = BudgetScripts.state(fromHash: try await redis.command("HGETALL", budget))
        #expect(try await decide() == .noAudience)
        #expect(BudgetScripts.state(fromHash: try await redis.command("HGETALL", budget)) == spent, "nothing spent or counted")
        _ = try await redis.command("HSET", channels, "production:fallback", "1")
        _ = try await redis.command("HDEL", channels, "production")
        #expect(decided(try await decide()), "a channel not live in one environment: its devices get per-token pushes")
    }

    // MARK: - Contention

    /// Four clients on four connections decide critical updates for one key as fast as they can,
    /// then the end: the priority-10 grants never exceed what the bucket allows over the span of
    /// the clocks used, the end goes at 10 from the reserve, and the hash counted every grant.
    @Test(arguments: [false, true])
    func fourClientsContendingForOneKeyNeverOverspend(redisClock: Bool) async throws {
        let server = try await RedisServer()
        let key = "ac:{match:race}:budget:standard"
        // Redis's clock: 100,000 per hour (28 a second) over the test's real second or so; the
        // caller's: 36,000 per hour (one per 100 ms) on a shared simulated clock.
        let policy = AudiencePolicy(bucket: BucketPolicy(capacity: 5, refillPerHour: redisClock ? 100_000 : 36_000),
                                    minSpacingMillis: 30_000, endReserve: 1)
        let clock = SharedClock()
        let perClient = 150
        let results = try await withThrowingTaskGroup(of: (grants: Int, downgrades: Int, nows: [Int64]).self) { group in
            for client in 0..<4 {
                group.addTask {
                    let redis = server.connection()
                    defer { redis.close() }
                    var rng = SplitMix64(seed: UInt64(client) &* 7919)
                    var grants = 0, downgrades = 0
                    var nows: [Int64] = []
                    for _ in 0..<perClient {
                        let now: Int64? = redisClock ? nil : clock.advance(by: Int64.random(in: 0...25, using: &rng))
                        let reply = try BudgetScripts.parse(try await redis.send(BudgetScripts.decideCommand(
                            budgetKey: key, event: .update(millis: 1000, priority: .critical), nowMillis: now, policy: policy, ttlSeconds: 60)))
                        nows.append(reply.nowMillis)
                        switch reply.decision {
                        case .priority10: grants += 1
                        case .priority5: downgrades += 1
                        default: Issue.record("client \(client): \(reply.decision)")
                        }
                    }
                    return (grants, downgrades, nows)
                }
            }
            var all: [(grants: Int, downgrades: Int, nows: [Int64])] = []
            for try await r in group { all.append(r) }
            return all
        }
        let redis = server.connection()
        defer { redis.close() }
        let endNow: Int64? = redisClock ? nil : clock.now
        let end = try BudgetScripts.parse(try await redis.send(BudgetScripts.decideCommand(
            budgetKey: key, event: .end(millis: 2000), nowMillis: endNow, policy: policy, ttlSeconds: 60)))
        #expect(end.decision == .priority10)

        let nows = results.flatMap(\.nows) + [end.nowMillis]
        let span = nows.max()! - nows.min()!
        let grants = results.reduce(0) { $0 + $1.grants } + 1
        let allowed = (policy.bucket.capacityTicks + span * policy.bucket.ticksPerMillisecond) / BudgetState.ticksPerToken
        print("BudgetTests: \(redisClock ? "Redis's" : "a shared") clock, 4 clients, \(nows.count) decisions over \(span) ms: \(grants) at 10 (allowed \(allowed)), \(results.reduce(0) { $0 + $1.downgrades }) downgraded")
        #expect(grants <= allowed)
        // The bucket was used, not hoarded: at least its capacity went out at 10 (end included).
        #expect(grants >= policy.bucket.capacity)
        let stored = try #require(BudgetScripts.state(fromHash: try await redis.command("HGETALL", key)))
        #expect(stored.counters.priority10 == grants)
        #expect(stored.counters.downgraded == results.reduce(0) { $0 + $1.downgrades })
        #expect(stored.counters.priority10 + stored.counters.priority5 == 4 * perClient + 1)
        // Conservation: what was granted plus what is left never exceeds what the bucket held and gained.
        #expect(Int64(grants) * BudgetState.ticksPerToken + stored.bucket.ticks
                <= policy.bucket.capacityTicks + span * policy.bucket.ticksPerMillisecond)
    }
}

/// The simulated clock the contending clients share: each call moves it on a little.
final class SharedClock: Sendable {
    private let millis = Atomic<Int64>(1_750_000_000_000)
    func advance(by step: Int64) -> Int64 { millis.add(step, ordering: .relaxed).newValue }
    var now: Int64 { millis.load(ordering: .relaxed) }

    /// The push-to-start bucket's script (`BudgetScripts.take`) against `TokenBucket` on generated
    /// clocks (forward, repeated, backwards) and policies: same answer, same ticks, every time.
    @Test func theTakeScriptAgreesWithTheTokenBucket() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let seed = UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix64(seed: seed)
        var refused = 0, taken = 0
        for round in 0..<100 {
            let policy = BucketPolicy(capacity: Int.random(in: 1...5, using: &rng), refillPerHour: Int.random(in: 0...50, using: &rng))
            let key = "take:\(round)"
            var now = Int64.random(in: 1_000_000...2_000_000, using: &rng)
            var model: TokenBucket?
            for _ in 0..<30 {
                now += Int64.random(in: -5_000...600_000, using: &rng)
                var bucket = model ?? .full(policy, at: now)
                bucket.refill(to: now, policy)
                let expected = bucket.take()
                model = bucket
                let got = try await redis.send(.script(BudgetScripts.take, keys: [key], args: [policy.capacityTicks, policy.ticksPerMillisecond, now, 60]))
                let ticks = try await redis.send(RedisCommand("HGET", key, "ticks")).string.flatMap(Int64.init)
                #expect(got.int == (expected ? 1 : 0) && ticks == bucket.ticks, "seed \(seed) round \(round): script \(got) ticks \(ticks ?? -1), model \(expected) \(bucket.ticks)")
                if expected { taken += 1 } else { refused += 1 }
            }
        }
        #expect(taken > 0 && refused > 0, "the sequences never ran a bucket dry, or never took")
    }
}
