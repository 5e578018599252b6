import ActivityCastInspect
import Foundation
import RedisClient
import Testing
import TestSupport

/// `activitycast trace KEY`: every feed entry of the key once, in order, with what the merge did,
/// each audience's decision and budget, and the channel's broadcasts as APNs answered them.
extension SendTests {
    @Test func traceShowsEveryEntryOfTheKeyWithItsDecisionsAndAnswers() async throws {
        let r = try await rig(["--delivery-log", "1000"])
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.standard.capacity": "2"])
        defer { w.removeLogs() }
        let sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        try await register(r, device: "c", key: "match:tr1", activity: "C", token: token("e5"), ts: t, broadcast: true)
        try await register(r, device: "p", key: "match:tr1", activity: "P", token: token("e6"), ts: t)
        #expect(await eventually { await r.drainedAll() })
        var ids: [String] = []
        func add(_ fields: [(String, String)]) async throws {
            let id = try #require(try await r.redis.send(RedisCommand("XADD", [sports, "*"] + fields.flatMap { [$0.0, $0.1] })).string)
            ids.append(id)
            #expect(await eventually { await r.drainedAll() })
        }
        t += 1000
        try await add([("type", "match.started"), ("ts", String(t)), ("match", "tr1"), ("home", "ars"), ("away", "che")])
        for goal in 1...2 {
            t += 1000
            try await add([("type", "match.moment"), ("ts", String(t)), ("match", "tr1"), ("moment", "goal"), ("team", "home"),
                           ("player", "P\(goal)"), ("home_score", String(goal)), ("away_score", "0"), ("clock", "\(goal * 10)'")])
        }
        // Older than the key's newest: stale.
        try await add([("type", "match.score"), ("ts", String(t - 500)), ("match", "tr1"), ("home_score", "1"), ("away_score", "0")])
        // Dead-lettered before any plan: a score that isn't a number, a time far ahead of the clock.
        try await add([("type", "match.score"), ("ts", String(t + 100)), ("match", "tr1"), ("home_score", "two"), ("away_score", "0")])
        try await add([("type", "match.score"), ("ts", String(t + 86_400_000)), ("match", "tr1"), ("home_score", "3"), ("away_score", "0")])

        let (status, out, err) = try await runActivitycast(["trace", "match:tr1", "--json"], redis: r.server, settings: ["prefix": r.settings.prefix])
        #expect(status == 0, "\(err)")
        let report = try JSONDecoder().decode(TraceReport.self, from: Data(out.utf8))
        #expect(report.events.map(\.entryID) == ids && report.events.allSatisfy { $0.stream == sports && $0.delivery == 1 }, "\(report.events.map(\.entryID)) \(ids)")
        #expect(report.events.map(\.type) == ["match.started", "match.moment", "match.moment", "match.score", "match.score", "match.score"])
        let first = report.events[1], second = report.events[2], stale = report.events[3]
        let (malformed, ahead) = (report.events[4], report.events[5])
        #expect(malformed.merge == "dead-lettered" && malformed.why?.contains("home_score") == true && malformed.broadcasts.isEmpty, "\(malformed)")
        #expect(ahead.merge == "dead-lettered" && ahead.why?.contains("ahead of Redis's clock") == true, "\(ahead)")
        let letters = try #require(try await r.redis.send(RedisCommand("XRANGE", r.settings.deadLetterStream, "-", "+")).array)
        #expect(letters.count == 2, "\(letters)")
        #expect(first.merge == "changed" && first.tsMillis == t - 1000 && first.fields.contains("homeScore"), "\(first)")
        func decision(_ e: TraceReport.Event, _ a: String) -> TraceReport.Audience? { e.audiences.first { $0.audience == a } }
        #expect(decision(first, "channel")?.decision == "p10" && decision(first, "standard")?.decision == "p10", "\(first.audiences)")
        #expect(decision(first, "standard")?.budget?.tokensLeft == 1.0 && decision(first, "standard")?.budget?.capacity == 2, "\(first.audiences)")
        // The second goal: the standard tier's last token is the end's: downgraded, and why.
        #expect(decision(second, "standard")?.decision == "downgraded" && decision(second, "standard")?.why?.contains("budget is spent") == true,
                "\(second.audiences)")
        #expect(stale.merge?.hasPrefix("stale ") == true && stale.broadcasts.isEmpty, "\(stale)")
        // Each broadcast as APNs answered it, and exactly what the sandbox accepted for the channel.
        let channel = try #require(try await r.channelID("match:tr1"))
        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=1000")?["deliveries"] as? [[String: Any]])
        let accepted = log.filter { $0["target"] as? String == channel }
        let traced = report.events.flatMap(\.broadcasts).filter { $0.channel == channel }
        #expect(!traced.isEmpty && traced.count == accepted.count && traced.allSatisfy { $0.status == 200 && $0.fate == "delivered" && $0.apnsUniqueID != nil },
                "\(traced) \(accepted)")
        #expect(first.broadcasts.first?.priority == 10 && first.broadcasts.first?.alert == true && second.broadcasts.first?.alert == true)
        // The table: a line per event and audience.
        let (_, text, _) = try await runActivitycast(["trace", "match:tr1"], redis: r.server, settings: ["prefix": r.settings.prefix])
        #expect(text.hasPrefix("TRAIL match:tr1: 6 events") && text.contains("downgraded") && text.contains("stale "), "\(text)")
        // The per-token device: each dead letter is an event it was not sent, and why.
        let (_, dev, _) = try await runActivitycast(["trace", "match:tr1", "--device", "p", "--json"], redis: r.server, settings: ["prefix": r.settings.prefix])
        let notSent = try #require(try JSONSerialization.jsonObject(with: Data(dev.utf8)) as? [String: Any])["notSent"] as? [[String: Any]]
        let dead = (notSent ?? []).filter { ($0["reason"] as? String)?.hasPrefix("dead-lettered: ") == true }.compactMap { $0["entryID"] as? String }
        #expect(dead == Array(ids.suffix(2)), "\(notSent ?? [])")
        #expect(await w.stop() == 0)
    }
}

extension SendTests {
    /// `trace KEY --device ID` is exact: with 429s mixed in and a token answered 410, each
    /// per-token device's pushes that the trace shows delivered are exactly what the sandbox
    /// accepted for its token (timestamp and priority, in order), each refused attempt is shown
    /// with its status, the channel device's pushes are exactly what its channel accepted, and
    /// the 410'd token is shown forgotten with Apple's reason.
    @Test func traceOfADeviceIsWhatTheSandboxAccepted() async throws {
        let r = try await rig(["--delivery-log", "10000"])
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.standard.capacity": "3"])
        defer { w.removeLogs() }
        var t = now() - 100_000
        let devices = (0..<12).map { token(String(format: "a%02x", $0)) }
        for (i, tok) in devices.enumerated() {
            try await register(r, device: "d\(i)", key: "match:tx1", activity: "A\(i)", token: tok, ts: t)
        }
        try await register(r, device: "c", key: "match:tx1", activity: "C", token: token("ac"), ts: t, broadcast: true)
        #expect(await eventually { await r.drainedAll() })
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"tooManyRequestsRate":0.25,"seed":11,"unregisteredTokens":{"\#(devices[3])":\#(t + 500)}}"#)
        let sports = r.settings.feeds[0].stream
        for goal in 1...5 {
            t += 1000
            try await r.add(sports, [("type", "match.moment"), ("ts", String(t)), ("match", "tx1"), ("moment", "goal"), ("team", "home"),
                                     ("player", "P\(goal)"), ("home_score", String(goal)), ("away_score", "0"), ("clock", "\(goal * 10)'")])
            #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        }
        t += 1000
        try await r.add(sports, [("type", "match.full_time"), ("ts", String(t)), ("match", "tx1"), ("home_score", "5"), ("away_score", "0")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        try await Task.sleep(for: .milliseconds(300))
        let accepted = try await r.sandbox.deviceDeliveries()
        func trace(_ device: String) async throws -> DeviceTrace {
            let (status, out, err) = try await runActivitycast(["trace", "match:tx1", "--device", device, "--json"], redis: r.server,
                                                               settings: ["prefix": r.settings.prefix])
            #expect(status == 0, "\(err)")
            return try JSONDecoder().decode(DeviceTrace.self, from: Data(out.utf8))
        }
        var refused = 0
        for (i, tok) in devices.enumerated() {
            let view = try await trace("d\(i)")
            let delivered = view.pushes.filter { $0.fate == "delivered" }
            let mine = accepted.filter { $0.target == tok }
            #expect(delivered.map { "\($0.timestamp ?? -1) p\($0.priority)" } == mine.map { "\(Int64($0.timestamp)) p\($0.priority)" },
                    "d\(i): trace \(view.pushes) sandbox \(mine)")
            #expect(!view.pushes.contains { $0.fate == "unknown" || $0.fate == "uncertain" }, "d\(i): \(view.pushes)")
            refused += view.pushes.filter { $0.status == 429 }.count
            if i == 3 {
                #expect(view.token.state == "forgotten" && view.token.reason == "Unregistered", "\(view.token)")
                #expect(view.pushes.contains { $0.status == 410 })
            } else {
                #expect(view.token.state == "registered" && view.pushes.last?.event == "end", "d\(i): \(view.pushes)")
            }
        }
        #expect(refused > 0, "no 429 was seen: the test proves nothing about refused attempts")
        let channel = try #require(try await r.channelID("match:tx1"))
        let view = try await trace("c")
        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=10000")?["deliveries"] as? [[String: Any]])
        let onChannel = log.filter { $0["target"] as? String == channel }
        let viaChannel = view.pushes.filter { $0.fate == "delivered" }
        #expect(view.token.onBroadcast && viaChannel.count == onChannel.count && viaChannel.allSatisfy { $0.via == "channel" && $0.channel == channel },
                "\(view.pushes) \(onChannel)")
        #expect(await w.stop() == 0)
    }
}

extension SendTests {
    /// `inspect --key` and `inspect --device`: one key's state, channels, budgets, audience and
    /// trail; one device's settings, start tokens, follows and keys (tokens shortened).
    @Test func inspectShowsOneKeyAndOneDevice() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let t = now() - 60_000
        let tok = token("e9")
        try await register(r, device: "c", key: "match:ik1", activity: "C", token: token("e8"), ts: t, broadcast: true)
        try await register(r, device: "p", key: "match:ik1", activity: "P", token: tok, ts: t)
        try await r.add(r.settings.registrationsStream, [("type", "follow"), ("ts", String(t)), ("device", "p"), ("target", "team:ars")])
        try await score(r, "ik1", 2, 1, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        let settings = ["prefix": r.settings.prefix]
        var (status, out, err) = try await runActivitycast(["inspect", "--key", "match:ik1", "--json"], redis: r.server, settings: settings)
        #expect(status == 0, "\(err)")
        let key = try JSONDecoder().decode(KeyInspection.self, from: Data(out.utf8))
        #expect(key.contentState?["homeScore"] == "2" && key.newestEvent == "update" && key.newestMillis == t + 1000, "\(key)")
        #expect(key.onBroadcast == 1 && key.devices.map(\.device).sorted() == ["c", "p"] && key.channels["development"] != nil, "\(key)")
        #expect(key.budgets["standard"]?["p10"] == "1" && key.trailRecords > 0 && key.endedMillis == nil, "\(key)")
        (status, out, err) = try await runActivitycast(["inspect", "--device", "p"], redis: r.server, settings: settings)
        #expect(status == 0 && out.contains("KEYS") && out.contains("match:ik1") && out.contains("team:ars"), "\(err)\(out)")
        #expect(!out.contains(tok) && out.contains(String(tok.prefix(8)) + "…"), "the whole token was printed: \(out)")
        // trace --device without a key: the device, then its pushes for each of its keys.
        (status, out, err) = try await runActivitycast(["trace", "--device", "p"], redis: r.server, settings: settings)
        #expect(status == 0 && out.hasPrefix("DEVICE p") && out.contains("DEVICE p on match:ik1: token registered") && out.contains("PUSHES 1"), "\(err)\(out)")
        (status, out, _) = try await runActivitycast(["inspect", "--device", "nobody"], redis: r.server, settings: settings)
        #expect(status == 0 && out.contains("not registered"), "\(out)")
        #expect(await w.stop() == 0)
    }
}

extension SendTests {
    /// Push-to-start on the trail: each device's starts that `trace --device` shows delivered are
    /// exactly what the sandbox accepted for its start token (429s mixed in, each refused attempt
    /// shown with its status); a start over the device's start budget, and a device following
    /// none of the event's teams, are shown not sent with why; `trace KEY` counts each event's
    /// starts.
    @Test func tracedStartsAreWhatTheSandboxAccepted() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.start.capacity": "2", "budgets.start.refill_per_hour": "0"])
        defer { w.removeLogs() }
        let sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        let fans = (0..<6).map { ("fan\($0)", token(String(format: "5%x", $0)), "team:ars") } + [("other", token("5e"), "team:lee")]
        for (device, tok, team) in fans {
            t += 1
            try await follower(r, device: device, startToken: tok, team: team, ts: t)
        }
        #expect(await eventually { await r.drainedAll() })
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"tooManyRequestsRate":0.3,"seed":5}"#)
        for (match, home, away) in [("st1", "ars", "che"), ("st2", "tot", "ars"), ("st3", "ars", "new")] {
            t += 1000
            try await r.add(sports, [("type", "match.started"), ("ts", String(t)), ("match", match), ("home", home), ("away", away)])
            #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        }
        let accepted = try await r.sandbox.deviceDeliveries().filter { $0.event == "start" }
        var refused = 0
        for match in ["st1", "st2", "st3"] {
            let (status, out, err) = try await runActivitycast(["trace", "match:\(match)", "--json"], redis: r.server, settings: ["prefix": r.settings.prefix])
            #expect(status == 0, "\(err)")
            let report = try JSONDecoder().decode(TraceReport.self, from: Data(out.utf8))
            #expect(report.events.count == 1 && report.events[0].event == "start", "\(report.events)")
            let expected = match == "st3" ? TraceReport.Starts(sent: 0, overBudget: 6) : TraceReport.Starts(sent: 6)
            #expect(report.events.first?.starts == expected, "\(match): \(String(describing: report.events.first?.starts))")
            for (device, tok, _) in fans {
                let (status, out, err) = try await runActivitycast(["trace", "match:\(match)", "--device", device, "--json"], redis: r.server,
                                                                   settings: ["prefix": r.settings.prefix])
                #expect(status == 0, "\(err)")
                let view = try JSONDecoder().decode(DeviceTrace.self, from: Data(out.utf8))
                let ts = view.pushes.first?.timestamp ?? -1
                let mine = accepted.filter { $0.target == tok && Int64($0.timestamp) == ts }
                let delivered = view.pushes.filter { $0.fate == "delivered" }
                #expect(delivered.map { "\($0.event) p\($0.priority)" } == mine.map { "start p\($0.priority)" }, "\(device) \(match): \(view.pushes) \(mine)")
                refused += view.pushes.filter { $0.status == 429 }.count
                if device == "other" || match == "st3" {
                    #expect(view.pushes.isEmpty && view.notSent.count == 1, "\(device) \(match): \(view)")
                    let why = view.notSent.first?.reason ?? ""
                    #expect(device == "other" ? why.contains("follows none") : why.contains("start budget was spent"), "\(device) \(match): \(why)")
                } else {
                    #expect(delivered.count == 1 && !view.pushes.contains { $0.fate == "unknown" }, "\(device) \(match): \(view.pushes)")
                }
            }
        }
        #expect(refused > 0, "no 429 was seen: the test proves nothing about refused starts")
        #expect(await w.stop() == 0)
    }
}
