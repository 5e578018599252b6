import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import RedisClient

/// One attempt at a batch, in four steps: its entries' earlier attempts (redeliveries), a pure
/// plan of what each entry comes to (`planBatch`), that plan carried out (registrations' writes
/// and dead letters, then the pushes), and the settlement: one `Acknowledgement` of every entry
/// with a final outcome, with why the others failed beside it.
extension EntryProcessor {
    /// Earlier deliveries of each entry that started processing it, and its last error.
    struct Attempts {
        var count: [String: Int64] = [:]
        var lastErrors: [String: String] = [:]

        func deliveries(_ id: String) -> Int64 { (count[id] ?? 0) + 1 }
    }

    /// What carrying out the plan left: per entry nil (final) or why not, the dead letters
    /// written, the registrations found stale, and the finished fan-out records to unlink once
    /// their entries are acknowledged.
    struct Carried {
        var outcome: [EntryFailure?]
        var deadLettered: [(entry: StreamEntry, reason: String)] = []
        var stale = 0
        var records: [String] = []
        /// Written in the acknowledgement's pipeline, before the XACK (`SendSummary.beforeAcknowledgement`).
        var beforeAck: [RedisCommand] = []
        /// Activity tokens whose registration was accepted: caught up with their key's state.
        var catchUps: [CatchUp] = []
    }

    /// `counted`: a redelivered batch's attempts, counted before anything is done (so an entry
    /// that kills every worker that takes it still runs out of attempts); nil for a first delivery.
    func attemptProcess(feed: Settings.Feed, entries: [StreamEntry], attempts counted: Attempts?, order: UInt64?,
                        baseline: GroupLoss.Baseline) async throws -> Outcome {
        let redelivered = counted != nil
        let attempts = counted ?? Attempts()
        let work = planBatch(feed: feed, entries: entries, attempts: attempts)
        var carried = try await applyEffects(feed: feed, entries: entries, work: work, attempts: attempts)
        // Late tokens get their key's state now, not at its next event (which may be 20 minutes away).
        if let sender, !carried.catchUps.isEmpty { sender.catchUpSoon(carried.catchUps) }
        if let sender {
            try await sendPlans(feed: feed, entries: entries, work: work, attempts: attempts, redelivered: redelivered, order: order,
                                sender: sender, carried: &carried)
        }
        return try await settle(feed: feed, entries: entries, carried: carried, redelivered: redelivered, baseline: baseline)
    }

    /// Counts `delivery` of each entry once (`AttemptScripts.count`) and reads their last errors.
    func countAttempts(_ stream: String, _ entries: [StreamEntry], delivery: String) async throws -> Attempts {
        let errors = errorsKey(stream), ids = entries.map(\.id)
        let replies = try await redis.pipeline([AttemptScripts.count(errors, delivery: delivery, ids: ids),
                                                RedisCommand("HMGET", [errors] + ids.map(EntryErrorFields.lastError))])
        var attempts = Attempts()
        attempts.count = try AttemptScripts.counts(replies[0], ids: ids)
        for (id, value) in zip(ids, replies[1].array ?? []) {
            if let s = value.string { attempts.lastErrors[id] = s }
        }
        return attempts
    }

    /// What each entry comes to, from the entries alone: acknowledged as is, dead-lettered (too
    /// many deliveries, too large, malformed, a route's error), registration writes, or a plan
    /// to send. No I/O.
    func planBatch(feed: Settings.Feed, entries: [StreamEntry], attempts: Attempts) -> [Work] {
        entries.map { entry in
            guard let fields = entry.fields else { return .ack }  // deleted from the stream while pending: nothing left to do
            let delivered = attempts.deliveries(entry.id)
            if delivered > Int64(settings.maxDeliveries) {
                let last = attempts.lastErrors[entry.id].map { "last error: \($0)" }
                    ?? "no error was recorded: the workers that took it stopped before finishing it (crash, kill or out of memory)"
                return .deadLetter("delivered \(delivered) times without a final outcome (max \(settings.maxDeliveries)); \(last)",
                                   copyFields: entry.oversize == nil)
            }
            if let big = entry.oversize {
                let error = decoder.oversizeError(fields: big.fields, bytes: big.bytes, longValue: big.longValue)
                return .deadLetter(error.reason + " (too large to read: not copied)", copyFields: false)
            }
            if let crashOn, fields.contains(crashOn) {
                fatalError("failpoint ACTIVITYCAST_FAILPOINT_CRASH_ON: crashing on entry \(feed.stream)/\(entry.id)")
            }
            var raw: [RawField] = []
            raw.reserveCapacity(fields.count / 2)
            var i = 0
            while i + 1 < fields.count { raw.append(RawField(name: fields[i], value: fields[i + 1])); i += 2 }
            // Free text for people is repaired, not refused: a bad name never costs a score.
            let repairs = FreeText.repair(&raw, maxBytes: decoder.limits.maxTextBytes)
            if !repairs.isEmpty { noteRepairs(repairs, entry: "\(feed.stream)/\(entry.id)") }
            switch decoder.decode(kind: feed.kind, fields: raw) {
            case .failure(let error): return .deadLetter(error.reason, copyFields: true)
            case .success(let decoded):
                if let shard = feed.shard { checkShard(shard, of: feed, fields: raw, entryID: entry.id) }
                return handle(decoded, fields: raw, entryID: entry.id, stream: feed.stream)
            }
        }
    }

    /// Counts and logs the free text repaired in one entry.
    func noteRepairs(_ repairs: [FreeText.Repaired], entry: String) {
        stats.textRepaired.withLock { counts in for r in repairs { for reason in r.repairs { counts[reason, default: 0] += 1 } } }
        logger.info("free text repaired", metadata: [
            "entry": "\(entry)", "repaired": "\(repairs.map { "\($0.field): \($0.repairs.map(\.rawValue).joined(separator: "+"))" }.joined(separator: ", "))",
        ])
    }

    /// Every entry's first commands and every dead letter in one pipeline, then the writes that
    /// depended on a first-phase script accepting a registration.
    func applyEffects(feed: Settings.Feed, entries: [StreamEntry], work: [Work], attempts: Attempts) async throws -> Carried {
        var carried = Carried(outcome: Array(repeating: nil, count: entries.count))
        var commands: [RedisCommand] = []
        var ranges: [Range<Int>] = []
        for (entry, w) in zip(entries, work) {
            let start = commands.count
            switch w {
            case .deadLetter(let reason, let copy):
                commands.append(deadLetterCommand(feed: feed, entry: entry, reason: reason, deliveries: attempts.deliveries(entry.id), copyFields: copy))
            case .effects(let e, _): commands += e.first
            case .ack, .send: break
            }
            ranges.append(start..<commands.count)
        }
        guard !commands.isEmpty else { return carried }
        // A dead-lettered entry whose key can be told is on that key's trail too (after the
        // entries' own replies, which alone decide their outcomes).
        let trails = zip(entries, work).flatMap { entry, w -> [RedisCommand] in
            guard case .deadLetter(let reason, _) = w else { return [] }
            return DeadLetterTrail(routes: routes, keys: keys, settings: settings).commands(feed: feed, entry: entry, reason: reason)
        }
        let replies = try await redis.pipeline(commands + trails)
        var second: [RedisCommand] = []
        var secondRanges = Array(repeating: 0..<0, count: entries.count)
        for (index, w) in work.enumerated() {
            let mine = Array(replies[ranges[index]])
            if let bad = mine.lazy.compactMap(\.errorMessage).first {
                carried.outcome[index] = EntryFailure(bad)
                continue
            }
            switch w {
            case .deadLetter(let reason, _):
                carried.deadLettered.append((entries[index], reason))
            case .effects(let e, let after):
                if let s = e.staleIfZero, mine.count > s, mine[s] == .integer(0) { carried.stale += 1 }
                if let c = e.catchUp, let stored = mine.first?.int, stored == 1 || (stored == 2 && c.stateMillis != nil) { carried.catchUps.append(c) }
                after?(mine)
                if let next = e.second {
                    let start = second.count
                    second += next(mine)
                    secondRanges[index] = start..<second.count
                }
            case .ack, .send: break
            }
        }
        if !second.isEmpty {
            let replies = try await redis.pipeline(second)
            for index in entries.indices where carried.outcome[index] == nil {
                if let bad = replies[secondRanges[index]].lazy.compactMap(\.errorMessage).first { carried.outcome[index] = EntryFailure(bad) }
            }
        }
        for (index, w) in work.enumerated() where carried.outcome[index] == nil {
            if case .effects(let e, _) = w { carried.beforeAck += e.done }
        }
        return carried
    }

    /// The pushes: one key's events in order, different keys side by side.
    func sendPlans(feed: Settings.Feed, entries: [StreamEntry], work: [Work], attempts: Attempts, redelivered: Bool, order: UInt64?,
                   sender: Sender, carried: inout Carried) async throws {
        let sends = work.indices.compactMap { i -> (Int, Plan)? in
            if case .send(let plan) = work[i], carried.outcome[i] == nil { return (i, plan) }
            return nil
        }
        guard !sends.isEmpty else { return }
        for (index, result) in await send(sends, sender: sender, stream: feed.stream, entries: entries, redelivered: redelivered, order: order) {
            switch result {
            case .success(.done(let summary)):
                // Finished fan-out records of entries acknowledged below: they go after the acknowledgement.
                if let record = summary.finishedRecord { carried.records.append(record) }
                carried.beforeAck += summary.beforeAcknowledgement
            case .success(.handedOff):
                // Other workers are sending its slices; the last of them acknowledges it.
                carried.outcome[index] = .handedOff
            case .success(.rejected(let reason)):
                // Too large to send: a dead letter like any entry that can't be processed.
                let reply = try await redis.pipeline([deadLetterCommand(feed: feed, entry: entries[index], reason: reason,
                                                                        deliveries: attempts.deliveries(entries[index].id), copyFields: true)])[0]
                if let e = reply.errorMessage { carried.outcome[index] = EntryFailure(e) } else { carried.deadLettered.append((entries[index], reason)) }
            case .failure(let error):
                carried.outcome[index] = EntryFailure(sending: error)
            }
        }
    }
}
