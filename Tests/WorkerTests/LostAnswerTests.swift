import ActivityCastCore
import Foundation
import RedisClient
import Testing
import TestSupport

/// An alert is shown once, whatever happens to APNs's answers (issue 40): a push whose answer was
/// lost after APNs acted on it goes again only without its alert.
extension SendTests {
    /// Two workers, one SIGKILLed mid-fan-out (and another started); the sandbox loses the answer
    /// of 3 % of the requests after it delivered them (the connection resets), answers 5 % with
    /// 429 and says GOAWAY every 60 streams; two matches with goals, per-token devices and one on
    /// each match's channel. No device is shown an alert twice, pushes were sent again quietly,
    /// and every device ends on its match's final state.
    @Test func noAlertTwiceWhenAnswersAreLost() async throws {
        let r = try await rig(["--lost-answer-rate", "0.03", "--fault429", "0.05", "--goaway-after", "60", "--delivery-log", "100000"])
        defer { r.redis.close() }
        let small = ["fanout.slice_size": "30", "fanout.batch": "10", "fanout.lease_ms": "1000", "worker.visibility_timeout_ms": "1500",
                     "worker.claim_interval_ms": "200", "budgets.standard.capacity": "100", "budgets.standard.refill_per_hour": "100000",
                     "budgets.channel_no_storage.capacity": "100"]
        var workers = try (0..<2).map { try r.worker("w\($0)", small) }
        var killed: [ChildProcess] = []
        defer { for w in workers + killed { w.removeLogs() } }
        var t = now() - 100_000
        let matches = ["l1", "l2"]
        var tokens: [String: [String]] = [:], channelTokens: [String: String] = [:]
        for (m, match) in matches.enumerated() {
            tokens[match] = (0..<60).map { String(format: "%064x", 0xb1e000 + m * 1000 + $0) }
            for (i, tok) in tokens[match]!.enumerated() {
                try await register(r, device: "\(match)-\(i)", key: "match:\(match)", activity: "A\(i)", token: tok, ts: t)
            }
            channelTokens[match] = String(format: "%064x", 0xc1e000 + m)
            try await register(r, device: "\(match)-c", key: "match:\(match)", activity: "C", token: channelTokens[match]!, ts: t, broadcast: true)
        }
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        let goals = 4
        for goal in 1...goals {
            t += 1000
            for match in matches {
                try await homeGoal(r, match, goal, ts: t)
            }
            if goal == 2 {
                try await Task.sleep(for: .milliseconds(150))
                let victim = workers.removeFirst()
                victim.kill(signal: SIGKILL)
                _ = await victim.waitForExit(timeout: .seconds(5))
                killed.append(victim)
                workers.append(try r.worker("w9", small))
            }
            #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        }
        t += 1000
        for match in matches {
            try await r.add(r.settings.feeds[0].stream, [("type", "match.full_time"), ("ts", String(t)), ("match", match), ("home_score", String(goals)),
                                                          ("away_score", "0")])
        }
        #expect(await eventually(timeout: .seconds(120)) { await r.drainedAll() })

        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=100000")?["deliveries"] as? [[String: Any]])
        let alertsSeen = alertsByTarget(log)
        let twice = alertsSeen.filter { $0.value > 1 }
        #expect(twice.isEmpty, "\(twice.count) alerts shown more than once, e.g. \(Array(twice.keys.sorted().prefix(3)))")
        let stats = try #require(try await r.sandbox.get("/sandbox/stats"))
        #expect(stats["repeatedAlerts"] as? Int == 0, "the sandbox's own count: \(stats["repeatedAlerts"] ?? "-")")
        let lost = stats["answersLost"] as? Int ?? 0
        #expect(lost > 0, "answers lost: \(lost)")
        var wrong: [String] = []
        for match in matches {
            for tok in tokens[match]! + [channelTokens[match]!] where tok != channelTokens[match] {
                let v = try await r.device(tok)
                if v?["state"] as? String != "ended" || state(v)["homeScore"] as? Int != goals { wrong.append(String(tok.suffix(4))) }
            }
            let channel = try #require(try await r.channelID("match:\(match)"))
            let c = try await r.channel(channel)
            if c?["state"] as? String != "ended" || state(c)["homeScore"] as? Int != goals { wrong.append("channel of \(match)") }
        }
        #expect(wrong.isEmpty, "\(wrong.count) devices not on the final state: \(wrong.prefix(5))")
        var quiet = 0
        for w in workers {
            _ = await w.stop()
            quiet += jsonLogLines(w.stderr).compactMap { $0["resent_quietly"].flatMap(Int.init) }.last ?? 0
        }
        print("noAlertTwiceWhenAnswersAreLost: \(log.count) deliveries, \(alertsSeen.count) alerts, \(lost) answers lost, \(quiet) sent again quietly (by the workers still running)")
        #expect(quiet > 0, "pushes sent again without their alert")
    }
}

extension SendTests {
    /// The `goal`th home goal of `match` at `ts` (the score `goal`-0, minute `goal` × 10).
    func homeGoal(_ r: Rig, _ match: String, _ goal: Int, ts: Int64) async throws {
        try await r.add(r.settings.feeds[0].stream, [("type", "match.moment"), ("ts", String(ts)), ("match", match), ("moment", "goal"),
                                                      ("team", "home"), ("player", "P\(goal)"), ("home_score", String(goal)),
                                                      ("away_score", "0"), ("clock", "\(goal * 10)'")])
    }

    /// How often each device or channel (`target`) was shown each alert (by its `aps.timestamp`),
    /// from the sandbox's delivery log.
    func alertsByTarget(_ log: [[String: Any]]) -> [String: Int] {
        var seen: [String: Int] = [:]
        for d in log where d["alert"] as? Bool == true {
            seen["\(d["target"] as? String ?? "") \((d["timestamp"] as? NSNumber)?.int64Value ?? 0)", default: 0] += 1
        }
        return seen
    }
}
