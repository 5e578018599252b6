import ActivityCastCore
import APNs
import APNsCore
import Foundation
import Logging
import RedisClient
import Synchronization

/// Push-to-start: a start to the followers of the event's targets who have a start token and no
/// activity for the key yet, within each device's start budget, paced.
struct StartSender: SendRole {
    let ctx: SendContext
    let tokens: TokenBatches

    func sendStarts(_ plan: Plan, state: [String: JSONValue], channels known: [APNsEnvironment: ChannelRegistry.State],
                            entry: String, summary: inout SendSummary) async throws {
        var states = known
        guard case .followers(let targets) = plan.audience, let activityType = plan.attributesType else { return }
        if configuration.relaunchPastLifetime { try await recordStart(plan, activityType: activityType) }
        // Devices that already have an activity for the key get no start.
        let metaValues = try await redis.send(RedisCommand("HVALS", keys.meta(plan.key)))
        let haveActivity = Set((metaValues.array ?? []).compactMap { $0.bytes.flatMap(RegistrationMeta.init)?.device })
        var seen = Set<String>()
        let pacing = Pacing(perSecond: configuration.startsPerSecond)
        let withToken: [UInt8]
        switch PushBuilder.encoded(PushBuilder.payload(plan, contentState: state), limit: PayloadLimits.device, what: "a push-to-start") {
        case .success(let b): withToken = b
        case .failure(let r): throw PushRejectionError(r)
        }
        for target in targets {
            var cursor = "0"
            repeat {
                let reply = try await redis.send(RedisCommand("SSCAN", keys.followers(target), cursor, "COUNT", configuration.batchSize))
                guard let parts = reply.array, parts.count == 2, let next = parts[0].string else { throw SendFailure("SSCAN: unexpected reply") }
                cursor = next
                let devices = (parts[1].array ?? []).compactMap(\.string).filter { !haveActivity.contains($0) && seen.insert($0).inserted }
                if devices.isEmpty { continue }
                // Each device gets at most one start per key, across events and workers.
                let already = try await redis.send(RedisCommand("SMISMEMBER", [keys.starts(plan.key)] + devices))
                let fresh = zip(devices, already.array ?? []).filter { $0.1.int != 1 }.map(\.0)
                if fresh.isEmpty { continue }
                // Each device's push-to-start budget (across keys and workers): a device over it is
                // skipped and counted; it can be started by a later event.
                let rows = try await withinStartBudget(try await startRows(fresh, activityType: activityType), plan, entry: entry)
                // A follower on broadcast starts its activity on the key's channel
                // (`input-push-channel`): the key gets its channels now if it has none (in every
                // environment, as for a registration on broadcast: one key, one set of channels).
                if rows.contains(where: \.onBroadcast) {
                    for env in apns.environments where states[env] == ChannelRegistry.State.none {
                        states[env] = try await channels.ensure(plan.key, env, policy: plan.storagePolicy, known: ChannelRegistry.State.none)
                    }
                }
                var plain: [APNsEnvironment: [TokenRow]] = [:]
                var onChannel: [APNsEnvironment: [TokenRow]] = [:]
                for row in rows {
                    if row.onBroadcast, case .live? = states[row.env] { onChannel[row.env, default: []].append(row) } else { plain[row.env, default: []].append(row) }
                }
                let marks: ([TokenRow]) async throws -> Void = { [redis, startsKey = keys.starts(plan.key), ttl = configuration.stateTTLSeconds] rows in
                    _ = try await redis.pipeline([RedisCommand("SADD", [startsKey] + rows.map(\.activity)), RedisCommand("EXPIRE", startsKey, ttl)])
                }
                do {
                    for (env, rows) in plain.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                        for chunk in pacing.chunks(rows) {
                            try await pacing.wait(for: chunk.count)
                            await trailStarts(plan, "sent", Array(chunk), env: env, channel: nil, entry: entry)
                            try await tokens.sendBatch(plan, withToken, priority: 10, env: env, rows: Array(chunk), kind: .start, entry: entry, summary: &summary, onDelivered: marks)
                        }
                    }
                    for (env, rows) in onChannel.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                        guard case .live(let record)? = states[env] else { continue }
                        let payload = PushBuilder.payload(plan, contentState: state, inputPushChannel: record.id)
                        guard case .success(let bytes) = PushBuilder.encoded(payload, limit: PayloadLimits.device, what: "a push-to-start") else { continue }
                        for chunk in pacing.chunks(rows) {
                            try await pacing.wait(for: chunk.count)
                            await trailStarts(plan, "sent", Array(chunk), env: env, channel: record.id, entry: entry)
                            try await tokens.sendBatch(plan, bytes, priority: 10, env: env, rows: Array(chunk), kind: .start, entry: entry, summary: &summary, onDelivered: marks)
                        }
                    }
                } catch {
                    // The entry will be delivered again: devices that didn't get their start get their
                    // token back, so retries don't spend the budget.
                    await giveBackStartBudget(plan.key, rows)
                    throw error
                }
            } while cursor != "0"
        }
    }

}

/// What push-to-start and relaunches share: each device's start token and start budget.
extension SendRole {
    /// Each device's push-to-start token for the type, with its environment and whether it is on
    /// broadcast (its device hash: `start:<type>` → `ts token`); devices without one are left out.
    func startRows(_ devices: [String], activityType: String) async throws -> [TokenRow] {
        let settings = try await redis.pipeline(devices.map { RedisCommand("HMGET", keys.device($0), "start:\(activityType)", "env", "broadcast") })
        var rows: [TokenRow] = []
        for (device, reply) in zip(devices, settings) {
            // An error reply is not "no start token": that device would silently get no start.
            let v = try reply.orThrow("HMGET \(keys.device(device))").array ?? []
            guard let start = v.first?.string, let space = start.firstIndex(of: " ") else { continue }
            let token = String(start[start.index(after: space)...])
            let env = (v.count > 1 ? v[1].string.flatMap(APNsEnvironment.init(rawValue:)) : nil) ?? .production
            rows.append(TokenRow(activity: device, token: token, env: env, onBroadcast: v.count > 2 && v[2].string == "1",
                                 registeredMillis: Int64(start[..<space])))
        }
        return rows
    }

    /// Gives the start-budget token back to each of `rows` whose device didn't get its start.
    func giveBackStartBudget(_ key: ActivityKey, _ rows: [TokenRow]) async {
        guard !rows.isEmpty,
              let started = try? await redis.send(RedisCommand("SMISMEMBER", [keys.starts(key)] + rows.map(\.activity))).array else { return }
        let capacity = configuration.budgets.pushToStart.capacityTicks
        let back = zip(rows, started).filter { $0.1.int != 1 }.map { RedisCommand.script(BudgetScripts.giveBack, keys: [keys.startBudget(device: $0.0.activity)], args: [capacity]) }
        if !back.isEmpty { _ = try? await redis.pipeline(back) }
    }

    /// On the key's trail before they go: the devices about to be sent a start (`what` `sent`, or
    /// `relaunched`), or skipped (`over budget`), 20 to a record (`TrailRecord.Kind.start`).
    func trailStarts(_ plan: Plan, _ what: String, _ rows: [TokenRow], env: APNsEnvironment?, channel: String?, entry: String) async {
        guard configuration.trailMaxRecords > 0, !rows.isEmpty else { return }
        var f = ["e": entry, "what": what, "pts": String(plan.timestampMillis / 1000), "al": plan.alert != nil ? "1" : "0"]
        if let env { f["env"] = env.rawValue }
        if let channel { f["ch"] = channel }
        await trail(plan.key, TokenBatches.chunked(rows.map(\.activity), f, kind: .start))
    }

    /// The rows whose device's push-to-start bucket had a token (one taken each, in one round
    /// trip); the others are on the key's trail as over budget.
    func withinStartBudget(_ rows: [TokenRow], _ plan: Plan, entry: String) async throws -> [TokenRow] {
        guard !rows.isEmpty else { return rows }
        let policy = configuration.budgets.pushToStart
        let now = budgetNow().map { String($0) } ?? "-"
        let replies = try await redis.pipeline(rows.map { row in
            .script(BudgetScripts.take, keys: [keys.startBudget(device: row.activity)],
                    args: [policy.capacityTicks, policy.ticksPerMillisecond, now, configuration.stateTTLSeconds])
        })
        var kept: [TokenRow] = [], over: [TokenRow] = []
        for (row, reply) in zip(rows, replies) {
            if let e = reply.errorMessage { throw RedisError(.server, "push-to-start budget: \(e)") }
            if reply.int == 1 { kept.append(row) } else {
                over.append(row)
                stats.startsOverBudget.add(1, ordering: .relaxed)
                logger.info("push-to-start skipped: the device's start budget is spent", metadata: ["device": "\(row.activity)"])
            }
        }
        if !over.isEmpty {
            _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "starts_over_budget", over.count))
            await trailStarts(plan, "over budget", over, env: nil, channel: nil, entry: entry)
        }
        return kept
    }
}

/// Spreads sends over time at `perSecond`: before sending `n` more, waits until the ones sent so
/// far are within the rate.
final class Pacing: @unchecked Sendable {
    // Used by one task at a time (one event's start loop).
    private let perSecond: Int
    private let started = ContinuousClock.now
    private var sent = 0

    init(perSecond: Int) { self.perSecond = max(1, perSecond) }

    /// `rows` in pieces of a tenth of a second's worth.
    func chunks<T>(_ rows: [T]) -> [ArraySlice<T>] {
        let size = max(1, perSecond / 10)
        return stride(from: 0, to: rows.count, by: size).map { rows[$0..<min(rows.count, $0 + size)] }
    }

    func wait(for n: Int) async throws {
        let due = started + .seconds(Double(sent) / Double(perSecond))
        if due > .now { try await Task.sleep(until: due, clock: .continuous) }
        sent += n
    }
}

/// A start whose payload is over the limit: the whole event is rejected.
