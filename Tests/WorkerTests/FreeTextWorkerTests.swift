import ActivityCastCore
import Foundation
import RedisClient
import Testing
import TestSupport

/// Free text never costs a score (issue 40): real workers, Redis and the sandbox.
extension SendTests {
    /// A goal whose `player` is 1,024 characters, one whose player hides a bidirectional override,
    /// a control sequence and invalid UTF-8, and a score: every device shows each score, the names
    /// repaired (trimmed with an ellipsis, the rest removed or replaced), nothing dead-lettered,
    /// and each repair logged with its reasons.
    @Test func badFreeTextIsRepairedAndTheScoreStillGoesOut() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["budgets.standard.spacing_ms": "0"])
        defer { w.removeLogs() }
        let t = now() - 10_000
        let tok = token("9e")
        try await register(r, device: "a", key: "match:ft1", activity: "A", token: tok, ts: t)
        try await score(r, "ft1", 1, 1, ts: t + 1000)
        #expect(await eventually { state(try? await r.device(tok))["homeScore"] as? Int == 1 })
        let sports = r.settings.feeds[0].stream
        try await r.add(sports, [("type", "match.moment"), ("ts", String(t + 2000)), ("match", "ft1"), ("moment", "goal"), ("team", "away"),
                                 ("home_score", "1"), ("away_score", "2"), ("player", String(repeating: "x", count: 1024))])
        #expect(await eventually { state(try? await r.device(tok))["awayScore"] as? Int == 2 }, "the 1-2 is shown")
        let long = (state(try await r.device(tok))["lastEvent"] as? [String: Any])?["player"] as? String ?? ""
        #expect(long.utf8.count <= 256 && long.hasSuffix("\u{2026}") && long.hasPrefix("xxxx"), "\(long.utf8.count) bytes")
        // Hostile: an override that reverses the name, an escape sequence, a byte that isn't UTF-8.
        _ = try await r.redis.send(RedisCommand("XADD", [sports, "*", "type", "match.moment", "ts", String(t + 3000), "match", "ft1", "moment", "goal",
                                                         "team", "home", "home_score", "2", "away_score", "2"] as [any RedisArgument]
                                                + ["player", Array("Sa\u{202E}ak\u{1B}[2J".utf8) + [0xFF]]))
        #expect(await eventually { state(try? await r.device(tok))["homeScore"] as? Int == 2 }, "the 2-2 is shown")
        let hostile = (state(try await r.device(tok))["lastEvent"] as? [String: Any])?["player"] as? String
        #expect(hostile == "Saak[2J\u{FFFD}", "\(String(describing: hostile))")
        #expect(await eventually { await r.drainedAll() })
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.deadLetterStream)).int == 0, "nothing dead-lettered")
        #expect(await w.stop() == 0)
        let repaired = jsonLogLines(w.stderr).filter { $0["msg"] == "free text repaired" }.compactMap { $0["repaired"] }
        #expect(repaired == ["player: trimmed", "player: bidi+control+invalid_utf8"], "\(repaired)")
    }
}
