import ActivityCastCore
import RedisClient

/// A token bucket's size: `capacity` tokens at most, refilled continuously at `refillPerHour`.
/// In any hour a bucket grants at most `capacity + refillPerHour` tokens, which is what the
/// defaults are measured against (docs/budgets.md).
public struct BucketPolicy: Equatable, Sendable {
    public var capacity: Int
    public var refillPerHour: Int

    public init(capacity: Int, refillPerHour: Int) {
        self.capacity = capacity
        self.refillPerHour = refillPerHour
    }

    /// Bounds that keep every tick count exact in Lua's doubles (below 2^53): capacity ticks
    /// ≤ 3.6·10^10 and (elapsed ms clamped to that) × refill ≤ 3.6·10^15.
    public static let capacityRange = 1...10_000
    public static let refillRange = 0...100_000

    /// The bucket's size in ticks (one token is `BudgetState.ticksPerToken` ticks).
    public var capacityTicks: Int64 { Int64(capacity) * BudgetState.ticksPerToken }
    /// Ticks added per millisecond: a refill of R tokens per hour is exactly R ticks per ms.
    public var ticksPerMillisecond: Int64 { Int64(refillPerHour) }
}

/// The budget of one audience of a key: its priority-10 bucket, the minimum spacing between
/// routine updates (closer ones coalesce), and the tokens kept back so the end always goes out
/// at priority 10.
public struct AudiencePolicy: Equatable, Sendable {
    public var bucket: BucketPolicy
    /// Routine updates closer than this to the previous send coalesce (0: never).
    public var minSpacingMillis: Int64
    /// Tokens a critical update may not spend: the end's reserve. Must be below the capacity.
    public var endReserve: Int

    public init(bucket: BucketPolicy, minSpacingMillis: Int64, endReserve: Int) {
        self.bucket = bucket
        self.minSpacingMillis = minSpacingMillis
        self.endReserve = endReserve
    }

    public static let spacingRange: ClosedRange<Int64> = 0...3_600_000

    public var reserveTicks: Int64 { Int64(endReserve) * BudgetState.ticksPerToken }
}

/// Who a budget decision is for: a key's broadcast channel (budget by its storage policy), or
/// the key's per-token devices of one tier. Devices of both tiers on one key each spend their
/// own tier's budget, never the most restrictive one for all.
public enum BudgetAudience: Hashable, Sendable, CustomStringConvertible {
    case channel(ChannelStoragePolicy)
    case tier(Tier)

    /// The last part of the budget hash's name. A key has one channel (its storage policy is
    /// fixed at creation), so the policy isn't part of the name.
    public var name: String {
        switch self {
        case .channel: "channel"
        case .tier(let tier): tier.rawValue
        }
    }

    public var description: String { name }
}

/// Every budget number. Apple publishes none: the defaults come from the community's
/// measurements and err on the safe side (docs/budgets.md gives the sources). All of them are
/// configuration (`budgets.*`).
public struct BudgetPolicy: Equatable, Sendable {
    public var standard: AudiencePolicy
    public var frequent: AudiencePolicy
    /// A channel with storage policy 0 (no storage: frequent updates, a match).
    public var channelNoStorage: AudiencePolicy
    /// A channel with storage policy 1 (latest message kept: infrequent updates, a trip).
    public var channelLatestMessage: AudiencePolicy
    /// Push-to-start per device.
    public var pushToStart: BucketPolicy

    public init(standard: AudiencePolicy, frequent: AudiencePolicy, channelNoStorage: AudiencePolicy,
                channelLatestMessage: AudiencePolicy, pushToStart: BucketPolicy) {
        self.standard = standard
        self.frequent = frequent
        self.channelNoStorage = channelNoStorage
        self.channelLatestMessage = channelLatestMessage
        self.pushToStart = pushToStart
    }

    /// The defaults. In any hour each grants at most capacity + refill priority-10 pushes:
    /// standard 12 (community: about 15, some report fewer), frequent 70 (community: "far more",
    /// sub-minute), channels 14 and 6 (a broadcast may reach standard-tier devices), starts 8
    /// (about 10 in a short window, unconfirmed).
    public static let `default` = BudgetPolicy(
        standard: AudiencePolicy(bucket: BucketPolicy(capacity: 4, refillPerHour: 8), minSpacingMillis: 30_000, endReserve: 1),
        frequent: AudiencePolicy(bucket: BucketPolicy(capacity: 10, refillPerHour: 60), minSpacingMillis: 15_000, endReserve: 1),
        channelNoStorage: AudiencePolicy(bucket: BucketPolicy(capacity: 4, refillPerHour: 10), minSpacingMillis: 10_000, endReserve: 1),
        channelLatestMessage: AudiencePolicy(bucket: BucketPolicy(capacity: 2, refillPerHour: 4), minSpacingMillis: 60_000, endReserve: 1),
        pushToStart: BucketPolicy(capacity: 4, refillPerHour: 4))

    public func audience(_ audience: BudgetAudience) -> AudiencePolicy {
        switch audience {
        case .tier(.standard): standard
        case .tier(.frequent): frequent
        case .channel(.noStorage): channelNoStorage
        case .channel(.latestMessage): channelLatestMessage
        }
    }

    /// What is wrong with the numbers, one line each with the setting's proposed name; empty
    /// when they are usable.
    public var problems: [String] {
        var out: [String] = []
        func bucket(_ name: String, _ b: BucketPolicy) {
            if !BucketPolicy.capacityRange.contains(b.capacity) {
                out.append("budgets.\(name).capacity must be \(BucketPolicy.capacityRange.lowerBound)…\(BucketPolicy.capacityRange.upperBound), got \(b.capacity)")
            }
            if !BucketPolicy.refillRange.contains(b.refillPerHour) {
                out.append("budgets.\(name).refill_per_hour must be \(BucketPolicy.refillRange.lowerBound)…\(BucketPolicy.refillRange.upperBound), got \(b.refillPerHour)")
            }
        }
        for (name, a) in [("standard", standard), ("frequent", frequent), ("channel_no_storage", channelNoStorage),
                          ("channel_latest_message", channelLatestMessage)] {
            bucket(name, a.bucket)
            if !AudiencePolicy.spacingRange.contains(a.minSpacingMillis) {
                out.append("budgets.\(name).spacing_ms must be 0…3600000, got \(a.minSpacingMillis)")
            }
            if a.endReserve < 0 || a.endReserve >= a.bucket.capacity {
                out.append("budgets.\(name).end_reserve must be 0 or more and below the capacity (\(a.bucket.capacity)), got \(a.endReserve)")
            }
        }
        bucket("start", pushToStart)
        return out
    }
}

/// A continuous token bucket in integer ticks: one token is 3,600,000 ticks, so a refill of R
/// tokens per hour adds exactly R ticks per millisecond — no fractions, no drift between Swift
/// and Lua, whatever the call pattern (refilling in two steps gives what one step gives).
public struct TokenBucket: Equatable, Sendable {
    public var ticks: Int64
    /// The time (ms) up to which `ticks` has been refilled; it never goes back, so a worker
    /// whose clock lags can't refill the same interval twice.
    public var refilledAt: Int64

    public init(ticks: Int64, refilledAt: Int64) {
        self.ticks = ticks
        self.refilledAt = refilledAt
    }

    /// A full bucket at `now`.
    public static func full(_ policy: BucketPolicy, at now: Int64) -> TokenBucket {
        TokenBucket(ticks: policy.capacityTicks, refilledAt: now)
    }

    /// Brings the bucket up to `now`. Elapsed time is clamped to the capacity in ticks before
    /// multiplying (a refill of at least one tick per ms fills the bucket by then), which keeps
    /// every product below 2^53.
    public mutating func refill(to now: Int64, _ policy: BucketPolicy) {
        let cap = policy.capacityTicks
        if now > refilledAt {
            let elapsed = min(now - refilledAt, cap)
            ticks = min(cap, ticks + elapsed * policy.ticksPerMillisecond)
            refilledAt = now
        }
        ticks = max(0, min(cap, ticks))  // a smaller capacity configured since
    }

    /// Takes one token if at least `keep` ticks stay; true when taken.
    public mutating func take(keeping keep: Int64 = 0) -> Bool {
        guard ticks - BudgetState.ticksPerToken >= keep else { return false }
        ticks -= BudgetState.ticksPerToken
        return true
    }
}

/// What a worker asks the budget about one key and audience.
public enum BudgetEvent: Equatable, Sendable {
    /// An update at the source event's time (ms), critical (may spend priority-10 budget) or
    /// routine (priority 5, spaced).
    case update(millis: Int64, priority: PriorityClass)
    /// The activity's end: always priority 10 (the reserve pays for it).
    case end(millis: Int64)
    /// The shared schedule says the key's coalesced state is due: send it if it is.
    case flush
}

/// The outcome of one decision.
public enum BudgetDecision: Equatable, Sendable {
    /// Send now at priority 10 (spends one token).
    case priority10
    /// Send now at priority 5, without an alert: a routine update, a critical one over budget
    /// (downgraded), or a due coalesced state.
    case priority5
    /// Don't send now: only the newest state is kept, and it is due at this time (ms).
    case coalesce(dueAtMillis: Int64)
    /// Nothing to send: older than what was already sent for the key (or an update after the
    /// end), or a flush that found nothing pending.
    case stale
    /// Nothing to send: the audience already shows this state (`Shown`), and the event has no
    /// alert; a state that waited to be flushed is dropped with it.
    case unchanged
}

/// What a decision knows of the state its push would show (`KeyState.signature`), to send
/// nothing to an audience that shows it already.
public struct Shown: Equatable, Sendable {
    /// The key's merged state and presentation as `KeyStateScripts.merge` hashes them ('': unknown).
    public var signature: String
    /// No alert: the push would show nothing but the state. (An end is never unchanged.)
    public var quiet: Bool
    /// A state shown this long (event time, ms) is sent again even though unchanged, so the
    /// device's stale date moves on while the feed is alive (half the stale-after); nil: never.
    public var refreshMillis: Int64?

    public init(signature: String, quiet: Bool, refreshMillis: Int64? = nil) {
        self.signature = signature; self.quiet = quiet; self.refreshMillis = refreshMillis
    }
}

/// One (key, audience)'s budget: its bucket, what was sent and what waits. The pure model of
/// `BudgetScripts.decide`; tests check the two agree on generated sequences.
public struct BudgetState: Equatable, Sendable {
    /// Ticks per token: 3,600,000 (one per millisecond of an hour).
    public static let ticksPerToken: Int64 = 3_600_000

    public var bucket: TokenBucket
    /// The newest event time (ms) sent for the key; an older event is stale.
    public var lastMillis: Int64?
    /// When the last push went out (ms, the decider's clock): spacing counts from it.
    public var lastSentAt: Int64?
    /// The newest coalesced event waiting to be flushed (ms); nil when nothing waits.
    public var pendingMillis: Int64?
    /// The time of the end sent for the key; updates after it are stale.
    public var endedMillis: Int64?
    /// The entry (`<stream>/<id>`) decided at 10 last. The same entry decided again — a
    /// redelivery whose first try died between the decision and the send — is answered 10 again
    /// without spending a second token. (An entry, not an event time: feeds with second-resolution
    /// times have several events of one time.)
    public var priority10Entry: String?
    /// The signature of the state the audience's last push carried, and that push's event time.
    public var shownSignature: String?
    public var shownMillis: Int64?
    public var counters: Counters

    /// Every decision, counted (`inspect` shows them).
    public struct Counters: Equatable, Sendable {
        public var priority10 = 0
        /// Every priority-5 send: routine updates, downgrades, flushes.
        public var priority5 = 0
        /// Critical events (or a repeated end) sent at 5 because the budget was spent.
        public var downgraded = 0
        /// Events kept as the pending state instead of sent.
        public var coalesced = 0
        /// Pending states sent by a flush.
        public var flushed = 0
        public var stale = 0
        /// Flushes that found nothing to send (not yet due, or already flushed by another worker).
        public var idleFlushes = 0
        /// Tokens given back: decided at 10, the push never went out (a newer fan-out of the key
        /// began between the decision and the record).
        public var refunded = 0
        /// Updates and flushes not sent: the audience already showed their state.
        public var unchanged = 0

        public init() {}
    }

    public init(bucket: TokenBucket, lastMillis: Int64? = nil, lastSentAt: Int64? = nil, pendingMillis: Int64? = nil,
                endedMillis: Int64? = nil, priority10Entry: String? = nil, shownSignature: String? = nil, shownMillis: Int64? = nil,
                counters: Counters = Counters()) {
        self.bucket = bucket
        self.lastMillis = lastMillis
        self.lastSentAt = lastSentAt
        self.pendingMillis = pendingMillis
        self.endedMillis = endedMillis
        self.priority10Entry = priority10Entry
        self.shownSignature = shownSignature
        self.shownMillis = shownMillis
        self.counters = counters
    }

    /// When the pending state may be flushed: spacing after the last send.
    public func dueAt(_ policy: AudiencePolicy) -> Int64? {
        guard pendingMillis != nil else { return nil }
        return (lastSentAt ?? 0) + policy.minSpacingMillis
    }
}

/// The decision for one event of one (key, audience). `state` nil: the first event (the bucket
/// starts full). `nowMillis` is the decider's clock; event times are the source's. `entry`: the
/// stream entry that carried the event (`<stream>/<id>`), so its redelivery isn't charged twice.
extension BudgetState {
    /// Gives back the token a decision took (`BudgetReply.spent`) for a push at 10 that never
    /// went out, up to the capacity; counted as `refunded`.
    public mutating func refund(_ policy: AudiencePolicy) {
        bucket.ticks = min(policy.bucket.capacityTicks, bucket.ticks + Self.ticksPerToken)
        counters.refunded += 1
        // `p10` counts the pushes at 10 that went out.
        counters.priority10 -= 1
    }
}

public func decide(_ state: BudgetState?, _ event: BudgetEvent, entry: String? = nil, nowMillis now: Int64,
                   policy: AudiencePolicy, shown: Shown? = nil) -> (BudgetDecision, BudgetState) {
    // The entry decided at 10 last, decided again (and nothing newer since): 10, the state as it
    // was — nothing spent, refilled or counted.
    if let state, let entry, state.priority10Entry == entry {
        switch event {
        case .update(let millis, .critical) where state.lastMillis == millis: return (.priority10, state)
        case .end(let millis) where state.lastMillis == millis: return (.priority10, state)
        default: break
        }
    }
    var d = Deciding(s: state ?? BudgetState(bucket: .full(policy.bucket, at: now)), policy: policy, now: now, entry: entry, shown: shown)
    d.s.bucket.refill(to: now, policy.bucket)
    let decision: BudgetDecision
    switch event {
    case .flush: decision = d.flush()
    case .end(let millis): decision = d.end(millis)
    case .update(let millis, let priority): decision = d.update(millis, priority)
    }
    return (decision, d.s)
}

/// One decision in the making: the audience's state as it changes, and what it is decided with.
private struct Deciding {
    var s: BudgetState
    let policy: AudiencePolicy
    let now: Int64
    let entry: String?
    let shown: Shown?

    /// The audience shows this state already (and was sent it recently enough): nothing to send.
    func unchanged(_ millis: Int64) -> Bool {
        guard let shown, shown.quiet, !shown.signature.isEmpty, shown.signature == s.shownSignature else { return false }
        if let refresh = shown.refreshMillis, refresh > 0, let at = s.shownMillis, millis - at >= refresh { return false }
        return true
    }

    mutating func send(_ decision: BudgetDecision, millis: Int64) -> BudgetDecision {
        if let shown, !shown.signature.isEmpty {
            s.shownSignature = shown.signature
            s.shownMillis = millis
        }
        s.lastMillis = max(s.lastMillis ?? millis, millis)
        s.lastSentAt = max(s.lastSentAt ?? now, now)
        // The push carries the whole merged state: a pending state no newer than it is sent too.
        if let p = s.pendingMillis, p <= millis { s.pendingMillis = nil }
        if decision == .priority10 {
            s.counters.priority10 += 1
            s.priority10Entry = entry
        } else {
            s.counters.priority5 += 1
        }
        return decision
    }

    mutating func flush() -> BudgetDecision {
        guard let pending = s.pendingMillis, let due = s.dueAt(policy) else {
            s.counters.idleFlushes += 1
            return .stale
        }
        if unchanged(pending) {
            s.pendingMillis = nil
            s.counters.unchanged += 1
            return .unchanged
        }
        guard now >= due else {
            s.counters.idleFlushes += 1
            return .coalesce(dueAtMillis: due)
        }
        s.counters.flushed += 1
        return send(.priority5, millis: pending)
    }

    mutating func end(_ millis: Int64) -> BudgetDecision {
        if let last = s.lastMillis, millis < last {
            s.counters.stale += 1
            return .stale
        }
        s.pendingMillis = nil  // the end carries the merged state; nothing is sent after it
        if s.endedMillis == nil {
            // The first end always goes at 10: the reserve keeps a token for it (with no
            // reserve configured it still goes, and the bucket floors at zero).
            s.endedMillis = millis
            if !s.bucket.take() { s.bucket.ticks = 0 }
            return send(.priority10, millis: millis)
        }
        // A later end (a corrected final state): like a critical update, reserve included.
        s.endedMillis = max(s.endedMillis!, millis)
        if s.bucket.take() { return send(.priority10, millis: millis) }
        s.counters.downgraded += 1
        return send(.priority5, millis: millis)
    }

    mutating func update(_ millis: Int64, _ priority: PriorityClass) -> BudgetDecision {
        if let last = s.lastMillis, millis < last {
            s.counters.stale += 1
            return .stale
        }
        if s.endedMillis != nil {
            // After the end the device takes no more updates: nothing is worth a push.
            s.counters.stale += 1
            return .stale
        }
        if unchanged(millis) {
            // What waits to be flushed is what the audience shows, too.
            s.pendingMillis = nil
            s.counters.unchanged += 1
            return .unchanged
        }
        switch priority {
        case .critical:
            if s.bucket.take(keeping: policy.reserveTicks) { return send(.priority10, millis: millis) }
            s.counters.downgraded += 1
            return send(.priority5, millis: millis)
        case .routine:
            if let pending = s.pendingMillis, millis < pending, let due = s.dueAt(policy) {
                // Older than the state already waiting, which carries its values: absorbed.
                s.counters.coalesced += 1
                return .coalesce(dueAtMillis: due)
            }
            if let sent = s.lastSentAt, now < sent + policy.minSpacingMillis {
                s.pendingMillis = max(s.pendingMillis ?? millis, millis)
                s.counters.coalesced += 1
                return .coalesce(dueAtMillis: sent + policy.minSpacingMillis)
            }
            return send(.priority5, millis: millis)
        }
    }
}

extension RedisKeys {
    /// One (key, audience)'s budget hash (`budget(_:audience:)`).
    public func budget(_ key: ActivityKey, _ audience: BudgetAudience) -> String { budget(key, audience: audience.name) }
}

/// What a decision made in an update's merge round trip checks first (`BudgetScripts.decide`).
public struct BudgetGuards: Sendable {
    /// The key's state hash (`_ts`: its newest event's time).
    public var state: String
    /// The entry's fan-out record (`b` 1: its broadcast was recorded).
    public var fanout: String
    /// For a channel's budget: the key's channels hash and the environments to look in.
    public var channels: (key: String, environments: [String])?
    /// For a tier's budget: the key's channels hash, the environments, and its per-token audience
    /// (`RedisKeys.direct`). When that is kept and empty and every environment has a live channel,
    /// nobody needs a per-token push: the answer is `none`, nothing spent or counted.
    public var audience: (channels: String, environments: [String], direct: String)?

    public init(state: String, fanout: String, channels: (key: String, environments: [String])? = nil,
                audience: (channels: String, environments: [String], direct: String)? = nil) {
        precondition(channels == nil || audience == nil, "a channel's guard or a tier's")
        self.state = state
        self.fanout = fanout
        self.channels = channels
        self.audience = audience
    }
}

/// What `BudgetScripts.decide` answered.
public struct BudgetReply: Equatable, Sendable {
    public var decision: BudgetDecision
    /// The clock the decision used (the caller's, or Redis's `TIME`).
    public var nowMillis: Int64
    /// A token was taken (a push at 10 that didn't go out gives it back: `BudgetScripts.refund`).
    public var spent = false
    /// The bucket after the decision (`TokenBucket.ticks`), for the key's trail; nil from a
    /// script that didn't say.
    public var ticksLeft: Int64? = nil
}

/// The Redis side of `decide`: one hash per (key, audience), `<prefix>:{key}:budget:<audience>`,
/// shared by every worker. Fields: `ticks`, `refilled_at`, `last_ms`, `sent_at`, `pending_ms`,
/// `ended_ms`, `p10_entry` (absent when nil) and the counters `p10`, `p5`, `downgraded`, `coalesced`,
/// `flushed`, `stale`, `idle_flushes`. Integers are written with `%.0f`: Lua 5.1's numbers are
/// doubles, exact below 2^53, which the policy's bounds keep every value under.
public enum BudgetScripts {
    /// Lua the bucket scripts share: `fmt` (integers as Redis keeps them), `clock` (the caller's
    /// time, or Redis's `TIME` when it gave none: one clock for the fleet) and `refill`
    /// (`TokenBucket.refill`: continuous, in integer ticks; elapsed time is clamped to the
    /// capacity first — at a tick per ms or more the bucket is full by then — so the product stays
    /// exact, and `refilled_at` never goes back). A bucket with no state starts full.
    static let bucketLua = """
    local function fmt(x) return string.format('%.0f', x) end
    local function clock(given)
      local now = tonumber(given or '')
      if now then return now end
      local t = redis.call('TIME')
      return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local function refill(ticks, at, now, cap, rate)
      if not ticks or not at then return cap, now end
      if now > at then
        local elapsed = now - at
        if elapsed > cap then elapsed = cap end
        ticks = math.min(cap, ticks + elapsed * rate)
        at = now
      end
      if ticks > cap then ticks = cap end
      if ticks < 0 then ticks = 0 end
      return ticks, at
    end

    """

    /// KEYS[1] = budget hash. ARGV: kind (`critical`, `routine`, `end`, `flush`), event ms (''
    /// for a flush), now ms (`-`: Redis's clock), capacity ticks, ticks per ms, reserve ticks,
    /// spacing ms, ttl s, entry (`<stream>/<id>`, '' when none), shown ('': not known, `1`: a
    /// quiet push, `0`: one with an alert), refresh ms (0: none). Returns {decision (`p10`, `p5`,
    /// `coalesce`, `stale`, `unchanged`), due ms (0 unless coalesce), now ms, spent 0|1}.
    /// Shown (`Shown`): KEYS[2] = the key's state, whose `_sig` is compared with the audience's
    /// `shown_sig` (the state its last push carried): a quiet update or a flush of the same state
    /// is `unchanged`, unless the refresh time passed since that push's event.
    /// Guards, for an update decided in its merge's round trip (`BudgetGuards`): KEYS[2] = the
    /// key's state, KEYS[3] = the entry's fan-out record, and for a channel KEYS[4] = the key's
    /// channels with ARGV[12] = the environments. The answer is {`skip`, 0, now}, with nothing
    /// spent or counted, when the merge found a newer event (the state's `_ts` is past the
    /// event's) or refused this entry (`_rej`), when the key has ended (`_end`), when the fan-out recorded its broadcast (a
    /// redelivery keeps its decisions), or when the key has no live channel in those environments.
    /// For a tier, KEYS[4] = the key's channels and KEYS[5] = its per-token audience
    /// (`RedisKeys.direct`), ARGV[12] = the environments: {`none`, 0, now}, nothing spent or
    /// counted, when that audience is kept and empty and every environment's channel is live.
    public static let decide = RedisScript(bucketLua + """
    local TOKEN = 3600000
    local kind, ms, now = ARGV[1], tonumber(ARGV[2]), clock(ARGV[3])
    local cap, rate, reserve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
    local spacing, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
    local entry = ARGV[9] or ''
    -- What the push would show (`Shown`): the state's signature, read from the key's state.
    local shown, refresh = ARGV[10] or '', tonumber(ARGV[11] or '0') or 0
    local sig = nil
    -- The state's fields it reads, in one call: the guards' too when it has them.
    local st = (#KEYS >= 3) and redis.call('HMGET', KEYS[2], '_sig', '_ts', '_rej', '_end') or {}
    if shown ~= '' then
      if #KEYS >= 3 then sig = st[1] else sig = redis.call('HGET', KEYS[2], '_sig') end
      if not sig or sig == '' then sig = nil end
    end
    if #KEYS >= 3 then
      local newest = tonumber(st[2] or '')
      if newest ~= nil and newest > ms then return {'skip', '0', fmt(now)} end
      if redis.call('HGET', KEYS[3], 'b') == '1' then return {'skip', '0', fmt(now)} end
      if entry ~= '' and st[3] == entry then return {'skip', '0', fmt(now)} end
      -- The key ended: an update after its end is not sent.
      if st[4] and kind ~= 'end' then return {'skip', '0', fmt(now)} end
      if #KEYS >= 5 then
        if redis.call('HLEN', KEYS[5]) == 1 and redis.call('HEXISTS', KEYS[5], '_') == 1 then
          local all = true
          for env in string.gmatch(ARGV[12] or '', '%S+') do
            local v = redis.call('HGET', KEYS[4], env)
            if not (v and string.match(v, '\(ChannelRecord.luaPattern)')) then all = false break end
          end
          if all then return {'none', '0', fmt(now)} end
        end
      elseif #KEYS >= 4 then
        local live = false
        for env in string.gmatch(ARGV[12] or '', '%S+') do
          local v = redis.call('HGET', KEYS[4], env)
          if v and string.match(v, '\(ChannelRecord.luaPattern)') then live = true break end
        end
        if not live then return {'skip', '0', fmt(now)} end
      end
    end
    local h = redis.call('HMGET', KEYS[1], 'ticks', 'refilled_at', 'last_ms', 'sent_at', 'pending_ms', 'ended_ms', 'p10_entry', 'shown_sig', 'shown_ms')
    local last, sent, pending, ended, p10entry = tonumber(h[3]), tonumber(h[4]), tonumber(h[5]), tonumber(h[6]), h[7]
    local shownsig, shownms = h[8], tonumber(h[9])
    local function same(m)
      if sig == nil or shown ~= '1' or shownsig ~= sig then return false end
      if refresh > 0 and shownms ~= nil and m - shownms >= refresh then return false end
      return true
    end
    -- The entry decided at 10 last, decided again (a redelivery): 10, nothing spent or counted.
    if (kind == 'end' or kind == 'critical') and entry ~= '' and p10entry == entry and last == ms then
      return {'p10', '0', fmt(now), '0', h[1] or '0'}
    end
    -- A token is 3,600,000 ticks: R per hour is R ticks per ms.
    local ticks, at = refill(tonumber(h[1]), tonumber(h[2]), now, cap, rate)
    local counts = {}
    local decision, due = 'stale', 0
    local function count(f) counts[#counts + 1] = f end
    local spent = '0'
    local function take(keep)
      if ticks - TOKEN >= keep then ticks = ticks - TOKEN spent = '1' return true end
      return false
    end
    local function send(d, m)
      if sig ~= nil then shownsig, shownms = sig, m end
      if last == nil or m > last then last = m end
      if sent == nil or now > sent then sent = now end
      -- The push carries the whole merged state: a pending state no newer than it goes too.
      if pending ~= nil and pending <= m then pending = nil end
      if d == 'p10' then p10entry = entry ~= '' and entry or false end
      count(d)
      decision = d
    end
    local function dueat() return (sent or 0) + spacing end
    if kind == 'flush' then
      if pending == nil then
        count('idle_flushes')
      elseif same(pending) then
        pending = nil
        count('unchanged')
        decision = 'unchanged'
      elseif now < dueat() then
        count('idle_flushes')
        decision, due = 'coalesce', dueat()
      else
        count('flushed')
        send('p5', pending)
      end
    elseif kind == 'end' then
      if last ~= nil and ms < last then
        count('stale')
      else
        pending = nil
        if ended == nil then
          -- The first end always goes at 10: the reserve kept a token for it.
          ended = ms
          if not take(0) then ticks = 0 end
          send('p10', ms)
        else
          if ms > ended then ended = ms end
          if take(0) then send('p10', ms) else count('downgraded') send('p5', ms) end
        end
      end
    elseif (last ~= nil and ms < last) or ended ~= nil then
      count('stale')
    elseif same(ms) then
      pending = nil
      count('unchanged')
      decision = 'unchanged'
    elseif kind == 'critical' then
      if take(reserve) then send('p10', ms) else count('downgraded') send('p5', ms) end
    elseif pending ~= nil and ms < pending then
      count('coalesced')
      decision, due = 'coalesce', dueat()
    elseif sent ~= nil and now < sent + spacing then
      if pending == nil or ms > pending then pending = ms end
      count('coalesced')
      decision, due = 'coalesce', sent + spacing
    else
      send('p5', ms)
    end
    -- Fields set, and fields deleted: only those the hash had (HMGET above), so a state that
    -- keeps them absent costs no HDEL.
    local set, del = {'ticks', fmt(ticks), 'refilled_at', fmt(at)}, {}
    local opt = {{'last_ms', last, h[3]}, {'sent_at', sent, h[4]}, {'pending_ms', pending, h[5]}, {'ended_ms', ended, h[6]},
                 {'shown_ms', shownms, h[9]}}
    for _, f in ipairs(opt) do
      if f[2] ~= nil then set[#set + 1] = f[1] set[#set + 1] = fmt(f[2]) elseif f[3] then del[#del + 1] = f[1] end
    end
    if p10entry then set[#set + 1] = 'p10_entry' set[#set + 1] = p10entry elseif h[7] then del[#del + 1] = 'p10_entry' end
    if shownsig then set[#set + 1] = 'shown_sig' set[#set + 1] = shownsig elseif h[8] then del[#del + 1] = 'shown_sig' end
    redis.call('HSET', KEYS[1], unpack(set))
    if #del > 0 then redis.call('HDEL', KEYS[1], unpack(del)) end
    for _, c in ipairs(counts) do redis.call('HINCRBY', KEYS[1], c, 1) end
    redis.call('EXPIRE', KEYS[1], ttl)
    return {decision, fmt(due), fmt(now), spent, fmt(ticks)}
    """)

    /// Takes due members of the schedule (`RedisKeys.budgetDue`) for one worker: each is moved
    /// to `now + lease` (its claim), so it comes due again if the worker dies before settling it.
    /// KEYS[1] = schedule. ARGV: lease ms, count, now ms (`-`: Redis's clock). Returns
    /// {claim score, {member, …}}.
    public static let takeDue = RedisScript(bucketLua + """
    local now = clock(ARGV[3])
    local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
    local claim = now + tonumber(ARGV[1])
    for _, m in ipairs(due) do redis.call('ZADD', KEYS[1], claim, m) end
    return {fmt(claim), due}
    """)

    /// Settles a taken member, only while it still holds this worker's claim (a newer coalesced
    /// state may have rescheduled it meanwhile). KEYS[1] = schedule. ARGV: member, claim score,
    /// next due ms ('' removes it). Returns 1 when settled.
    public static let settleDue = RedisScript("""
    local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if not cur or string.format('%.0f', tonumber(cur)) ~= ARGV[2] then return 0 end
    if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
    return 1
    """)

    /// Takes one token from a plain bucket (a device's push-to-start budget): the same tick maths
    /// as `decide` (`TokenBucket`). KEYS[1] = bucket hash (`ticks`, `refilled_at`, counters `taken`,
    /// `refused`). ARGV: capacity ticks, ticks per ms, now ms (`-`: Redis's clock), ttl s.
    /// Returns 1 (taken) or 0 (over budget).
    public static let take = RedisScript(bucketLua + """
    local TOKEN = 3600000
    local cap, rate, now = tonumber(ARGV[1]), tonumber(ARGV[2]), clock(ARGV[3])
    local h = redis.call('HMGET', KEYS[1], 'ticks', 'refilled_at')
    local ticks, at = refill(tonumber(h[1]), tonumber(h[2]), now, cap, rate)
    local ok = 0
    if ticks >= TOKEN then ticks = ticks - TOKEN ok = 1 end
    redis.call('HSET', KEYS[1], 'ticks', fmt(ticks), 'refilled_at', fmt(at))
    redis.call('HINCRBY', KEYS[1], ok == 1 and 'taken' or 'refused', 1)
    redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
    return ok
    """)

    /// Gives back a token `decide` took (its reply said `spent`) for a push at 10 that never went
    /// out: `BudgetState.refund`. KEYS[1] = budget hash. ARGV: capacity ticks. Returns 1, or 0
    /// when the hash is gone.
    public static let refund = RedisScript(bucketLua + """
    local ticks = tonumber(redis.call('HGET', KEYS[1], 'ticks') or '')
    if not ticks then return 0 end
    redis.call('HSET', KEYS[1], 'ticks', fmt(math.min(tonumber(ARGV[1]), ticks + 3600000)))
    redis.call('HINCRBY', KEYS[1], 'refunded', 1)
    redis.call('HINCRBY', KEYS[1], 'p10', -1)
    return 1
    """)

    /// Gives back a token taken with `take` for a push that didn't go out. KEYS[1] = bucket hash.
    /// ARGV: capacity ticks. Returns 1.
    public static let giveBack = RedisScript("""
    local ticks = tonumber(redis.call('HGET', KEYS[1], 'ticks') or '')
    if not ticks then return 1 end
    ticks = math.min(tonumber(ARGV[1]), ticks + 3600000)
    redis.call('HSET', KEYS[1], 'ticks', string.format('%.0f', ticks))
    redis.call('HINCRBY', KEYS[1], 'taken', -1)
    return 1
    """)

    /// Undoes a flush decision whose push didn't go out (its fan-out couldn't start, or the send
    /// failed): the state is pending again, and — unless another push went out since, which moved
    /// `sent_at` on — `sent_at` and `last_ms` are what they were before, so the state is due again
    /// at once rather than a spacing later; the decision's counts are taken back.
    /// What the decision recorded as shown (`shown_sig`, `shown_ms`) is put back too: the state
    /// wasn't shown.
    /// KEYS[1] = budget hash. ARGV: the state's time (ms), the decision's now (ms), `sent_at`,
    /// `last_ms`, `shown_sig` and `shown_ms` before the decision ('' when absent). Returns 1.
    public static let undoFlush = RedisScript("""
    if redis.call('HGET', KEYS[1], 'ended_ms') then return 1 end
    local p = tonumber(redis.call('HGET', KEYS[1], 'pending_ms') or '')
    if not p or p < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'pending_ms', ARGV[1]) end
    if tonumber(redis.call('HGET', KEYS[1], 'sent_at') or '') == tonumber(ARGV[2]) then
      if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'sent_at') else redis.call('HSET', KEYS[1], 'sent_at', ARGV[3]) end
      if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'last_ms') else redis.call('HSET', KEYS[1], 'last_ms', ARGV[4]) end
      if (ARGV[5] or '') == '' then redis.call('HDEL', KEYS[1], 'shown_sig') else redis.call('HSET', KEYS[1], 'shown_sig', ARGV[5]) end
      if (ARGV[6] or '') == '' then redis.call('HDEL', KEYS[1], 'shown_ms') else redis.call('HSET', KEYS[1], 'shown_ms', ARGV[6]) end
      redis.call('HINCRBY', KEYS[1], 'flushed', -1)
      redis.call('HINCRBY', KEYS[1], 'p5', -1)
    end
    return 1
    """)

    /// One decision. `nowMillis` nil: Redis's clock (one clock for the whole fleet). `guards`:
    /// decided in the merge's round trip (see `decide`; the answer may be `skip`: `parseGuarded`).
    /// `shown`: the key's state hash (its `_sig` is the `Shown.signature`), whether the push is
    /// quiet, and the refresh time (`Shown`); nil: never unchanged, nothing recorded of it.
    public static func decideCommand(budgetKey: String, event: BudgetEvent, entry: String? = nil, nowMillis: Int64?, policy: AudiencePolicy,
                                     ttlSeconds: Int, guards: BudgetGuards? = nil,
                                     shown: (state: String, quiet: Bool, refreshMillis: Int64?)? = nil) -> RedisCommand {
        let kind: String, millis: String
        switch event {
        case .update(let ms, let priority): (kind, millis) = (priority == .critical ? "critical" : "routine", String(ms))
        case .end(let ms): (kind, millis) = ("end", String(ms))
        case .flush: (kind, millis) = ("flush", "")
        }
        var keys = [budgetKey]
        var args: [any RedisArgument] = [
            kind, millis, nowMillis.map { String($0) } ?? "-", policy.bucket.capacityTicks, policy.bucket.ticksPerMillisecond,
            policy.reserveTicks, policy.minSpacingMillis, ttlSeconds, entry ?? "",
            shown.map { $0.quiet ? "1" : "0" } ?? "", shown?.refreshMillis ?? 0,
        ]
        precondition(shown == nil || guards == nil || shown!.state == guards!.state, "one state key")
        if let state = guards?.state ?? shown?.state { keys.append(state) }
        if let guards {
            keys.append(guards.fanout)
            if let channels = guards.channels {
                keys.append(channels.key)
                args.append(channels.environments.joined(separator: " "))
            } else if let audience = guards.audience {
                keys += [audience.channels, audience.direct]
                args.append(audience.environments.joined(separator: " "))
            }
        }
        return .script(decide, keys: keys, args: args)
    }

    /// A guarded decision's answer.
    public enum Guarded: Equatable, Sendable {
        case decided(BudgetReply)
        /// A guard said this event isn't decided here (nothing spent).
        case skipped
        /// A tier with nobody to reach per token (`BudgetGuards.audience`; nothing spent).
        case noAudience
    }

    public static func parseGuarded(_ reply: RESPValue) throws -> Guarded {
        switch reply.array?.first?.string {
        case "skip": return .skipped
        case "none": return .noAudience
        default: return .decided(try parse(reply))
        }
    }

    public static func parse(_ reply: RESPValue) throws -> BudgetReply {
        if let e = reply.errorMessage { throw RedisError(.server, "budget decide: \(e)") }
        guard let items = reply.array, items.count >= 3, let name = items[0].string, let due = items[1].int, let now = items[2].int else {
            throw RedisError(.unexpectedReply, "budget decide: unexpected reply")
        }
        let decision: BudgetDecision
        switch name {
        case "p10": decision = .priority10
        case "p5": decision = .priority5
        case "coalesce": decision = .coalesce(dueAtMillis: due)
        case "stale": decision = .stale
        case "unchanged": decision = .unchanged
        default: throw RedisError(.unexpectedReply, "budget decide: unknown decision \(name)")
        }
        return BudgetReply(decision: decision, nowMillis: now, spent: items.count > 3 && items[3].string == "1",
                           ticksLeft: items.count > 4 ? items[4].int : nil)
    }

    /// A budget hash (`HGETALL`) as the model's state; nil when it holds none.
    public static func state(fromHash reply: RESPValue) -> BudgetState? {
        guard let items = reply.array, !items.isEmpty else { return nil }
        var f: [String: Int64] = [:]
        var entry: String?, signature: String?
        var i = 0
        while i + 1 < items.count {
            if let name = items[i].string {
                if name == "p10_entry" { entry = items[i + 1].string }
                else if name == "shown_sig" { signature = items[i + 1].string }
                else if let v = items[i + 1].int { f[name] = v }
            }
            i += 2
        }
        guard let ticks = f["ticks"], let at = f["refilled_at"] else { return nil }
        var c = BudgetState.Counters()
        c.priority10 = Int(f["p10"] ?? 0)
        c.priority5 = Int(f["p5"] ?? 0)
        c.downgraded = Int(f["downgraded"] ?? 0)
        c.coalesced = Int(f["coalesced"] ?? 0)
        c.flushed = Int(f["flushed"] ?? 0)
        c.stale = Int(f["stale"] ?? 0)
        c.idleFlushes = Int(f["idle_flushes"] ?? 0)
        c.refunded = Int(f["refunded"] ?? 0)
        c.unchanged = Int(f["unchanged"] ?? 0)
        return BudgetState(bucket: TokenBucket(ticks: ticks, refilledAt: at), lastMillis: f["last_ms"], lastSentAt: f["sent_at"],
                           pendingMillis: f["pending_ms"], endedMillis: f["ended_ms"], priority10Entry: entry,
                           shownSignature: signature, shownMillis: f["shown_ms"], counters: c)
    }
}
