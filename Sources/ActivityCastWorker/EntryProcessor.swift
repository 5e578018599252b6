import ActivityCastCore
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
    let planner = Planner()
    let registrar: Registrar
    let keys: RedisKeys

    init(settings: Settings, redis: RedisConnection, consumer: String, logger: Logger, stats: WorkerStats, mode: Mode = .full) {
        self.settings = settings
        self.redis = redis
        self.consumer = consumer
        self.logger = logger
        self.stats = stats
        self.mode = mode
        self.decoder = EntryDecoder(limits: settings.limits)
        self.keys = settings.keys
        self.registrar = Registrar(keys: settings.keys, activityTTLSeconds: settings.activityTTLSeconds,
                                   deviceTTLSeconds: settings.deviceTTLSeconds)
    }

    /// The hash holding the last processing error of each pending entry of `stream`.
    func errorsKey(_ stream: String) -> String { "\(keys.prefix):errors:\(stream)" }

    private enum Work {
        case ack
        case deadLetter(String)
        case effects(EntryEffects, after: (@Sendable ([RESPValue]) -> Void)?)
    }

    /// Processes `entries` of `feed`. `deliveries` has the delivery counts of claimed entries
    /// (absent: first delivery). Retries connection failures while `retryUntil` allows.
    /// Returns how many entries reached a final outcome.
    @discardableResult
    func process(feed: Settings.Feed, entries: [StreamEntry], deliveries: [String: Int64] = [:], retryUntil: ContinuousClock.Instant) async -> Int {
        guard !entries.isEmpty else { return 0 }
        var attempt = 0
        while true {
            do {
                return try await attemptProcess(feed: feed, entries: entries, deliveries: deliveries)
            } catch let error as RedisError where error.isConnectionProblem && ContinuousClock.now < retryUntil {
                attempt += 1
                if attempt == 1 || attempt % 20 == 0 {
                    logger.warning("Redis unavailable while processing; retrying", metadata: ["stream": "\(feed.stream)", "entries": "\(entries.count)", "error": "\(error)"])
                }
                try? await Task.sleep(for: .milliseconds(min(50 * attempt, 1000)))
            } catch {
                stats.failed.add(entries.count, ordering: .relaxed)
                logger.error("batch left pending for a retry", metadata: ["stream": "\(feed.stream)", "entries": "\(entries.count)", "error": "\(error)"])
                return 0
            }
        }
    }

    private func attemptProcess(feed: Settings.Feed, entries: [StreamEntry], deliveries: [String: Int64]) async throws -> Int {
        // Errors recorded by earlier attempts, for the dead-letter reason of redelivered entries.
        var lastErrors: [String: String] = [:]
        let redelivered = entries.filter { (deliveries[$0.id] ?? 1) > 1 }.map(\.id)
        if !redelivered.isEmpty {
            let reply = try await redis.send(RedisCommand("HMGET", [errorsKey(feed.stream)] + redelivered))
            for (id, value) in zip(redelivered, reply.array ?? []) { if let s = value.string { lastErrors[id] = s } }
        }

        var work: [Work] = []
        work.reserveCapacity(entries.count)
        for entry in entries {
            let delivered = deliveries[entry.id] ?? 1
            guard let fields = entry.fields else {
                work.append(.ack)  // deleted from the stream while pending: nothing left to do
                continue
            }
            if delivered > Int64(settings.maxDeliveries) {
                let last = lastErrors[entry.id] ?? "none recorded (the worker handling it may have died)"
                work.append(.deadLetter("delivered \(delivered) times without a final outcome (max \(settings.maxDeliveries)); last error: \(last)"))
                continue
            }
            var raw: [RawField] = []
            raw.reserveCapacity(fields.count / 2)
            var i = 0
            while i + 1 < fields.count { raw.append(RawField(name: fields[i], value: fields[i + 1])); i += 2 }
            switch decoder.decode(kind: feed.kind, fields: raw) {
            case .failure(let error):
                work.append(.deadLetter(error.reason))
            case .success(let decoded):
                work.append(handle(decoded, entryID: entry.id, stream: feed.stream))
            }
        }

        // Phase 1: every entry's first commands and every dead letter, in one pipeline.
        var commands: [RedisCommand] = []
        var ranges: [Range<Int>] = []
        for (entry, w) in zip(entries, work) {
            let start = commands.count
            switch w {
            case .ack: break
            case .deadLetter(let reason): commands.append(deadLetterCommand(feed: feed, entry: entry, reason: reason, deliveries: deliveries[entry.id] ?? 1))
            case .effects(let e, _): commands += e.first
            }
            ranges.append(start..<commands.count)
        }
        var outcome = [String?](repeating: nil, count: entries.count)  // nil: done; else the error
        var second: [RedisCommand] = []
        var secondRanges: [Range<Int>] = []
        if !commands.isEmpty {
            let replies = try await redis.pipeline(commands)
            for (index, w) in work.enumerated() {
                let mine = Array(replies[ranges[index]])
                let start = second.count
                defer { secondRanges.append(start..<second.count) }
                if let bad = mine.first(where: { $0.errorMessage != nil }) {
                    outcome[index] = bad.errorMessage
                    continue
                }
                switch w {
                case .deadLetter:
                    stats.deadLettered.add(1, ordering: .relaxed)
                case .effects(let e, let after):
                    if let stale = e.staleIfZero, mine.count > stale, mine[stale] == .integer(0) { stats.stale.add(1, ordering: .relaxed) }
                    after?(mine)
                    if let next = e.second { second += next(mine) }
                case .ack: break
                }
            }
        } else {
            secondRanges = Array(repeating: 0..<0, count: entries.count)
        }

        // Phase 2: writes that depended on a phase-1 script accepting the registration.
        if !second.isEmpty {
            let replies = try await redis.pipeline(second)
            for index in entries.indices where outcome[index] == nil {
                if let bad = replies[secondRanges[index]].first(where: { $0.errorMessage != nil }) { outcome[index] = bad.errorMessage }
            }
        }

        // Acknowledge what is final; remember why the rest failed.
        var ackIDs: [String] = []
        var failures: [any RedisArgument] = []
        for (index, entry) in entries.enumerated() {
            if let error = outcome[index] {
                failures += [entry.id, String(error.prefix(300))]
            } else {
                ackIDs.append(entry.id)
            }
        }
        var finals: [RedisCommand] = []
        if !ackIDs.isEmpty { finals.append(.xack(stream: feed.stream, group: settings.group, ids: ackIDs)) }
        if !failures.isEmpty {
            finals.append(RedisCommand("HSET", [errorsKey(feed.stream)] + failures))
            finals.append(RedisCommand("EXPIRE", errorsKey(feed.stream), 7 * 86_400))
        }
        let acked = Set(ackIDs)
        let cleared = redelivered.filter(acked.contains)
        if !cleared.isEmpty { finals.append(RedisCommand("HDEL", [errorsKey(feed.stream)] + cleared)) }
        if !finals.isEmpty {
            let replies = try await redis.pipeline(finals)
            if !ackIDs.isEmpty {
                let n = Int(replies[0].int ?? 0)
                stats.acked.add(n, ordering: .relaxed)
                if n < ackIDs.count {
                    stats.ackMissed.add(ackIDs.count - n, ordering: .relaxed)
                    logger.warning("entries were already acknowledged by another worker", metadata: ["stream": "\(feed.stream)", "count": "\(ackIDs.count - n)"])
                }
            }
        }
        if !failures.isEmpty {
            let failed = failures.count / 2
            stats.failed.add(failed, ordering: .relaxed)
            logger.warning("entries left pending after a failure", metadata: ["stream": "\(feed.stream)", "count": "\(failed)", "error": "\(outcome.compactMap { $0 }.first ?? "")"])
        }
        return ackIDs.count
    }

    private func handle(_ decoded: DecodedEntry, entryID: String, stream: String) -> Work {
        switch decoded.body {
        case .registration(let registration):
            guard mode == .full else { return .ack }
            return .effects(registrar.effects(of: registration, timestampMillis: decoded.timestampMillis), after: nil)
        case .sports, .transit:
            guard let plan = planner.plan(decoded) else { return .ack }
            stats.plans.add(1, ordering: .relaxed)
            guard mode == .full else { return .ack }
            // Count the audience the plan would reach, and forget the key once its activity ends.
            var first: [RedisCommand] = []
            switch plan.audience {
            case .activity(let key): first.append(RedisCommand("HLEN", keys.tokens(key)))
            case .followers(let targets): first += targets.map { RedisCommand("SCARD", keys.followers($0)) }
            case .none: break
            }
            let counted = first.count
            if plan.event == .end {
                first.append(RedisCommand("DEL", keys.tokens(plan.key), keys.meta(plan.key)))
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

    private func deadLetterCommand(feed: Settings.Feed, entry: StreamEntry, reason: String, deliveries: Int64) -> RedisCommand {
        var args: [any RedisArgument] = [settings.deadLetterStream, "*",
                                          "reason", reason, "stream", feed.stream, "id", entry.id,
                                          "deliveries", deliveries, "consumer", consumer,
                                          "at", Int64(Date().timeIntervalSince1970 * 1000)]
        if let fields = entry.fields {
            var i = 0
            while i + 1 < fields.count {
                args.append(Array("f:".utf8) + fields[i])
                args.append(fields[i + 1])
                i += 2
            }
        }
        logger.warning("dead letter", metadata: ["entry": "\(feed.stream)/\(entry.id)", "reason": "\(reason)"])
        return RedisCommand("XADD", args)
    }
}
