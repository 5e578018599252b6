import ActivityCastCore
import ActivityCastSettings
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

        /// Adds an entry. On a cluster a feed event waits for the registrations added before it
        /// to be applied: the registrations stream and the feeds are read by separate reads
        /// there, in no order between them (docs/cluster.md), while on one Redis one read takes
        /// both, registrations first — what these tests' sequences rely on.
        @discardableResult
        func add(_ stream: String, _ fields: [(String, String)]) async throws -> String {
            if server.cluster != nil, stream != settings.registrationsStream {
                #expect(await eventually { await drained(redis, settings.registrationsStream) })
            }
            return try await xadd(redis, stream, fields)
        }

        func drainedAll() async -> Bool {
            for s in settings.inputStreams.map(\.stream) where !(await drained(redis, s)) { return false }
            return true
        }

        /// Fan-out records a sweep should have deleted: every record but those of `killed` (the
        /// records there when a worker was killed) that are finished (`left` 0) and expire within
        /// the hour, which is what a worker killed between an acknowledgement and its next sweep
        /// leaves (docs/sending.md).
        func recordsNotSwept(excusing killed: Set<String>) async throws -> [String] {
            var left: [String] = []
            for name in try await keysEverywhere(redis, "\(settings.prefix):*:fan:*") {
                guard killed.contains(name) else { left.append(name); continue }
                let slicesLeft = try await redis.send(RedisCommand("HGET", name, "left")).string
                let ttl = try await redis.send(RedisCommand("PTTL", name)).int ?? -1
                let finished = slicesLeft == "0" && (1...3_600_000).contains(ttl)
                if !finished { left.append(name) }
            }
            return left
        }

        func device(_ token: String) async throws -> [String: Any]? { try await sandbox.get("/sandbox/devices/\(token)") }
        func channel(_ id: String) async throws -> [String: Any]? { try await sandbox.get("/sandbox/channels/\(id)") }

        /// The channel id stored for `key` in `env`.
        func channelID(_ key: String, _ env: String = "development") async throws -> String? {
            let v = try await redis.send(RedisCommand("HGET", "\(settings.prefix):{\(key)}:channels", env)).string
            return v?.split(separator: " ").first.map(String.init)
        }
    }

    func rig(_ sandboxArguments: [String] = []) async throws -> Rig {
        let server = try await RedisServer()
        let sandbox = try await SandboxProcess(arguments: sandboxArguments)
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
        // The match is scheduled: no channel yet, nobody is on it.
        try await r.add(sports, [("type", "match.scheduled"), ("ts", next()), ("match", "m1"), ("home", "ars"), ("away", "che"),
                                 ("kickoff", String(ts + 600_000))])
        #expect(await eventually { await r.drainedAll() })
        #expect(try await r.channelID("match:m1") == nil)
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
        // b's registration on broadcast (and d's start) made the channel at kick-off.
        let channel = try #require(try await r.channelID("match:m1"))

        // Per-token: the whole state, ended on the final score.
        let a = try #require(try await r.device(perToken))
        #expect(a["state"] as? String == "ended")  // (lastEvent is the last received, displayed or not)
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
        #expect(c["state"] as? String == "ended")
        #expect(NSDictionary(dictionary: state(c)).isEqual(to: final))
        // Starts: one each; d (on broadcast, following both teams) joins the channel.
        let plain = try #require(try await r.device(starterPlain))
        #expect(plain["startsReceived"] as? Int == 1)
        #expect(plain["inputPushToken"] as? Bool == true)
        #expect(plain["attributesType"] as? String == "MatchActivityAttributes")
        // The start names its key, so the app can register the started activity's update token.
        #expect((plain["attributes"] as? [String: Any])?["matchId"] as? String == "m1")
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
        // inspect lists the channel: key, environment, id, policy, age, broadcasts, state.
        let (status, out, _) = try await runActivitycast(["inspect", "--json"], redis: r.server, settings: ["prefix": r.settings.prefix])
        #expect(status == 0)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        let listed = ((report["channels"] as? [String: Any])?["channels"] as? [[String: Any]] ?? [])
            .first { $0["key"] as? String == "match:m1" && $0["environment"] as? String == "development" }
        #expect(listed?["id"] as? String == channel)
        #expect(listed?["state"] as? String == "ending")
        #expect(listed?["storagePolicy"] as? Int == 0)
        #expect((listed?["broadcasts"] as? Int ?? 0) >= 4)
        #expect(await w1.stop() == 0)
        #expect(await w2.stop() == 0)
    }

    /// Registers an activity token for `key` (development, not on broadcast unless asked).
    func register(_ r: Rig, device: String, key: String, activity: String, token: String, ts: Int64, broadcast: Bool = false) async throws {
        var fields = [("type", "activity.token"), ("ts", String(ts)), ("device", device), ("key", key), ("activity", activity),
                      ("token", token), ("env", "development")]
        if broadcast { fields.append(("broadcast", "true")) }
        try await r.add(r.settings.registrationsStream, fields)
    }

    /// Gives `device` a push-to-start token for matches (development) and has it follow `team`.
    func follower(_ r: Rig, device: String, startToken: String, team: String, ts: Int64) async throws {
        try await r.add(r.settings.registrationsStream, [("type", "start.token"), ("ts", String(ts)), ("device", device),
                                                         ("activity_type", "MatchActivityAttributes"), ("token", startToken), ("env", "development")])
        try await r.add(r.settings.registrationsStream, [("type", "follow"), ("ts", String(ts)), ("device", device), ("target", team)])
    }

    func score(_ r: Rig, _ match: String, _ home: Int, _ away: Int, ts: Int64) async throws {
        try await r.add(r.settings.feeds[0].stream, [("type", "match.score"), ("ts", String(ts)), ("match", match),
                                                      ("home_score", String(home)), ("away_score", String(away))])
    }

    func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A token rotated mid-match: the new token gets what follows, the old one nothing more.
    @Test func aRotatedTokenTakesOver() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let old = token("e1"), new = token("e2")
        let t = now() - 10_000
        try await register(r, device: "a", key: "match:m2", activity: "A", token: old, ts: t)
        try await score(r, "m2", 1, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        try await register(r, device: "a", key: "match:m2", activity: "A", token: new, ts: t + 1500)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, "m2", 2, 0, ts: t + 2000)
        #expect(await eventually { await r.drainedAll() })
        #expect(state(try await r.device(old))["homeScore"] as? Int == 1)
        #expect(try await r.device(old)?["pushesReceived"] as? Int == 1)
        let now = try #require(try await r.device(new))
        #expect(state(now)["homeScore"] as? Int == 2 && now["pushesReceived"] as? Int == 1)
        #expect(await w.stop() == 0)
    }

    /// A worker that starts when the slices group already exists (every worker but the fleet's
    /// first, and any restart) takes slices too: an audience cut into many slices reaches every
    /// device. (It used to retry creating the group forever on BUSYGROUP and never read a slice,
    /// so only slice 0 went out.)
    @Test func aWorkerJoiningAnExistingSlicesGroupTakesSlices() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        for stream in r.settings.keys.sliceStreams {
            _ = try await r.redis.send(RedisCommand("XGROUP", "CREATE", stream, r.settings.group, "0", "MKSTREAM"))
        }
        let w = try r.worker("w", ["fanout.slice_size": "64", "fanout.batch": "16"])
        defer { w.removeLogs() }
        let key = ActivityKey(kind: .match, id: "m9")
        let t = now() - 10_000
        // 600 tokens straight into the audience hashes (docs/schema.md): 16 slices of about 40
        // (a hash small enough for Redis's listpack encoding, up to 512 entries here, is one slice).
        // Their meta values are written as before meta kept the token: the send path reads
        // those tokens from `{key}:tokens`.
        var tokens: [any RedisArgument] = [r.settings.keys.tokens(key)], meta: [any RedisArgument] = [r.settings.keys.meta(key)]
        for i in 0..<600 {
            let hex = String(i, radix: 16)
            tokens += ["a\(i)", String(repeating: "c", count: 64 - hex.count) + hex]
            meta += ["a\(i)", "\(t) d\(i) development standard 0"]
        }
        _ = try await r.redis.pipeline([RedisCommand("HSET", tokens), RedisCommand("HSET", meta)])
        try await score(r, "m9", 1, 0, ts: t + 1000)
        let slices = r.settings.keys.sliceStreams
        #expect(await eventually {
            guard await r.drainedAll() else { return false }
            for stream in slices where !(await drained(r.redis, stream)) { return false }
            return true
        })
        #expect(try await r.sandbox.get("/sandbox/stats")?["devicePushes"] as? Int == 600)
        #expect(await w.stop() == 0)
        #expect(!w.stderr.contains("cannot create the slices group"))
    }

    /// 410 from APNs: the token is forgotten (its registration was older than the 410's time) and
    /// gets nothing more; the other device goes on.
    @Test func aGoneTokenIsPruned() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let gone = token("f1"), alive = token("f2")
        let t = now() - 10_000
        try await register(r, device: "a", key: "match:m3", activity: "A", token: gone, ts: t)
        try await register(r, device: "b", key: "match:m3", activity: "B", token: alive, ts: t)
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/unregister", json: #"{"token":"\#(gone)"}"#)
        try await score(r, "m3", 1, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        let key = ActivityKey(kind: .match, id: "m3")
        #expect(try await r.redis.send(RedisCommand("HGET", r.settings.keys.tokens(key), "A")) == .null)
        #expect(try await r.redis.send(RedisCommand("HGET", r.settings.keys.meta(key), "A")).string?.hasSuffix(" -") == true)
        #expect(jsonLogLines(w.stderr).contains { $0["msg"] == "token forgotten" && $0["reason"] == "Unregistered" })
        try await score(r, "m3", 2, 0, ts: t + 2000)
        #expect(await eventually { await r.drainedAll() })
        #expect(state(try await r.device(alive))["homeScore"] as? Int == 2)
        #expect(try await r.device(gone) == nil)  // every push to it was answered 410, none displayed
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.deadLetterStream)).int == 0)
        #expect(await w.stop() == 0)
        // The stop line sums the pushes by kind and outcome.
        let stopped = try #require(jsonLogLines(w.stderr).last { $0["msg"] == "worker stopped" })
        #expect(stopped["pushes"]?.contains("token Unregistered=") == true && stopped["pushes"]?.contains("token ok=") == true)
        #expect(stopped["tokens_forgotten"] == "1")
    }

    /// The channel disappears at APNs (deleted behind the worker's back): `ChannelNotRegistered`,
    /// a new channel is created and announced, and the broadcast reaches it.
    @Test func aChannelApnsForgotIsRecreated() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let t = now() - 10_000
        try await register(r, device: "b", key: "match:m4", activity: "B", token: token("4b"), ts: t - 1, broadcast: true)
        try await score(r, "m4", 1, 0, ts: t)
        #expect(await eventually { await r.drainedAll() })
        let first = try #require(try await r.channelID("match:m4"))
        // Delete it at the sandbox with the CLI, as another tool (or Apple) would.
        let (status, out, err) = try await runActivitycast(["channels", "delete", first], redis: r.server, settings: r.sandbox.settings)
        #expect(status == 0, "\(out) \(err)")
        try await score(r, "m4", 2, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        let second = try #require(try await r.channelID("match:m4"))
        #expect(second != first)
        #expect(state(try await r.channel(second))["homeScore"] as? Int == 2)
        let announced = try await r.redis.send(RedisCommand("XRANGE", "\(r.settings.prefix):channels", "-", "+"))
        let ids = (announced.array ?? []).compactMap { try? StreamReplies.entry($0) }.compactMap { e -> String? in
            guard let f = e.fields, let i = f.firstIndex(of: Array("channel".utf8)), i + 1 < f.count else { return nil }
            return String(decoding: f[i + 1], as: UTF8.self)
        }
        #expect(ids.contains(first) && ids.contains(second))
        #expect(await w.stop() == 0)
    }

    /// Apple's channel limit reached (`CannotCreateChannelConfig`): the key's devices on broadcast
    /// get per-token pushes instead, and ops are told.
    @Test func theChannelLimitFallsBackToPerTokenSends() async throws {
        let r = try await rig(["--max-channels", "0"])
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let onBroadcast = token("0b")
        let t = now() - 10_000
        try await register(r, device: "b", key: "match:m5", activity: "B", token: onBroadcast, ts: t, broadcast: true)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, "m5", 3, 1, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        #expect(state(try await r.device(onBroadcast))["homeScore"] as? Int == 3)
        #expect(jsonLogLines(w.stderr).contains { ($0["msg"] ?? "").hasPrefix("CHANNEL LIMIT REACHED") })
        #expect(try await r.redis.send(RedisCommand("HGET", r.settings.keys.counters, "channels_fallback")).int ?? 0 >= 1)
        #expect(await w.stop() == 0)
    }

    /// A state over a push's room because of free text (a 2,000-byte player name, in the goal's
    /// alert and its content-state, the text limit raised so that the decoder lets it through) is
    /// not dead-lettered: the state's free text is trimmed, the longest first, until the push
    /// fits, and the event goes out with everything else it carried (issue 40).
    @Test func anOversizedFreeTextIsTrimmedUntilThePushFits() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["limits.max_value_bytes": "8000", "limits.max_entry_bytes": "16000", "limits.max_text_bytes": "2000"])
        defer { w.removeLogs() }
        let t = now() - 10_000
        try await register(r, device: "a", key: "match:m6", activity: "A", token: token("6a"), ts: t)
        try await r.add(r.settings.feeds[0].stream, [("type", "match.moment"), ("ts", String(t + 1000)), ("match", "m6"), ("moment", "goal"),
                                                      ("team", "home"), ("home_score", "1"), ("away_score", "2"),
                                                      ("player", String(repeating: "P", count: 2000))])
        #expect(await eventually { await r.drainedAll() })
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.deadLetterStream)).int == 0)
        #expect(await eventually { state(try? await r.device(token("6a")))["awayScore"] as? Int == 2 })
        let shown = state(try await r.device(token("6a")))
        let player = (shown["lastEvent"] as? [String: Any])?["player"] as? String ?? ""
        #expect(player.hasPrefix("PPPP") && player.hasSuffix("\u{2026}") && player.utf8.count < 4096, "\(player.utf8.count) bytes")
        #expect(shown["homeScore"] as? Int == 1)
        #expect(await w.stop() == 0)
        #expect(jsonLogLines(w.stderr).contains { $0["msg"] == "free text trimmed so that the key's state fits a push" })
    }

    /// Entries of one key in the stream out of time order: no device ever displays an older
    /// state after a newer one, and every device ends on the newest.
    @Test func outOfOrderEntriesNeverShowAnOlderState() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let device = token("7a")
        let t = now() - 100_000
        try await register(r, device: "a", key: "match:m7", activity: "A", token: device, ts: t)
        #expect(await eventually { await r.drainedAll() })
        for i in [3, 1, 4, 2, 6, 5, 9, 7, 8] { try await score(r, "m7", i, 0, ts: t + Int64(i) * 1000) }
        #expect(await eventually { await r.drainedAll() })
        let view = try #require(try await r.device(device))
        #expect(state(view)["homeScore"] as? Int == 9)
        let deliveries = (try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]] ?? [])
            .filter { $0["target"] as? String == device && $0["displayed"] as? Int == 1 }
        let shown = deliveries.sorted { ($0["timeMillis"] as? Int ?? 0) < ($1["timeMillis"] as? Int ?? 0) }.compactMap { $0["timestamp"] as? Int }
        #expect(shown == shown.sorted() && !shown.isEmpty)
        #expect(view["timestampRegressionsIgnored"] as? Int == 0, "stale events were sent")
        #expect(await w.stop() == 0)
    }

    /// APNs misbehaving — 5 % 429, 2 % 500, a GOAWAY every 100 streams — while two workers send
    /// a match to 200 per-token devices and a channel: every device still ends on the final
    /// state, and nothing is dead-lettered. (Goals 30 ms apart supersede each other's fan-outs,
    /// so a few hundred pushes go out, not 13 × 200.)
    @Test func everyDeviceEndsOnTheFinalStateDespiteFaults() async throws {
        let r = try await rig(["--fault429", "0.05", "--fault500", "0.02", "--goaway-after", "100"])
        defer { r.redis.close() }
        let w1 = try r.worker("w1"), w2 = try r.worker("w2")
        defer { w1.removeLogs(); w2.removeLogs() }
        var t = now() - 100_000
        let tokens = (0..<200).map { String(format: "%064x", 0xabc000 + $0) }
        for (i, tok) in tokens.enumerated() {
            try await register(r, device: "d\(i)", key: "match:m8", activity: "A\(i)", token: tok, ts: t)
        }
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        for goal in 1...12 {
            t += 1000
            try await score(r, "m8", goal, goal / 3, ts: t)
            try await Task.sleep(for: .milliseconds(30))
        }
        t += 1000
        try await r.add(r.settings.feeds[0].stream, [("type", "match.full_time"), ("ts", String(t)), ("match", "m8"),
                                                      ("home_score", "12"), ("away_score", "4")])
        #expect(await eventually(timeout: .seconds(120)) { await r.drainedAll() })
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.deadLetterStream)).int == 0)
        var wrong: [String] = []
        for tok in tokens {
            let v = try await r.device(tok)
            let s = state(v)
            if v?["state"] as? String != "ended" || s["homeScore"] as? Int != 12 || s["awayScore"] as? Int != 4 {
                wrong.append("\(tok.suffix(4)): \(v?["state"] ?? "-") \(s["homeScore"] ?? "-")-\(s["awayScore"] ?? "-") received \(v?["pushesReceived"] ?? 0)")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) devices not on the final state")
        let stats = try #require(try await r.sandbox.get("/sandbox/stats"))
        let byStatus = stats["byStatus"] as? [String: Int] ?? [:]
        #expect((byStatus["429"] ?? 0) > 0 && (byStatus["500"] ?? 0) > 0, "the faults were not injected: \(byStatus)")
        #expect((stats["goAways"] as? Int ?? 0) > 0, "no GOAWAY was sent: \(stats)")
        #expect(await w1.stop() == 0)
        #expect(await w2.stop() == 0)
    }

    /// A bus trip from its start (push-to-start to the route's followers) to its end, with two
    /// workers (on a cluster too: ACTIVITYCAST_TEST_REDIS_CLUSTER).
    @Test func aTransitTripFromStartToEnd() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w"), w2 = try r.worker("w2")
        defer { w.removeLogs(); w2.removeLogs() }
        let transit = r.settings.feeds[1].stream, reg = r.settings.registrationsStream
        var t = now() - 100_000
        func next() -> String { t += 1000; return String(t) }
        let starter = token("9a")
        try await r.add(reg, [("type", "start.token"), ("ts", next()), ("device", "rider"), ("activity_type", "TripActivityAttributes"),
                              ("token", starter), ("env", "development")])
        try await r.add(reg, [("type", "follow"), ("ts", next()), ("device", "rider"), ("target", "route:42")])
        #expect(await eventually { await r.drainedAll() })
        try await r.add(transit, [("type", "trip.started"), ("ts", next()), ("trip", "t1"), ("route", "42"), ("headsign", "Central")])
        #expect(await eventually { await r.drainedAll() })
        let started = try #require(try await r.device(starter))
        #expect(started["startsReceived"] as? Int == 1 && started["attributesType"] as? String == "TripActivityAttributes")
        // The app registers the started activity's update token for the key the start names (as
        // a real app does: it reads the started activity's attributes); the trip goes on to its end.
        let tripID = try #require((started["attributes"] as? [String: Any])?["tripId"] as? String)
        #expect(tripID == "t1")
        let update = token("9b")
        try await register(r, device: "rider", key: "trip:\(tripID)", activity: "T", token: update, ts: t + 10)
        #expect(await eventually { await r.drainedAll() })
        try await r.add(transit, [("type", "trip.eta"), ("ts", next()), ("trip", "t1"), ("stop", "s1"), ("eta", String(t + 120_000)),
                                  ("stop_name", "Market Sq")])
        try await r.add(transit, [("type", "trip.arriving"), ("ts", next()), ("trip", "t1"), ("stop", "s1"), ("stop_name", "Market Sq")])
        try await r.add(transit, [("type", "trip.ended"), ("ts", next()), ("trip", "t1")])
        #expect(await eventually { await r.drainedAll() })
        let view = try #require(try await r.device(update))
        #expect(view["state"] as? String == "ended")
        let s = state(view)
        #expect(s["status"] as? String == "ended" && s["stopName"] as? String == "Market Sq" && s["stop"] as? String == "s1", "\(view)")
        // The three events in a row: an update whose fan-out a newer one superseded before it
        // went out isn't sent (nothing is spent on a state already out of date), and nothing
        // reaches the device after the end.
        #expect((1...3).contains(view["pushesReceived"] as? Int ?? 0) && view["ignoredAfterEnd"] as? Int == 0, "\(view)")
        #expect(await w.stop() == 0)
        #expect(await w2.stop() == 0)
    }

    /// Push-to-start is paced, not burst: 30 followers at 20 starts/s take well over a second, and
    /// each gets exactly one start.
    @Test func startsArePaced() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["worker.starts_per_second": "20"])
        defer { w.removeLogs() }
        let reg = r.settings.registrationsStream
        var t = now() - 100_000
        let tokens = (0..<30).map { String(format: "%064x", 0xdef000 + $0) }
        for (i, tok) in tokens.enumerated() {
            t += 1
            try await r.add(reg, [("type", "start.token"), ("ts", String(t)), ("device", "f\(i)"), ("activity_type", "MatchActivityAttributes"),
                                  ("token", tok), ("env", "development")])
            try await r.add(reg, [("type", "follow"), ("ts", String(t)), ("device", "f\(i)"), ("target", "team:ars")])
        }
        #expect(await eventually { await r.drainedAll() })
        try await r.add(r.settings.feeds[0].stream, [("type", "match.started"), ("ts", String(t + 1000)), ("match", "m9"), ("home", "ars"), ("away", "che")])
        #expect(await eventually { await r.drainedAll() })
        let starts = (try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]] ?? [])
            .filter { $0["event"] as? String == "start" }
        #expect(starts.count == 30)
        #expect(Set(starts.compactMap { $0["target"] as? String }) == Set(tokens))
        let times = starts.compactMap { $0["timeMillis"] as? Int }
        #expect((times.max() ?? 0) - (times.min() ?? 0) >= 1000, "30 starts at 20/s went out within \((times.max() ?? 0) - (times.min() ?? 0)) ms")
        #expect(await w.stop() == 0)
    }

    /// A push-to-start token APNs answers 410 for is forgotten: the device no longer counts as
    /// able to start that type; the other follower still gets its start.
    @Test func aGonePushToStartTokenIsForgotten() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let reg = r.settings.registrationsStream
        let gone = token("5a"), alive = token("5b")
        let t = now() - 100_000
        for (device, tok) in [("g", gone), ("h", alive)] {
            try await r.add(reg, [("type", "start.token"), ("ts", String(t)), ("device", device), ("activity_type", "MatchActivityAttributes"),
                                  ("token", tok), ("env", "development")])
            try await r.add(reg, [("type", "follow"), ("ts", String(t)), ("device", device), ("target", "team:ars")])
        }
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/unregister", json: #"{"token":"\#(gone)"}"#)
        try await r.add(r.settings.feeds[0].stream, [("type", "match.started"), ("ts", String(t + 1000)), ("match", "m10"), ("home", "ars"), ("away", "che")])
        #expect(await eventually { await r.drainedAll() })
        let keys = r.settings.keys
        #expect(try await r.redis.send(RedisCommand("HGET", keys.device("g"), "start:MatchActivityAttributes")) == .null)
        #expect(try await r.redis.send(RedisCommand("SISMEMBER", keys.startTokens(activityType: "MatchActivityAttributes"), "g")).int == 0)
        #expect(try await r.redis.send(RedisCommand("SISMEMBER", keys.startTokens(activityType: "MatchActivityAttributes"), "h")).int == 1)
        #expect(try await r.device(alive)?["startsReceived"] as? Int == 1)
        #expect(jsonLogLines(w.stderr).contains { $0["msg"] == "push-to-start token forgotten" && $0["device"] == "g" })
        #expect(await w.stop() == 0)
    }
}

extension SendTests {
    /// A failed send is logged once, with what ops need — the key, the kind, Apple's reason and the
    /// apns-id of its answer — and never the whole token (JSON log lines, as `log.format json`).
    @Test func aFailedSendIsLoggedOnceWithItsApnsIDAndNoWholeToken() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        var t = now() - 100_000
        let gone = token("7f"), fine = token("7e")
        try await register(r, device: "g1", key: "match:g1", activity: "A", token: gone, ts: t)
        try await register(r, device: "g2", key: "match:g1", activity: "B", token: fine, ts: t + 1)
        #expect(await eventually { await r.drainedAll() })
        // APNs says the first token stopped being valid after it was registered: 410 Unregistered.
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"unregisteredTokens":{"\#(gone)":\#(t + 500)}}"#)
        t += 1000
        try await score(r, "g1", 1, 0, ts: t)
        #expect(await eventually { await r.drainedAll() })
        #expect(await w.stop() == 0)
        let lines = jsonLogLines(w.stderr).filter { $0["msg"] == "token forgotten" }
        #expect(lines.count == 1, "\(lines)")
        let line = try #require(lines.first)
        #expect(line["key"] == "match:g1" && line["kind"] == "token" && line["reason"] == "Unregistered")
        let id = line["apns_id"] ?? ""
        #expect(UUID(uuidString: id) != nil, "apns_id '\(id)' is not APNs's apns-id")
        #expect(line["token"] == String(gone.prefix(8)) + "…")
        #expect(!w.stderr.contains(gone) && !w.stdout.contains(gone), "a whole token reached the log")
    }
    /// A match with a device off its channel and one on it, its first score (which makes the
    /// channel and broadcasts to it), then broadcasts answered `delayMillis` late. Returns the
    /// channel's id.
    func slowBroadcasts(_ r: Rig, match: String, perToken: String, onChannel: String, ts t: Int64, delayMillis: Int) async throws -> String {
        try await register(r, device: "a", key: "match:\(match)", activity: "A", token: perToken, ts: t)
        try await register(r, device: "b", key: "match:\(match)", activity: "B", token: onChannel, ts: t, broadcast: true)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, match, 1, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        let channel = try #require(try await r.channelID("match:\(match)"))
        // The key's first event made the channel, and its broadcast (decided then) went to it.
        #expect(state(try await r.channel(channel))["homeScore"] as? Int == 1)
        _ = try await r.sandbox.post("/sandbox/faults", json: #"{"slowResponseRate":1,"slowResponseDelayMillis":\#(delayMillis),"only":["broadcast"]}"#)
        return channel
    }

    /// An update's device pushes don't wait for its broadcast's answer (here 3 s late): devices
    /// off the channel have it at once. Devices on the channel wait for the answer, and when the
    /// broadcast failed (the channel gone at APNs and none can be made: the limit), they get the
    /// push per token.

    @Test func devicePushesDoNotWaitForTheBroadcastsAnswer() async throws {
        let r = try await rig(["--max-channels", "1"])
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let perToken = token("3a"), onChannel = token("3b")
        let t = now() - 100_000
        let channel = try await slowBroadcasts(r, match: "c1", perToken: perToken, onChannel: onChannel, ts: t, delayMillis: 3000)

        func received(_ target: String, _ ts: Int64) async throws -> Int64? {
            let log = try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]] ?? []
            let d = log.last { $0["target"] as? String == target && ($0["timestamp"] as? NSNumber)?.int64Value == ts / 1000 }
            return (d?["receivedMicros"] as? NSNumber)?.int64Value
        }
        try await score(r, "c1", 2, 0, ts: t + 2000)
        #expect(await eventually { await r.drainedAll() })
        let broadcast = try #require(try await received(channel, t + 2000))
        let device = try #require(try await received(perToken, t + 2000))
        #expect(device - broadcast < 2_000_000, "the device push went \(device - broadcast) µs after the broadcast, whose answer took 3 s")
        #expect(try await received(onChannel, t + 2000) == nil, "a device on the channel had the push per token too")
        #expect(state(try await r.channel(channel))["homeScore"] as? Int == 2)

        // The channel disappears at APNs and another key takes the only one left: the next broadcast fails.
        let (status, out, err) = try await runActivitycast(["channels", "delete", channel], redis: r.server, settings: r.sandbox.settings)
        #expect(status == 0, "\(out) \(err)")
        try await register(r, device: "c", key: "match:c2", activity: "C", token: token("3c"), ts: t + 2400, broadcast: true)
        try await score(r, "c2", 1, 0, ts: t + 2500)
        #expect(await eventually { await r.drainedAll() })
        try await score(r, "c1", 3, 0, ts: t + 3000)
        #expect(await eventually { await r.drainedAll() })
        let first = try #require(try await received(perToken, t + 3000))
        let fallback = try #require(try await received(onChannel, t + 3000), "the device on the failed channel never had the push")
        #expect(fallback - first > 2_000_000, "the device on the channel had its push before the broadcast's answer")
        #expect(state(try await r.device(onChannel))["homeScore"] as? Int == 3)
        #expect(state(try await r.device(perToken))["homeScore"] as? Int == 3)
        #expect(await w.stop() == 0)
    }
    /// A worker killed while its broadcast waits for an answer, with the device pushes already
    /// out: the entry's next delivery (another worker) broadcasts again and finishes the fan-out;
    /// every device ends on the state and the channel shows it.

    @Test func aWorkerKilledDuringItsBroadcastLeavesItToTheNext() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let settings = ["fanout.lease_ms": "1000"]
        let w1 = try r.worker("w1", settings)
        defer { w1.removeLogs() }
        let perToken = token("4a"), onChannel = token("4b")
        let t = now() - 100_000
        let channel = try await slowBroadcasts(r, match: "k1", perToken: perToken, onChannel: onChannel, ts: t, delayMillis: 30_000)
        try await score(r, "k1", 2, 0, ts: t + 2000)
        // The device push is out, the broadcast unanswered: kill the worker.
        #expect(try await eventually { state(try await r.device(perToken))["homeScore"] as? Int == 2 })
        let fans = try await keysEverywhere(r.redis, "\(r.settings.prefix):{match:k1}:fan:*")
        let pendingRecord = try await fans.asyncFirst { try await r.redis.send(RedisCommand("HGET", $0, "b")).string == "0" }
        #expect(pendingRecord != nil, "the fan-out's record should say its broadcast is unanswered")
        w1.kill(signal: SIGKILL)
        _ = await w1.stop()
        _ = try await r.sandbox.post("/sandbox/faults", json: "{}")
        let w2 = try r.worker("w2", settings)
        defer { w2.removeLogs() }
        #expect(await eventually { await r.drainedAll() })
        #expect(state(try await r.channel(channel))["homeScore"] as? Int == 2)
        #expect(state(try await r.device(perToken))["homeScore"] as? Int == 2)
        let log = try await r.sandbox.get("/sandbox/deliveries?limit=100")?["deliveries"] as? [[String: Any]] ?? []
        #expect(!log.contains { $0["target"] as? String == onChannel }, "the device on the live channel had a push per token")
        // The first worker's broadcast (never answered) and the second's.
        #expect(log.filter { $0["target"] as? String == channel && ($0["timestamp"] as? NSNumber)?.int64Value == (t + 2000) / 1000 }.count == 2)
        // Finished and acknowledged, the killed broadcast's fan-out record is gone (by w2's next
        // sweep), as is every record w2 made. Another record w1 acknowledged just before it was
        // killed may wait for its TTL instead (its sweep never came): finished, and bounded to the hour.
        var notSwept: [String] = []
        #expect(try await eventually(timeout: .seconds(2)) {
            notSwept = try await r.recordsNotSwept(excusing: Set(fans).subtracting([pendingRecord ?? ""]))
            return notSwept.isEmpty
        }, "\(notSwept)")
        #expect(await w2.stop() == 0)
    }
}

extension Array {
    func asyncFirst(_ p: (Element) async throws -> Bool) async rethrows -> Element? {
        for e in self where try await p(e) { return e }
        return nil
    }
}
