import ActivityCastCore
import APNs
import APNsCore
import RedisClient

extension SendRole {
    /// Broadcasts to every environment's channel at once (a broadcast doesn't wait for the previous
    /// one's answer); returns the environments whose broadcast was delivered.
    /// `quiet`: the push without its alert, sent instead once a broadcast got no answer (it may
    /// have reached APNs, and its alert must not show twice).
    func broadcast(_ plan: Plan, _ bytes: [UInt8], quiet: [UInt8]? = nil, priority: Int, channels live: [(APNsEnvironment, ChannelRecord)],
                   trail: EventTrail? = nil) async throws -> [APNsEnvironment] {
        guard let (lastEnv, lastRecord) = live.last else { return [] }
        @Sendable func attempt(_ env: APNsEnvironment, _ record: ChannelRecord) async -> (APNsEnvironment, Result<Bool, Error>) {
            do { return (env, .success(try await broadcast(plan, bytes, quiet: quiet, priority: priority, env: env, record: record, trail: trail))) } catch {
                return (env, .failure(error))
            }
        }
        let results = await withTaskGroup(of: (APNsEnvironment, Result<Bool, Error>).self) { group in
            for (env, record) in live.dropLast() { group.addTask { await attempt(env, record) } }
            // The last one from this task, meanwhile (a single one needs no child task at all).
            var all = [await attempt(lastEnv, lastRecord)]
            for await result in group { all.append(result) }
            return all
        }
        var delivered: [APNsEnvironment] = [], errors: [Error] = []
        for (env, result) in results {
            switch result {
            case .success(let ok): if ok { delivered.append(env) }
            case .failure(let error): errors.append(error)
            }
        }
        guard let first = errors.first else { return delivered }
        // An outage only if every environment's broadcast met one: one that was delivered would
        // go again with each delivery of the entry, for as long as the other's outage lasted.
        if let own = errors.first(where: { ($0 as? SendFailure)?.apnsOutage != true }) { throw own }
        if !delivered.isEmpty { throw SendFailure("\(first) (delivered in \(delivered.map(\.rawValue).joined(separator: ", ")))") }
        throw first
    }

    /// Broadcasts to the key's channel. False when APNs no longer knows the channel and a new one
    /// couldn't be made for this event (its devices then get nothing from the channel this time).
    func broadcast(_ plan: Plan, _ bytes: [UInt8], quiet: [UInt8]? = nil, priority: Int, env: APNsEnvironment, record: ChannelRecord,
                   trail: EventTrail? = nil) async throws -> Bool {
        guard let client = apns.push(env) else { return false }
        var record = record
        var attempt = 0
        var recreated = false
        var payload = bytes
        let watch = APNsOutageWatch(client, .broadcast, bundleID: configuration.bundleID)
        while true {
            try await admit(1)
            let result = await client.broadcast(payload: payload, channelID: record.id, bundleID: configuration.bundleID,
                                                priority: priority, storagePolicy: record.policy.rawValue)
            stats.count(.broadcast, result, priority: priority)
            trail?.answer(Self.broadcastRecord(result, env: env, channel: record.id, priority: priority, alert: plan.alert != nil && payload == bytes && quiet != bytes),
                          first: attempt == 0 && !recreated)
            if result.action == .delivered { return true }
            if result.response?.reason == .channelNotRegistered, !recreated {
                recreated = true
                try await channels.forget(plan.key, env, id: record.id)
                guard case .live(let fresh) = try await channels.ensure(plan.key, env, policy: plan.storagePolicy) else { return false }
                record = fresh
                continue
            }
            attempt += 1
            if let quiet, quiet != payload, result.fateUnknown {
                // No answer: the broadcast may have gone out. Its next try goes without the alert.
                payload = quiet
                stats.quietResends.add(1, ordering: .relaxed)
            }
            switch TokenOutcome.of(result.action, reason: result.response?.reason, registeredMillis: nil, attempt: attempt) {
            case .retry(let delay, _) where attempt < configuration.maxAttempts:
                try await Task.sleep(for: delay)
                // What went so far, before the next try goes.
                await write(trail)
            case .retry(_, let reason):
                throw SendFailure("broadcast to \(plan.key) (\(env.rawValue)) kept failing: \(reason)", apnsOutage: await watch.isOutage(unusable: result.apnsUnusable))
            default:
                try await recordFailures(plan.key, kind: "broadcast", [(record.id, describe(result))],
                                         apnsIDs: [result.response?.apnsID ?? result.response?.requestID], entry: "")
                return false
            }
        }
    }

    /// One broadcast attempt as the trail keeps it: its channel, priority, whether it carried the
    /// alert, and APNs's answer (`st` is `unknown` when none came: it may have gone out).
    static func broadcastRecord(_ result: APNsResult, env: APNsEnvironment, channel: String, priority: Int, alert: Bool) -> TrailRecord {
        var f = ["env": env.rawValue, "ch": channel, "pr": String(priority), "al": alert ? "1" : "0"]
        if let r = result.response {
            f["st"] = String(r.status)
            if let reason = r.reason { f["r"] = reason.rawValue }
            if let id = r.apnsID ?? r.requestID { f["id"] = id }
            if let u = r.uniqueID { f["u"] = u }
        } else {
            f["st"] = result.fateUnknown ? "unknown" : "none"
            f["r"] = "\(result.action)"
        }
        return TrailRecord(.broadcast, f)
    }
}

