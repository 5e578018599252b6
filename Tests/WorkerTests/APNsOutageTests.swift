import ActivityCastCore
import Foundation
import RedisClient
import Testing
import TestSupport

/// APNs down — out of reach, or answering nothing normally — doesn't use up deliveries: what the
/// outage held is sent once APNs answers, and nothing is dead-lettered or recorded as failed. A
/// request APNs fails while it answers others still counts.
extension SendTests {
    /// Settings that make an outage outlast an entry's deliveries (and a token's attempts)
    /// within seconds.
    var quickDeliveries: [String: String] {
        ["worker.visibility_timeout_ms": "500", "worker.claim_interval_ms": "100", "worker.max_deliveries": "2", "fanout.token_attempts": "2",
         "log.level": "info"]
    }

    /// A worker whose APNs is a port that refuses connections.
    func outage(_ sandboxArguments: [String] = []) async throws -> (Rig, RefusingLoopbackPort, ChildProcess) {
        let r = try await rig(sandboxArguments)
        let refusing = RefusingLoopbackPort()
        do {
            return (r, refusing, try r.worker("w", quickDeliveries.merging(["sandbox.listen": "127.0.0.1:\(refusing.port)"]) { _, new in new }))
        } catch {
            r.redis.close()
            refusing.close()
            throw error
        }
    }

    /// Lets the outage run at least `seconds`, then brings a sandbox up on the refusing port.
    func endOutage(_ r: Rig, _ refusing: RefusingLoopbackPort, after seconds: Int) async throws -> Rig {
        try await Task.sleep(for: .seconds(seconds))
        refusing.close()
        let back = try await SandboxProcess(sharing: r.sandbox, port: refusing.port)
        return Rig(server: r.server, redis: r.redis, sandbox: back, settings: r.settings)
    }

    func expectNothingLost(_ r: Rig, _ worker: ChildProcess, seen: String = "cannot connect to APNs") async throws {
        let dead = try await r.redis.send(RedisCommand("XRANGE", r.settings.deadLetterStream, "-", "+", "COUNT", 5))
        #expect(dead.array?.isEmpty == true, "dead letters: \(String(describing: dead).prefix(1000))")
        let failures = try await r.redis.send(RedisCommand("XRANGE", r.settings.keys.sendFailures, "-", "+", "COUNT", 5))
        #expect(failures.array?.isEmpty ?? true, "send failures: \(String(describing: failures).prefix(1000))")
        #expect(await worker.stop() == 0)
        let logs = jsonLogLines(worker.stderr)
        #expect(logs.contains { ($0["msg"] ?? "").hasPrefix(seen) }, "the outage wasn't seen")
        #expect(!logs.contains { ($0["msg"] ?? "") == "dead letter" })
    }

    /// A device on the key's channel: the channel can't be made while APNs refuses connections,
    /// through more claims of the event than `worker.max_deliveries` allows (2, every 500 ms);
    /// once APNs is back, the channel is made and has the score.
    @Test func anAPNsOutageLongerThanTheDeliveriesDeadLettersNoEvent() async throws {
        let (r, refusing, w) = try await outage()
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        let t = now() - 60_000
        try await register(r, device: "d", key: "match:o1", activity: "A", token: token("e1"), ts: t, broadcast: true)
        try await score(r, "o1", 1, 0, ts: t + 1000)

        let back = try await endOutage(r, refusing, after: 8)
        #expect(await eventually(timeout: .seconds(60)) { await back.drainedAll() })
        let id = try #require(try await back.channelID("match:o1"))
        #expect(state(try await back.channel(id))["homeScore"] as? Int == 1)
        try await expectNothingLost(back, w)
    }

    /// Per-token devices: the fan-out's tokens fail for want of a connection for more rounds
    /// than `fanout.token_attempts` (2) and their slice for more claims than the deliveries
    /// allow; once APNs is back every device shows the score, delivered once.
    @Test func anAPNsOutageLongerThanATokensAttemptsFailsNoToken() async throws {
        let (r, refusing, w) = try await outage(["--delivery-log", "1000"])
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        let t = now() - 60_000
        let devices = (0..<3).map { token(String(format: "f%x", $0)) }
        for (i, device) in devices.enumerated() {
            try await register(r, device: "d\(i)", key: "match:o2", activity: "A\(i)", token: device, ts: t)
        }
        try await score(r, "o2", 2, 1, ts: t + 1000)

        let back = try await endOutage(r, refusing, after: 8)
        #expect(try await eventually(timeout: .seconds(60)) {
            for device in devices where state(try await back.device(device))["homeScore"] as? Int != 2 { return false }
            return true
        })
        #expect(await eventually(timeout: .seconds(30)) { await drained(back.redis, back.settings) })
        let received = try await back.sandbox.deviceDeliveries().filter { $0.event == "update" }
        #expect(received.count == devices.count, "\(received)")
        try await expectNothingLost(back, w)
    }

    /// APNs answers 503 to everything (pushes, broadcasts, channel management) for 8 s: a key
    /// on broadcast can't get its channel and a per-token key's tokens fail their every attempt,
    /// through more claims than `worker.max_deliveries` allows; once APNs answers again both
    /// keys' devices show their scores, each token's update delivered once, nothing lost.
    @Test func anAPNsAnsweringOnlyErrorsLongerThanTheDeliveriesLosesNothing() async throws {
        let r = try await rig(["--delivery-log", "1000"])
        defer { r.redis.close() }
        let w = try r.worker("w", quickDeliveries)
        defer { w.removeLogs() }
        let t = now() - 60_000
        let devices = [token("b7"), token("c7")]
        try await register(r, device: "c", key: "match:o3", activity: "C", token: token("a7"), ts: t, broadcast: true)
        for (i, device) in devices.enumerated() {
            try await register(r, device: "p\(i)", key: "match:o4", activity: "P\(i)", token: device, ts: t)
        }
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1}"#)
        try await score(r, "o3", 1, 0, ts: t + 1000)
        try await score(r, "o4", 2, 0, ts: t + 1000)
        try await Task.sleep(for: .seconds(8))
        #expect(w.stderr.contains("sending failed; the entry stays pending"), "no send failed: the test proves nothing")
        try await r.sandbox.post("/sandbox/faults", json: "{}")

        #expect(try await eventually(timeout: .seconds(60)) {
            guard let id = try await r.channelID("match:o3"), state(try await r.channel(id))["homeScore"] as? Int == 1 else { return false }
            for device in devices where state(try await r.device(device))["homeScore"] as? Int != 2 { return false }
            return true
        })
        #expect(await eventually(timeout: .seconds(30)) { await drained(r.redis, r.settings) })
        let received = try await r.sandbox.deviceDeliveries().filter { $0.event == "update" && devices.contains($0.target) }
        #expect(received.count == devices.count, "\(received)")
        try await expectNothingLost(r, w, seen: "sending failed")
    }

    /// Broadcasts alone answered 503 while device pushes go through: APNs works, so the
    /// broadcast's failures are its own and its event is dead-lettered after its deliveries, as
    /// before — an outage is only what leaves APNs answering nothing normally.
    @Test func aBroadcastAPNsFailsWhileItAnswersOthersIsStillDeadLettered() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w", quickDeliveries)
        defer { w.removeLogs() }
        var t = now() - 60_000
        try await register(r, device: "c", key: "match:o5", activity: "C", token: token("d7"), ts: t, broadcast: true)
        try await register(r, device: "p", key: "match:o6", activity: "P", token: token("e7"), ts: t)
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1,"only":["broadcast"]}"#)
        try await score(r, "o5", 1, 0, ts: t + 1000)
        // Device pushes answered normally all along, on the same client.
        var home = 0
        var letters = ""
        let dead = await eventually(timeout: .seconds(60)) {
            home += 1
            t = max(t + 1, now())
            try? await score(r, "o6", home, 0, ts: t)
            try? await Task.sleep(for: .milliseconds(50))
            letters = (try? await r.redis.send(RedisCommand("XRANGE", r.settings.deadLetterStream, "-", "+"))).map { String(describing: $0) } ?? ""
            return letters.contains("broadcast to match:o5")
        }
        #expect(dead, "the broadcast APNs kept failing was never dead-lettered: \(letters.prefix(1000))")
        #expect(letters.contains("kept failing") && !letters.contains("\"o6\""), "\(letters.prefix(1000))")
        #expect(await w.stop() == 0)
    }
}
