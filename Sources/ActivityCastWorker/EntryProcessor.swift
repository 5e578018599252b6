import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import ActivityCastSettings
import Foundation
import Logging
import RedisClient

/// Takes a batch of entries from one stream to a final outcome: applied (registrations), planned
/// (feed events), or dead-lettered with a reason. Only entries with a final outcome are
/// acknowledged; an entry whose processing failed stays pending, with its last error kept in
/// Redis, until a retry succeeds or it has been delivered too often and is dead-lettered.
struct EntryProcessor: Sendable {
    enum Mode: Sendable {
        /// Apply registrations, count each plan's audience and log the plan.
        case full
        /// Decode and plan, touch nothing else: the intake benchmark's trivial handler.
        case decodeOnly
    }

    let settings: Settings
    let redis: RedisConnection
    let consumer: String
    let logger: Logger
    let stats: WorkerStats
    let mode: Mode
    let decoder: EntryDecoder
    /// The routes that turn feed events into plans (the shipped ones unless configured).
    let routes: RouteSet
    let registrar: Registrar
    let keys: RedisKeys
    /// The order this worker read its batches in (see `ReadOrder`).
    let readOrder = ReadOrder()
    /// Test-only failpoint: `ACTIVITYCAST_FAILPOINT_CRASH_ON=<value>` makes the process abort
    /// when it is about to decode an entry with a field of exactly that value — how the fault
    /// suite makes an entry that kills every worker that takes it. Unset in production.
    let crashOn: [UInt8]? = ProcessInfo.processInfo.environment["ACTIVITYCAST_FAILPOINT_CRASH_ON"].map { Array($0.utf8) }
    /// Test-only failpoint: `ACTIVITYCAST_FAILPOINT_PAUSE_REDELIVERED_MS=<ms>` waits that long before
    /// sending a redelivered entry's pushes — how a test makes a claim race the acknowledgement of
    /// the worker that finished the entry. Unset in production.
    let pauseRedelivered: Duration? = ProcessInfo.processInfo.environment["ACTIVITYCAST_FAILPOINT_PAUSE_REDELIVERED_MS"]
        .flatMap(Int.init).map { .milliseconds($0) }

    /// The send path (nil: plans are only logged, `worker.send: false`).
    let sender: Sender?
    /// Says why an acknowledgement found entries no longer pending.
    let groupLoss: GroupLoss
    /// Where batches' acknowledgements wait to share a round trip (nil: each goes at once).
    let acks: AcknowledgementQueue?
    /// What this worker is working on: kept claimed, never started twice (`EntriesInHand`).
    let held: EntriesInHand

    init(settings: Settings, redis: RedisConnection, consumer: String, logger: Logger, stats: WorkerStats, mode: Mode = .full,
         sender: Sender? = nil, routes: RouteSet = .shipped, groupLoss: GroupLoss? = nil, acks: AcknowledgementQueue? = nil,
         held: EntriesInHand? = nil) {
        self.sender = sender
        self.acks = acks
        self.held = held ?? EntriesInHand(visibilityTimeout: settings.visibilityTimeout)
        self.groupLoss = groupLoss ?? GroupLoss(connections: [redis], streams: settings.inputStreams.map(\.stream))
        self.routes = routes
        self.settings = settings
        self.redis = redis
        self.consumer = consumer
        self.logger = logger
        self.stats = stats
        self.mode = mode
        self.decoder = EntryDecoder(limits: settings.limits)
        self.keys = settings.keys
        self.registrar = Registrar(keys: settings.keys, activityTTLSeconds: settings.activityTTLSeconds,
                                   deviceTTLSeconds: settings.deviceTTLSeconds, trailMaxRecords: settings.traceMaxRecords,
                                   trailRetentionSeconds: settings.traceRetentionSeconds)
    }

    /// The hash holding, per pending entry of `stream` that failed, its last error (`<id>`)
    /// and how many redeliveries started processing it (`<id>#n`).
    func errorsKey(_ stream: String) -> String { keys.errors(stream) }

    /// Fleet-wide counters shown by `inspect`.
    var countersKey: String { keys.counters }

    /// Reply limits for reading entries: an entry that could never be accepted is read as its
    /// size only (see `StreamEntry.oversize`), so it costs bounded memory.
    var readLimits: RESPDecoder.Limits {
        let l = decoder.readLimits(batch: settings.batchSize)
        return RESPDecoder.Limits(maxElements: l.maxElements, maxStringBytes: l.maxStringBytes, maxArrayBytes: l.maxArrayBytes)
    }

    /// How a batch ended: how many entries reached a final outcome, and whether Redis refused
    /// work (those entries stay pending, through no fault of their own).
    struct Outcome: Sendable {
        var finished = 0
        var refusal: RedisRefusal?
        /// False when nothing was tried: every entry was still in hand with another delivery.
        /// Such a batch says nothing about whether Redis takes writes.
        var attempted = true
    }

    enum Work {
        case ack
        case deadLetter(String, copyFields: Bool)
        case effects(EntryEffects, after: (@Sendable ([RESPValue]) -> Void)?)
        /// The plan's pushes, through the send path.
        case send(Plan)
    }

    /// Processes `entries` of `feed`. `redelivered`: they were delivered before (claimed, or
    /// this consumer's own pending entries after a restart), so their earlier attempts count.
    /// Retries connection failures while `retryUntil` allows. `order`: the batch's number from
    /// `readOrder`, taken when it was read (its events queue for their keys after those of the
    /// batches read before it).
    @discardableResult
    func process(feed: Settings.Feed, entries: [StreamEntry], redelivered: Bool = false, retryUntil: ContinuousClock.Instant,
                 order: UInt64? = nil) async -> Outcome {
        defer { if let order { readOrder.done(order) } }
        // An entry this worker is still working on (its own claim handed it back) is left to that delivery.
        let taken = held.take(feed.stream, entries.map(\.id))
        defer { held.release(feed.stream, taken) }
        let entries = taken.count == entries.count ? entries : entries.filter { taken.contains($0.id) }
        guard !entries.isEmpty else { return Outcome(attempted: false) }
        let baseline = groupLoss.baseline()
        guard redelivered, entries.count > 1 else {
            return await processWithRetries(feed: feed, entries: entries, redelivered: redelivered, retryUntil: retryUntil, order: order,
                                            baseline: baseline)
        }
        // An entry that was started before and never finished may be what killed the worker that
        // had it. Process those one at a time, so that such an entry takes down only itself and
        // its attempts, not the attempts of every entry that shared its batch.
        let started: [Int64]
        do {
            let reply = try await redis.send(RedisCommand("HMGET", [errorsKey(feed.stream)] + entries.map { EntryErrorFields.attempts($0.id) }))
            started = (reply.array ?? []).map { $0.int ?? 0 }
        } catch {
            return await processWithRetries(feed: feed, entries: entries, redelivered: true, retryUntil: retryUntil, baseline: baseline)
        }
        var fresh: [StreamEntry] = [], suspects: [StreamEntry] = []
        for (index, entry) in entries.enumerated() {
            if index < started.count, started[index] > 0 { suspects.append(entry) } else { fresh.append(entry) }
        }
        var total = await processWithRetries(feed: feed, entries: fresh, redelivered: true, retryUntil: retryUntil, baseline: baseline)
        for entry in suspects {
            let one = await processWithRetries(feed: feed, entries: [entry], redelivered: true, retryUntil: retryUntil, baseline: baseline)
            total.finished += one.finished
            total.refusal = total.refusal ?? one.refusal
        }
        return total
    }

    /// One delivery of `entries`. A redelivered batch's attempt is counted once, before anything
    /// is done, however many times Redis makes it retry; and it is given back when the delivery
    /// ends because Redis was unreachable or refusing: an outage (a failover, a restart, a full
    /// Redis) is not the entries' fault and must not run them out of attempts into dead letters.
    private func processWithRetries(feed: Settings.Feed, entries: [StreamEntry], redelivered: Bool, retryUntil: ContinuousClock.Instant,
                                    order: UInt64? = nil, baseline: GroupLoss.Baseline) async -> Outcome {
        guard !entries.isEmpty else { return Outcome() }
        var attempt = 0
        var attempts: Attempts?
        // This delivery's name: a count retried after its reply was lost counts once.
        let delivery = UUID().uuidString
        while true {
            do {
                if redelivered, attempts == nil { attempts = try await countAttempts(feed.stream, entries, delivery: delivery) }
                return try await attemptProcess(feed: feed, entries: entries, attempts: attempts, order: order, baseline: baseline)
            } catch let error as RedisError where error.isConnectionProblem && ContinuousClock.now < retryUntil {
                attempt += 1
                if attempt == 1 || attempt % 20 == 0 {
                    logger.warning("Redis unavailable while processing; retrying", metadata: ["stream": "\(feed.stream)", "entries": "\(entries.count)", "error": "\(error)"])
                }
                try? await Task.sleep(for: .milliseconds(min(50 * attempt, 1000)))
            } catch {
                if attempts != nil, Outage.isOutage(error) { await refundAttempts(feed.stream, entries) }
                if let refusal = Outage.refusal(of: error) {
                    stats.stream(feed.stream)?.refused.add(entries.count, ordering: .relaxed)
                    return Outcome(finished: 0, refusal: refusal)
                }
                stats.stream(feed.stream)?.failed.add(entries.count, ordering: .relaxed)
                logger.error("batch left pending for a retry", metadata: ["stream": "\(feed.stream)", "entries": "\(entries.count)", "error": "\(error)"])
                return Outcome()
            }
        }
    }

    /// Gives this delivery's attempt back to each of `entries` (best effort: with Redis gone, the
    /// attempt stays counted, one per outage at most).
    private func refundAttempts(_ stream: String, _ entries: [StreamEntry]) async {
        let errors = errorsKey(stream)
        _ = try? await redis.pipeline(entries.map { AttemptScripts.refund(errors, $0.id) })
    }

    func handle(_ decoded: DecodedEntry, fields: [RawField], entryID: String, stream: String) -> Work {
        // A time far ahead of the clock would make every later event (or registration) of its key
        // older than it, ignored as stale: the activity frozen, the end never shown.
        if let added = entryID.split(separator: "-").first.flatMap({ Int64($0) }),
           decoded.timestampMillis - added > settings.maxFutureMillis {
            let ahead = decoded.timestampMillis - added
            return .deadLetter("ts \(decoded.timestampMillis) is \(ahead / 1000) s ahead of Redis's clock when the entry was added "
                               + "(\(added), its id); at most limits.max_future_ms (\(settings.maxFutureMillis) ms) is accepted: "
                               + "every later event of its key would be ignored as older", copyFields: true)
        }
        switch decoded.body {
        case .registration(let registration):
            guard mode == .full else { return .ack }
            return .effects(registrar.effects(of: registration, timestampMillis: decoded.timestampMillis), after: nil)
        case .sports, .transit:
            let plan: Plan
            switch routes.plan(entry: decoded, fields: fields) {
            case .success(nil): return .ack  // routed to nothing
            case .success(var p?):
                p.freeText = FreeText.values(of: fields)
                p.entryType = decoded.type
                plan = p
            case .failure(let error): return .deadLetter("route: \(error.description)", copyFields: true)
            }
            stats.plans.add(1, ordering: .relaxed)
            guard mode == .full else { return .ack }
            if sender != nil {
                // The send path does the rest: it indexes the key (in its first round trip, which an
                // event's latency is made of) and forgets it after its end.
                // At debug: the `sent` line that follows says what happened, at info (two lines per
                // event cost about 0.4 ms of broadcast latency at the median).
                logger.debug("plan", metadata: [
                    "entry": "\(stream)/\(entryID)", "type": "\(decoded.type)", "key": "\(plan.key)",
                    "event": "\(plan.event?.rawValue ?? "none")", "priority": "\(plan.priority.rawValue)", "audience": "\(plan.audience)",
                ])
                return .send(plan)
            }
            // Count the audience the plan would reach, and forget the key once its activity ends.
            var first: [RedisCommand] = []
            switch plan.audience {
            case .activity(let key): first.append(RedisCommand("HLEN", keys.tokens(key)))
            case .followers(let targets): first += targets.map { RedisCommand("SCARD", keys.followers($0)) }
            case .none: break
            }
            let counted = first.count
            if plan.event == .end {
                first.append(RedisCommand("DEL", keys.tokens(plan.key), keys.meta(plan.key), keys.direct(plan.key)))
                first.append(RedisCommand("ZREM", keys.keysIndex, plan.key.description))
            } else if plan.event != nil || decoded.type.hasSuffix(".scheduled") {
                first.append(RedisCommand("ZADD", keys.keysIndex, "GT", decoded.timestampMillis, plan.key.description))
            }
            let logger = self.logger
            return .effects(EntryEffects(first: first), after: { replies in
                let reach = replies.prefix(counted).reduce(Int64(0)) { $0 + ($1.int ?? 0) }
                logger.info("plan", metadata: [
                    "entry": "\(stream)/\(entryID)", "type": "\(decoded.type)", "key": "\(plan.key)",
                    "event": "\(plan.event?.rawValue ?? "none")", "priority": "\(plan.priority.rawValue)",
                    "audience": "\(plan.audience)", "reach": "\(reach)",
                ])
            })
        }
    }

    /// An entry of a sharded feed belongs on its key's shard (`FeedShards`): one published to
    /// another shard is still processed, but its key's events are no longer read in one order
    /// (the merge still never shows an older state after a newer, by `ts`). Counted per stream
    /// (`activitycast_stream_entries_misplaced_total`) and logged once per stream, so a
    /// publisher's mistake is seen.
    func checkShard(_ shard: Settings.Feed.Shard, of feed: Settings.Feed, fields: [RawField], entryID: String) {
        // Only the one or two fields the shard key is made of become Strings.
        let key = FeedShards.key(kind: feed.kind) { name in
            fields.first { $0.name.elementsEqual(name.utf8) }.map { String(decoding: $0.value, as: UTF8.self) }
        }
        guard let key else { return }
        let belongs = FeedShards.shard(ofKey: key, count: shard.count)
        guard belongs != shard.index, let counters = stats.stream(feed.stream) else { return }
        if counters.misplaced.add(1, ordering: .relaxed).newValue == 1 {
            logger.warning("an entry of a sharded feed was published to another shard than its key's: its key's events may be applied out of order (publishers pick the shard as docs/schema.md says)", metadata: [
                "entry": "\(feed.stream)/\(entryID)", "key": "\(key)", "shard": "\(belongs)", "stream_shard": "\(shard.index)",
                "feed": "\(shard.feed)", "shards": "\(shard.count)",
            ])
        }
    }

    /// Runs the send path for `sends` (entry index, plan): each plan its own task, a key's plans
    /// taking their turns in its line (`KeyLocks` tickets, taken here in order). A plan's turn
    /// covers its merge, broadcast and fan-out's creation; its slice 0 is sent after, so the
    /// key's next plan doesn't wait behind that slice (awaited in a row, an event held behind a
    /// 100,000-token fan-out's slice 0 for seconds found a newer event merged by another worker
    /// meanwhile, and its catch-up pushed the newest state again). Returns each entry's result.
    func send(_ sends: [(Int, Plan)], sender: Sender, stream: String, entries: [StreamEntry], redelivered: Bool,
                      order: UInt64?) async -> [(Int, Result<SendOutcome, Error>)] {
        if redelivered, let pauseRedelivered { try? await Task.sleep(for: pauseRedelivered) }
        // Places in the keys' lines first, in the order the batches were read (see `ReadOrder`).
        if let order { await readOrder.waitTurn(order) }
        let turns = sends.sorted { $0.1.timestampMillis < $1.1.timestampMillis }.map { ($0.0, $0.1, sender.ticket(for: $0.1.key)) }
        if let order { readOrder.done(order) }
        let logger = self.logger
        @Sendable func sendOne(_ index: Int, _ plan: Plan, _ ticket: KeyLocks.Ticket) async -> (Int, Result<SendOutcome, Error>) {
            let entry = "\(stream)/\(entries[index].id)"
            do {
                let outcome = try await sender.send(plan, entry: entry, redelivered: redelivered, ticket: ticket)
                var summary: SendSummary?
                switch outcome {
                case .done(let s), .handedOff(let s): summary = s
                case .rejected: summary = nil
                }
                if let s = summary {
                    logger.info(outcome == .handedOff(s) ? "sent its first slice; the others are the fleet's" : "sent", metadata: [
                        "entry": "\(entry)", "key": "\(plan.key)", "event": "\(plan.event?.rawValue ?? "none")",
                        "priority": "\(plan.priority.rawValue)",
                        "stale": "\(s.stale)", "broadcasts": "\(s.broadcasts)", "tokens": "\(s.tokens)", "starts": "\(s.starts)",
                        "forgotten": "\(s.forgotten)", "failed": "\(s.failed)",
                    ])
                }
                return (index, .success(outcome))
            } catch {
                // Redis refusing work is logged once for the whole episode (the worker's
                // `noteRefusal`), not once per entry.
                if Outage.refusal(of: error) == nil {
                    logger.warning("sending failed; the entry stays pending", metadata: ["entry": "\(entry)", "key": "\(plan.key)", "error": "\(error)"])
                }
                return (index, .failure(error))
            }
        }
        // One plan (the usual batch at a steady rate) runs here: a child task would cost a hop
        // between threads before its Redis round trip.
        if turns.count == 1 { return [await sendOne(turns[0].0, turns[0].1, turns[0].2)] }
        return await withTaskGroup(of: (Int, Result<SendOutcome, Error>).self) { group in
            for (index, plan, ticket) in turns {
                group.addTask { await sendOne(index, plan, ticket) }
            }
            var all: [(Int, Result<SendOutcome, Error>)] = []
            for await result in group { all.append(result) }
            return all
        }
    }

    /// `XADD` of a dead letter: the reason and where the entry came from, and a copy of its
    /// fields capped at the schema's limits (`f:<name>`; `truncated` says what was left out).
    /// The stream is trimmed to about `streams.dead_letter_max_len` entries.
    func deadLetterCommand(feed: Settings.Feed, entry: StreamEntry, reason: String, deliveries: Int64, copyFields: Bool) -> RedisCommand {
        var args: [any RedisArgument] = [settings.deadLetterStream, "MAXLEN", "~", settings.deadLetterMaxLength, "*",
                                          "reason", String(reason.prefix(1000)), "stream", feed.stream, "id", entry.id,
                                          "deliveries", deliveries, "consumer", consumer,
                                          "at", Int64(Date().timeIntervalSince1970 * 1000)]
        let limits = settings.limits
        if let big = entry.oversize {
            args += ["truncated", "no fields copied: the entry was too large to read (\(big.fields) fields, \(big.bytes) bytes)"]
        } else if let fields = entry.fields, copyFields {
            let pairs = fields.count / 2
            var copied = 0, cut = 0
            var i = 0
            while i + 1 < fields.count, copied < limits.maxFields {
                let name = fields[i], value = fields[i + 1]
                if name.count > limits.maxValueBytes || value.count > limits.maxValueBytes { cut += 1 }
                args.append(Array("f:".utf8) + name.prefix(limits.maxValueBytes))
                args.append(Array(value.prefix(limits.maxValueBytes)))
                copied += 1
                i += 2
            }
            if copied < pairs || cut > 0 {
                args += ["truncated", "copied \(copied) of \(pairs) fields; \(cut) cut to \(limits.maxValueBytes) bytes"]
            }
        }
        return RedisCommand("XADD", args)
    }
}

/// Delivery attempts, counted in `<prefix>:errors:<stream>` (`EntryErrorFields`).
enum AttemptScripts {
    /// KEYS[1] = errors hash. ARGV = delivery, ttl s, then each entry's attempts field and
    /// counted-by field. Counts the delivery once per entry, however many times it is sent (a
    /// reply lost with the connection, then the same delivery's count again), and returns each
    /// entry's count.
    static let countScript = RedisScript("""
    local out = {}
    for i = 3, #ARGV, 2 do
      if redis.call('HGET', KEYS[1], ARGV[i + 1]) == ARGV[1] then
        out[#out + 1] = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') or 0
      else
        out[#out + 1] = redis.call('HINCRBY', KEYS[1], ARGV[i], 1)
        redis.call('HSET', KEYS[1], ARGV[i + 1], ARGV[1])
      end
    end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return out
    """)

    /// Counts `delivery` (a name it made up) of each of `ids` once.
    static func count(_ errorsKey: String, delivery: String, ids: [String]) -> RedisCommand {
        .script(countScript, keys: [errorsKey],
                args: [delivery, 7 * 86_400] + ids.flatMap { [EntryErrorFields.attempts($0), EntryErrorFields.countedBy($0)] })
    }

    /// Each entry's count in `count`'s reply, in the order of its ids.
    static func counts(_ reply: RESPValue, ids: [String]) throws -> [String: Int64] {
        if let message = reply.errorMessage {
            if let refusal = RedisRefusal(errorReply: message) { throw RedisError(.server, refusal.message) }
            throw RedisError(.server, "counting deliveries: \(message)")
        }
        guard let items = reply.array, items.count == ids.count else {
            throw RedisError(.unexpectedReply, "counting deliveries: \(String(describing: reply).prefix(200))")
        }
        return Dictionary(zip(ids, items.map { $0.int ?? 1 }), uniquingKeysWith: { a, _ in a })
    }

    /// KEYS[1] = errors hash, ARGV[1] = field. Gives one attempt back, if there is one: progress
    /// (a confirmed fan-out batch) or the entry's end may have cleared the count, a settlement
    /// retried after its pipeline's answer was lost may refund twice, and a refund must not leave
    /// a stray `-1` behind (an entry's extra delivery).
    static let refundScript = RedisScript("""
    local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
    if n <= 0 then return 0 end
    return redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
    """)

    static func refund(_ errorsKey: String, _ id: String) -> RedisCommand {
        .script(refundScript, keys: [errorsKey], args: [EntryErrorFields.attempts(id)])
    }
}
