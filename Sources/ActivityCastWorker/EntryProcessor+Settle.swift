import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import RedisClient

/// The end of a batch's attempt: acknowledge what is final, remember why the entries' own
/// failures happened. A refusal, or Redis out of reach, is Redis's state, not the entry's:
/// nothing is recorded and its attempt is given back; so is a handed-off entry's (its fan-out's
/// slices are under way).
extension EntryProcessor {
    /// What the outcomes come to (no I/O): the entries to acknowledge, the failures to record,
    /// the attempts to give back.
    struct Settlement {
        var ack: [String] = []
        var failures: [(id: String, message: String)] = []
        var refunds: [String] = []
        var refusal: RedisRefusal?
        /// Entries left pending because Redis was out of reach or APNs down, and why.
        var unreachable: [String] = []
        /// Entries whose fan-outs' slices are under way (kept claimed: `EntriesInHand.handOff`).
        var handedOff: [String] = []

        init(entries: [StreamEntry], outcome: [EntryFailure?], redelivered: Bool) {
            for (index, entry) in entries.enumerated() {
                switch outcome[index] {
                case nil: ack.append(entry.id)
                case .refused(let r)?:
                    refusal = refusal ?? r
                    if redelivered { refunds.append(entry.id) }
                case .unreachable(let message)?:
                    unreachable.append(message)
                    if redelivered { refunds.append(entry.id) }
                case .handedOff?:
                    handedOff.append(entry.id)
                    if redelivered { refunds.append(entry.id) }
                case .own(let message)?:
                    failures.append((entry.id, message))
                }
            }
        }
    }

    func settle(feed: Settings.Feed, entries: [StreamEntry], carried: Carried, redelivered: Bool,
                baseline: GroupLoss.Baseline) async throws -> Outcome {
        var s = Settlement(entries: entries, outcome: carried.outcome, redelivered: redelivered)
        held.handOff(feed.stream, s.handedOff)
        let errors = errorsKey(feed.stream)
        var also = Acknowledgement.failures(keys, stream: feed.stream, s.failures)
        if carried.stale > 0 { also.append(RedisCommand("HINCRBY", countersKey, "registrations_stale", carried.stale)) }
        also += s.refunds.map { AttemptScripts.refund(errors, $0) }
        // A fresh entry has no attempts or errors to clear.
        var ack = Acknowledgement(stream: feed.stream, group: settings.group, ids: s.ack, keys: keys, also: also)
        ack.before = carried.beforeAck
        ack.clearErrors = redelivered
        let counters = stats.stream(feed.stream)
        if !s.ack.isEmpty || !also.isEmpty || !ack.before.isEmpty {
            switch try await ack.run(redis, unlinkAfter: carried.records, sweep: sender?.recordSweep, queue: acks) {
            case .failure(let error):
                // Not acknowledged: the entries stay pending and are done again (idempotently).
                if let r = error.refusal { s.refusal = s.refusal ?? r } else {
                    logger.warning("acknowledging entries failed", metadata: ["stream": "\(feed.stream)", "count": "\(s.ack.count)", "error": "\(error)"])
                }
                s.ack = []
            case .success(let n):
                counters?.acked.add(n, ordering: .relaxed)
                if n < s.ack.count {
                    counters?.ackMissed.add(s.ack.count - n, ordering: .relaxed)
                    await groupLoss.explainMissedAcknowledgements(stream: feed.stream, group: settings.group, missed: s.ack.count - n,
                                                                  acknowledged: s.ack.count, since: baseline, redis: redis, logger: logger)
                }
            }
        }
        // Counted and logged only now that the dead letter is written (and its entry acknowledged).
        if !s.ack.isEmpty {
            counters?.stale.add(carried.stale, ordering: .relaxed)
            for (entry, reason) in carried.deadLettered {
                counters?.deadLettered.add(1, ordering: .relaxed)
                logger.warning("dead letter", metadata: ["entry": "\(feed.stream)/\(entry.id)", "reason": "\(reason.prefix(300))"])
            }
        }
        if let first = s.failures.first {
            counters?.failed.add(s.failures.count, ordering: .relaxed)
            logger.warning("entries left pending after a failure", metadata: ["stream": "\(feed.stream)", "count": "\(s.failures.count)", "error": "\(first.message)"])
        }
        if let first = s.unreachable.first {
            counters?.failed.add(s.unreachable.count, ordering: .relaxed)
            logger.warning("entries left pending: Redis or APNs unavailable", metadata: ["stream": "\(feed.stream)", "count": "\(s.unreachable.count)", "error": "\(first)"])
        }
        if s.refusal != nil {
            counters?.refused.add(entries.count - s.ack.count - s.failures.count - s.unreachable.count - s.handedOff.count, ordering: .relaxed)
        }
        return Outcome(finished: s.ack.count, refusal: s.refusal)
    }
}
