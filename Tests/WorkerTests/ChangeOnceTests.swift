import ActivityCastCore
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// What a device sees: each change once. Real worker processes, Redis and the sandbox; what each
/// device was sent is read from the sandbox's delivery log.
extension SendTests {
    /// A feed's usual redundancy: each goal published as a moment and, 1 ms later, as a score with
    /// the same numbers, and clock ticks inside one minute. Devices get each change once (the
    /// goal with its alert); the repeats cost no push and no budget, and are counted as unchanged;
    /// each tier's `p10` equals what its devices received at 10.
    @Test(arguments: [1, 3])
    func aGoalThenItsScoreAndTicksInsideAMinuteCostOnePush(workers count: Int) async throws {
        let r = try await rig()
        defer { r.redis.close() }
        // No spacing: a routine change goes out at once, so each push is one the test can name.
        let spacing = ["budgets.standard.spacing_ms": "0", "budgets.frequent.spacing_ms": "0", "budgets.channel_no_storage.spacing_ms": "0"]
        let workers = try (0..<count).map { try r.worker("w\($0)", spacing) }
        defer { for w in workers { w.removeLogs() } }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        let standard = [token("c1"), token("c2")], frequent = [token("c3")], onChannel = token("c4")
        for (i, tok) in (standard + frequent + [onChannel]).enumerated() {
            t += 1
            var fields = [("type", "activity.token"), ("ts", String(t)), ("device", "d\(i)"), ("key", "match:u1"), ("activity", "A\(i)"),
                          ("token", tok), ("env", "development"), ("tier", frequent.contains(tok) ? "frequent" : "standard")]
            if tok == onChannel { fields.append(("broadcast", "true")) }
            try await r.add(reg, fields)
        }
        #expect(await eventually { await r.drainedAll() })
        // Events seconds apart in a real feed: each is sent before the next comes (a burst would
        // have a newer fan-out supersede an older one, a test of its own).
        func clock(_ minute: Int) async throws {
            t += 1000
            try await r.add(sports, [("type", "match.clock"), ("ts", String(t)), ("match", "u1"), ("clock", "\(minute)'"), ("period", "first_half")])
            #expect(await eventually { await r.drainedAll() })
        }
        try await clock(1)
        var home = 0
        for goal in 1...4 {
            home += 1
            let minute = goal * 10
            try await clock(minute)
            t += 1000
            try await r.add(sports, [("type", "match.moment"), ("ts", String(t)), ("match", "u1"), ("moment", "goal"), ("team", "home"),
                                     ("player", "P\(goal)"), ("home_score", String(home)), ("away_score", "0"), ("clock", "\(minute)'")])
            // The score, 1 ms later, with the same numbers; then ticks inside the same minute.
            try await r.add(sports, [("type", "match.score"), ("ts", String(t + 1)), ("match", "u1"), ("home_score", String(home)),
                                     ("away_score", "0"), ("clock", "\(minute)'"), ("period", "first_half")])
            #expect(await eventually { await r.drainedAll() })
            t += 1
            try await clock(minute)
            try await clock(minute)
        }
        t += 1000
        try await r.add(sports, [("type", "match.full_time"), ("ts", String(t)), ("match", "u1"), ("home_score", String(home)), ("away_score", "0")])
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })

        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=10000")?["deliveries"] as? [[String: Any]])
        let channelID = try #require(try await r.channelID("match:u1"))
        for target in standard + frequent + [channelID] {
            let mine = log.filter { $0["target"] as? String == target }.sorted { ($0["sequence"] as? Int ?? 0) < ($1["sequence"] as? Int ?? 0) }
            let updates = mine.filter { $0["event"] as? String == "update" }
            if ProcessInfo.processInfo.environment["CHANGE_ONCE_DEBUG"] != nil { print("DEBUG \(target.prefix(6)) " + mine.map { "\($0["event"]!) p\($0["priority"]!) a\($0["alert"]!) \($0["contentState"].map { "\($0)" }?.replacingOccurrences(of: "\n", with: " ") ?? "")" }.joined(separator: " | ")) }
            // One clock at 1', and per goal its minute's clock and the goal: 9 changes. (With three
            // workers a goal's score can be processed before its moment by another worker: then
            // the score is the change, and the moment, stale, is not sent as itself.)
            if count == 1 { #expect(updates.count == 9, "\(target.prefix(6)): \(updates.count) updates") }
            #expect(updates.count <= 9 + 4, "\(target.prefix(6)): \(updates.count) updates")
            var shown: NSDictionary?
            for d in updates {
                let state = d["contentState"] as? NSDictionary
                #expect(state != shown, "\(target.prefix(6)) was sent the state it showed: \(String(describing: state))")
                shown = state
            }
            // A goal at 10 has its alert (the standard tier's budget runs out at the fourth, which
            // goes at 5 without it); nothing else has one.
            let alerts = updates.filter { $0["alert"] as? Bool == true }.count
            let atTen = updates.filter { $0["priority"] as? Int == 10 }.count
            // (With three workers a score processed before its moment goes at 10 without one.)
            #expect((count == 1 ? alerts == atTen : alerts <= atTen) && alerts <= 4, "\(target.prefix(6)): \(alerts) alerts, \(atTen) at 10, for 4 goals")
            if count == 1, frequent.contains(target) { #expect(alerts == 4) }
            #expect(mine.last?["event"] as? String == "end")
            if target != channelID {
                let view = try await r.device(target)
                #expect(view?["state"] as? String == "ended" && state(view)["homeScore"] as? Int == 4)
            }
        }
        // Each tier's budget counted what its devices got at 10, and the repeats as unchanged.
        for (tier, tokens) in [("standard", standard), ("frequent", frequent)] {
            let budget = try await r.redis.send(RedisCommand("HMGET", "\(r.settings.prefix):{match:u1}:budget:\(tier)", "p10", "unchanged")).array ?? []
            for tok in tokens {
                let atTen = log.filter { $0["target"] as? String == tok && $0["priority"] as? Int == 10 }.count
                #expect(budget.first?.int == Int64(atTen), "\(tier): p10 \(String(describing: budget.first)), \(tok.prefix(6)) got \(atTen) at 10")
            }
            #expect(budget.count == 2 && (count == 1 ? budget[1].int == 12 : (budget[1].int ?? 0) >= 1), "\(tier): unchanged \(budget)")
        }
        for w in workers { #expect(await w.stop() == 0) }
    }
}

/// No single event can freeze or poison a key.
extension SendTests {
    /// A `ts` a year ahead is dead-lettered with its reason (it would make every later event of
    /// the key stale); the match goes on to its end. An end older than the key's newest event
    /// still ends the activity, carrying the newest score (issue 40).
    @Test func aFarFutureTimeIsDeadLetteredAndAnOlderEndStillEnds() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let t = now() - 10_000
        try await register(r, device: "a", key: "match:f1", activity: "A", token: token("f7"), ts: t)
        try await score(r, "f1", 1, 0, ts: now() + 365 * 86_400_000)
        #expect(await eventually { await r.drainedAll() })
        let dead = try await r.redis.send(RedisCommand("XRANGE", r.settings.deadLetterStream, "-", "+"))
        let entry = try StreamReplies.entry(try #require(dead.array?.first))
        let reason = entry.fields.flatMap { f in f.firstIndex(of: Array("reason".utf8)).map { String(decoding: f[$0 + 1], as: UTF8.self) } }
        #expect(reason?.contains("ahead of Redis's clock") == true && reason?.contains("limits.max_future_ms") == true, "\(String(describing: reason))")
        try await score(r, "f1", 2, 0, ts: t + 2000)
        #expect(await eventually { state(try? await r.device(token("f7")))["homeScore"] as? Int == 2 })
        // The end, older than the score: it ends the activity all the same.
        try await r.add(r.settings.feeds[0].stream, [("type", "match.full_time"), ("ts", String(t + 1000)), ("match", "f1"),
                                                      ("home_score", "2"), ("away_score", "0")])
        #expect(await eventually { (try? await r.device(token("f7")))?["state"] as? String == "ended" })
        #expect(await w.stop() == 0)
        #expect(state(try await r.device(token("f7")))["homeScore"] as? Int == 2)
    }
}

/// Channels only for an audience.
extension SendTests {
    /// Events for keys nobody follows make no channel (Apple allows 10,000 per app). A device on
    /// broadcast by its device setting gets the first event per token, and the key's next event
    /// makes the channel and broadcasts to it.
    @Test func aKeyGetsAChannelOnlyWhenADeviceOnBroadcastNeedsIt() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let t = now() - 100_000
        for k in 0..<20 { try await score(r, "nobody\(k)", 1, 0, ts: t + Int64(k)) }
        #expect(await eventually { await r.drainedAll() })
        #expect(try await r.redis.send(RedisCommand("ZCARD", "\(r.settings.prefix):channels:index")).int == 0)
        #expect(try await r.channelID("match:nobody0") == nil)

        let viewer = token("9b")
        try await r.add(r.settings.registrationsStream, [("type", "device"), ("ts", String(t)), ("device", "v"), ("env", "development"),
                                                         ("broadcast", "true")])
        try await register(r, device: "v", key: "match:q1", activity: "V", token: viewer, ts: t + 1)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, "q1", 1, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        #expect(try await r.channelID("match:q1") == nil)
        #expect(state(try await r.device(viewer))["homeScore"] as? Int == 1, "the device on broadcast without a channel gets its push per token")
        try await score(r, "q1", 2, 0, ts: t + 2000)
        #expect(await eventually { await r.drainedAll() })
        let channel = try #require(try await r.channelID("match:q1"))
        #expect(state(try await r.channel(channel))["homeScore"] as? Int == 2)
        #expect(state(try await r.device(viewer))["homeScore"] as? Int == 1, "on the channel now: nothing per token")
        #expect(try await r.redis.send(RedisCommand("ZCARD", "\(r.settings.prefix):channels:index")).int == 2, "one per APNs environment")
        #expect(await w.stop() == 0)
    }
}

/// A key whose every device is on broadcast: each event is one broadcast per environment and
/// nothing else — no fan-out, no tier's budget — until a broadcast fails, when its devices get
/// the state per token.
extension SendTests {
    @Test func aKeyWhoseDevicesAreAllOnBroadcastCostsOneBroadcast() async throws {
        // Room for two channels: this key's, one per environment.
        let r = try await rig(["--max-channels", "2"])
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let t = now() - 100_000
        let viewer = token("7a")
        try await register(r, device: "v", key: "match:b1", activity: "V", token: viewer, ts: t, broadcast: true)
        #expect(await eventually { await r.drainedAll() })
        let p = r.settings.prefix
        func exists(_ key: String) async throws -> Bool { try await r.redis.send(RedisCommand("EXISTS", key)).int == 1 }
        // The first event makes the channel (the registration wanted it): decided before it
        // existed, its tiers were asked and its fan-out found the device on the channel.
        func fanouts() async throws -> [RESPValue] {
            try await r.redis.pipeline([RedisCommand("HGET", "\(p):{match:b1}:gen", "name"), RedisCommand("HGETALL", "\(p):{match:b1}:budget:standard")])
        }
        try await score(r, "b1", 1, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        let before = try await fanouts()
        for goal in 2...4 {
            try await score(r, "b1", goal, 0, ts: t + Int64(goal) * 1000)
            #expect(await eventually { await r.drainedAll() })
        }
        let channel = try #require(try await r.channelID("match:b1"))
        #expect(state(try await r.channel(channel))["homeScore"] as? Int == 4)
        #expect(try await r.device(viewer) == nil, "the device on the channel had a push per token")
        let after = try await fanouts()
        #expect(after == before, "a fan-out was made, or a tier's budget decided: \(before) → \(after)")
        #expect(try await r.redis.send(RedisCommand("HGET", "\(p):{match:b1}:budget:channel", "p10")).string == "3", "the channel's budget: 3 at 10 after its first")

        // A device off broadcast registers: the worker, which remembers the key had nobody per
        // token (and asks for the channel's decision alone), reads it in the same round trip
        // and sends it the next state per token.
        let plain = token("7b")
        try await register(r, device: "p", key: "match:b1", activity: "P", token: plain, ts: t + 4500)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, "b1", 4, 1, ts: t + 4600)
        #expect(await eventually { await r.drainedAll() })
        #expect(state(try await r.device(plain))["awayScore"] as? Int == 1, "the device off broadcast never had the state")
        #expect(try await r.device(viewer) == nil, "the device on the channel had a push per token")
        try await r.add(r.settings.registrationsStream, [("type", "unregister"), ("ts", String(t + 4700)), ("device", "p"), ("key", "match:b1"),
                                                         ("activity", "P")])
        #expect(await eventually { await r.drainedAll() })

        // The development channel disappears at APNs and another key takes the room it left: the
        // next broadcast fails there, and the device (development) gets the state per token.
        let (status, out, err) = try await runActivitycast(["channels", "delete", channel], redis: r.server, settings: r.sandbox.settings)
        #expect(status == 0, "\(out) \(err)")
        try await register(r, device: "c", key: "match:b2", activity: "C", token: token("7c"), ts: t + 3500, broadcast: true)
        try await score(r, "b2", 1, 0, ts: t + 3600)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, "b1", 5, 1, ts: t + 5000)
        #expect(await eventually { await r.drainedAll() })
        #expect(state(try await r.device(viewer))["homeScore"] as? Int == 5, "the device whose broadcast failed never had the state")
        #expect(await w.stop() == 0)
    }
}

/// An alert is shown once.
extension SendTests {
    /// Chaos: three workers, one SIGKILLed every 1.5 s (and another started), APNs answering 5 %
    /// 429, 2 % 500 and a GOAWAY every 150 requests, three matches at once with goals (alerts)
    /// fanned out in small slices. No device is shown the same alert twice (a batch sent again
    /// after a takeover or after no answer goes without its alert), and every device ends on its
    /// match's final state.
    @Test func noAlertTwiceThroughKillsAndFaults() async throws {
        // Every answer 600 ms late: a worker killed mid-batch leaves requests APNs had, unanswered.
        let r = try await rig(["--fault429", "0.05", "--fault500", "0.02", "--goaway-after", "150", "--slow-rate", "1", "--slow-ms", "600",
                               "--delivery-log", "100000"])
        defer { r.redis.close() }
        let small = ["fanout.slice_size": "40", "fanout.batch": "10", "fanout.lease_ms": "1000", "worker.visibility_timeout_ms": "1500",
                     "worker.claim_interval_ms": "200", "budgets.standard.capacity": "100", "budgets.standard.refill_per_hour": "100000"]
        var workers = try (0..<3).map { try r.worker("w\($0)", small) }
        var killed: [ChildProcess] = []
        defer { for w in workers + killed { w.removeLogs() } }
        var t = now() - 100_000
        let matches = ["x1", "x2", "x3"]
        var tokens: [String: [String]] = [:]
        for (m, match) in matches.enumerated() {
            tokens[match] = (0..<120).map { String(format: "%064x", 0xa1e000 + m * 1000 + $0) }
            for (i, tok) in tokens[match]!.enumerated() {
                try await register(r, device: "\(match)-\(i)", key: "match:\(match)", activity: "A\(i)", token: tok, ts: t)
            }
        }
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        var spawned = 3
        // Mid-fan-out (the goals' batches in flight): one worker SIGKILLed, another started.
        func killOne() async throws {
            let victim = workers.removeFirst()
            victim.kill(signal: SIGKILL)
            _ = await victim.waitForExit(timeout: .seconds(5))
            killed.append(victim)
            workers.append(try r.worker("w\(spawned)", small))
            spawned += 1
        }
        let goals = 4
        for goal in 1...goals {
            t += 1000
            for match in matches {
                try await homeGoal(r, match, goal, ts: t)
            }
            // The goal's batches are in flight: the kill leaves them to a takeover, which must not
            // show the goal's alert again to the devices that had it.
            try await Task.sleep(for: .milliseconds(300))
            try await killOne()
            #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        }
        t += 1000
        for match in matches {
            try await r.add(r.settings.feeds[0].stream, [("type", "match.full_time"), ("ts", String(t)), ("match", match), ("home_score", String(goals)),
                                                          ("away_score", "0")])
        }
        try await Task.sleep(for: .milliseconds(300))
        try await killOne()
        #expect(await eventually(timeout: .seconds(120)) { await r.drainedAll() })
        #expect(killed.count >= 3, "the chaos killed \(killed.count) workers")

        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=100000")?["deliveries"] as? [[String: Any]])
        let alertsSeen = alertsByTarget(log)
        let twice = alertsSeen.filter { $0.value > 1 }
        if let first = twice.keys.sorted().first {
            // What to look at first: every push that device got.
            let target = String(first.split(separator: " ")[0])
            print("noAlertTwiceThroughKillsAndFaults: the pushes of \(target.suffix(8)), shown an alert twice:")
            for d in log where d["target"] as? String == target { print("  \(d)") }
        }
        #expect(twice.isEmpty, "\(twice.count) alerts shown more than once, e.g. \(Array(twice.keys.sorted().prefix(3)))")
        var wrong: [String] = []
        for match in matches {
            for tok in tokens[match]! {
                let v = try await r.device(tok)
                if v?["state"] as? String != "ended" || state(v)["homeScore"] as? Int != goals { wrong.append(String(tok.suffix(4))) }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) devices not on the final state")
        let stats = try #require(try await r.sandbox.get("/sandbox/stats"))
        let byStatus = stats["byStatus"] as? [String: Int] ?? [:]
        print("noAlertTwice: \(killed.count) workers killed, \(log.count) deliveries, \(alertsSeen.count) alerts, statuses \(byStatus), GOAWAYs \(stats["goAways"] ?? 0)")
        #expect((byStatus["429"] ?? 0) > 0 && (byStatus["500"] ?? 0) > 0, "the faults were not injected: \(byStatus)")
        for w in workers { _ = await w.stop() }
    }
}

/// Budgets that add up.
extension SendTests {
    /// 30 critical scores 10 ms apart to five standard-tier devices: fan-outs superseded before
    /// their devices had them give their tokens back, so the key's `p10` equals the pushes each
    /// device received at 10 (the end's included).
    @Test func aBurstOfScoresCountsAtTenWhatDevicesGotAtTen() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let workers = try (0..<3).map { try r.worker("w\($0)") }
        defer { for w in workers { w.removeLogs() } }
        var t = now() - 100_000
        let tokens = (0..<5).map { String(format: "%064x", 0xb0e000 + $0) }
        for (i, tok) in tokens.enumerated() { try await register(r, device: "b\(i)", key: "match:bz", activity: "A\(i)", token: tok, ts: t) }
        #expect(await eventually { await r.drainedAll() })
        for goal in 1...30 {
            t += 1000
            try await score(r, "bz", goal, 0, ts: t)
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.full_time"), ("ts", String(t)), ("match", "bz"), ("home_score", "30"),
                                                      ("away_score", "0")])
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=10000")?["deliveries"] as? [[String: Any]])
        let budget = try await r.redis.send(RedisCommand("HMGET", "\(r.settings.prefix):{match:bz}:budget:standard", "p10", "refunded")).array ?? []
        for tok in tokens {
            let atTen = log.filter { $0["target"] as? String == tok && $0["priority"] as? Int == 10 }.count
            #expect(budget.first?.int == Int64(atTen), "p10 \(String(describing: budget.first?.int)), refunded \(String(describing: budget.last?.int)); \(tok.suffix(4)) got \(atTen) at 10")
            #expect(state(try await r.device(tok))["homeScore"] as? Int == 30)
        }
        print("aBurstOfScores: p10 \(budget.first?.int ?? -1), refunded \(budget.last?.int ?? 0)")
        for w in workers { #expect(await w.stop() == 0) }
    }
}
