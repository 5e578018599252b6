import Foundation
import RedisClient
import Testing
import TestSupport

/// The outcomes stream for app backends (`<prefix>:outcomes`): a token forgotten with Apple's
/// reason and time, a start delivered, a permanent failure, a key ended.
extension SendTests {
    /// The stream's entries as field maps, oldest first.
    func outcomes(_ r: Rig) async throws -> [[String: String]] {
        let reply = try await r.redis.send(RedisCommand("XRANGE", r.settings.keys.outcomes, "-", "+"))
        return (reply.array ?? []).compactMap { item in
            guard let pair = item.array, pair.count == 2, let f = pair[1].array else { return nil }
            var map: [String: String] = [:]
            for i in stride(from: 0, to: f.count - 1, by: 2) { if let k = f[i].string { map[k] = f[i + 1].string ?? "" } }
            return map
        }
    }

    @Test func appBackendsReadForgottenTokensStartsAndEndsFromTheOutcomesStream() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        var t = now() - 100_000
        let gone = token("8a"), fine = token("8b"), start = token("8c")
        try await r.add(r.settings.registrationsStream, [("type", "start.token"), ("ts", String(t)), ("device", "fan"),
                                                         ("activity_type", "MatchActivityAttributes"), ("token", start), ("env", "development")])
        try await r.add(r.settings.registrationsStream, [("type", "follow"), ("ts", String(t)), ("device", "fan"), ("target", "team:ars")])
        try await register(r, device: "g1", key: "match:oc1", activity: "A", token: gone, ts: t)
        try await register(r, device: "g2", key: "match:oc1", activity: "B", token: fine, ts: t + 1)
        #expect(await eventually { await r.drainedAll() })
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.started"), ("ts", String(t)), ("match", "oc1"), ("home", "ars"), ("away", "che")])
        #expect(await eventually { await r.drainedAll() })
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"unregisteredTokens":{"\#(gone)":\#(t + 500)}}"#)
        t += 1000
        try await score(r, "oc1", 1, 0, ts: t)
        #expect(await eventually { await r.drainedAll() })
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.full_time"), ("ts", String(t)), ("match", "oc1"),
                                                      ("home_score", "1"), ("away_score", "0")])
        #expect(await eventually { (try? await outcomes(r))?.contains { $0["type"] == "key.ended" } == true })
        let all = try await outcomes(r)
        #expect(all.map { $0["type"] ?? "" } == ["start.delivered", "token.forgotten", "key.ended"], "\(all)")
        #expect(all[0]["device"] == "fan" && all[0]["key"] == "match:oc1" && all[0]["activity_type"] == "MatchActivityAttributes")
        let forgotten = all[1]
        #expect(forgotten["device"] == "g1" && forgotten["activity"] == "A" && forgotten["token"] == gone && forgotten["reason"] == "Unregistered"
                && forgotten["invalid_since"] == String(t - 1500) && forgotten["key"] == "match:oc1", "\(forgotten)")
        #expect(all[2]["ts"] == String(t) && all.allSatisfy { Int64($0["at"] ?? "") ?? 0 > t - 100_000 })
        #expect(await w.stop() == 0)
    }
}
