import ActivityCastCore
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// The send path end to end: real worker processes, a real Redis and the APNs sandbox over TLS
/// and HTTP/2; what each device shows is read from the sandbox's device views.
@Suite(.serialized) struct SendTests {
    struct Rig {
        let server: RedisServer
        let redis: RedisConnection
        let sandbox: SandboxProcess
        let settings: Settings

        func worker(_ name: String, _ extra: [String: String] = [:]) throws -> ChildProcess {
            var env = sandbox.settings
            env.merge(["prefix": settings.prefix, "worker.block_ms": "100", "worker.claim_interval_ms": "200",
                       "worker.visibility_timeout_ms": "5000"]) { _, new in new }
            env.merge(extra) { _, new in new }
            return try startActivitycast(["worker", "--consumer", name], redis: server, settings: env, logName: name)
        }

        func add(_ stream: String, _ fields: [(String, String)]) async throws {
            _ = try await xadd(redis, stream, fields)
        }

        func drainedAll() async -> Bool {
            for s in settings.inputStreams.map(\.stream) where !(await drained(redis, s)) { return false }
            return true
        }

        func device(_ token: String) async throws -> [String: Any]? { try await sandbox.get("/sandbox/devices/\(token)") }
        func channel(_ id: String) async throws -> [String: Any]? { try await sandbox.get("/sandbox/channels/\(id)") }

        /// The channel id stored for `key` in `env`.
        func channelID(_ key: String, _ env: String = "development") async throws -> String? {
            let v = try await redis.send(RedisCommand("HGET", "\(settings.prefix):{\(key)}:channels", env)).string
            return v?.split(separator: " ").first.map(String.init)
        }
    }

    func rig() async throws -> Rig {
        let server = try await RedisServer()
        let sandbox = try await SandboxProcess()
        let settings = try testSettings(server)
        return Rig(server: server, redis: server.connection(), sandbox: sandbox, settings: settings)
    }

    func token(_ byte: String) -> String { String(repeating: byte, count: 32) }

    func state(_ view: [String: Any]?) -> [String: Any] { view?["contentState"] as? [String: Any] ?? [:] }

    /// A whole match: channel subscribers, per-token devices and push-to-start followers each
    /// show the complete state in order and end on the final score.
    @Test func aWholeMatchReachesEveryKindOfDevice() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w1 = try r.worker("w1"), w2 = try r.worker("w2")
        defer { w1.removeLogs(); w2.removeLogs() }
        let reg = r.settings.registrationsStream, sports = r.settings.feeds[0].stream
        let perToken = token("a1"), onChannel = token("b2"), starterPlain = token("c3"), starterChannel = token("d4")
        var ts = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        func next() -> String { ts += 1000; return String(ts) }

        // Followers with push-to-start tokens: c (no broadcast) follows one team, d (iOS 18,
        // broadcast) follows both and must get one start.
        try await r.add(reg, [("type", "start.token"), ("ts", next()), ("device", "c"), ("activity_type", "MatchActivityAttributes"),
                              ("token", starterPlain), ("env", "development")])
        try await r.add(reg, [("type", "start.token"), ("ts", next()), ("device", "d"), ("activity_type", "MatchActivityAttributes"),
                              ("token", starterChannel), ("env", "development"), ("broadcast", "true")])
        for (device, team) in [("c", "ars"), ("d", "ars"), ("d", "che")] {
            try await r.add(reg, [("type", "follow"), ("ts", next()), ("device", device), ("target", "team:\(team)")])
        }
        // The match is scheduled: its channel is created before kick-off.
        try await r.add(sports, [("type", "match.scheduled"), ("ts", next()), ("match", "m1"), ("home", "ars"), ("away", "che"),
                                 ("kickoff", String(ts + 600_000))])
        #expect(await eventually { await r.drainedAll() })
        let channel = try #require(try await r.channelID("match:m1"))
        // Activities the apps started themselves: a on per-token updates, b subscribed to the channel.
        try await r.add(reg, [("type", "activity.token"), ("ts", next()), ("device", "a"), ("key", "match:m1"), ("activity", "A"),
                              ("token", perToken), ("env", "development")])
        try await r.add(reg, [("type", "activity.token"), ("ts", next()), ("device", "b"), ("key", "match:m1"), ("activity", "B"),
                              ("token", onChannel), ("env", "development"), ("broadcast", "true")])
        #expect(await eventually { await r.drainedAll() })

        // A match's events come seconds apart; here 50 ms, so the two workers still take turns.
        try await r.add(sports, [("type", "match.started"), ("ts", next()), ("match", "m1"), ("home", "ars"), ("away", "che")])
        try await Task.sleep(for: .milliseconds(50))
        try await r.add(sports, [("type", "match.score"), ("ts", next()), ("match", "m1"), ("home_score", "1"), ("away_score", "0"),
                                 ("clock", "15'"), ("period", "first_half")])
        try await Task.sleep(for: .milliseconds(50))
        try await r.add(sports, [("type", "match.moment"), ("ts", next()), ("match", "m1"), ("moment", "red_card"), ("team", "away"),
                                 ("player", "C. Palmer"), ("clock", "40'")])
        try await Task.sleep(for: .milliseconds(50))
        try await r.add(sports, [("type", "match.moment"), ("ts", next()), ("match", "m1"), ("moment", "goal"), ("team", "home"),
                                 ("player", "B. Saka"), ("clock", "70'"), ("home_score", "2"), ("away_score", "0")])
        try await Task.sleep(for: .milliseconds(50))
        try await r.add(sports, [("type", "match.full_time"), ("ts", next()), ("match", "m1"), ("home_score", "2"), ("away_score", "1")])
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.deadLetterStream)).int == 0)

        if ProcessInfo.processInfo.environment["SEND_TESTS_DEBUG"] != nil {
        for w in [w1, w2] { for l in jsonLogLines(w.stderr) where ["sent", "plan", "sending failed; the entry stays pending", "send failed"].contains(l["msg"] ?? "") { print("DEBUG", l["msg"]!, l["entry"] ?? "", l["event"] ?? "", l["stale"] ?? "", l["tokens"] ?? "", l["broadcasts"] ?? "", l["starts"] ?? "", l["error"] ?? "", l["reason"] ?? "") } }
        if let d = try await r.sandbox.get("/sandbox/deliveries?limit=100"), let list = d["deliveries"] as? [[String: Any]] {
            for x in list { print("DEBUGD", x["kind"] ?? "", x["target"] ?? "", x["event"] ?? "", x["timestamp"] ?? "", x["displayed"] ?? "", x["timeMillis"] ?? "") }
        }
        print("DEBUGC", try await r.device(starterPlain) ?? [:], try await r.device(starterChannel) ?? [:])
        }
        // Per-token: the whole state, ended on the final score.
        let a = try #require(try await r.device(perToken))
        #expect(a["lastEvent"] as? String == "end")
        let final = state(a)
        #expect(final["homeScore"] as? Int == 2 && final["awayScore"] as? Int == 1)
        #expect(final["period"] as? String == "full_time")
        // Keys set by earlier events are still there: every push carried the whole state.
        #expect(final["clock"] as? String == "70'")
        #expect((final["lastEvent"] as? [String: Any])?["kind"] as? String == "goal")
        // Two workers may take one key's events out of order: an event processed after a newer
        // one is not sent as itself, but the state it completes is pushed again at the newest
        // time. (Two workers sending one key's events at the same moment can still deliver them
        // out of order; the device then ignores the older one — the sandbox counts it.)
        #expect((a["pushesReceived"] as? Int ?? 0) >= 2)
        // On the channel: b got nothing per token; the channel shows the same final state.
        #expect(try await r.device(onChannel) == nil)
        let c = try #require(try await r.channel(channel))
        #expect(c["lastEvent"] as? String == "end")
        #expect(NSDictionary(dictionary: state(c)).isEqual(to: final))
        // Starts: one each; d (on broadcast, following both teams) joins the channel.
        let plain = try #require(try await r.device(starterPlain))
        #expect(plain["startsReceived"] as? Int == 1)
        #expect(plain["inputPushToken"] as? Bool == true)
        #expect(plain["attributesType"] as? String == "MatchActivityAttributes")
        let joined = try #require(try await r.device(starterChannel))
        #expect(joined["startsReceived"] as? Int == 1)
        #expect(joined["inputPushChannel"] as? String == channel)

        // After the end the key's tokens expire with its dismissal window and the channel is due
        // for deletion then.
        let ttl = try await r.redis.send(RedisCommand("TTL", r.settings.keys.tokens(ActivityKey(kind: .match, id: "m1")))).int ?? -1
        #expect(ttl > 0 && ttl <= 4 * 3600 + 600)
        #expect(try await r.redis.send(RedisCommand("ZSCORE", "\(r.settings.prefix):channels:expiring", "match:m1")) != .null)
        let announced = try await r.redis.send(RedisCommand("XRANGE", "\(r.settings.prefix):channels", "-", "+"))
        #expect((announced.array ?? []).count >= 1)
        #expect(await w1.stop() == 0)
        #expect(await w2.stop() == 0)
    }
}
