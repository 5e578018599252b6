import ActivityCastCore
import ActivityCastInspect
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

extension SendTests {
    /// `budgets.*` reach the worker's decisions: with a standard bucket of 2 (one kept for the
    /// end), one goal of three goes at 10 and two are downgraded, the end still goes at 10, and
    /// `inspect` shows that budget with the configured capacity.
    @Test func configuredBudgetsDecideTheWorkersPriorities() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let budget = ["budgets.standard.capacity": "2"]
        let w = try r.worker("wb", budget)
        defer { w.removeLogs() }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        var t = now() - 100_000
        let tok = token("5c")
        try await r.add(reg, [("type", "activity.token"), ("ts", String(t)), ("device", "bs"), ("key", "match:bs"), ("activity", "A1"),
                              ("token", tok), ("env", "development"), ("tier", "standard")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        for goal in 1...3 {
            t += 1000
            try await r.add(sports, [("type", "match.moment"), ("ts", String(t)), ("match", "bs"), ("moment", "goal"), ("team", "home"),
                                     ("player", "P\(goal)"), ("home_score", String(goal)), ("away_score", "0"), ("clock", "\(goal * 10)'")])
            #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        }
        t += 1000
        try await r.add(sports, [("type", "match.full_time"), ("ts", String(t)), ("match", "bs"), ("home_score", "3"), ("away_score", "0")])
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })

        let log = try #require(try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]])
        let mine = log.filter { $0["target"] as? String == tok }.sorted { ($0["sequence"] as? Int ?? 0) < ($1["sequence"] as? Int ?? 0) }
        let goals = mine.filter { $0["event"] as? String == "update" }
        #expect(goals.map { $0["priority"] as? Int } == [10, 5, 5], "\(goals)")
        #expect(mine.last?["event"] as? String == "end" && mine.last?["priority"] as? Int == 10)
        #expect(await w.stop() == 0)

        // inspect, with the same settings, shows the budget the worker spent.
        let settings = try SettingsLoader.load(file: nil, environment: [:],
                                               overrides: budget.merging(["prefix": r.settings.prefix, "redis.url": r.server.urlString]) { a, _ in a })
        let report = try await Inspector(settings: settings, redis: r.redis).report()
        let row = try #require(report.budgets.budgets.first { $0.key == "match:bs" && $0.audience == "standard" })
        #expect(row.capacity == 2 && row.priority10 == 2 && row.downgraded == 2 && row.priority5 == 2, "\(row)")
        #expect(row.endedMillis == t && row.tokens < 0.1)
    }
}
