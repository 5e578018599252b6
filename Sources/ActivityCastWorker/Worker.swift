import ActivityCastCore
import Foundation
import Logging
import RedisClient
import Synchronization

/// Consumes the configured streams through one consumer group until asked to stop.
///
/// - Reads batches with `XREADGROUP … BLOCK` on a connection of its own, so a blocked read
///   never delays acknowledgements.
/// - Processes each batch as its own task; stops reading while `max_in_flight` entries are in
///   flight (back-pressure), and acknowledges an entry only once it has a final outcome.
/// - Every `claim_interval`, takes over entries idle longer than `visibility_timeout`
///   (`XAUTOCLAIM`): a dead worker's entries are finished by the others; too many deliveries
///   send an entry to the dead-letter stream.
/// - On `requestStop()`: stops reading, finishes and acknowledges what is in flight, and
///   returns within `shutdown_deadline` (anything unfinished stays pending for the others).
public final class Worker: Sendable {
    public let settings: Settings
    public let consumer: String
    public let stats = WorkerStats()
    private let reader: RedisConnection
    private let redis: RedisConnection
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    /// Entries read and not yet finished; batch tasks decrement it.
    private let inFlight = Atomic<Int>(0)
    private let processor: EntryProcessor

    public init(settings: Settings, logger: Logger, mode: Mode = .full) {
        self.settings = settings
        self.logger = logger
        self.consumer = settings.consumer.isEmpty ? Worker.defaultConsumerName() : settings.consumer
        var readerConfig = settings.redisConfiguration
        readerConfig.clientName = "activitycast-reader-\(consumer)"
        var commandConfig = settings.redisConfiguration
        commandConfig.clientName = "activitycast-\(consumer)"
        self.reader = RedisConnection(configuration: readerConfig)
        self.redis = RedisConnection(configuration: commandConfig)
        self.processor = EntryProcessor(settings: settings, redis: redis, consumer: consumer, logger: logger, stats: stats,
                                        mode: mode == .full ? .full : .decodeOnly)
    }

    public enum Mode: Sendable { case full, decodeOnly }

    deinit {
        reader.close()
        redis.close()
    }

    /// `<hostname>-<pid>`: unique per process, readable in `inspect`.
    public static func defaultConsumerName() -> String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "worker"
        return "\(host)-\(getpid())"
    }

    public func requestStop() { stopping.store(true, ordering: .relaxed) }
    public var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// Redis round trips and commands of both connections, for the benchmark.
    public var redisStats: RedisConnection.Stats {
        let a = reader.stats, b = redis.stats
        return .init(roundTrips: a.roundTrips + b.roundTrips, commands: a.commands + b.commands, connects: a.connects + b.connects)
    }

    /// Runs until `requestStop()`; returns the counters.
    public func run() async -> WorkerStats.Snapshot {
        logger.info("worker starting", metadata: [
            "consumer": "\(consumer)", "group": "\(settings.group)", "redis": "\(settings.redisURL)",
            "streams": "\(settings.inputStreams.map { "\($0.kind.rawValue)=\($0.stream)" }.joined(separator: ","))",
        ])
        if !settings.redisURL.verifyPeer {
            logger.warning("TLS CERTIFICATE VERIFICATION IS OFF for Redis (verify=false): anyone on the path can read and change this traffic")
        }
        await ensureGroups()

        let (completions, completed) = AsyncStream<Int>.makeStream()
        var iterator = completions.makeAsyncIterator()
        var nextClaim = ContinuousClock.now
        var failures = 0
        let streams = settings.inputStreams
        let byName = Dictionary(uniqueKeysWithValues: streams.map { ($0.stream, $0) })

        // Entries this consumer read before a restart (a configured, stable consumer name).
        for feed in streams where !isStopping {
            await drainOwnPending(feed)
        }

        while !isStopping {
            // Back-pressure: wait for batches to finish while the bound is reached.
            while inFlight.load(ordering: .relaxed) >= settings.maxInFlight, await iterator.next() != nil {}

            if ContinuousClock.now >= nextClaim {
                await claimIdle()
                nextClaim = ContinuousClock.now + settings.claimInterval
            }
            let room = settings.maxInFlight - inFlight.load(ordering: .relaxed)
            let count = max(1, min(settings.batchSize, room / streams.count))
            let reads: [StreamRead]
            do {
                reads = try await reader.readGroup(group: settings.group, consumer: consumer, count: count, block: settings.block,
                                                   streams: streams.map { ($0.stream, ">") })
                if failures > 0 { logger.info("Redis reachable again", metadata: ["after_failures": "\(failures)"]) }
                failures = 0
            } catch {
                failures += 1
                if failures == 1 || failures % 50 == 0 {
                    logger.error("reading streams failed; retrying", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                if let e = error as? RedisError, e.kind == .server, e.message.contains("NOGROUP") { await ensureGroups() }
                // The connection itself paces reconnects with back-off; this only avoids a hot
                // loop on server errors.
                try? await Task.sleep(for: .milliseconds(min(100 * failures, 1000)))
                continue
            }
            for read in reads where !read.entries.isEmpty {
                guard let feed = byName[read.stream] else { continue }
                let n = read.entries.count
                inFlight.add(n, ordering: .relaxed)
                stats.read.add(n, ordering: .relaxed)
                let processor = self.processor
                let retryUntil = ContinuousClock.now + settings.visibilityTimeout
                Task {
                    await processor.process(feed: feed, entries: read.entries, retryUntil: retryUntil)
                    self.inFlight.subtract(n, ordering: .relaxed)
                    completed.yield(n)
                }
            }
        }

        // Drain: finish what is in flight, within the deadline.
        logger.info("stopping: finishing entries in flight", metadata: ["in_flight": "\(inFlight.load(ordering: .relaxed))"])
        if inFlight.load(ordering: .relaxed) > 0 {
            let deadline = settings.shutdownDeadline
            let timer = Task {
                try? await Task.sleep(for: deadline)
                completed.yield(-1)
            }
            while inFlight.load(ordering: .relaxed) > 0, let done = await iterator.next(), done >= 0 {}
            timer.cancel()
        }
        if inFlight.load(ordering: .relaxed) > 0 {
            logger.warning("shutdown deadline reached; entries left pending for other workers to claim", metadata: ["in_flight": "\(inFlight.load(ordering: .relaxed))"])
        }
        let snapshot = stats.snapshot
        logger.info("worker stopped", metadata: [
            "read": "\(snapshot.read)", "acked": "\(snapshot.acked)", "ack_missed": "\(snapshot.ackMissed)",
            "dead_lettered": "\(snapshot.deadLettered)", "failed": "\(snapshot.failed)", "claimed": "\(snapshot.claimed)",
            "plans": "\(snapshot.plans)", "stale": "\(snapshot.stale)",
        ])
        return snapshot
    }

    /// Creates each stream's group (and stream) if missing; retries until Redis answers or stop.
    private func ensureGroups() async {
        var attempt = 0
        while !isStopping {
            do {
                for feed in settings.inputStreams {
                    try await redis.ensureGroup(stream: feed.stream, group: settings.group)
                }
                return
            } catch {
                attempt += 1
                if attempt == 1 || attempt % 50 == 0 {
                    logger.error("cannot create consumer groups yet; retrying", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: .milliseconds(min(100 * attempt, 1000)))
            }
        }
    }

    /// Processes entries already delivered to this consumer name (id `0`): after a restart
    /// with a configured consumer name, they are finished at once instead of after the timeout.
    private func drainOwnPending(_ feed: Settings.Feed) async {
        var start = "0"
        while !isStopping {
            guard let reads = try? await redis.readGroup(group: settings.group, consumer: consumer, count: settings.batchSize,
                                                         block: nil, streams: [(feed.stream, start)]),
                  let entries = reads.first?.entries, !entries.isEmpty else { return }
            let deliveries = await deliveryCounts(feed.stream, entries)
            stats.read.add(entries.count, ordering: .relaxed)
            await processor.process(feed: feed, entries: entries, deliveries: deliveries,
                                    retryUntil: ContinuousClock.now + settings.visibilityTimeout)
            start = entries.last!.id
        }
    }

    /// Takes over entries idle longer than the visibility timeout, from any consumer.
    private func claimIdle() async {
        for feed in settings.inputStreams where !isStopping {
            var cursor = "0-0"
            var rounds = 0
            repeat {
                let claim: AutoClaim
                do {
                    let reply = try await redis.pipeline([.xautoclaim(stream: feed.stream, group: settings.group, consumer: consumer,
                                                                      minIdle: settings.visibilityTimeout, start: cursor, count: settings.batchSize)])[0]
                    claim = try StreamReplies.autoclaim(reply)
                } catch {
                    logger.warning("claiming idle entries failed", metadata: ["stream": "\(feed.stream)", "error": "\(error)"])
                    return
                }
                if !claim.deleted.isEmpty {
                    logger.warning("pending entries were deleted from the stream before being processed", metadata: [
                        "stream": "\(feed.stream)", "ids": "\(claim.deleted.prefix(10).joined(separator: ","))", "count": "\(claim.deleted.count)"])
                }
                if !claim.entries.isEmpty {
                    stats.claimed.add(claim.entries.count, ordering: .relaxed)
                    stats.read.add(claim.entries.count, ordering: .relaxed)
                    logger.info("claimed idle entries", metadata: ["stream": "\(feed.stream)", "count": "\(claim.entries.count)"])
                    let deliveries = await deliveryCounts(feed.stream, claim.entries)
                    await processor.process(feed: feed, entries: claim.entries, deliveries: deliveries,
                                            retryUntil: ContinuousClock.now + settings.visibilityTimeout)
                }
                cursor = claim.nextCursor
                rounds += 1
            } while cursor != "0-0" && rounds < 20 && !isStopping
        }
    }

    /// Delivery counts of entries pending on this consumer, from `XPENDING`.
    private func deliveryCounts(_ stream: String, _ entries: [StreamEntry]) async -> [String: Int64] {
        guard let first = entries.first?.id, let last = entries.last?.id else { return [:] }
        do {
            let reply = try await redis.pipeline([.xpending(stream: stream, group: settings.group, start: first, end: last,
                                                            count: entries.count, consumer: consumer)])[0]
            return Dictionary(try StreamReplies.pending(reply).map { ($0.id, $0.deliveries) }, uniquingKeysWith: max)
        } catch {
            return [:]
        }
    }
}
