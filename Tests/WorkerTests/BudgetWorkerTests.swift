import ActivityCastCore
import ActivityCastSend
import Foundation
import RedisClient
import Testing
import TestSupport

/// Push budgets through real workers, Redis and the sandbox (docs/budgets.md).
extension SendTests {
    /// A flush's fan-out whose slices never reached the fleet (its worker couldn't hand slice 0
    /// back to the stream; here the record is made with the create script, and nothing more) is
    /// finished by the key's next flush, which then goes on; before, the key's flushes waited for
    /// it for good.
    @Test func anOrphanedFlushIsFinishedByTheNextOne() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let reg = r.settings.registrationsStream
        let t = now() - 100_000
        let tok = token("5f")
        let key = ActivityKey(kind: .match, id: "of")
        try await r.add(reg, [("type", "activity.token"), ("ts", String(t)), ("device", "of"), ("key", "\(key)"), ("activity", "A"),
                              ("token", tok), ("env", "development"), ("tier", "standard")])
        try await score(r, "of", 1, 0, ts: t + 1000)
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        #expect(try await eventually { state(try await r.device(tok))["homeScore"] as? Int == 1 })
        // The orphan: a flush's fan-out of a newer state, created and never sent.
        let prefix = r.settings.prefix, gen = "flush:standard:\(t + 5000):1"
        let fan = "\(prefix):{\(key)}:fan:\(gen)"
        let payload = #"{"aps":{"timestamp":\#((t + 5000) / 1000),"event":"update","content-state":{"homeScore":42,"awayScore":0}}}"#
        let newest = try await r.redis.send(RedisCommand("HGET", "\(prefix):{\(key)}:gen", "name")).string
        let created = try await r.redis.send(FanoutCreate(
            keys: FanoutKeys(r.settings.keys, key), gen: gen, millis: t + 5000, sliceSize: 4096, ttlSeconds: 3600, payload: Array(payload.utf8),
            quiet: Array(payload.utf8), priority: 5, tiers: AudiencePriorities(standard: 5).encodedTiers, live: [], stream: "", entryID: "",
            flush: true, newest: newest, broadcastPending: false).command)
        #expect(try FanoutCreateReply(created) == .new(slices: 1, tokens: 1), "\(created)")
        // The key's standard tier comes due for a flush.
        _ = try await r.redis.send(RedisCommand("ZADD", r.settings.keys.budgetDue, 0, "\(key)|standard"))
        #expect(try await eventually { state(try await r.device(tok))["homeScore"] as? Int == 42 }, "the orphaned flush was never sent")
        // Finished, its record goes at once (a flush has no entry to be delivered again).
        #expect(try await eventually { try await r.redis.send(RedisCommand("EXISTS", fan)).int == 0 })
        #expect(try await eventually { try await r.redis.send(RedisCommand("ZSCORE", r.settings.keys.budgetDue, "\(key)|standard")) == .null })
        #expect(await w.stop() == 0)
    }

    /// A critical update decided at 10 whose fan-out then finds a newer one of its key under way
    /// (another worker decided and recorded a newer event in between: here its record is written
    /// by hand) sends nothing, and its token goes back to the tier's bucket, counted `refunded`.
    @Test func aTokenWhosePushDidNotGoOutIsGivenBack() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        let t = now() - 100_000
        let tok = token("5e")
        try await r.add(reg, [("type", "activity.token"), ("ts", String(t)), ("device", "rf"), ("key", "match:rf"), ("activity", "A"),
                              ("token", tok), ("env", "development"), ("tier", "standard")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        // A newer fan-out of the key, as another worker would have begun it.
        let gen = "\(r.settings.prefix):{match:rf}:gen"
        _ = try await r.redis.send(RedisCommand("HSET", gen, "name", "\(sports)/9999999999999-0", "millis", t + 5000))
        try await r.add(sports, [("type", "match.moment"), ("ts", String(t + 1000)), ("match", "rf"), ("moment", "goal"), ("team", "home"),
                                 ("player", "P"), ("home_score", "1"), ("away_score", "0"), ("clock", "10'")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        let hash = try await r.redis.send(RedisCommand("HGETALL", "\(r.settings.prefix):{match:rf}:budget:standard"))
        let state = try #require(BudgetScripts.state(fromHash: hash))
        // Decided at 10, given back: `p10` counts pushes at 10 that went out.
        #expect(state.counters.priority10 == 0 && state.counters.refunded == 1, "\(state.counters)")
        // Full again: the bucket started full, gave a token to the goal and got it back.
        #expect(state.bucket.ticks == BudgetPolicy.default.standard.bucket.capacityTicks)
        let log = try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]] ?? []
        #expect(!log.contains { $0["target"] as? String == tok }, "the stale goal reached the device")
        #expect(await w.stop() == 0)
    }

    /// Eight goals in a row on one key with devices of both tiers, then the final whistle. With
    /// the default budgets a standard device's bucket (4, one kept for the end) allows three goals
    /// at priority 10 and the other five go at 5 without their alert: downgraded, not lost. A
    /// frequent device's bucket (10) takes all eight at 10. The end goes at 10 to everyone, and
    /// every device ends on the final score.
    @Test func aBurstOfGoalsIsDowngradedPerTierAndTheFinalWhistleGoesAtTen() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        let standard = [token("51"), token("52")], frequent = [token("f1"), token("f2")]
        for (i, tok) in (standard + frequent).enumerated() {
            t += 1
            try await r.add(reg, [("type", "activity.token"), ("ts", String(t)), ("device", "b\(i)"), ("key", "match:b1"),
                                  ("activity", "A\(i)"), ("token", tok), ("env", "development"),
                                  ("tier", i < 2 ? "standard" : "frequent")])
        }
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        for goal in 1...8 {
            t += 1000
            try await r.add(sports, [("type", "match.moment"), ("ts", String(t)), ("match", "b1"), ("moment", "goal"), ("team", "home"),
                                     ("player", "P\(goal)"), ("home_score", String(goal)), ("away_score", "0"), ("clock", "\(goal * 10)'")])
            #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        }
        t += 1000
        let end = try await r.add(sports, [("type", "match.full_time"), ("ts", String(t)), ("match", "b1"), ("home_score", "8"), ("away_score", "0")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        // Each tier's budget names the entry it last granted 10 to: decided again (a redelivery
        // after a crash before the fan-out was recorded), it costs nothing more.
        for tier in ["standard", "frequent"] {
            let granted = try await r.redis.send(RedisCommand("HGET", "\(r.settings.prefix):{match:b1}:budget:\(tier)", "p10_entry"))
            #expect(granted.string == "\(sports)/\(end)", "\(tier): \(granted)")
        }

        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=1000")?["deliveries"] as? [[String: Any]])
        for tok in standard + frequent {
            let mine = log.filter { $0["target"] as? String == tok }.sorted { ($0["sequence"] as? Int ?? 0) < ($1["sequence"] as? Int ?? 0) }
            let goals = mine.filter { $0["event"] as? String == "update" }
            let atTen = goals.filter { $0["priority"] as? Int == 10 }
            let quiet = goals.filter { $0["priority"] as? Int == 5 }
            let expected = standard.contains(tok) ? 3 : 8
            #expect(goals.count == 8, "\(tok.prefix(4)): \(goals.count) goals received")
            #expect(atTen.count == expected, "\(tok.prefix(4)): \(atTen.count) goals at 10, expected \(expected)")
            #expect(atTen.allSatisfy { $0["alert"] as? Bool == true }, "a goal at 10 lost its alert")
            #expect(quiet.allSatisfy { $0["alert"] as? Bool == false }, "a push at 5 carried an alert")
            // The downgraded goals are the last ones: the bucket runs out, it doesn't skip.
            #expect(goals.prefix(expected).allSatisfy { $0["priority"] as? Int == 10 })
            #expect(mine.last?["event"] as? String == "end" && mine.last?["priority"] as? Int == 10, "\(tok.prefix(4)): the end did not go at 10")
            #expect(mine.allSatisfy { $0["overBudget"] as? Bool == false }, "\(tok.prefix(4)) went over the sandbox's device budget")
            let view = try await r.device(tok)
            #expect(view?["state"] as? String == "ended" && state(view)["homeScore"] as? Int == 8)
        }
        #expect(await w.stop() == 0)
        let stopped = try #require(jsonLogLines(w.stderr).last { $0["msg"] == "worker stopped" })
        let budget = stopped["budget"] ?? ""
        for part in ["standard.p10=4", "standard.downgraded=5", "frequent.p10=9"] {
            #expect(budget.split(separator: ",").contains(Substring(part)), "\(part) not in the stop line's budget=\(budget)")
        }
    }

    /// Routine clock updates every 50 ms, inside a 3 s spacing: the first goes out at 5, the
    /// rest are coalesced into the key's newest state, which a flush sends when the spacing
    /// allows, per tier and to the channel. The worker that coalesced them is killed before the
    /// flush is due: another worker flushes from the fleet's schedule. Every device ends on the
    /// newest clock, with far fewer pushes than updates.
    @Test func coalescedStatesAreFlushedByAnyWorkerAndDevicesEndOnTheNewest() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        // A spacing long enough that the first worker is gone before anything is due.
        let spacing = ["budgets.standard.spacing_ms": "3000", "budgets.frequent.spacing_ms": "3000",
                       "budgets.channel_no_storage.spacing_ms": "3000", "worker.visibility_timeout_ms": "1000"]
        let w1 = try r.worker("w1", spacing)
        defer { w1.removeLogs() }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        let perToken = [token("c1"), token("c2"), token("c3")], onChannel = token("c4")
        for (i, tok) in (perToken + [onChannel]).enumerated() {
            t += 1
            var fields = [("type", "activity.token"), ("ts", String(t)), ("device", "c\(i)"), ("key", "match:c1"), ("activity", "A\(i)"),
                          ("token", tok), ("env", "development"), ("tier", i == 1 ? "frequent" : "standard")]
            if tok == onChannel { fields.append(("broadcast", "true")) }
            try await r.add(reg, fields)
        }
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        // The key's first event makes its channel (the device on broadcast is the channel's audience).
        t += 1000
        try await r.add(sports, [("type", "match.score"), ("ts", String(t)), ("match", "c1"), ("home_score", "0"), ("away_score", "0"),
                                 ("clock", "0'"), ("period", "first_half")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        let channel = try #require(try await r.channelID("match:c1"))

        for minute in 1...10 {
            t += 1000
            try await r.add(sports, [("type", "match.clock"), ("ts", String(t)), ("match", "c1"), ("clock", "\(minute)'"), ("period", "first_half")])
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        // Coalesced and scheduled: the worker dies before the flush is due.
        let scheduled = try await r.redis.send(RedisCommand("ZCARD", "\(r.settings.prefix):budget-due")).int ?? 0
        w1.kill(signal: SIGKILL)
        _ = await w1.waitForExit(timeout: .seconds(5))
        #expect(scheduled > 0, "nothing was coalesced: the test proves nothing")
        let recordsAtTheKill = Set(try await keysEverywhere(r.redis, "\(r.settings.prefix):*:fan:*"))

        let w2 = try r.worker("w2", spacing)
        defer { w2.removeLogs() }
        let everyone = perToken + [channel]
        func clock(_ target: String) async throws -> String? {
            let view = target == channel ? try await r.channel(target) : try await r.device(target)
            return state(view)["clock"] as? String
        }
        #expect(await eventually(timeout: .seconds(30)) {
            for target in everyone where (try? await clock(target)) != "10'" { return false }
            return true
        }, "not every device and the channel show the newest clock")
        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=1000")?["deliveries"] as? [[String: Any]])
        for target in everyone {
            let clocks = log.filter { $0["target"] as? String == target && ($0["timestamp"] as? Double ?? 0) > Double(t - 10_000) / 1000 }
            // The score just before spent the spacing, so even the first clock update may wait: at
            // least the flush, and far fewer pushes than updates.
            #expect((1...3).contains(clocks.count), "\(target.prefix(6)): \(clocks.count) pushes for 10 routine updates")
            #expect(clocks.allSatisfy { $0["priority"] as? Int == 5 })
        }
        #expect(try await r.redis.send(RedisCommand("ZCARD", "\(r.settings.prefix):budget-due")).int == 0)
        // Neither the events' fan-out records nor the flushes' outlive them (by more than the sweep;
        // w1, killed right after its last acknowledgements, may leave those finished to their TTL).
        var notSwept: [String] = []
        #expect(try await eventually(timeout: .seconds(2)) {
            notSwept = try await r.recordsNotSwept(excusing: recordsAtTheKill)
            return notSwept.isEmpty
        }, "\(notSwept)")
        #expect(await w2.stop() == 0)
        let stopped = try #require(jsonLogLines(w2.stderr).last { $0["msg"] == "worker stopped" })
        #expect((stopped["budget"] ?? "").contains("flushed"), "w2 flushed nothing: \(stopped["budget"] ?? "")")
    }
}

extension SendTests {
    /// A three-hour match on a compressed clock (one real millisecond is 0.36 s of match: the
    /// whole match in 30 s), four workers contending for the key's budgets, three devices of each tier: a clock update every 5
    /// seconds (routine: coalesced inside each tier's spacing and flushed), a goal every 4
    /// minutes (critical: 15 an hour, more than a standard budget allows, so some are
    /// downgraded), then the final whistle. In no hour of match time does a device get more
    /// priority-10 pushes than its tier's budget allows (capacity + refill per hour: 12
    /// standard, 70 frequent); frequent devices, served by their own budget, get more goals at 10
    /// than a standard budget allows; every device ends on the final state.
    @Test func aThreeHourMatchOnACompressedClockKeepsEveryDeviceWithinItsBudget() async throws {
        let r = try await rig(["--delivery-log", "50000"])
        defer { r.redis.close() }
        let scale: Int64 = 360
        let epoch = now()
        // Match time runs 360 times faster than Redis's clock: its events are hours ahead of it.
        let clock = ["test.budget_clock": "\(epoch)x\(scale)", "limits.max_future_ms": String(4 * 3_600_000)]
        // Four workers contend for the key's budgets.
        let workers = try (1...4).map { try r.worker("w\($0)", clock) }
        defer { workers.forEach { $0.removeLogs() } }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        let standard = (0..<3).map { token("a\($0)") }, frequent = (0..<3).map { token("e\($0)") }
        var t = epoch - 60_000
        for (i, tok) in (standard + frequent).enumerated() {
            t += 1
            try await r.add(reg, [("type", "activity.token"), ("ts", String(t)), ("device", "h\(i)"), ("key", "match:h1"),
                                  ("activity", "A\(i)"), ("token", tok), ("env", "development"), ("tier", i < 3 ? "standard" : "frequent")])
        }
        // And one on the key's channel, which has a budget of its own.
        try await r.add(reg, [("type", "activity.token"), ("ts", String(t + 1)), ("device", "hc"), ("key", "match:h1"), ("activity", "AC"),
                              ("token", token("ec")), ("env", "development"), ("broadcast", "true")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })

        // Match time: the budget clock's, so event times and decisions agree.
        func matchNow() -> Int64 { epoch + (now() - epoch) * scale }
        let start = matchNow()
        var home = 0, step = 0
        while true {
            let at = start + Int64(step) * 5000
            if at - start >= 3 * 3_600_000 { break }
            while matchNow() < at { try await Task.sleep(for: .milliseconds(2)) }
            // The clock with its seconds, so every tick changes the state (a tick that changes
            // nothing is sent nowhere: ChangeOnceTests) and routine updates coalesce.
            let minute = "\((at - start) / 60_000)'\(((at - start) / 1000) % 60)"
            if step > 0, step % 48 == 0 {
                home += 1
                try await r.add(sports, [("type", "match.moment"), ("ts", String(matchNow())), ("match", "h1"), ("moment", "goal"),
                                         ("team", "home"), ("player", "P"), ("home_score", String(home)), ("away_score", "0"), ("clock", minute)])
            } else {
                try await r.add(sports, [("type", "match.clock"), ("ts", String(matchNow())), ("match", "h1"), ("clock", minute),
                                         ("period", "second_half")])
            }
            step += 1
        }
        try await r.add(sports, [("type", "match.full_time"), ("ts", String(matchNow())), ("match", "h1"), ("home_score", String(home)),
                                 ("away_score", "0")])
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })

        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=50000")?["deliveries"] as? [[String: Any]])
        var report: [String] = []
        for tok in standard + frequent {
            let budget = standard.contains(tok) ? 12 : 70
            let mine = log.filter { $0["target"] as? String == tok }
            // Each priority-10 push at its match time; the most in any hour of match time.
            let tens = mine.filter { $0["priority"] as? Int == 10 }.compactMap { $0["timeMillis"] as? Int }
                .map { epoch + (Int64($0) - epoch) * scale }.sorted()
            let most = mostWithin(3_600_000, of: tens)
            report.append("\(tok.prefix(2)): \(mine.count) pushes, \(tens.count) at 10, at most \(most) in an hour")
            #expect(most <= budget, "\(tok.prefix(4)) got \(most) priority-10 pushes in one hour of match time (budget \(budget))")
            let view = try await r.device(tok)
            #expect(view?["state"] as? String == "ended" && state(view)["homeScore"] as? Int == home, "\(tok.prefix(4)) not on the final state")
            #expect(mine.last?["event"] as? String == "end" && mine.last?["priority"] as? Int == 10)
            // Served by their own budget: more goals at 10 than a standard budget could ever grant in
            // three hours (4 + 8 × 3 = 28). (A goal superseded by the next update 14 ms later, on a
            // loaded machine, goes out with that update's state instead.)
            if frequent.contains(tok) { #expect(tens.count > 28, "\(tok.prefix(4)): \(tens.count) at 10 for \(home) goals and the end") }
        }
        // The key's channel (made at its first event) is held to its own budget: 14 an hour.
        if let channel = try await r.channelID("match:h1") {
            let tens = log.filter { $0["target"] as? String == channel && $0["priority"] as? Int == 10 }.compactMap { $0["timeMillis"] as? Int }
                .map { epoch + (Int64($0) - epoch) * scale }.sorted()
            let most = mostWithin(3_600_000, of: tens)
            report.append("channel: \(tens.count) at 10, at most \(most) in an hour")
            #expect(most <= 14, "the channel got \(most) priority-10 broadcasts in one hour of match time (budget 14)")
        } else {
            Issue.record("the key has no channel")
        }
        for w in workers { #expect(await w.stop() == 0) }
        let budgets = workers.compactMap { jsonLogLines($0.stderr).last { $0["msg"] == "worker stopped" }?["budget"] }
        print("BudgetWorkerTests 3 h match: \(step) events, \(home) goals; \(report.joined(separator: "; ")); workers: \(budgets)")
        // Not vacuous: standard devices had goals downgraded, and routine updates were coalesced and flushed.
        let all = budgets.joined(separator: ",")
        #expect(all.contains("standard.downgraded") && all.contains("coalesced") && all.contains("flushed"), "\(all)")
    }
}

extension SendTests {
    /// Each device's push-to-start budget holds across keys: with a bucket of 2 (no refill), a
    /// device following a team gets the starts of its first two matches; the third is skipped and
    /// counted, while a device that follows only the third match's team still gets its start.
    @Test func aDevicesPushToStartBudgetHoldsAcrossMatches() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.start.capacity": "2", "budgets.start.refill_per_hour": "0"])
        defer { w.removeLogs() }
        let sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        let fan = token("5a"), other = token("5b")
        for (device, tok, team) in [("fan", fan, "team:ars"), ("other", other, "team:lee")] {
            t += 1
            try await follower(r, device: device, startToken: tok, team: team, ts: t)
        }
        #expect(await eventually { await r.drainedAll() })
        for (match, home, away) in [("s1", "ars", "che"), ("s2", "tot", "ars"), ("s3", "ars", "lee")] {
            t += 1000
            try await r.add(sports, [("type", "match.started"), ("ts", String(t)), ("match", match), ("home", home), ("away", away)])
            #expect(await eventually { await r.drainedAll() })
        }
        let starts = (try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]] ?? [])
            .filter { $0["event"] as? String == "start" }
        #expect(starts.filter { $0["target"] as? String == fan }.count == 2, "the fan's starts: \(starts.filter { $0["target"] as? String == fan }.count)")
        #expect(starts.filter { $0["target"] as? String == other }.count == 1)
        #expect(await w.stop() == 0)
        let stopped = try #require(jsonLogLines(w.stderr).last { $0["msg"] == "worker stopped" })
        #expect(stopped["starts_over_budget"] == "1")
        #expect(try await r.redis.send(RedisCommand("HGET", r.settings.keys.counters, "starts_over_budget")).string == "1")
    }
}

extension SendTests {
    /// Registers `tokens` on `key` (standard unless listed in `frequent`; `onChannel` on broadcast)
    /// and sends the key's first event, which makes its channel. Returns the channel id.
    func budgetKey(_ r: Rig, _ key: String, match: String, tokens: [String], frequent: Set<String> = [], onChannel: Set<String> = [],
                   t: inout Int64) async throws -> String? {
        for (i, tok) in tokens.enumerated() {
            t += 1
            var fields = [("type", "activity.token"), ("ts", String(t)), ("device", "\(match)-\(i)"), ("key", key), ("activity", "A\(i)"),
                          ("token", tok), ("env", "development"), ("tier", frequent.contains(tok) ? "frequent" : "standard")]
            if onChannel.contains(tok) { fields.append(("broadcast", "true")) }
            try await r.add(r.settings.registrationsStream, fields)
        }
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.score"), ("ts", String(t)), ("match", match), ("home_score", "0"),
                                                      ("away_score", "0"), ("clock", "0'"), ("period", "first_half")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        return try await r.channelID(key)
    }

    /// One routine update coalesced for both tiers comes due for both at once: each tier's flush
    /// goes out then, not one of them a whole spacing later (the second flush used to yield to the
    /// first's fan-out and keep the spacing its decision had moved on).
    @Test func bothTiersFlushTogetherWhenTheyComeDueTogether() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.standard.spacing_ms": "3000", "budgets.frequent.spacing_ms": "3000"])
        defer { w.removeLogs() }
        var t = now() - 100_000
        let standard = token("d1"), frequent = token("d2")
        _ = try await budgetKey(r, "match:d1", match: "d1", tokens: [standard, frequent], frequent: [frequent], t: &t)
        for minute in 1...3 {
            t += 1000
            try await r.add(r.settings.feeds[0].stream, [("type", "match.clock"), ("ts", String(t)), ("match", "d1"), ("clock", "\(minute)'"),
                                                          ("period", "first_half")])
        }
        let last = Double(t / 1000)  // aps.timestamp: whole seconds
        #expect(await eventually(timeout: .seconds(30)) {
            let s = state(try? await r.device(standard)), f = state(try? await r.device(frequent))
            return s["clock"] as? String == "3'" && f["clock"] as? String == "3'"
        })
        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=1000")?["deliveries"] as? [[String: Any]])
        func at(_ tok: String) -> Int? { log.first { $0["target"] as? String == tok && ($0["timestamp"] as? NSNumber)?.doubleValue == last }?["timeMillis"] as? Int }
        let a = try #require(at(standard)), b = try #require(at(frequent))
        #expect(abs(a - b) < 1500, "the tiers' flushes went \(abs(a - b)) ms apart (spacing 3000 ms)")
        #expect(await w.stop() == 0)
    }

    /// APNs unavailable when a coalesced state comes due: the flush fails, its decision is undone,
    /// and once APNs is back the per-token device and the channel get the newest state (it used to
    /// be lost: the decision had cleared it before anything was sent).
    @Test func aFlushThatFailsIsRetriedAndNothingIsLost() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.standard.spacing_ms": "1500", "budgets.channel_no_storage.spacing_ms": "1500"])
        defer { w.removeLogs() }
        var t = now() - 100_000
        let perToken = token("e1"), onChannel = token("e2")
        let channel = try #require(try await budgetKey(r, "match:e1", match: "e1", tokens: [perToken, onChannel], onChannel: [onChannel], t: &t))
        for minute in 1...3 {
            t += 1000
            try await r.add(r.settings.feeds[0].stream, [("type", "match.clock"), ("ts", String(t)), ("match", "e1"), ("clock", "\(minute)'"),
                                                          ("period", "first_half")])
        }
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1}"#)
        #expect(await eventually(timeout: .seconds(30)) { w.stderr.contains("flushing a coalesced state failed") }, "no flush failed: the test proves nothing")
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":0}"#)
        #expect(await eventually(timeout: .seconds(30)) {
            let d = state(try? await r.device(perToken)), c = state(try? await r.channel(channel))
            return d["clock"] as? String == "3'" && c["clock"] as? String == "3'"
        }, "the coalesced state was lost when its flush failed")
        #expect(await w.stop() == 0)
    }
}

extension SendTests {
    /// A start entry delivered again and again during an APNs outage spends its followers' start
    /// budget once, not once per delivery: with a bucket of 2 and three failed deliveries, the
    /// follower still gets its start when APNs is back.
    @Test func aStartRetriedThroughAnOutageSpendsTheBudgetOnce() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.start.capacity": "2", "budgets.start.refill_per_hour": "0",
                                   "worker.visibility_timeout_ms": "1000", "worker.claim_interval_ms": "200"])
        defer { w.removeLogs() }
        var t = now() - 100_000
        let fan = token("6a")
        try await r.add(r.settings.registrationsStream, [("type", "start.token"), ("ts", String(t)), ("device", "fan"),
                                                         ("activity_type", "MatchActivityAttributes"), ("token", fan), ("env", "development")])
        try await r.add(r.settings.registrationsStream, [("type", "follow"), ("ts", String(t)), ("device", "fan"), ("target", "team:ars")])
        // (No channel: the follower isn't on broadcast, and a key nobody follows on broadcast has none.)
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.scheduled"), ("ts", String(t)), ("match", "o1"), ("home", "ars"),
                                                      ("away", "che"), ("competition", "Cup"), ("kickoff", String(t + 600_000))])
        #expect(await eventually { await r.drainedAll() })
        #expect(try await r.channelID("match:o1") == nil)
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1}"#)
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.started"), ("ts", String(t)), ("match", "o1"), ("home", "ars"), ("away", "che")])
        #expect(await eventually(timeout: .seconds(60)) { w.stderr.components(separatedBy: "sending failed; the entry stays pending").count > 3 },
                "the start was not retried three times: the test proves nothing")
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":0}"#)
        #expect(await eventually(timeout: .seconds(60)) { (try? await r.device(fan))?["startsReceived"] as? Int == 1 },
                "the follower never got its start: its budget was spent by the failed deliveries")
        #expect(await w.stop() == 0)
        let stopped = try #require(jsonLogLines(w.stderr).last { $0["msg"] == "worker stopped" })
        #expect(stopped["starts_over_budget"] == "0")
    }
}
