import ActivityCastCore
import APNs
import APNsCore
import Foundation
import Logging
import RedisClient
import Synchronization

/// Per-token pushes: the rows of a key's registrations, one payload to a batch of tokens and
/// what each answer means (retries, dead tokens forgotten, permanent failures recorded).
struct TokenBatches: SendRole {
    let ctx: SendContext

    /// One activity token of the key, with what its registration says.
    struct TokenRow {
        var activity: String
        var token: String
        var env: APNsEnvironment
        var onBroadcast: Bool
        var registeredMillis: Int64?
        /// Whose budget its pushes spend.
        var tier: Tier = .standard
        /// The registration's device (nil for a start row: its `activity` is the device).
        var device: String? = nil
    }

    /// Token rows from `(activity, meta)` pairs of `{key}:meta` (its values end with the token),
    /// with the device's own settings where the registration gave none. Meta is read as bytes (a
    /// fan-out reads it for every token). A value written before meta kept the token gets it from
    /// `{key}:tokens`. `tiers`: a registration's tier that is left to its device is looked up
    /// (only needed when the tiers' pushes differ).
    func tokenRows(_ key: ActivityKey, _ pairs: [(activity: String, meta: [UInt8])], tiers: Bool = false) async throws -> [TokenRow] {
        var rows: [TokenRow] = []
        rows.reserveCapacity(pairs.count)
        // Rows whose registration left env or broadcast to the device's settings.
        var needDevice: [(row: Int, device: String, env: Bool, broadcast: Bool, tier: Bool)] = []
        var needToken: [Int] = []
        for p in pairs {
            // A tombstone (`ts -`) has no token: nothing to send.
            guard let m = RegistrationMeta(p.meta) else { continue }
            rows.append(TokenRow(activity: p.activity, token: m.token ?? "", env: m.env ?? .production, onBroadcast: m.broadcast ?? false,
                                 registeredMillis: m.millis, tier: m.tier ?? .standard, device: m.device))
            if m.token == nil { needToken.append(rows.count - 1) }
            if m.env == nil || m.broadcast == nil || (tiers && m.tier == nil) {
                needDevice.append((rows.count - 1, m.device, m.env == nil, m.broadcast == nil, tiers && m.tier == nil))
            }
        }
        if !needToken.isEmpty {
            let reply = try await redis.send(RedisCommand("HMGET", [keys.tokens(key)] + needToken.map { rows[$0].activity }))
            for (row, value) in zip(needToken, reply.array ?? []) { rows[row].token = value.string ?? "" }
        }
        if !needDevice.isEmpty {
            let replies = try await redis.pipeline(needDevice.map { RedisCommand("HMGET", keys.device($0.device), "env", "broadcast", "tier") })
            for (need, reply) in zip(needDevice, replies) {
                // An error reply (Redis refusing, a cluster's node away) is not "no settings": read
                // as such, a development token would go to production and be forgotten as bad.
                let values = try reply.orThrow("HMGET \(keys.device(need.device))").array ?? []
                // The device hash keeps its settings as plain values: `env`, `broadcast` ("1"/"0"), `tier`.
                if need.env, let env = values.first?.string.flatMap(APNsEnvironment.init(rawValue:)) { rows[need.row].env = env }
                if need.broadcast, values.count > 1 { rows[need.row].onBroadcast = values[1].string == "1" }
                if need.tier, values.count > 2, let tier = values[2].string.flatMap(Tier.init(rawValue:)) { rows[need.row].tier = tier }
            }
        }
        return rows.filter { !$0.token.isEmpty }
    }

    /// A slice's batch makes one attempt per token (`FanoutScripts.step`): tokens still failing
    /// wait for the end of the slice's range and go again then, round after round, while the
    /// slice goes on. A token's last attempt (`tokenAttempts`) records it as failed if it still
    /// fails instead of letting it wait; a round that met an APNs outage counts for none of its
    /// tokens (`FanoutWaiting.uncounted`), so each has its attempts once APNs answers.
    struct Parking {
        /// Which round of waiting tokens the batch is (0: a range's batch).
        var round = 0
        /// The batch's waiting tokens as they waited, by activity (none for a range's batch).
        var waiting: [String: FanoutWaiting] = [:]

        /// Whether the token goes without its alert.
        func quiet(_ activity: String) -> Bool { waiting[activity]?.quiet ?? false }
        /// Tries of the token that met an outage so far.
        func uncounted(_ activity: String) -> Int { waiting[activity]?.uncounted ?? 0 }
        /// The attempt this try is for the token, as counted.
        func attempt(_ activity: String) -> Int { round + 1 - uncounted(activity) }
    }

    /// What a slice's batch leaves to wait: tokens still failing, and how long they wait at least.
    struct Waiting: Sendable {
        var tokens: [FanoutWaiting] = []
        var after: Duration = .zero

        mutating func add(_ other: Waiting) {
            tokens += other.tokens
            after = max(after, other.after)
        }
    }

    /// Sends one payload to `rows` and acts on every answer: retries what can be retried,
    /// forgets dead tokens, records permanent failures. Throws when retries run out; with
    /// `parking` (a slice's batch), makes one attempt and returns what can be retried instead.
    /// `quiet`: the payload without its alert, for a token retried after no answer (the request
    /// may have reached APNs, and its alert must not show twice); a refused request (429, 5xx)
    /// is retried as it was.
    @discardableResult
    func sendBatch(_ plan: Plan, _ bytes: [UInt8], quiet: [UInt8]? = nil, priority: Int, env: APNsEnvironment, rows: [TokenRow],
                   kind: SendStats.Kind, entry: String, summary: inout SendSummary, onDelivered: (([TokenRow]) async throws -> Void)? = nil,
                   beforeRetry: ((Duration) async throws -> Void)? = nil, parking: Parking? = nil) async throws -> Waiting {
        guard let client = apns.push(env) else {
            let reason = "no APNs endpoint is configured for \(env.rawValue) tokens"
            try await recordFailures(plan.key, kind: kind.rawValue, rows.map { ($0.token, reason) }, entry: entry)
            summary.failed += rows.count
            return Waiting()
        }
        // An activity past Apple's 8 hours is over on the device: its token is sent nothing more.
        let rows = kind == .start ? rows : await pastLifetime(rows, plan, entry: entry)
        // Each token with whether an earlier request for it went unanswered (it may have gone out).
        var pending = rows.map { (row: $0, unsure: parking?.quiet($0.activity) ?? false) }
        // Tries before this one: they set the back-off (a slice's batch: its round).
        var attempt = parking?.round ?? 0
        let watch = APNsOutageWatch(client, .devicePush, bundleID: configuration.bundleID)
        while !pending.isEmpty {
            // The tokens that go without the alert after the others (none, almost always: then no copy).
            let split = quiet != nil && pending.contains { $0.unsure }
            let sent = split ? pending.filter { !$0.unsure } + pending.filter(\.unsure) : pending
            let sure = split ? sent.prefix { !$0.unsure }.count : sent.count
            var results = sure == 0 ? [] : try await sendAdmitted(client, bytes, sent[..<sure].map(\.row.token), priority: priority)
            if sure < sent.count, let quiet {
                stats.quietResends.add(sent.count - sure, ordering: .relaxed)
                results += try await sendAdmitted(client, quiet, sent[sure...].map(\.row.token), priority: priority)
            }
            if results.contains(where: { $0.response?.reason == .tooManyRequests }) { await tightenRate() }
            stats.count(kind, results, priority: priority)
            let answers = Answers(sent: sent, results: results, attempt: attempt, keepDelivered: onDelivered != nil || kind == .start)
            // The tokens whose answer differed from their audience's (delivered, with the alert
            // when it had one) are on the key's trail, each with what APNs said.
            await trail(plan.key, Self.trailAnswers(sent.map(\.row.activity), results, quietFrom: sure, attempt: attempt + 1, kind: kind, entry: entry))
            try await act(on: answers, plan, kind: kind, entry: entry, summary: &summary, onDelivered: onDelivered)
            var retry = answers.retry
            if kind == .start, retry.contains(where: \.unsure) {
                // A start that got no answer may have started the activity: never sent again (a
                // second start is a second activity on the device). The device counts as started,
                // so a redelivery of the entry doesn't start it either.
                let unknown = retry.filter(\.unsure)
                retry.removeAll(where: \.unsure)
                stats.startsUnknownFate.add(unknown.count, ordering: .relaxed)
                logger.warning("push-to-start without an answer: not sent again", metadata: [
                    "key": "\(plan.key)", "entry": "\(entry)", "starts": "\(unknown.count)", "reason": "\(unknown[0].reason)",
                ])
                if let onDelivered { try await onDelivered(unknown.map(\.row)) }
                try await recordOutcomes(unknown.map { .startUnknown(key: plan.key, device: $0.row.activity, activityType: plan.attributesType ?? "") })
            }
            attempt += 1
            // Every token failed, for APNs's outage: the attempts say nothing about them.
            func outage() async -> Bool { answers.allFailed ? await watch.isOutage(unusable: answers.unusable) : false }
            if let parking, !retry.isEmpty {
                return try await park(retry, plan, kind: kind, parking: parking, outage: await outage(), after: answers.delay, entry: entry,
                                      summary: &summary)
            }
            if !retry.isEmpty && attempt >= configuration.maxAttempts {
                // No further attempt in this batch: the trail says so, or its last `retry` would read as a try that followed.
                await trail(plan.key, Self.chunked(retry.map(\.row.activity), ["e": entry, "kind": kind.rawValue, "what": "gave up", "n": String(attempt),
                                                                             "r": "still failing after \(attempt) attempts: \(answers.lastReason)"]))
                throw SendFailure("\(retry.count) \(kind.rawValue) pushes for \(plan.key) still failing after \(attempt) attempts: \(answers.lastReason)",
                                  apnsOutage: await outage())
            }
            pending = retry.map { ($0.row, $0.unsure) }
            if !pending.isEmpty {
                let wait = min(answers.delay, .seconds(30))
                try await beforeRetry?(wait)
                try await Task.sleep(for: wait)
            }
        }
        return Waiting()
    }

    /// `rows` less the tokens registered longer ago than an activity lives
    /// (`SendConfiguration.activityLifetimeMillis`): counted in the fleet's counters
    /// (`tokens_past_lifetime`, shown by `inspect`) and the worker's metrics.
    /// With `relaunchPastLifetime`, those activities are started again beside the batch (`relaunch`).
    private func pastLifetime(_ rows: [TokenRow], _ plan: Plan, entry: String) async -> [TokenRow] {
        let oldest = Int64(Date().timeIntervalSince1970 * 1000) - configuration.activityLifetimeMillis
        let live = rows.filter { ($0.registeredMillis ?? .max) >= oldest }
        let past = rows.count - live.count
        guard past > 0 else { return rows }
        stats.tokensPastLifetime.add(past, ordering: .relaxed)
        // Best effort: a counter that can't be written never holds up the batch's pushes.
        _ = try? await redis.send(RedisCommand("HINCRBY", keys.counters, "tokens_past_lifetime", past))
        if configuration.relaunchPastLifetime, plan.event == .update {
            let old = rows.filter { ($0.registeredMillis ?? .max) < oldest }
            Task { [self] in await relaunch(plan, old, entry: entry) }
        }
        return live
    }

    /// Trail records of a batch's answers that differ from delivered-as-sent: refused (`retry`,
    /// `forgotten`, `failed`, with the status and reason), unanswered (`st` unknown: it may have
    /// gone out), or delivered without the alert (a quiet re-send, `al` 0). `quietFrom`: the
    /// index from which the batch went without its alert. Activities grouped by answer, a few
    /// dozen per record.
    static func trailAnswers(_ activities: [String], _ results: [APNsResult], quietFrom: Int, attempt: Int, kind: SendStats.Kind,
                             entry: String) -> [TrailRecord] {
        var groups: [[String: String]: [String]] = [:]
        var order: [[String: String]] = []
        for (i, (activity, result)) in zip(activities, results).enumerated() {
            let quiet = i >= quietFrom
            guard result.action != .delivered || quiet else { continue }
            var f = ["e": entry, "kind": kind.rawValue, "n": String(attempt), "al": quiet ? "0" : "1"]
            if result.action == .delivered {
                f["what"] = "delivered"
                f["st"] = String(result.response?.status ?? 200)
            } else {
                switch TokenOutcome.of(result.action, reason: result.response?.reason, registeredMillis: nil, attempt: attempt) {
                case .forget: f["what"] = "forgotten"
                case .failed: f["what"] = "failed"
                default: f["what"] = "retry"
                }
                f["st"] = result.response.map { String($0.status) } ?? (result.fateUnknown ? "unknown" : "none")
                if let reason = result.response?.reason { f["r"] = reason.rawValue } else if result.response == nil { f["r"] = "\(result.action)" }
            }
            if groups[f] == nil { order.append(f) }
            groups[f, default: []].append(activity)
        }
        return order.flatMap { chunked(groups[$0]!, $0) }
    }

    /// Records of `fields` naming `activities` (`acts`), 20 to a record.
    static func chunked(_ activities: [String], _ fields: [String: String], kind: TrailRecord.Kind = .tokens) -> [TrailRecord] {
        stride(from: 0, to: activities.count, by: 20).map { start in
            var f = fields
            f["acts"] = activities[start..<min(start + 20, activities.count)].joined(separator: " ")
            return TrailRecord(kind, f)
        }
    }

    /// A token to try again: whether an earlier request for it may have reached APNs, why, and
    /// whether this one failed for reasons outside it (`APNsResult.apnsUnusable`).
    struct Retry {
        var row: TokenRow
        var unsure: Bool
        var reason: String
        var unusable: Bool
    }

    /// What APNs answered for a batch's tokens, sorted by what to do with each.
    struct Answers {
        var retry: [Retry] = []
        /// The longest back-off a retried token asked for.
        var delay = Duration.zero
        var lastReason = ""
        /// Delivered tokens (kept only when the caller wants them), and how many.
        var delivered: [TokenRow] = []
        var deliveredCount = 0
        var dead: [(row: TokenRow, reason: String, apnsID: String?, invalidSince: Int64?)] = []
        var failures: [(target: String, reason: String)] = []
        var failureIDs: [String?] = []

        /// How many tokens the batch sent.
        let sentCount: Int

        /// No token of the batch was delivered or settled: every one is to be tried again.
        var allFailed: Bool { retry.count == sentCount }
        /// Every request of the batch failed for reasons outside it: no connection to APNs, or
        /// our credentials refused.
        var unusable: Bool { allFailed && retry.allSatisfy(\.unusable) }

        /// `sent`: each token with whether an earlier request for it went unanswered; `results`
        /// in the same order; `attempt`: the attempts made before this one.
        init(sent: [(row: TokenRow, unsure: Bool)], results: [APNsResult], attempt: Int, keepDelivered: Bool) {
            sentCount = sent.count
            for ((row, wasUnsure), result) in zip(sent, results) {
                let response = result.response
                switch TokenOutcome.of(result.action, reason: response?.reason, registeredMillis: row.registeredMillis, attempt: attempt) {
                case .delivered:
                    deliveredCount += 1
                    if keepDelivered { delivered.append(row) }
                case .forget(let reason):
                    dead.append((row, reason, response?.apnsID, response?.timestampMillis))
                case .retry(let after, let reason):
                    // Unsure: no answer, and the request may have reached APNs (`fateUnknown`).
                    retry.append(Retry(row: row, unsure: wasUnsure || result.fateUnknown, reason: reason,
                                       unusable: result.apnsUnusable))
                    delay = max(delay, after)
                    lastReason = reason
                case .failed(let reason):
                    failures.append((row.token, reason))
                    failureIDs.append(response?.apnsID)
                }
            }
        }
    }

    /// Forgets the dead tokens, records the permanent failures (each in one go for the whole
    /// batch, not per token) and counts the deliveries.
    private func act(on answers: Answers, _ plan: Plan, kind: SendStats.Kind, entry: String, summary: inout SendSummary,
                     onDelivered: (([TokenRow]) async throws -> Void)?) async throws {
        if !answers.dead.isEmpty {
            summary.forgotten += answers.dead.count
            stats.tokensForgotten.add(answers.dead.count, ordering: .relaxed)
            if kind == .start { try await forgetStartTokens(answers.dead, activityType: plan.attributesType ?? "") }
            else { try await forgetTokens(plan.key, answers.dead) }
        }
        if !answers.failures.isEmpty {
            summary.failed += answers.failures.count
            stats.failedTokens.add(answers.failures.count, ordering: .relaxed)
            try await recordFailures(plan.key, kind: kind.rawValue, answers.failures, apnsIDs: answers.failureIDs, entry: entry)
        }
        switch kind {
        case .start:
            summary.starts += answers.deliveredCount
            try await recordOutcomes(answers.delivered.map { .startDelivered(key: plan.key, device: $0.activity, activityType: plan.attributesType ?? "") })
        default: summary.tokens += answers.deliveredCount
        }
        if let onDelivered, !answers.delivered.isEmpty { try await onDelivered(answers.delivered) }
    }

    /// A slice's tokens still failing: those at their last attempt are recorded as failed, each
    /// with its last reason; the others wait. In an APNs outage (`outage`) none is at its last:
    /// the try doesn't count (`FanoutWaiting.uncounted`).
    private func park(_ retry: [Retry], _ plan: Plan, kind: SendStats.Kind, parking: Parking, outage: Bool, after: Duration,
                      entry: String, summary: inout SendSummary) async throws -> Waiting {
        var failed: [(target: String, reason: String)] = [], waiting: [FanoutWaiting] = []
        for r in retry {
            let activity = r.row.activity, attempt = parking.attempt(activity)
            if !outage && attempt >= configuration.tokenAttempts {
                failed.append((r.row.token, "still failing after \(attempt) attempts: \(r.reason)"))
            } else {
                waiting.append(FanoutWaiting(activity: activity, quiet: r.unsure, uncounted: parking.uncounted(activity) + (outage ? 1 : 0)))
            }
        }
        if !failed.isEmpty {
            summary.failed += failed.count
            stats.failedTokens.add(failed.count, ordering: .relaxed)
            let gaveUp = retry.filter { !outage && parking.attempt($0.row.activity) >= configuration.tokenAttempts }.map(\.row.activity)
            await trail(plan.key, Self.chunked(gaveUp, ["e": entry, "kind": kind.rawValue, "what": "gave up",
                                                        "r": "still failing after \(configuration.tokenAttempts) attempts"]))
            try await recordFailures(plan.key, kind: kind.rawValue, failed, entry: entry)
        }
        guard !waiting.isEmpty else { return Waiting() }
        stats.tokensWaited.add(waiting.count, ordering: .relaxed)
        logger.info("tokens still failing wait for the end of their slice", metadata: [
            "key": "\(plan.key)", "tokens": "\(waiting.count)", "attempt": "\(parking.round + 1)", "apns_outage": "\(outage)",
            "reason": "\(retry[0].reason)", "after_ms": "\(after.milliseconds)",
        ])
        return Waiting(tokens: waiting, after: min(after, .seconds(30)))
    }

    /// Forgets activity tokens APNs says are dead, unless replaced meanwhile: one pipeline.
    private func forgetTokens(_ key: ActivityKey, _ dead: [(row: TokenRow, reason: String, apnsID: String?, invalidSince: Int64?)]) async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let forgot = try await redis.pipeline(dead.map { d in
            .script(TokenScripts.forgetIfSame, keys: [keys.tokens(key), keys.meta(key), keys.tokenOwners(key), keys.direct(key)], args: [d.row.activity, d.row.token, now])
        })
        // Told to the app's backend only for a token forgotten here (not one replaced meanwhile).
        try await recordOutcomes(zip(dead, forgot).filter { $0.1.int == 1 }.map { d, _ in
            .tokenForgotten(key: key, device: d.row.device ?? "", activity: d.row.activity, token: d.row.token, reason: d.reason,
                            invalidSince: d.invalidSince, env: d.row.env.rawValue)
        })
        for d in dead {
            // A failed send, logged once: what APNs said, its apns-id, never the whole token.
            logger.info("token forgotten", metadata: ["key": "\(key)", "kind": "token", "activity": "\(d.row.activity)", "reason": "\(d.reason)",
                                                      "apns_id": "\(d.apnsID ?? "-")", "token": "\(d.row.token.prefix(8))…"])
        }
    }

    /// Forgets a push-to-start token APNs says is dead (unless the device registered a new one
    /// meanwhile): the device no longer counts as able to start this type.
    func forgetStartTokens(_ dead: [(row: TokenRow, reason: String, apnsID: String?, invalidSince: Int64?)], activityType: String) async throws {
        // Device hashes and the type's set are in different slots: the set follows the hashes.
        let removed = try await redis.pipeline(dead.map { d in
            .script(TokenScripts.forgetStartIfSame, keys: [keys.device(d.row.activity)], args: ["start:\(activityType)", d.row.token])
        })
        let gone = zip(dead, removed).filter { $0.1.int == 1 }.map { $0.0.row.activity }
        if !gone.isEmpty { _ = try await redis.send(RedisCommand("SREM", [keys.startTokens(activityType: activityType)] + gone)) }
        try await recordOutcomes(zip(dead, removed).filter { $0.1.int == 1 }.map { d, _ in
            .startTokenForgotten(device: d.row.activity, activityType: activityType, token: d.row.token, reason: d.reason, invalidSince: d.invalidSince)
        })
        for d in dead {
            logger.info("push-to-start token forgotten", metadata: ["device": "\(d.row.activity)", "kind": "start", "reason": "\(d.reason)",
                                                                    "apns_id": "\(d.apnsID ?? "-")", "token": "\(d.row.token.prefix(8))…"])
        }
    }
}


enum TokenScripts {
    /// KEYS[1] = device hash. ARGV = field (`start:<type>`), token. Removes the push-to-start
    /// token if it is still `token` (stored as `ts token`). Returns 1 or 0.
    static let forgetStartIfSame = RedisScript("""
    local cur = redis.call('HGET', KEYS[1], ARGV[1])
    if not cur then return 0 end
    local sp = string.find(cur, ' ', 1, true)
    if not sp or string.sub(cur, sp + 1) ~= ARGV[2] then return 0 end
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 1
    """)

    /// KEYS[1] = `{key}:tokens`, KEYS[2] = `{key}:meta`. ARGV = activity, token, now ms.
    /// Forgets the activity's token if it is still `token` (a rotated token stays). Returns 1 or 0.
    static let forgetIfSame = RedisScript("""
    if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
    redis.call('HDEL', KEYS[1], ARGV[1])
    if redis.call('HGET', KEYS[3], ARGV[2]) == ARGV[1] then redis.call('HDEL', KEYS[3], ARGV[2]) end
    -- A tombstone, so a late registration older than this can't bring the dead token back.
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' -')
    redis.call('HDEL', KEYS[4], ARGV[1])
    return 1
    """)
}
