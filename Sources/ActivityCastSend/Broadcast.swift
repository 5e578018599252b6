import ActivityCastCore
import APNs
import APNsCore
import RedisClient

extension SendRole {
    /// Broadcasts to the key's channel. False when APNs no longer knows the channel and a new one
    /// couldn't be made for this event (its devices then get nothing from the channel this time).
    func broadcast(_ plan: Plan, _ bytes: [UInt8], priority: Int, env: APNsEnvironment, record: ChannelRecord) async throws -> Bool {
        guard let client = apns.push(env) else { return false }
        var record = record
        var attempt = 0
        var recreated = false
        let watch = APNsOutageWatch(client)
        while true {
            try await admit(1)
            let result = await client.broadcast(payload: bytes, channelID: record.id, bundleID: configuration.bundleID,
                                                priority: priority, storagePolicy: record.policy.rawValue)
            stats.count(.broadcast, result, priority: priority)
            if result.action == .delivered { return true }
            if result.response?.reason == .channelNotRegistered, !recreated {
                recreated = true
                try await channels.forget(plan.key, env, id: record.id)
                guard case .live(let fresh) = try await channels.ensure(plan.key, env, policy: plan.storagePolicy) else { return false }
                record = fresh
                continue
            }
            attempt += 1
            switch TokenOutcome.of(result.action, reason: result.response?.reason, registeredMillis: nil, attempt: attempt) {
            case .retry(let delay, _) where attempt < configuration.maxAttempts:
                try await Task.sleep(for: delay)
            case .retry(_, let reason):
                throw SendFailure("broadcast to \(plan.key) (\(env.rawValue)) kept failing: \(reason)", apnsOutage: watch.isOutage(unreached: result.apnsUnreachable))
            default:
                try await recordFailures(plan.key, kind: "broadcast", [(record.id, describe(result))],
                                         apnsIDs: [result.response?.apnsID ?? result.response?.requestID], entry: "")
                return false
            }
        }
    }
}
