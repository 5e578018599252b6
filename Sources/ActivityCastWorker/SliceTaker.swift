import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import Foundation
import Logging
import RedisClient
import Synchronization

/// Takes fan-out slices from one slices stream (`<prefix>:slices` for priority 10,
/// `<prefix>:slices:5` for 5; a worker has a taker for each) through the worker's consumer group,
/// at most that stream's slices in hand at a time (`fanout.slices_in_hand`,
/// `fanout.priority5_slices_in_hand`): a worker reads a slice only when it has room for it, so a
/// hot key's slices spread over the fleet instead of piling up behind one worker, and priority-5
/// slices in hand never keep a priority-10 one waiting in its stream. Slices idle
/// longer than the visibility timeout (their worker died) are claimed like feed entries; a slice
/// whose attempts run out is dead-lettered and counted as final, so its event is still
/// acknowledged.
final class SliceTaker: Sendable {
    let settings: Settings
    let consumer: String
    let sender: Sender
    let redis: RedisConnection
    let reader: RedisConnection
    let logger: Logger
    let stop: StopSignal
    let stats: WorkerStats
    /// What this worker is working on: kept claimed, never started twice (`EntriesInHand`).
    let held: EntriesInHand
    /// The slices stream it reads, and how many of its slices it may hold.
    let stream: String
    let inHand: Int
    /// Slices in hand.
    let active = Atomic<Int>(0)
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>

    var errorsKey: String { settings.keys.errors(stream) }

    init(settings: Settings, priority: Int, consumer: String, sender: Sender, redis: RedisConnection, logger: Logger, stop: StopSignal,
         stats: WorkerStats, held: EntriesInHand) {
        self.settings = settings
        self.held = held
        self.stream = settings.keys.slices(priority: priority)
        self.inHand = settings.slicesInHand(priority: priority)
        self.consumer = consumer
        self.sender = sender
        self.redis = redis
        var config = settings.redisConfiguration
        config.clientName = "activitycast-\(priority >= 10 ? "slices" : "slices5")-\(consumer)"
        self.reader = RedisConnection(configuration: config)
        self.logger = logger
        self.stop = stop
        self.stats = stats
        (wakes, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    deinit { reader.close() }

    /// Runs until the stop signal; then waits (within the caller's deadline) for slices in hand,
    /// which stop between batches and hand the rest back to the stream.
    func run() async {
        var wakeups = wakes.makeAsyncIterator()
        let token = stop.onStop { [wake] in wake.yield() }
        defer { stop.forget(token) }
        await ensureGroup()
        var nextClaim = ContinuousClock.now
        var failures = 0
        while !stop.isStopped {
            let room = inHand - active.load(ordering: .relaxed)
            if room <= 0 {
                _ = await wakeups.next()
                continue
            }
            if ContinuousClock.now >= nextClaim {
                await claimIdle(room: room)
                nextClaim = ContinuousClock.now + settings.claimInterval
                continue
            }
            let reader = self.reader, group = settings.group, consumer = self.consumer, stream = self.stream
            let block = min(settings.block, settings.claimInterval)
            let read = Task { () -> Result<[StreamRead], Error> in
                do {
                    let reply = try await reader.pipeline([.xreadgroup(group: group, consumer: consumer, count: room, block: block,
                                                                       streams: [(stream, ">")])], blocking: block)[0]
                    return .success(try StreamReplies.read(reply))
                } catch {
                    return .failure(error)
                }
            }
            guard let result = await stop.race({ await read.value }) else { break }
            switch result {
            case .success(let reads):
                failures = 0
                for entry in reads.flatMap(\.entries) { take(entry, redelivered: false) }
            case .failure(let error):
                failures += 1
                if (error as? RedisError)?.message.contains("NOGROUP") == true { await ensureGroup() }
                if failures == 1 || failures % 50 == 0 {
                    logger.warning("reading slices failed; retrying", metadata: ["stream": "\(stream)", "error": "\(error)"])
                }
                await stop.sleep(for: .milliseconds(min(100 * failures, 2000)))
            }
        }
    }

    /// Waits until no slice is in hand or `deadline` passes.
    func drain(until deadline: ContinuousClock.Instant) async {
        while active.load(ordering: .relaxed) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    private func ensureGroup() async {
        var attempt = 0
        while !stop.isStopped {
            do {
                // `ensureGroup` reads the reply itself: `send` would throw on BUSYGROUP (the group
                // exists: every worker but the first to start), and the worker would never take a slice.
                try await redis.ensureGroup(stream: stream, group: settings.group)
                return
            } catch {
                attempt += 1
                if attempt == 1 { logger.warning("cannot create the slices group yet; retrying", metadata: ["error": "\(error)"]) }
                await stop.sleep(for: .milliseconds(min(100 * attempt, 2000)))
            }
        }
    }

    /// Where the next claim looks: XAUTOCLAIM examines about ten entries per one it may claim, so
    /// each round goes on from where the last stopped (back to the start after the end), and idle
    /// slices far down a long pending list are reached too.
    private let claimCursor = Mutex("0-0")

    private func claimIdle(room: Int) async {
        let start = claimCursor.withLock { $0 }
        guard let reply = try? await redis.send(.xautoclaim(stream: stream, group: settings.group, consumer: consumer,
                                                            minIdle: settings.visibilityTimeout, start: start, count: room)),
              let claim = try? StreamReplies.autoclaim(reply) else { return }
        claimCursor.withLock { $0 = claim.nextCursor }
        if !claim.entries.isEmpty {
            stats.stream(stream)?.claimed.add(claim.entries.count, ordering: .relaxed)
            logger.info("claimed idle slices", metadata: ["count": "\(claim.entries.count)"])
        }
        for entry in claim.entries { take(entry, redelivered: true) }
    }

    private func take(_ entry: StreamEntry, redelivered: Bool) {
        // Still in hand here (this worker's own claim handed it back): that delivery goes on.
        guard !held.take(stream, [entry.id]).isEmpty else { return }
        active.add(1, ordering: .relaxed)
        stats.stream(stream)?.read.add(1, ordering: .relaxed)
        Task {
            await self.process(entry, redelivered: redelivered)
            self.held.release(self.stream, [entry.id])
            self.active.subtract(1, ordering: .relaxed)
            self.wake.yield()
        }
    }

    private func process(_ entry: StreamEntry, redelivered: Bool) async {
        guard let fields = entry.fields else {
            await finish(entry)
            return
        }
        guard let slice = SliceRef(fields: fields) else {
            await deadLetter(entry, reason: "not a slice (fields key, gen, slice, of)", slice: nil)
            return
        }
        var attempts: Int64 = 0
        if redelivered {
            guard let n = await countDelivery(entry) else { return }
            attempts = n
            if n + 1 > Int64(settings.maxDeliveries) {
                let last = (try? await redis.send(RedisCommand("HGET", errorsKey, EntryErrorFields.lastError(entry.id))).string) ?? "no error was recorded"
                await deadLetter(entry, reason: "slice delivered \(n + 1) times without a final outcome (max \(settings.maxDeliveries)); last error: \(last)", slice: slice)
                return
            }
        }
        let stop = self.stop
        do {
            let result = try await sender.runSlice(slice, attempts: redelivered ? (errorsKey, EntryErrorFields.attempts(entry.id)) : nil,
                                                   shouldStop: { stop.isStopped })
            switch result {
            case .final, .gone:
                await finish(entry)
                stats.stream(stream)?.acked.add(1, ordering: .relaxed)
                if case .final(_, let acknowledged) = result { count(acknowledged) }
            case .paused:
                // The rest of the slice goes back to the stream for another worker, now.
                _ = try await redis.pipeline([RedisCommand("XADD", [stream, "*"] + slice.fields)] + acknowledgement(entry).commands)
            case .busy:
                // Another worker has a batch of it in flight: not this delivery's failure.
                if attempts > 0 { _ = try? await redis.send(AttemptScripts.refund(errorsKey, entry.id)) }
            }
        } catch where Outage.isOutage(error) {
            // Redis unreachable or refusing (a failover, a restart, a full Redis): not the slice's
            // failure. Its attempt is given back, so an outage longer than its deliveries does not
            // dead-letter it; nothing is recorded as its error. (An APNs outage doesn't end here:
            // a slice's tokens wait for another round, see `TokenBatches.sendBatch`.)
            if Outage.refusal(of: error) == nil {
                stats.stream(stream)?.failed.add(1, ordering: .relaxed)
            } else {
                stats.stream(stream)?.refused.add(1, ordering: .relaxed)
            }
            logger.warning("slice left pending: Redis unavailable", metadata: ["slice": "\(slice)", "error": "\(error)"])
            if attempts > 0 { _ = try? await redis.send(AttemptScripts.refund(errorsKey, entry.id)) }
        } catch {
            stats.stream(stream)?.failed.add(1, ordering: .relaxed)
            logger.warning("slice left pending after a failure", metadata: ["slice": "\(slice)", "error": "\(error)"])
            _ = try? await redis.pipeline(Acknowledgement.failures(settings.keys, stream: stream, [(entry.id, "\(error)")]))
        }
    }

    /// Counts this delivery of a slice entry once, though its reply be lost and the count sent
    /// again (three tries); nil when Redis didn't answer: the entry stays pending for later.
    private func countDelivery(_ entry: StreamEntry) async -> Int64? {
        let delivery = UUID().uuidString
        for attempt in 1...3 {
            if let reply = try? await redis.send(AttemptScripts.count(errorsKey, delivery: delivery, ids: [entry.id])),
               let n = (try? AttemptScripts.counts(reply, ids: [entry.id]))?[entry.id] {
                return n
            }
            try? await Task.sleep(for: .milliseconds(100 * attempt))
        }
        return nil
    }

    /// A slice entry is read once: acknowledged, it is deleted too.
    private func acknowledgement(_ entry: StreamEntry) -> Acknowledgement {
        Acknowledgement(stream: stream, group: settings.group, ids: [entry.id], keys: settings.keys, delete: true)
    }

    private func finish(_ entry: StreamEntry) async {
        _ = try? await acknowledgement(entry).run(redis)
    }

    /// The event's own entry, acknowledged here by its fan-out's last slice: counted on its
    /// stream, as its reader would have (it handed the entry off uncounted).
    private func count(_ acknowledged: AcknowledgedEntry?) {
        guard let acknowledged, let counters = stats.stream(acknowledged.stream) else { return }
        if acknowledged.count > 0 { counters.acked.add(1, ordering: .relaxed) } else { counters.ackMissed.add(1, ordering: .relaxed) }
    }

    private func deadLetter(_ entry: StreamEntry, reason: String, slice: SliceRef?) async {
        do {
            var acknowledged: AcknowledgedEntry?
            if let slice { acknowledged = try await sender.abandonSlice(slice, reason: reason) }
            var args: [any RedisArgument] = [settings.deadLetterStream, "MAXLEN", "~", settings.deadLetterMaxLength, "*",
                                              "reason", String(reason.prefix(1000)), "stream", stream, "id", entry.id, "consumer", consumer,
                                              "at", Int64(Date().timeIntervalSince1970 * 1000)]
            for (i, f) in (entry.fields ?? []).prefix(16).enumerated() { args.append(i % 2 == 0 ? Array("f:".utf8) + f : f) }
            _ = try await redis.send(RedisCommand("XADD", args))
            await finish(entry)
            stats.stream(stream)?.deadLettered.add(1, ordering: .relaxed)
            count(acknowledged)
            logger.warning("dead letter", metadata: ["entry": "\(stream)/\(entry.id)", "reason": "\(reason.prefix(300))"])
        } catch {
            logger.warning("dead-lettering a slice failed; it stays pending", metadata: ["entry": "\(stream)/\(entry.id)", "error": "\(error)"])
        }
    }
}
