import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import APNs
import ActivityCastSettings
import Foundation
import Logging
import RedisClient
import Synchronization

/// Consumes the configured streams through one consumer group until asked to stop.
///
/// - Reads batches with `XREADGROUP … BLOCK` on a connection of its own, so a blocked read
///   never delays acknowledgements. Entries too big to accept are read as their size only.
/// - Processes each batch as its own task; stops reading while `max_in_flight` entries are in
///   flight (back-pressure), and acknowledges an entry only once it has a final outcome.
/// - Every `claim_interval`, takes over entries idle longer than `visibility_timeout`
///   (`XAUTOCLAIM`): a dead worker's entries are finished by the others; an entry whose
///   attempts run out goes to the dead-letter stream with its last error.
/// - Redis refusing work (out of memory, a permission, a replica) leaves entries pending and is
///   logged when it starts, while it lasts (every 10 s) and when it ends.
/// - A stream key of the wrong type is named and skipped while the healthy streams go on; a
///   consumer group destroyed under the worker is recreated where reading had reached.
/// - On `requestStop()`: stops reading, finishes and acknowledges what is in flight, and
///   returns within `shutdown_deadline` of the request, even with Redis frozen (anything
///   unfinished stays pending for the others).
public final class Worker: Sendable {
    public let settings: Settings
    public let consumer: String
    public let stats: WorkerStats
    /// The blocking reads of the input streams (one connection, or one per slot on a cluster).
    private let streamReader: StreamReader
    private let redis: RedisConnection
    private let logger: Logger
    private let conditions: ConditionLog
    let stop = StopSignal()
    /// Tells a Redis that lost its data, a destroyed group and another worker's acknowledgement apart.
    private let groupLoss: GroupLoss
    /// Entries read and not yet finished; batch tasks decrement it.
    let inFlight = Atomic<Int>(0)
    /// When the read loop last made progress (a read round ended, a wait ended), in milliseconds
    /// since `born`: what `/healthz` judges the worker by (`OpsService`).
    private let born = ContinuousClock.now
    private let progressMillis = Atomic<Int64>(0)
    private let processor: EntryProcessor
    private let streams = Mutex<[String: StreamState]>([:])
    /// The send path, when the worker sends (`worker.send`).
    let sender: Sender?
    /// Sends the slices this worker takes from the slices streams, on a connection of its own: a
    /// big fan-out's steps then don't queue in front of an event's round trips.
    private let sliceSender: Sender?
    private let sliceRedis: RedisConnection
    /// Takes fan-out slices, when the worker sends: one taker per slices stream (priority 10, 5).
    private let slices: [SliceTaker]
    /// Flushes coalesced states that came due, when the worker sends.
    private let flusher: BudgetFlusher?
    /// Trims the streams it reads to the retention (nil: `streams.trim_interval_ms` 0).
    let trimmer: StreamTrimmer?
    let apns: APNsRouter?
    /// Why the send path could not be set up (a missing key, no sandbox): the worker won't start.
    private let sendSetupError: String?

    /// What the worker knows of one input stream.
    struct StreamState {
        /// The furthest id the group is known to have delivered (from the group at start, and
        /// this worker's reads since): where to recreate the group if it disappears.
        var position: String?
        /// When the position was last recorded in Redis.
        var recordedAt: ContinuousClock.Instant?
        /// Why the stream can't be read (its key has the wrong type), and when to look again.
        var broken: String?
        var nextProbe = ContinuousClock.now
    }

    /// A failure the worker can't wait out: the CLI exits with it.
    public struct StartError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public init(settings: Settings, logger: Logger, mode: Mode = .full, routes: RouteSet = .shipped) {
        self.settings = settings
        self.logger = logger
        self.conditions = ConditionLog(logger: logger)
        // Per-stream counts for the streams this worker reads: its input streams, and the slices
        // streams when it sends.
        self.stats = WorkerStats(streams: settings.inputStreams.map(\.stream) + (mode == .full && settings.send ? settings.keys.sliceStreams : []))
        self.consumer = settings.consumer.isEmpty ? Settings.defaultConsumerName() : settings.consumer
        var readerConfig = settings.redisConfiguration
        readerConfig.clientName = "activitycast-reader-\(consumer)"
        var commandConfig = settings.redisConfiguration
        commandConfig.clientName = "activitycast-\(consumer)"
        self.streamReader = StreamReader(configuration: readerConfig)
        let redis = RedisConnection(configuration: commandConfig)
        self.redis = redis
        self.groupLoss = GroupLoss(connections: [streamReader.main, redis], streams: settings.inputStreams.map(\.stream))
        var sliceConfig = settings.redisConfiguration
        sliceConfig.clientName = "activitycast-slicework-\(consumer)"
        let sliceRedis = RedisConnection(configuration: sliceConfig)
        self.sliceRedis = sliceRedis
        var sender: Sender?
        var sliceSender: Sender?
        var apns: APNsRouter?
        var setupError: String?
        if mode == .full && settings.send {
            do {
                let router = try APNsSetup.router(settings, redis: redis, logger: logger)
                apns = router
                var configuration = SendConfiguration(keys: settings.keys, bundleID: settings.apns.bundleID,
                                                      stateTTLSeconds: settings.activityTTLSeconds,
                                                      startsPerSecond: settings.startsPerSecond, group: settings.group,
                                                      sliceSize: settings.sliceSize, sliceBatch: settings.sliceBatch,
                                                      leaseMillis: Int(settings.sliceLease.milliseconds))
                configuration.budgets = settings.budgets
                configuration.tokenAttempts = settings.tokenAttempts
                configuration.activityLifetimeMillis = Int64(settings.activityActiveSeconds) * 1000
                configuration.relaunchPastLifetime = settings.relaunchPastLifetime
                configuration.outcomesMaxLength = settings.outcomesMaxLength
                configuration.trailMaxRecords = settings.traceMaxRecords
                configuration.trailRetentionSeconds = settings.traceRetentionSeconds
                configuration.rateGuard = RateGuardPolicy(perSecond: settings.apns.ratePerSecond, burst: settings.apns.rateBurst)
                // Test-only: a compressed clock for budget decisions (see `BudgetClock`).
                if let text = ProcessInfo.processInfo.environment["ACTIVITYCAST_TEST_BUDGET_CLOCK"] {
                    guard let clock = BudgetClock(parsing: text) else { throw StartError(description: "ACTIVITYCAST_TEST_BUDGET_CLOCK must be <epoch ms>x<scale>, got '\(text)'") }
                    configuration.budgetClock = clock
                    logger.warning("budget decisions use a compressed clock (a test setting)", metadata: ["clock": "\(text)"])
                }
                let sends = Sender(redis: redis, apns: router, configuration: configuration, logger: logger, recordSweep: RecordSweep())
                sender = sends
                sliceSender = Sender(redis: sliceRedis, apns: router, configuration: configuration, logger: logger, stats: sends.stats,
                                     recordSweep: sends.recordSweep)
            } catch {
                setupError = "\(error)"
            }
        }
        self.sender = sender
        self.sliceSender = sliceSender
        let consumerName = self.consumer, stopSignal = self.stop, workerStats = self.stats
        let held = EntriesInHand(visibilityTimeout: settings.visibilityTimeout)
        self.slices = sliceSender.map { sender in
            RedisKeys.slicePriorities.map {
                SliceTaker(settings: settings, priority: $0, consumer: consumerName, sender: sender, redis: sliceRedis, logger: logger, stop: stopSignal,
                           stats: workerStats, held: held)
            }
        } ?? []
        self.flusher = sender.map { BudgetFlusher(sender: $0, redis: redis, keys: settings.keys, logger: logger, stop: stopSignal) }
        self.trimmer = settings.retention.interval == nil ? nil
            : StreamTrimmer(redis: redis, streams: settings.inputStreams.map(\.stream) + settings.keys.sliceStreams, retention: settings.retention,
                            keysIndex: settings.keys.keysIndex, activityTTLSeconds: settings.activityTTLSeconds, logger: logger)
        self.apns = apns
        self.sendSetupError = setupError
        self.processor = EntryProcessor(settings: settings, redis: redis, consumer: consumer, logger: logger, stats: stats,
                                        mode: mode == .full ? .full : .decodeOnly, sender: sender, routes: routes, groupLoss: groupLoss,
                                        acks: AcknowledgementQueue(redis, delay: settings.ackDelay), held: held)
    }

    public enum Mode: Sendable { case full, decodeOnly }

    deinit {
        streamReader.close()
        redis.close()
        sliceRedis.close()
        apns?.shutdown()
    }

    /// Asks the worker to drain and stop; the shutdown deadline counts from here.
    public func requestStop() { stop.stop() }
    public var isStopping: Bool { stop.isStopped }

    /// Records that the read loop made progress (see `sinceProgress`).
    private func noteProgress() {
        let d = (ContinuousClock.now - born).components
        progressMillis.store(d.seconds * 1000 + d.attoseconds / 1_000_000_000_000_000, ordering: .relaxed)
    }

    /// How long ago the read loop last made progress: completed a read round (entries, none, or
    /// an error), woke from back-pressure or a retry wait, finished a start-up attempt. It wakes at
    /// least every second while entries are in flight, so only a loop that hangs lets this grow
    /// past a read's own timeouts.
    var sinceProgress: Duration {
        (ContinuousClock.now - born) - .milliseconds(progressMillis.load(ordering: .relaxed))
    }

    /// Redis round trips and commands of both connections, for the benchmark.
    public var redisStats: RedisConnection.Stats {
        let a = streamReader.stats, b = redis.stats
        return .init(roundTrips: a.roundTrips + b.roundTrips, commands: a.commands + b.commands, connects: a.connects + b.connects,
                     failures: a.failures + b.failures)
    }

    var positionsKey: String { settings.keys.positions(group: settings.group) }

    /// Runs until `requestStop()`; returns the counters. Throws `StartError` when Redis rejects
    /// the worker's credentials or permissions at start: waiting would not help.
    public func run() async throws -> WorkerStats.Snapshot {
        try await start()
        // Wake-ups, not a queue: the loop reads them only while it waits (at the in-flight bound,
        // or draining), and re-checks the counts itself. Unbounded, every batch's completion stayed
        // buffered while the loop didn't wait: about 4 MB in 4 minutes at 2,000 events/s (the
        // soak's RSS creep, found with jemalloc's heap profile).
        let (completions, completed) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))
        var iterator = completions.makeAsyncIterator()
        // A stop request wakes the loop wherever it waits.
        stop.onStop { [sender, sliceSender] in
            sender?.beginStopping()
            sliceSender?.beginStopping()
            completed.yield(-1)
        }
        // Wakes the loop every second while it waits for batches at the in-flight bound, so that
        // liveness sees a loop that waits, not one that hangs (batches can take up to the
        // visibility timeout while Redis is away).
        // (Only then: the loop reads the stream only while it waits there, and ticks would pile up.)
        let ticker = Task { [stop, maxInFlight = settings.maxInFlight] in
            while !stop.isStopped {
                try? await Task.sleep(for: .seconds(1))
                if Task.isCancelled { break }
                if self.inFlight.load(ordering: .relaxed) >= maxInFlight { completed.yield(0) }
            }
        }
        defer { ticker.cancel() }
        let sliceLoops = slices.map { taker in Task { await taker.run() } }
        let flushLoop = flusher.map { flusher in Task { await flusher.run() } }
        let sweepLoop = sender.map { $0.recordSweep.loop(redis, logger: logger) }
        let clients = apns?.clients ?? []
        let keepClaimed = processor.held.keepClaimedLoop(redis, group: settings.group, consumer: consumer, logger: logger,
                                                         paused: { clients.contains { $0.stats.trouble != nil } })
        defer { keepClaimed.cancel() }

        // Entries this consumer read before a restart (a configured, stable consumer name).
        for feed in settings.inputStreams where !isStopping && !isBroken(feed.stream) {
            _ = await stop.race { await self.drainOwnPending(feed) }
            noteProgress()
        }
        var chores = WorkerChores()
        while !isStopping {
            // Back-pressure: wait for batches to finish while the bound is reached.
            while inFlight.load(ordering: .relaxed) >= settings.maxInFlight, !isStopping, await iterator.next() != nil { noteProgress() }
            if isStopping { break }
            noteProgress()
            await chores.runDue(self)
            let healthy = settings.inputStreams.filter { !isBroken($0.stream) }
            if healthy.isEmpty {
                await stop.sleep(for: min(settings.claimInterval, .seconds(1)))
                noteProgress()
                continue
            }
            guard let result = await read(healthy) else { break }
            noteProgress()
            switch result {
            case .success(let reads):
                groupLoss.noteRead()
                // After a reconnect: which Redis process serves the worker now (`GroupLoss`).
                if groupLoss.needsObservation { await groupLoss.observe(redis) }
                conditions.clear("read", "reading streams again")
                dispatch(reads, completed: completed)
            case .failure(let error):
                await readFailed(error, streams: healthy)
                noteProgress()
            }
        }
        // Reads still in flight (a cluster's other slots): theirs to finish too.
        dispatch(await streamReader.finishInFlight(until: drainDeadline), completed: completed)
        await drain(&iterator, completed: completed)
        for loop in sliceLoops { await loop.value }
        await flushLoop?.value
        for taker in slices { await taker.drain(until: drainDeadline) }
        // The sweep went on through the drain; what the last acknowledgements left goes now, within 2 s.
        sweepLoop?.cancel()
        if let sender { _ = await StopSignal.within(.now + .seconds(2)) { [redis] in await sender.recordSweep.sweep(redis) } }
        if inFlight.load(ordering: .relaxed) > 0 {
            logger.warning("shutdown deadline reached; entries left pending for other workers to claim", metadata: ["in_flight": "\(inFlight.load(ordering: .relaxed))"])
        }
        let snapshot = stats.snapshot
        logger.info("worker stopped", metadata: snapshot.logMetadata(sends: sender?.stats))
        return snapshot
    }

    /// Says what the worker reads and checks what it needs before it takes any entry.
    private func start() async throws {
        logger.info("worker starting", metadata: [
            "consumer": "\(consumer)", "group": "\(settings.group)", "redis": "\(settings.redisURL)",
            "streams": "\(settings.inputStreams.map { "\($0.kind.rawValue)=\($0.stream)" }.joined(separator: ","))",
        ])
        if !settings.redisURL.verifyPeer {
            logger.warning("TLS CERTIFICATE VERIFICATION IS OFF for Redis (verify=false): anyone on the path can read and change this traffic")
        }
        if let sendSetupError {
            throw StartError(description: "cannot send pushes: \(sendSetupError) (worker.send: false only logs the plans)")
        }
        noteProgress()
        try await preflight()
        await ensureGroups()
        await groupLoss.observe(redis)
        noteProgress()
    }

    /// One `XREADGROUP` of the healthy streams, as many entries as the in-flight bound leaves
    /// room for. nil: stopping, and Redis didn't answer before the deadline.
    private func read(_ healthy: [Settings.Feed]) async -> Result<[StreamRead], Error>? {
        let room = settings.maxInFlight - inFlight.load(ordering: .relaxed)
        let count = max(1, min(settings.batchSize, room / healthy.count))
        return await streamReader.read(healthy.map(\.stream), group: settings.group, consumer: consumer, count: count, block: settings.block,
                                  limits: processor.readLimits, stop: stop, deadline: { [self] in drainDeadline })
    }

    /// Each stream's batch goes to the processor on its own task.
    private func dispatch(_ reads: [StreamRead], completed: AsyncStream<Int>.Continuation) {
        for read in reads where !read.entries.isEmpty {
            // Any input stream: a read on a cluster may come back after its stream was set aside.
            guard let feed = settings.inputStreams.first(where: { $0.stream == read.stream }) else { continue }
            let n = read.entries.count
            inFlight.add(n, ordering: .relaxed)
            stats.stream(feed.stream)?.read.add(n, ordering: .relaxed)
            if let last = read.entries.last?.id { advancePosition(feed.stream, to: last) }
            let processor = self.processor
            let retryUntil = ContinuousClock.now + settings.visibilityTimeout
            let order = processor.readOrder.number()
            Task {
                let started = ContinuousClock.now
                let outcome = await processor.process(feed: feed, entries: read.entries, retryUntil: retryUntil, order: order)
                self.noteRefusal(outcome, stream: feed.stream, batchStarted: started)
                self.inFlight.subtract(n, ordering: .relaxed)
                completed.yield(n)
            }
        }
    }

    /// When a stopping worker gives up on what is in flight: a little before the shutdown deadline
    /// (counted from the stop request), so that the process has exited by then.
    private var drainDeadline: ContinuousClock.Instant {
        (stop.stoppedAt ?? .now) + settings.shutdownDeadline - min(.milliseconds(100), settings.shutdownDeadline / 10)
    }

    /// Drain: finish what is in flight, within the deadline.
    private func drain(_ iterator: inout AsyncStream<Int>.Iterator, completed: AsyncStream<Int>.Continuation) async {
        logger.info("stopping: finishing entries in flight", metadata: ["in_flight": "\(inFlight.load(ordering: .relaxed))"])
        guard inFlight.load(ordering: .relaxed) > 0 else { return }
        let deadline = drainDeadline
        let timer = Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            completed.yield(-1)
        }
        while inFlight.load(ordering: .relaxed) > 0, ContinuousClock.now < deadline, await iterator.next() != nil {}
        timer.cancel()
    }

    // MARK: Start

    /// Connects and checks what a worker needs before it takes any entry: credentials, and the
    /// right to run scripts. Unreachable Redis is waited for; rejected credentials or missing
    /// permissions end the worker with the reason (they need an operator).
    private func preflight() async throws {
        let probe = RedisScript("return 1")
        var attempt = 0
        while !isStopping {
            do {
                let replies = try await redis.pipeline([RedisCommand("PING"), .script(probe, keys: [], args: [])])
                for (name, reply) in zip(["PING", "EVALSHA"], replies) {
                    guard let message = reply.errorMessage else { continue }
                    switch RedisRefusal(errorReply: message)?.kind {
                    case .permission?, .authentication?:
                        throw StartError(description: "Redis \(settings.redisURL) denies \(name) to this worker: \(message). The worker's ACL user needs the permissions listed in docs/operations.md (\"Redis permissions\").")
                    case .some:
                        // Out of memory, loading, a replica: a state that passes; entries wait for it.
                        logger.warning("Redis refuses work at start; the worker starts and retries", metadata: ["command": "\(name)", "error": "\(message)"])
                    case nil:
                        throw RedisError(.server, "\(name): \(message)")
                    }
                }
                conditions.clear("connect", "Redis reachable")
                if let refused = redis.clientNameRefusal {
                    logger.warning("Redis refused CLIENT SETNAME; connections work without a name (grant client|setname to see them in CLIENT LIST)", metadata: ["error": "\(refused)"])
                }
                return
            } catch let error as RedisError where error.kind == .authentication {
                throw StartError(description: "Redis \(settings.redisURL) rejected the worker's credentials: \(error.message)")
            } catch let error as StartError {
                throw error
            } catch {
                attempt += 1
                conditions.report("connect", "Redis not reachable yet; waiting for it", ["error": "\(error)"])
                await stop.sleep(for: .milliseconds(min(100 * attempt, 2000)))
                noteProgress()
            }
        }
    }

    /// Creates each stream's group (and stream) if missing and learns how far each group has
    /// delivered. A stream key of the wrong type is named and skipped; the others go on.
    private func ensureGroups() async {
        for feed in settings.inputStreams {
            var attempt = 0
            while !isStopping {
                do {
                    try await ensureGroup(feed.stream, restoring: false)
                    break
                } catch let error as RedisError where error.message.contains("WRONGTYPE") {
                    await markBroken(feed.stream)
                    break
                } catch {
                    attempt += 1
                    conditions.report("groups", "cannot create consumer groups yet; retrying", ["stream": "\(feed.stream)", "error": "\(error)"])
                    await stop.sleep(for: .milliseconds(min(100 * attempt, 2000)))
                    noteProgress()
                }
            }
        }
        conditions.clear("groups", "consumer groups ready")
    }

    /// Makes sure `stream` has the group. A group that is missing is created where the fleet's
    /// reading had reached (the recorded position, or this worker's own), else from the start.
    /// `restoring`: the group existed before (it was destroyed under the worker).
    private func ensureGroup(_ stream: String, restoring: Bool) async throws {
        let group = settings.group
        // Read-only first: an existing group needs no write (which Redis may refuse, e.g. at
        // maxmemory). After a NOGROUP, go straight to the script: another worker may have
        // recreated the group behind where this one had read, and it moves it forward.
        if !restoring, try await learnGroupPosition(stream) { return }
        let recorded = try? await redis.send(RedisCommand("HGET", positionsKey, stream)).string
        let known = streams.withLock { $0[stream]?.position }
        let position = StreamID.furthest(recorded, known)
        let reply = try await redis.pipeline([.script(GroupScripts.createOrAdvance, keys: [stream], args: [group, position ?? "0"])])[0]
        if let e = reply.errorMessage { throw RedisError(.server, "XGROUP CREATE \(stream) \(group): \(e)") }
        if reply.int == 1, restoring, await groupLoss.groupRecreated(stream, group: group, from: position, redis: redis, logger: logger) {
            // Redis restarted without its data: said once, with what it means (`GroupLoss`).
        } else if reply.int == 1, let position {
            logger.error(restoring
                ? "CONSUMER GROUP WAS DESTROYED under the running worker; recreated it where reading had reached instead of replaying the stream. Entries that were pending in the old group (delivered, not acknowledged) are no longer tracked by it: those in flight on a worker are still finished; those of workers that died are not redelivered"
                : "consumer group was missing; created it where the recorded position says reading had reached, instead of replaying the stream",
                metadata: ["stream": "\(stream)", "group": "\(group)", "from_id": "\(position)"])
        }
        _ = try await learnGroupPosition(stream)
    }

    /// Reads the group's last-delivered id (how far reading has reached, as far as it knows) into
    /// the stream's known position. False if the group does not exist.
    private func learnGroupPosition(_ stream: String) async throws -> Bool {
        let reply = try await redis.pipeline([RedisCommand("XINFO", "GROUPS", stream)])[0]
        if let e = reply.errorMessage {
            if e.contains("no such key") { return false }
            throw RedisError(.server, "XINFO GROUPS \(stream): \(e)")
        }
        guard let group = GroupScripts.group(settings.group, inXInfoGroups: reply) else { return false }
        if let last = group.lastDelivered { advanceKnown(stream, to: last) }
        return true
    }

    // MARK: Streams

    private func isBroken(_ stream: String) -> Bool { streams.withLock { $0[stream]?.broken != nil } }

    private func advanceKnown(_ stream: String, to id: String) {
        streams.withLock { map in
            var state = map[stream] ?? StreamState()
            state.position = StreamID.furthest(state.position, id)
            map[stream] = state
        }
    }

    /// Remembers that reading `stream` reached `id`: here at once, in Redis at most every 200 ms
    /// per stream (a read costs no extra round trip; a group recreated from the recorded
    /// position alone may be up to that much behind — the worker's own position covers its reads).
    private func advancePosition(_ stream: String, to id: String) {
        let now = ContinuousClock.now
        let record: String? = streams.withLock { map in
            var state = map[stream] ?? StreamState()
            state.position = StreamID.furthest(state.position, id)
            defer { map[stream] = state }
            if let at = state.recordedAt, now - at < .milliseconds(200) { return nil }
            state.recordedAt = now
            return state.position
        }
        guard let record else { return }
        let redis = self.redis, key = positionsKey
        Task { _ = try? await redis.pipeline([.script(GroupScripts.advancePosition, keys: [key], args: [stream, record])]) }
    }

    /// Finds which streams have the wrong type (one such key fails a read of every stream), names
    /// them, and leaves them out until they are fixed.
    private func markBroken(_ stream: String) async {
        let type = (try? await redis.send(RedisCommand("TYPE", stream)).string) ?? "?"
        guard type != "stream" && type != "none" else { return }
        let reason = "the key \(stream) is a \(type), not a stream"
        streams.withLock { map in
            var state = map[stream] ?? StreamState()
            state.broken = reason
            state.nextProbe = .now + .seconds(5)
            map[stream] = state
        }
        conditions.report("broken:\(stream)", "STREAM CANNOT BE READ: \(reason); the other streams go on, and this one is read again once its key is a stream (delete or rename the key)",
                          ["stream": "\(stream)"])
    }

    /// Looks again at streams marked broken; one that was fixed is read again.
    func probeBrokenStreams() async {
        let due = streams.withLock { map in map.filter { $0.value.broken != nil && $0.value.nextProbe <= .now }.map(\.key) }
        for stream in due {
            let type = (try? await redis.send(RedisCommand("TYPE", stream)).string) ?? "?"
            if type == "stream" || type == "none" {
                do {
                    try await ensureGroup(stream, restoring: false)
                    streams.withLock { $0[stream]?.broken = nil }
                    conditions.clear("broken:\(stream)", "stream readable again", ["stream": "\(stream)"])
                } catch {
                    streams.withLock { $0[stream]?.nextProbe = .now + .seconds(5) }
                }
            } else {
                await markBroken(stream)
            }
        }
    }

    /// A failed read: find out which stream or condition caused it, and say so at a steady rate.
    private func readFailed(_ error: Error, streams healthy: [Settings.Feed]) async {
        let message = (error as? RedisError)?.message ?? "\(error)"
        if message.contains("NOGROUP") {
            await restoreGroups(healthy)
        } else if message.contains("WRONGTYPE") {
            for feed in healthy { await markBroken(feed.stream) }
        } else if let refusal = (error as? RedisError)?.refusal {
            conditions.report("read", "Redis refuses to serve this worker's reads; retrying", ["reason": "\(refusal.kind.rawValue)", "error": "\(refusal.message)"])
        } else {
            conditions.report("read", "reading streams failed; retrying", ["error": "\(message)"])
        }
        // The connection paces reconnects with back-off; this only avoids a hot loop on errors.
        await stop.sleep(for: .milliseconds(200))
    }

    /// Recreates groups that disappeared, where reading had reached.
    private func restoreGroups(_ feeds: [Settings.Feed]) async {
        for feed in feeds {
            do {
                try await ensureGroup(feed.stream, restoring: true)
            } catch let error as RedisError where error.message.contains("WRONGTYPE") {
                await markBroken(feed.stream)
            } catch {
                conditions.report("groups", "cannot recreate the consumer group yet; retrying", ["stream": "\(feed.stream)", "error": "\(error)"])
            }
        }
    }

    /// Logs Redis refusing a batch's work (once, then at a steady rate), or its end; `/readyz`
    /// reports it while it lasts. Which outcome starts or ends it: `RefusalSpan`.
    private func noteRefusal(_ outcome: EntryProcessor.Outcome, stream: String, batchStarted: ContinuousClock.Instant) {
        guard outcome.attempted else { return }
        if let refusal = outcome.refusal {
            guard refusals.withLock({ $0.refused(refusal, began: batchStarted, now: .now) }) != .none else { return }
            var message = "Redis refuses the worker's writes; entries stay pending and are retried (not dead-lettered: it is not their fault)"
            if refusal.kind == .outOfMemory {
                message += ". Redis is at maxmemory with a policy that refuses writes: raise maxmemory or free memory "
                    + "(activitycast inspect: streams held back by a lagging group or a pending entry, the dead-letter stream; "
                    + "redis-cli --bigkeys; docs/operations.md, 'Redis memory')"
            }
            conditions.report("refusal", message, ["reason": "\(refusal.kind.rawValue)", "error": "\(refusal.message)", "stream": "\(stream)"])
        } else if refusals.withLock({ $0.wentThrough(began: batchStarted, now: .now) }) == .ended {
            conditions.clear("refusal", "Redis accepts the worker's writes again")
        }
    }

    /// Whether Redis refuses this worker's writes: its last refusal and when, while it lasts.
    private let refusals = Mutex(RefusalSpan<ContinuousClock.Instant, RedisRefusal>())
    var refusal: (reason: RedisRefusal, at: ContinuousClock.Instant)? { refusals.withLock { $0.last } }

    // MARK: Pending entries

    /// Processes entries already delivered to this consumer name (id `0`): after a restart
    /// with a configured consumer name, they are finished at once instead of after the timeout.
    private func drainOwnPending(_ feed: Settings.Feed) async {
        var start = "0"
        while !isStopping {
            guard let reply = try? await redis.pipeline([.xreadgroup(group: settings.group, consumer: consumer, count: settings.batchSize,
                                                                     block: nil, streams: [(feed.stream, start)])],
                                                         limits: processor.readLimits)[0],
                  let reads = try? StreamReplies.read(reply),
                  let entries = reads.first?.entries, !entries.isEmpty else { return }
            stats.stream(feed.stream)?.read.add(entries.count, ordering: .relaxed)
            let started = ContinuousClock.now
            let outcome = await processor.process(feed: feed, entries: entries, redelivered: true,
                                                  retryUntil: ContinuousClock.now + settings.visibilityTimeout)
            noteRefusal(outcome, stream: feed.stream, batchStarted: started)
            noteProgress()
            start = entries.last!.id
        }
    }

    /// Says in Redis which of this worker's APNs clients can't use APNs now, since when and why
    /// (`RedisKeys.apnsUnusable`, read by `inspect` and `top`); deletes what no longer holds.
    /// `had`: the fields written last time; returns those written now. Nothing is written while
    /// APNs works.
    func reportAPNsTrouble(had: Set<String>) async -> Set<String> {
        let key = settings.keys.apnsUnusable
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var fields: [any RedisArgument] = [key], current: Set<String> = []
        for client in apns?.clients ?? [] {
            guard let t = client.stats.trouble else { continue }
            let field = "\(consumer) \(client.configuration.endpoint)"
            current.insert(field)
            fields += [field, "\(now) \(t.sinceMillis) \(t.why)|\(t.error.prefix(300))"]
        }
        var commands: [RedisCommand] = []
        if !current.isEmpty { commands += [RedisCommand("HSET", fields), RedisCommand("EXPIRE", key, 3600)] }
        let gone = had.subtracting(current)
        if !gone.isEmpty { commands.append(RedisCommand("HDEL", [key] + gone.sorted())) }
        guard !commands.isEmpty else { return current }
        // Best effort: Redis away now is reported by the read loop; this tries again in 5 s.
        guard (try? await redis.pipeline(commands)) != nil else { return had.union(current) }
        return current
    }

    /// This consumer's own pending entries (those Redis refused), tried again now.
    func retryOwnPending() async {
        for feed in settings.inputStreams where !isStopping && !isBroken(feed.stream) {
            _ = await stop.race { await self.drainOwnPending(feed) }
        }
    }

    /// Takes over entries idle longer than the visibility timeout, from any consumer.
    func claimIdle() async {
        for feed in settings.inputStreams where !isStopping && !isBroken(feed.stream) {
            var cursor = "0-0"
            var rounds = 0
            repeat {
                let claim: AutoClaim
                do {
                    let reply = try await redis.pipeline([.xautoclaim(stream: feed.stream, group: settings.group, consumer: consumer,
                                                                      minIdle: settings.visibilityTimeout, start: cursor, count: settings.batchSize)],
                                                         limits: processor.readLimits)[0]
                    claim = try StreamReplies.autoclaim(reply)
                    conditions.clear("claim:\(feed.stream)", "claiming idle entries works again", ["stream": "\(feed.stream)"])
                } catch {
                    let message = (error as? RedisError)?.message ?? "\(error)"
                    if message.contains("NOGROUP") { await restoreGroups([feed]) }
                    else if message.contains("WRONGTYPE") { await markBroken(feed.stream) }
                    else { conditions.report("claim:\(feed.stream)", level: .warning, "claiming idle entries failed", ["stream": "\(feed.stream)", "error": "\(message)"]) }
                    break
                }
                if !claim.deleted.isEmpty {
                    logger.warning("pending entries were deleted from the stream before being processed", metadata: [
                        "stream": "\(feed.stream)", "ids": "\(claim.deleted.prefix(10).joined(separator: ","))", "count": "\(claim.deleted.count)"])
                }
                if !claim.entries.isEmpty {
                    stats.stream(feed.stream)?.claimed.add(claim.entries.count, ordering: .relaxed)
                    stats.stream(feed.stream)?.read.add(claim.entries.count, ordering: .relaxed)
                    logger.info("claimed idle entries", metadata: ["stream": "\(feed.stream)", "count": "\(claim.entries.count)"])
                    let started = ContinuousClock.now
                    let outcome = await processor.process(feed: feed, entries: claim.entries, redelivered: true,
                                                          retryUntil: ContinuousClock.now + settings.visibilityTimeout)
                    noteRefusal(outcome, stream: feed.stream, batchStarted: started)
                }
                cursor = claim.nextCursor
                rounds += 1
            } while cursor != "0-0" && rounds < 20 && !isStopping
        }
    }
}
