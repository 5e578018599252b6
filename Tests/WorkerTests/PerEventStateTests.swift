import ActivityCastCore
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// What an event leaves in Redis once it is done: nothing of its own. Fan-out records go with
/// their entry's acknowledgement (none is written for a key without tokens), and the streams are
/// trimmed to what every group acknowledged, past the retention.
extension SendTests {
    /// A rig whose Redis keeps one entry per stream node, so that trimming is exact.
    func exactTrimRig() async throws -> Rig {
        let server = try await RedisServer(extraArguments: ["--stream-node-max-entries", "1"])
        let sandbox = try await SandboxProcess()
        return Rig(server: server, redis: server.connection(), sandbox: sandbox, settings: try testSettings(server))
    }

    @Test func anEventLeavesNoStateOfItsOwnOnceAcknowledged() async throws {
        let r = try await exactTrimRig()
        defer { r.redis.close() }
        let w = try r.worker("w", ["streams.trim_interval_ms": "200", "streams.retention_ms": "0", "streams.retention_entries": "3"])
        defer { w.removeLogs() }
        let perToken = token("7a"), onChannel = token("7b")
        var t = now() - 100_000
        try await register(r, device: "a", key: "match:p1", activity: "A", token: perToken, ts: t)
        try await register(r, device: "b", key: "match:p1", activity: "B", token: onChannel, ts: t + 1, broadcast: true)
        #expect(await eventually { await r.drainedAll() })
        // p1 has a device per token and one on its channel; p2 has nobody's token (broadcast only).
        for i in 1...20 {
            t += 1000
            try await score(r, i % 2 == 0 ? "p1" : "p2", i, 0, ts: t)
        }
        #expect(await eventually(timeout: .seconds(60)) { await r.drainedAll() })
        #expect(state(try await r.device(perToken))["homeScore"] as? Int == 20)
        #expect(try await r.device(onChannel) == nil, "the device on the channel had a push per token")
        let channel = try #require(try await r.channelID("match:p1"))
        #expect(state(try await r.channel(channel))["homeScore"] as? Int == 20)
        // No fan-out record outlives its entry: each goes by the worker's next sweep (every 100 ms)
        // after its acknowledgement.
        var fans: [String] = []
        let swept = try await eventually(timeout: .seconds(2)) {
            fans = try await keysEverywhere(r.redis, "\(r.settings.prefix):*:fan:*")
            return fans.isEmpty
        }
        #expect(swept, "left behind: \(fans.prefix(3))")
        // The streams are trimmed to what the group acknowledged, down to the retention's 3 entries.
        let sportsStream = r.settings.feeds[0].stream
        let trimmed = try await eventually { try await r.redis.send(RedisCommand("XLEN", sportsStream)).int == 3 }
        let length = try await r.redis.send(RedisCommand("XLEN", sportsStream))
        #expect(trimmed, "not trimmed: \(length)")
        // Two registrations: within the retention, kept.
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.registrationsStream)).int == 2)
        // inspect shows each stream's length, retention and oldest entry.
        let (status, out, _) = try await runActivitycast(["inspect", "--json"], redis: r.server,
                                                          settings: ["prefix": r.settings.prefix, "streams.retention_ms": "0",
                                                                     "streams.retention_entries": "3"])
        #expect(status == 0)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        let sports = try #require((report["streams"] as? [[String: Any]])?.first { $0["name"] as? String == r.settings.feeds[0].stream })
        #expect(sports["length"] as? Int == 3)
        #expect((sports["retention"] as? String)?.contains("newest 3") == true, "\(sports["retention"] ?? "none")")
        #expect((sports["oldestEntryAgeMillis"] as? Int ?? 0) > 0)
        #expect(await w.stop() == 0)
    }

    /// A claim that races the acknowledgement of the worker that finished the entry (the claimer
    /// reads it after the acknowledgement, which took the fan-out's record): nothing is sent again.
    /// Here the entry is read by a consumer that never runs, the worker claims it and waits (a
    /// test-only failpoint) while the test acknowledges it, as that consumer would have.
    @Test func aRedeliveryAfterTheAcknowledgementSendsNothing() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w1 = try r.worker("w1")
        defer { w1.removeLogs() }
        let device = token("7c")
        let t = now() - 100_000
        try await register(r, device: "c", key: "match:p3", activity: "C", token: device, ts: t)
        #expect(await eventually { await r.drainedAll() })
        #expect(await w1.stop() == 0)
        let sports = r.settings.feeds[0].stream
        try await score(r, "p3", 1, 0, ts: t + 1000)
        // Delivered to a consumer that dies at once: the entry is pending.
        let read = try await r.redis.send(.xreadgroup(group: r.settings.group, consumer: "ghost", count: 1, block: nil, streams: [(sports, ">")]))
        let id = try #require(try StreamReplies.read(read).first?.entries.first?.id)
        let w2 = try r.worker("w2", ["worker.visibility_timeout_ms": "300", "failpoint.pause_redelivered_ms": "3000"])
        defer { w2.removeLogs() }
        // Claimed by w2, which waits before sending it.
        #expect(try await eventually {
            let p = try await r.redis.send(RedisCommand("XPENDING", sports, r.settings.group, "-", "+", 10)).array ?? []
            return p.first?.array?[1].string == "w2"
        })
        // The ghost's acknowledgement, as if it had finished the entry meanwhile.
        #expect(try await r.redis.send(.xack(stream: sports, group: r.settings.group, ids: [id])).int == 1)
        try await Task.sleep(for: .seconds(4))
        #expect(await r.drainedAll())
        #expect(try await r.device(device) == nil, "the device was sent an entry that was acknowledged before its redelivery went out")
        #expect(await w2.stop() == 0)
        // Its own acknowledgement found the entry acknowledged: by another consumer, and it says so.
        let missed = jsonLogLines(w2.stderr).filter { $0["msg"]?.hasPrefix("entries were already acknowledged by another worker") == true }
        #expect(missed.count == 1 && missed.first?["unacknowledged"] == "1" && missed.first?["stream"] == sports, "\(missed)")
        #expect(!w2.stderr.contains("REDIS RESTARTED WITHOUT ITS DATA"))
    }
}
