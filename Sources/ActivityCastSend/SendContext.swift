import ActivityCastCore
import APNs
import APNsCore
import Foundation
import Logging
import RedisClient
import Synchronization

/// What every part of the send path shares: its connections, settings, channel registry, logger
/// and counters, and whether the worker is stopping.
final class SendContext: Sendable {
    let redis: RedisConnection
    let apns: APNsRouter
    let configuration: SendConfiguration
    let channels: ChannelRegistry
    let logger: Logger
    let stats: SendStats
    /// Set when the worker stops: slices stop between batches and hand the rest back.
    let stopping = Atomic<Bool>(false)
    /// Keys whose last event found nobody to reach per token (`AudienceMemory`).
    let nobodyPerToken = AudienceMemory()
    /// Fan-out records of acknowledged entries, deleted together (`RecordSweep`).
    let sweep: RecordSweep

    /// Now on the budget's clock: nil for Redis's (one clock for the fleet; tests give a compressed one).
    func budgetNow() -> Int64? { configuration.budgetClock.map { $0.now(wallMillis: Int64(Date().timeIntervalSince1970 * 1000)) } }

    /// A real duration on the budget's clock (ms).
    func budgetSpan(_ real: Duration) -> Int64 { configuration.budgetClock?.span(real) ?? real.milliseconds }

    init(redis: RedisConnection, apns: APNsRouter, configuration: SendConfiguration, channels: ChannelRegistry, logger: Logger, stats: SendStats,
         sweep: RecordSweep) {
        self.sweep = sweep
        self.redis = redis
        self.apns = apns
        self.configuration = configuration
        self.channels = channels
        self.logger = logger
        self.stats = stats
    }
}

/// A part of the send path (by role: `Sender` takes events to decisions and fan-outs,
/// `SliceRunner` sends slices, `CoalescedFlusher` flushes coalesced states, `StartSender` sends
/// push-to-start, `TokenBatches` per-token batches, `Fanouts` the records they share).
protocol SendRole: Sendable {
    var ctx: SendContext { get }
}

extension SendRole {
    /// Adds `outcomes` to the outcomes stream (`Outcome`), in one pipeline; nothing when none or
    /// when the stream is off.
    func recordOutcomes(_ outcomes: [Outcome]) async throws {
        let commands = outcomes.compactMap { $0.command(keys, maxLength: configuration.outcomesMaxLength) }
        if !commands.isEmpty { _ = try await redis.pipeline(commands) }
    }
}

extension SendRole {
    var redis: RedisConnection { ctx.redis }
    var apns: APNsRouter { ctx.apns }
    var configuration: SendConfiguration { ctx.configuration }
    var channels: ChannelRegistry { ctx.channels }
    var logger: Logger { ctx.logger }
    var stats: SendStats { ctx.stats }
    var keys: RedisKeys { configuration.keys }
    func fanoutKeys(_ key: ActivityKey) -> FanoutKeys { FanoutKeys(keys, key) }

    /// Now on the budget's clock: nil for Redis's (`SendContext.budgetNow`).
    func budgetNow() -> Int64? { ctx.budgetNow() }

    /// A real duration on the budget's clock (ms): leases and reschedules on the fleet's schedule.
    func budgetSpan(_ real: Duration) -> Int64 { ctx.budgetSpan(real) }

    /// What `plan`'s push would show, for the budget to send nothing to an audience that shows it
    /// already (`Shown`). A redelivered entry is never taken for unchanged: its first delivery
    /// may have recorded the state as shown and died before the push went out.
    func shown(_ plan: Plan, redelivered: Bool) -> (state: String, quiet: Bool, refreshMillis: Int64?) {
        (keys.state(plan.key), plan.alert == nil && !redelivered, plan.staleAfterSeconds.map { $0 * 500 })
    }

    /// A permanent failure of one send, where ops can see it: `<prefix>:send-failures` (capped).
    /// Permanent send failures, where ops can see them: `<prefix>:send-failures` (capped) and the
    /// `sends_failed` counter, in one pipeline however many.
    /// `apnsIDs`: APNs's `apns-id` of each failure's answer, where there was one.
    func recordFailures(_ key: ActivityKey, kind: String, _ failures: [(target: String, reason: String)], apnsIDs: [String?] = [],
                        entry: String) async throws {
        func id(_ i: Int) -> String { i < apnsIDs.count ? apnsIDs[i] ?? "-" : "-" }
        var commands = failures.enumerated().map { i, f in
            RedisCommand("XADD", keys.sendFailures, "MAXLEN", "~", 10_000, "*", "key", key.description, "kind", kind,
                         "target", String(f.target.prefix(8)) + "…", "reason", f.reason, "entry", entry, "apns_id", id(i))
        }
        commands.append(RedisCommand("HINCRBY", keys.counters, "sends_failed", failures.count))
        // A backend hears of its tokens given up (per-token pushes and starts), not of our own parts.
        if kind == SendStats.Kind.token.rawValue || kind == SendStats.Kind.start.rawValue {
            commands += failures.compactMap { f in
                Outcome.tokenFailed(key: key, kind: kind, token: f.target, reason: f.reason).command(keys, maxLength: configuration.outcomesMaxLength)
            }
        }
        _ = try await redis.pipeline(commands)
        for (i, f) in failures.enumerated() {
            logger.warning("send failed", metadata: ["key": "\(key)", "kind": "\(kind)", "reason": "\(f.reason)", "apns_id": "\(id(i))",
                                                     "target": "\(f.target.prefix(8))…"])
        }
    }
}

typealias TokenRow = TokenBatches.TokenRow
typealias SliceHead = SliceRunner.SliceHead
typealias FanoutStart = Fanouts.FanoutStart

/// The keys whose last event on this worker found nobody to reach per token (every device on a
/// live channel): their next event asks the budget for the channel alone and reads the key's
/// per-token audience (`HLEN {key}:direct`) in the same round trip, instead of two tier decisions
/// that would answer `none`. Someone there after all: the tiers are decided in one more round
/// trip. Bounded: forgotten whole past `limit` keys (a key forgotten is decided as any other).
final class AudienceMemory: Sendable {
    private let keys = Mutex<Set<ActivityKey>>([])
    let limit: Int

    init(limit: Int = 100_000) { self.limit = limit }

    func nobody(_ key: ActivityKey) -> Bool { keys.withLock { $0.contains(key) } }

    func note(_ key: ActivityKey, nobody: Bool) {
        keys.withLock { set in
            if nobody {
                if set.count >= limit { set.removeAll(keepingCapacity: true) }
                set.insert(key)
            } else {
                set.remove(key)
            }
        }
    }
}
