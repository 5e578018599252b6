import ActivityCastCore

/// The fan-outs of one key as a pure value: the state machine `FanoutScripts` runs in Redis
/// (`create`, `step`, `abandon`, `renew`, `mark`), event by event, with the answers the scripts
/// give. No I/O and no clock: every call carries its time (`nowMillis`), as the scripts' do.
/// Tests run it beside the scripts on a real Redis and compare every answer and the whole state
/// after each call (`FanoutModelTests`), as `KeyState` and `BudgetState` are checked.
///
/// What it decides: each call's status, the `left` counts, where each slice's next batch starts
/// (`FanoutBatchRange.from`), whether it is re-sent (after a takeover or a restart), the leases
/// in `{key}:inflight` and their ends, which slices are final, when a record is over (its payloads
/// dropped, or deleted for a flush), and the key's newest fan-out.
///
/// What it leaves to Redis: which tokens a batch holds and where it ends. `HSCAN`'s order comes
/// from Redis's hash seed and table, which nothing outside Redis can predict, so the model asks:
/// where a step scans, `step` calls `scan` with the batch's start and the slice's bounds, and is
/// told where the batch ended (`to`; the batch is the slice's last when `to` reaches the slice's
/// end) or that the range held nothing more. The tokens themselves are checked by the tests
/// against each token's place, which they learn from a full `HSCAN … COUNT 1` of the audience
/// first: a token belongs to exactly one slice, a batch holds only tokens of its slice and range,
/// a finished slice handed out every token of its range, and a batch handed out again after a
/// takeover starts where the lost one did.
///
/// Not modelled: expiry (TTLs run on Redis's own clock, hours away in any test), the scan's width
/// hint, the record's static fields (payloads, tiers, `live`, the entry), and a Redis restart's
/// new hash seed: `restart()` only makes every record's `rid` another process's, which is what the
/// step script acts on.
public struct FanoutModel: Equatable, Sendable {
    /// `{key}:gen`: the key's newest fan-out. An older one still running is superseded.
    public struct Newest: Equatable, Sendable {
        public var gen: String
        public var millis: Int64

        public init(gen: String, millis: Int64) {
            self.gen = gen
            self.millis = millis
        }
    }

    /// A slice's progress (`s<j>`); none recorded means its range's start.
    public enum Progress: Equatable, Sendable {
        /// Sent below this place.
        case at(UInt64)
        /// A batch handed out and not yet confirmed; `last`: it ends the slice.
        case inFlight(FanoutBatchRange, last: Bool)
        /// The range is sent; tokens still failing wait (`round` batches of them sent so far).
        case waiting(round: Int)
        /// The waiting tokens handed out, the `round`-th time, and not yet confirmed.
        case retrying(round: Int)
        /// Final: sent, superseded or abandoned.
        case done
    }

    /// One fan-out's record (`{key}:fan:<gen>`).
    public struct Record: Equatable, Sendable {
        /// `n`: its slices.
        public var slices: Int
        /// Slices without a final outcome.
        public var left: Int
        /// `b`: its broadcast is answered and recorded.
        public var broadcastDone: Bool
        /// `q`: slices 1…n-1 are on the slices stream.
        public var queued: Bool
        /// It has an entry to acknowledge (an event's). A flush's has none: its record goes as
        /// soon as it is over.
        public var hasEntry: Bool
        /// The Redis process it began in, or was laid out again in (`rid`).
        public var run: Int
        /// `r`: started again after a restart, so every batch is counted as re-sent.
        public var restarted: Bool
        /// Each slice's progress; a slice not here is at its range's start.
        public var progress: [Int: Progress]
        /// Each slice's tokens still failing (`w<j>`), in the order they were confirmed, and when
        /// they may go again (`wd<j>`).
        public var waiting: [Int: [FanoutWaiting]]
        public var due: [Int: Int64]
        /// Every slice is final: the payloads are gone and the record waits for its entry's
        /// acknowledgement.
        public var over: Bool

        public init(slices: Int, left: Int, broadcastDone: Bool, queued: Bool, hasEntry: Bool, run: Int, restarted: Bool = false,
                    progress: [Int: Progress] = [:], waiting: [Int: [FanoutWaiting]] = [:], due: [Int: Int64] = [:], over: Bool = false) {
            self.slices = slices
            self.left = left
            self.broadcastDone = broadcastDone
            self.queued = queued
            self.hasEntry = hasEntry
            self.run = run
            self.restarted = restarted
            self.progress = progress
            self.waiting = waiting
            self.due = due
            self.over = over
        }
    }

    /// The key's audience as `create` counts it (`HLEN` of `{key}:meta`, tombstones included) and
    /// whether Redis keeps it as a hash table (more than `hash-max-listpack-entries` entries: 128
    /// in redis.conf, 512 in a server started without one; or a value over 64 bytes, as a real
    /// token's registration is). A listpack can't be scanned by range, so it is one slice.
    public struct Audience: Equatable, Sendable {
        public var tokens: Int
        public var hashtable: Bool

        public init(tokens: Int, hashtable: Bool) {
            self.tokens = tokens
            self.hashtable = hashtable
        }
    }

    /// Where a step scans: from `from` up to `hi` (the slice's end, or a lost batch's when it is
    /// taken over) within the slice's range from `lo`, for about `want` tokens (`Int.max`: all).
    public struct Scan: Equatable, Sendable {
        public var from: UInt64
        public var lo: UInt64
        public var hi: UInt64
        public var want: Int
    }

    /// What a step answers, less what only the scan knows (the rows and the bucket width).
    public enum Step: Equatable, Sendable {
        case send(left: Int, batch: FanoutBatch, resent: FanoutResent)
        case later(msLeft: Int64)
        case finished(left: Int)
        case done(left: Int)
        case superseded(left: Int)
        case busy(msLeft: Int64)
        case wait(left: Int)
        case gone
        case relaid(slices: Int)
        case paused(left: Int)

        /// A step reply as the model sees it.
        public init(_ reply: FanoutStepReply) {
            switch reply {
            case .send(let left, let batch, let resent, _, _, _): self = .send(left: left, batch: batch, resent: resent)
            case .later(let ms): self = .later(msLeft: ms)
            case .finished(let left): self = .finished(left: left)
            case .done(let left): self = .done(left: left)
            case .superseded(let left): self = .superseded(left: left)
            case .busy(let ms): self = .busy(msLeft: ms)
            case .wait(let left): self = .wait(left: left)
            case .gone: self = .gone
            case .relaid(let slices): self = .relaid(slices: slices)
            case .paused(let left): self = .paused(left: left)
            }
        }
    }

    public var newest: Newest?
    /// The records that exist, by fan-out name.
    public var records: [String: Record]
    /// `{key}:inflight`: `<gen>|<j>` of each batch in flight → the end of its lease (ms). An
    /// ended lease stays until a step drops it (or its slice moves on).
    public var leases: [String: Int64]
    /// The Redis process now; `restart()` counts up.
    public var run: Int

    public init(newest: Newest? = nil, records: [String: Record] = [:], leases: [String: Int64] = [:], run: Int = 0) {
        self.newest = newest
        self.records = records
        self.leases = leases
        self.run = run
    }

    /// The member of slice `j` of `gen` in `{key}:inflight`.
    public static func member(_ gen: String, _ j: Int) -> String { "\(gen)|\(j)" }

    // MARK: - The scripts

    /// `FanoutScripts.create` for `audience`: a new fan-out, the one of that name (a redelivery),
    /// `older` when a newer one is the key's (or, for a flush, one of the same time is under way,
    /// or it was superseded before), `none` for a key without tokens (named the newest all the same).
    public mutating func create(_ call: FanoutCreate, audience: Audience) -> FanoutCreateReply {
        if let cur = newest, cur.gen == call.gen {
            guard let record = records[call.gen] else { return .exists(left: 0, slices: 1, broadcastDone: true, queued: true) }
            return .exists(left: record.left, slices: max(1, record.slices), broadcastDone: record.broadcastDone, queued: record.queued)
        }
        if let cur = newest, call.millis < cur.millis { return .older }
        // A flush yields to a fan-out of the same time under way, and to any it didn't read.
        if call.flush, let cur = newest, call.millis <= cur.millis {
            if cur.gen != call.newest { return .older }
            if (records[cur.gen]?.left ?? 0) > 0 { return .older }
        }
        // Superseded before: never started again.
        if records[call.gen] != nil { return .older }
        newest = Newest(gen: call.gen, millis: call.millis)
        guard audience.tokens > 0 else { return .none }
        var n = 1
        if audience.hashtable {
            while n * call.sliceSize < audience.tokens, n < call.maxSlices { n *= 2 }
        }
        records[call.gen] = Record(slices: n, left: n, broadcastDone: !call.broadcastPending, queued: false, hasEntry: !call.entryID.isEmpty,
                                   run: run)
        return .new(slices: n, tokens: audience.tokens)
    }

    /// `FanoutScripts.step`: confirms the caller's batch (its failing tokens wait), then hands out
    /// the next, in the script's order of checks: gone, relaid (another Redis process), done, the
    /// confirm, paused, busy (another's live lease), superseded, wait (an older fan-out's batch in
    /// flight), a takeover of waiting tokens in flight, the waiting tokens (`later` until due), a
    /// takeover of a range (an ended lease: the same batch again), then the scan (`scan`: where
    /// the batch ends, nil when the range held nothing more; a takeover asks only whether the lost
    /// batch still holds anything, and hands out that batch again) or the caller's own
    /// (`call.scanned`, when `accepted` where the slice stands); once the range is sent, the
    /// waiting tokens. `registered`: whether any of these activities is still in the audience
    /// (Redis knows; a batch of waiting tokens holds those that are).
    public mutating func step(_ call: FanoutStepCall, registered: ([String]) -> Bool = { !$0.isEmpty }, scan: (Scan) -> UInt64?) -> Step {
        let gen = call.gen, j = call.slice, now = call.nowMillis
        guard var record = records[gen] else { return .gone }
        if record.left > 0, record.run != run, newest?.gen == gen {
            // Another Redis process: another scan order. Every slice starts again.
            record = Record(slices: record.slices, left: record.slices, broadcastDone: record.broadcastDone, queued: false,
                            hasEntry: record.hasEntry, run: run, restarted: true)
            records[gen] = record
            return .relaid(slices: record.slices)
        }
        if record.progress[j] == .done { return .done(left: record.left) }
        let n = call.slices == 0 ? record.slices : call.slices
        var at = Position(record.progress[j], bounds: SliceMath.bounds(index: j, count: n))
        if let finished = confirm(call, &record, &at) { return finished }
        if call.want == 0 {
            records[gen] = record
            return .paused(left: record.left)
        }
        // Another worker's batch keeps its lease, superseded or not.
        if at.inFlight != nil || at.out != nil, let end = leases[Self.member(gen, j)], end > now {
            records[gen] = record
            return .busy(msLeft: end - now)
        }
        if newest?.gen != gen { return .superseded(left: final(gen, j, &record)) }
        // Ended leases go, whoever's; a live one of another fan-out (an older one) makes this wait.
        leases = leases.filter { $0.value > now }
        if leases.keys.contains(where: { !$0.hasPrefix(gen + "|") }) {
            records[gen] = record
            return .wait(left: record.left)
        }
        return handOut(call, &record, at, registered: registered, scan: scan)
    }

    /// Where a slice stands before a step: a place in its range, a range batch in flight, its range
    /// sent with tokens waiting (`round` batches of them sent), or a batch of them out (`out`).
    private struct Position {
        var lo: UInt64, hi: UInt64
        var pos: UInt64
        var inFlight: (range: FanoutBatchRange, last: Bool)?
        var round: Int?
        var out: Int?

        init(_ progress: Progress?, bounds: (lo: UInt64, hi: UInt64)) {
            (lo, hi, pos) = (bounds.lo, bounds.hi, bounds.lo)
            switch progress {
            case .at(let place)?: pos = place
            case .inFlight(let range, let last)?: inFlight = (range, last)
            case .waiting(let r)?: round = r
            case .retrying(let r)?: out = r
            case .done?, nil: break
            }
        }
    }

    /// Records the caller's batch as sent, if it is the one in flight; its failing tokens wait.
    /// Returns `finished` when that ends the slice.
    private mutating func confirm(_ call: FanoutStepCall, _ record: inout Record, _ at: inout Position) -> Step? {
        let gen = call.gen, j = call.slice, now = call.nowMillis
        let waiting = record.waiting[j] ?? []
        if let batch = at.inFlight, call.confirm == .range(batch.range) {
            leases[Self.member(gen, j)] = nil
            if !call.failing.isEmpty { Self.wait(&record, j, waiting + call.failing, at: max(record.due[j] ?? 0, now + call.retryAfterMillis)) }
            at.inFlight = nil
            guard batch.last else {
                record.progress[j] = .at(batch.range.to)
                at.pos = batch.range.to
                return nil
            }
        } else if let r = at.out, call.confirm == .waiting(round: r) {
            leases[Self.member(gen, j)] = nil
            Self.wait(&record, j, call.failing, at: now + call.retryAfterMillis)
            (at.out, at.round) = (nil, r)
        } else {
            return nil
        }
        // The range is sent (or a round of waiting tokens): what still waits, else the slice is done.
        if record.waiting[j] == nil { return .finished(left: final(gen, j, &record)) }
        let r = at.round ?? 0
        record.progress[j] = .waiting(round: r)
        at.round = r
        return nil
    }

    /// Slice `j`'s waiting tokens become `list`, due at `at` (none: both go).
    private static func wait(_ record: inout Record, _ j: Int, _ list: [FanoutWaiting], at: Int64) {
        record.waiting[j] = list.isEmpty ? nil : list
        record.due[j] = list.isEmpty ? nil : at
    }

    /// The next batch: the waiting tokens when due (at once after a takeover: its worker stopped
    /// with them), a range batch taken over, or the next range batch; once the range holds nothing
    /// more, the waiting tokens, else the slice is done.
    private mutating func handOut(_ call: FanoutStepCall, _ record: inout Record, _ at: Position, registered: ([String]) -> Bool,
                                  scan: (Scan) -> UInt64?) -> Step {
        let gen = call.gen, j = call.slice, now = call.nowMillis, lease = now + Int64(call.leaseMillis)
        let member = Self.member(gen, j), fresh: FanoutResent = record.restarted ? .afterRestart : .fresh
        func waitingBatch(_ r: Int, again: Bool) -> Step {
            if !again, let due = record.due[j], now < due {
                records[gen] = record
                return .later(msLeft: due - now)
            }
            guard registered((record.waiting[j] ?? []).map(\.activity)) else { return .finished(left: final(gen, j, &record)) }
            record.progress[j] = .retrying(round: r)
            leases[member] = lease
            records[gen] = record
            return .send(left: record.left, batch: .waiting(round: r), resent: again ? .afterTakeover : fresh)
        }
        func rangeSent() -> Step {
            if record.waiting[j] == nil { return .finished(left: final(gen, j, &record)) }
            record.progress[j] = .waiting(round: 0)
            return waitingBatch(1, again: false)
        }
        if let r = at.out { return waitingBatch(r, again: true) }
        if let r = at.round { return waitingBatch(r + 1, again: false) }
        var pos = at.pos
        if let batch = at.inFlight {
            // Its worker stopped with it in flight: that batch again, exactly, whatever the
            // caller's `want` (all of it, and nothing more, goes as re-sent).
            if scan(Scan(from: batch.range.from, lo: at.lo, hi: min(batch.range.to, at.hi), want: .max)) != nil {
                record.progress[j] = .inFlight(batch.range, last: batch.last)
                leases[member] = lease
                records[gen] = record
                return .send(left: record.left, batch: .range(batch.range), resent: .afterTakeover)
            }
            // Nothing of it is left (its registrations gone): the slice goes on from its end.
            if batch.last { return rangeSent() }
            pos = batch.range.to
        }
        // The caller's own scan when it starts where the slice stands (not after a takeover).
        let to: UInt64?
        if at.inFlight == nil, let scanned = call.scanned, scanned.accepted(at: pos, hi: at.hi) {
            to = scanned.count == 0 ? nil : scanned.to
        } else {
            to = scan(Scan(from: pos, lo: at.lo, hi: at.hi, want: call.want))
        }
        guard let to else { return rangeSent() }
        let range = FanoutBatchRange(from: pos, to: to)
        record.progress[j] = .inFlight(range, last: to >= at.hi)
        leases[member] = lease
        records[gen] = record
        return .send(left: record.left, batch: .range(range), resent: fresh)
    }

    /// `FanoutScripts.abandon`: the slice is final unsent (its lease, if any, goes).
    public mutating func abandon(_ call: FanoutAbandon) -> FanoutAbandonReply {
        guard var record = records[call.gen], record.progress[call.slice] != .done else { return .alreadyFinal }
        return .abandoned(left: final(call.gen, call.slice, &record))
    }

    /// `FanoutScripts.renew`: the lease ends at `leaseEndMillis` unless later already; nothing
    /// when it is gone.
    public mutating func renew(_ call: FanoutRenew) -> FanoutRenewReply {
        guard let end = leases[call.member] else { return .gone }
        leases[call.member] = max(end, call.leaseEndMillis)
        return .renewed
    }

    /// `FanoutScripts.mark` on `gen`'s record, only while it exists.
    public mutating func mark(gen: String, _ field: FanoutMark.Field) -> FanoutMarkReply {
        guard var record = records[gen] else { return .gone }
        switch field {
        case .broadcast: record.broadcastDone = true
        case .queued: record.queued = true
        case .spent, .sentAtTen: break
        }
        records[gen] = record
        return .marked
    }

    // MARK: - Outside the scripts

    /// Redis restarted (or failed over) with its data: every record's `rid` is another process's.
    public mutating func restart() { run += 1 }

    /// The worker that finished an event's fan-out deleted its record after the acknowledgement
    /// (`Sender.acknowledge`).
    public mutating func acknowledged(gen: String) { records[gen] = nil }

    /// Whether slice `j` of `gen` is final (a record that is gone counts as final).
    public func isFinal(_ gen: String, _ j: Int) -> Bool { records[gen].map { $0.progress[j] == .done } ?? true }

    /// The script's `final()`: the slice is done, its lease goes, and the last one makes the
    /// record over (a flush's is deleted). Returns the slices left.
    private mutating func final(_ gen: String, _ j: Int, _ record: inout Record) -> Int {
        record.progress[j] = .done
        record.waiting[j] = nil
        record.due[j] = nil
        leases[Self.member(gen, j)] = nil
        record.left -= 1
        if record.left <= 0 { record.over = true }
        records[gen] = record.over && !record.hasEntry ? nil : record
        return record.left
    }
}
