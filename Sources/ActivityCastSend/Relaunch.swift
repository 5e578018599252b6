import ActivityCastCore
import APNsCore
import Foundation
import RedisClient

/// Starting again an activity the system ended after its 8 hours (`worker.relaunch_past_lifetime`,
/// off by default): an update of a key still live finds a token past its lifetime, and its device
/// is sent a push-to-start with the key's current state and the attributes of the key's start
/// event (recorded by `recordStart`; a key whose start this fleet never sent can't be started
/// again), within the device's start budget, once per activity. A start must carry an alert:
/// the update's own when it has one, else the start's text without its sound. The ended card
/// stays on the Lock Screen (up to 4 hours) beside the new one: docs/sending.md.
extension StartSender {
    /// Between localization arguments as kept (a unit separator: never in a feed's text, which
    /// has its control characters removed).
    static let separator = "\u{1F}"

    /// Keeps what a start carried that an update does not: its `attributes-type` and attributes.
    func recordStart(_ plan: Plan, activityType: String) async throws {
        let key = keys.startAttributes(plan.key)
        var fields: [any RedisArgument] = [key, "_type", activityType]
        for (name, value) in plan.attributes.sorted(by: { $0.key < $1.key }) { fields += ["a:\(name)", value.encoded()] }
        if let alert = plan.alert {
            fields += ["_title", alert.title, "_body", alert.body, "_title_args", alert.titleLocArgs.joined(separator: Self.separator),
                       "_args", alert.locArgs.joined(separator: Self.separator)]
            if let k = alert.titleLocKey { fields += ["_title_key", k] }
            if let k = alert.locKey { fields += ["_key", k] }
        }
        _ = try await redis.pipeline([RedisCommand("DEL", key), RedisCommand("HSET", fields),
                                      RedisCommand("EXPIRE", key, configuration.stateTTLSeconds)])
    }
}

extension TokenBatches {
    /// Starts `past` (rows of `plan`'s key past their lifetime) again where it can; best effort:
    /// what fails is logged and counted, and the update's own pushes never wait for it.
    func relaunch(_ plan: Plan, _ past: [TokenRow], entry: String) async {
        do {
            try await relaunchOrThrow(plan, past, entry: entry)
        } catch {
            stats.relaunchesSkipped.add(past.count, ordering: .relaxed)
            logger.warning("starting activities past their lifetime again failed", metadata: ["key": "\(plan.key)", "error": "\(error)"])
        }
    }

    private func relaunchOrThrow(_ plan: Plan, _ past: [TokenRow], entry: String) async throws {
        let replies = try await redis.pipeline([RedisCommand("HGETALL", keys.startAttributes(plan.key)), RedisCommand("HGETALL", keys.state(plan.key))])
        var type: String?, attributes: [String: JSONValue] = [:], text: [String: String] = [:]
        let items = try replies[0].orThrow("HGETALL \(keys.startAttributes(plan.key))").array ?? []
        for i in stride(from: 0, to: items.count - 1, by: 2) {
            guard let name = items[i].string, let value = items[i + 1].bytes else { continue }
            if name.hasPrefix("a:") { attributes[String(name.dropFirst(2))] = .encoded(value) } else { text[name] = items[i + 1].string }
        }
        type = text["_type"]
        func args(_ name: String) -> [String] { (text[name] ?? "").isEmpty ? [] : text[name]!.components(separatedBy: StartSender.separator) }
        let startAlert = text["_title"].map {
            PlanAlert(title: $0, body: text["_body"] ?? "", titleLocKey: text["_title_key"], titleLocArgs: args("_title_args"),
                      locKey: text["_key"], locArgs: args("_args"))
        }
        guard let type, plan.alert != nil || startAlert != nil, let merged = KeyStateScripts.read(try replies[1].orThrow("HGETALL \(keys.state(plan.key))")), merged.endedMillis == nil else {
            stats.relaunchesSkipped.add(past.count, ordering: .relaxed)
            logger.info("activities past their lifetime not started again: the key's start was not sent by this fleet", metadata: [
                "key": "\(plan.key)", "activities": "\(past.count)"])
            return
        }
        // Each activity once, across events and workers: claimed before anything is sent.
        let claims = try await redis.pipeline(past.map { RedisCommand("SADD", keys.relaunched(plan.key), $0.activity) }
                                              + [RedisCommand("EXPIRE", keys.relaunched(plan.key), configuration.stateTTLSeconds)])
        let claimed = zip(past, claims).filter { $0.1.int == 1 }.map(\.0)
        let byDevice = Dictionary(claimed.compactMap { row in row.device.map { ($0, row.activity) } }, uniquingKeysWith: { a, _ in a })
        guard !byDevice.isEmpty else { return }
        let starts = try await startRows(byDevice.keys.sorted(), activityType: type)
        let within = try await withinStartBudget(starts, plan, entry: entry)
        let skipped = byDevice.count - within.count
        if skipped > 0 { stats.relaunchesSkipped.add(skipped, ordering: .relaxed) }
        guard !within.isEmpty else { return }
        var start = plan
        start.event = .start
        start.alert = plan.alert ?? startAlert
        start.attributesType = type
        start.attributes = attributes
        let bytes: [UInt8]
        switch PushBuilder.encoded(PushBuilder.payload(start, contentState: merged.contentState), limit: PayloadLimits.device, what: "a push-to-start") {
        case .success(let b): bytes = b
        case .failure(let r): throw PushRejectionError(r)
        }
        var summary = SendSummary()
        for (env, rows) in Dictionary(grouping: within, by: \.env).sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            await trailStarts(start, "relaunched", rows, env: env, channel: nil, entry: entry)
            try await sendBatch(start, bytes, priority: 10, env: env, rows: rows, kind: .start, entry: entry, summary: &summary)
        }
        let n = summary.starts
        stats.relaunched.add(n, ordering: .relaxed)
        _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "activities_relaunched", n))
        logger.info("started activities past their lifetime again", metadata: ["key": "\(plan.key)", "entry": "\(entry)", "activities": "\(n)"])
    }
}
