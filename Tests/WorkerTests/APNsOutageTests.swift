import ActivityCastCore
import Foundation
import RedisClient
import Testing
import TestSupport

/// APNs down — out of reach, refusing our credentials, or one of its services (device pushes,
/// broadcasts, channel management) answering nothing normally — doesn't use up deliveries: what
/// the outage held is sent once APNs answers, and nothing is dead-lettered or recorded as
/// failed. A request APNs fails while the service answers others still counts.
extension SendTests {
    /// Settings that make an outage outlast an entry's deliveries (and a token's attempts)
    /// within seconds.
    var quickDeliveries: [String: String] {
        ["worker.visibility_timeout_ms": "500", "worker.claim_interval_ms": "100", "worker.max_deliveries": "2", "fanout.token_attempts": "2",
         "log.level": "info"]
    }

    /// A worker with `quickDeliveries` and the sandbox for APNs.
    func quickRig(_ sandboxArguments: [String] = []) async throws -> (Rig, ChildProcess) {
        let r = try await rig(sandboxArguments)
        do {
            return (r, try r.worker("w", quickDeliveries))
        } catch {
            r.redis.close()
            throw error
        }
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

    /// Lets the outage run until `outlasted` (what would have dead-lettered or failed something
    /// has happened), then brings a sandbox up on the refusing port.
    func endOutage(_ r: Rig, _ refusing: RefusingLoopbackPort, once outlasted: () -> Bool) async throws -> Rig {
        #expect(await eventually(timeout: .seconds(60)) { outlasted() }, "the outage never outlasted the limits: the test proves nothing")
        refusing.close()
        let back = try await SandboxProcess(sharing: r.sandbox, port: refusing.port)
        return Rig(server: r.server, redis: r.redis, sandbox: back, settings: r.settings)
    }

    /// Deliveries of `key`'s events that failed and left them pending.
    func failedDeliveries(_ w: ChildProcess, _ key: String) -> Int {
        jsonLogLines(w.stderr).filter { $0["msg"] == "sending failed; the entry stays pending" && $0["key"] == key }.count
    }

    /// Whether `key`'s fan-out tokens went on waiting past their `fanout.token_attempts` (`attempts`, 2 in these rigs).
    func tokensWaitedPastTheirAttempts(_ w: ChildProcess, _ key: String, attempts: Int = 2) -> Bool {
        jsonLogLines(w.stderr).contains {
            $0["msg"] == "tokens still failing wait for the end of their slice" && $0["key"] == key && Int($0["attempt"] ?? "") ?? 0 > attempts
        }
    }

    /// Publishes a score of `match` every 50 ms (newer each time, from `after`) until `stream`'s
    /// entries, as text, satisfy `done` (at most 60 s); returns whether they did, and that text.
    func scoring(_ r: Rig, _ match: String, after: Int64, until stream: String, _ done: (String) -> Bool) async -> (Bool, String) {
        var (home, t, text) = (0, after, "")
        let ok = await eventually(timeout: .seconds(60)) {
            home += 1
            t = max(t + 1, now())
            try? await score(r, match, home, 0, ts: t)
            try? await Task.sleep(for: .milliseconds(50))
            text = await streamText(r, stream)
            return done(text)
        }
        return (ok, text)
    }

    /// `stream`'s entries, as text ("" when it can't be read).
    func streamText(_ r: Rig, _ stream: String) async -> String {
        (try? await r.redis.send(RedisCommand("XRANGE", stream, "-", "+"))).map { String(describing: $0) } ?? ""
    }

    /// A device on `channelKey`'s broadcast (token `channelToken`) and `devices` per token on
    /// `tokenKey`, all registered at `ts`.
    func registerBothKinds(_ r: Rig, channelKey: String, channelToken: String, tokenKey: String, devices: [String], ts: Int64) async throws {
        try await register(r, device: "c", key: channelKey, activity: "C", token: channelToken, ts: ts, broadcast: true)
        for (i, device) in devices.enumerated() {
            try await register(r, device: "p\(i)", key: tokenKey, activity: "P\(i)", token: device, ts: ts)
        }
    }

    /// Once APNs answers again: `channelKey`'s channel shows home score `channelHome`, each of
    /// `devices` shows `deviceHome`, the streams drain, each device's update came once, and
    /// nothing was lost.
    func expectBothKindsShown(_ r: Rig, _ w: ChildProcess, channelKey: String, channelHome: Int, devices: [String], deviceHome: Int) async throws {
        #expect(try await eventually(timeout: .seconds(60)) {
            guard let id = try await r.channelID(channelKey), state(try await r.channel(id))["homeScore"] as? Int == channelHome else { return false }
            for device in devices where state(try await r.device(device))["homeScore"] as? Int != deviceHome { return false }
            return true
        })
        #expect(await eventually(timeout: .seconds(30)) { await drained(r.redis, r.settings) })
        let received = try await r.sandbox.deviceDeliveries().filter { $0.event == "update" && devices.contains($0.target) }
        #expect(received.count == devices.count, "\(received)")
        try await expectNothingLost(r, w, seen: "sending failed")
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
    /// through more failed deliveries of the event than `worker.max_deliveries` allows (2);
    /// once APNs is back, the channel is made and has the score.
    @Test func anAPNsOutageLongerThanTheDeliveriesDeadLettersNoEvent() async throws {
        let (r, refusing, w) = try await outage()
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        let t = now() - 60_000
        try await register(r, device: "d", key: "match:o1", activity: "A", token: token("e1"), ts: t, broadcast: true)
        try await score(r, "o1", 1, 0, ts: t + 1000)

        let back = try await endOutage(r, refusing) { failedDeliveries(w, "match:o1") >= 3 }
        #expect(await eventually(timeout: .seconds(60)) { await back.drainedAll() })
        let id = try #require(try await back.channelID("match:o1"))
        #expect(state(try await back.channel(id))["homeScore"] as? Int == 1)
        try await expectNothingLost(back, w)
    }

    /// Per-token devices: the fan-out's tokens fail for want of a connection for more rounds
    /// than `fanout.token_attempts` (2) and keep waiting; once APNs is back every device shows
    /// the score, delivered once.
    @Test func anAPNsOutageLongerThanATokensAttemptsFailsNoToken() async throws {
        let (r, refusing, w) = try await outage(["--delivery-log", "1000"])
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        let t = now() - 60_000
        let devices = (0..<3).map { token(String(format: "f%x", $0)) }
        for (i, device) in devices.enumerated() {
            try await register(r, device: "d\(i)", key: "match:o2", activity: "A\(i)", token: device, ts: t)
        }
        try await score(r, "o2", 2, 1, ts: t + 1000)

        let back = try await endOutage(r, refusing) { tokensWaitedPastTheirAttempts(w, "match:o2") }
        #expect(try await eventually(timeout: .seconds(60)) {
            for device in devices where state(try await back.device(device))["homeScore"] as? Int != 2 { return false }
            return true
        })
        #expect(await eventually(timeout: .seconds(30)) { await drained(back.redis, back.settings) })
        let received = try await back.sandbox.deviceDeliveries().filter { $0.event == "update" }
        #expect(received.count == devices.count, "\(received)")
        try await expectNothingLost(back, w)
    }

    /// APNs answers 503 to everything (pushes, broadcasts, channel management): a key on
    /// broadcast can't get its channel through more failed deliveries than
    /// `worker.max_deliveries` allows, and a per-token key's tokens fail more rounds than
    /// `fanout.token_attempts`; once APNs answers again both keys' devices show their scores,
    /// each token's update delivered once, nothing lost.
    @Test func anAPNsAnsweringOnlyErrorsLongerThanTheDeliveriesLosesNothing() async throws {
        let (r, w) = try await quickRig(["--delivery-log", "1000"])
        defer { r.redis.close(); w.removeLogs() }
        let t = now() - 60_000
        let devices = [token("b7"), token("c7")]
        try await registerBothKinds(r, channelKey: "match:o3", channelToken: token("a7"), tokenKey: "match:o4", devices: devices, ts: t)
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1}"#)
        try await score(r, "o3", 1, 0, ts: t + 1000)
        try await score(r, "o4", 2, 0, ts: t + 1000)
        #expect(await eventually(timeout: .seconds(60)) { failedDeliveries(w, "match:o3") >= 3 && tokensWaitedPastTheirAttempts(w, "match:o4") },
                "the outage never outlasted the limits: the test proves nothing")
        try await r.sandbox.post("/sandbox/faults", json: "{}")
        try await expectBothKindsShown(r, w, channelKey: "match:o3", channelHome: 1, devices: devices, deviceHome: 2)
    }

    /// A fan-out's tokens through an outage longer than their `fanout.token_attempts` (3), then
    /// one of them failing once for itself as APNs comes back: the rounds that met the outage
    /// didn't count, so that failure is its first attempt, not its last; it waits, goes again,
    /// and both devices show the score. Nothing is recorded as failed.
    @Test func aTokenHasItsAttemptsAfterAnOutage() async throws {
        // Three attempts: the failure after the outage is the first, so the round after it may
        // come before the test lets the token through.
        let r = try await rig(["--delivery-log", "1000"])
        let w = try r.worker("w", quickDeliveries.merging(["fanout.token_attempts": "3"]) { _, new in new })
        defer { r.redis.close(); w.removeLogs() }
        let t = now() - 60_000
        let (shaky, steady) = (token("a9"), token("b9"))
        try await register(r, device: "s", key: "match:o14", activity: "S", token: shaky, ts: t)
        try await register(r, device: "t", key: "match:o14", activity: "T", token: steady, ts: t)
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1}"#)
        try await score(r, "o14", 3, 1, ts: t + 1000)
        #expect(await eventually(timeout: .seconds(60)) { tokensWaitedPastTheirAttempts(w, "match:o14", attempts: 3) },
                "the outage never outlasted the attempts: the test proves nothing")
        // APNs is back, but fails the one token for itself.
        try await r.sandbox.post("/sandbox/faults", json: #"{"failingTokens":["\#(shaky)"]}"#)
        #expect(await eventually(timeout: .seconds(60)) {
            jsonLogLines(w.stderr).contains {
                $0["msg"] == "tokens still failing wait for the end of their slice" && $0["key"] == "match:o14" && $0["apns_outage"] == "false"
            }
        }, "the token's failure after the outage was not given another attempt")
        try await r.sandbox.post("/sandbox/faults", json: "{}")
        #expect(try await eventually(timeout: .seconds(60)) {
            for device in [shaky, steady] where state(try await r.device(device))["homeScore"] as? Int != 3 { return false }
            return true
        })
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        try await expectNothingLost(r, w, seen: "tokens still failing")
    }

    /// Broadcasts alone answered 503 while device pushes go through on the same client: an
    /// outage of the broadcast service, so the broadcast's event waits through more failed
    /// deliveries than `worker.max_deliveries` allows, and its channel shows the score once
    /// broadcasts are answered again; nothing is dead-lettered.
    @Test func anOutageOfBroadcastsAloneLosesNothing() async throws {
        let (r, w) = try await quickRig()
        defer { r.redis.close(); w.removeLogs() }
        let t = now() - 60_000
        try await register(r, device: "c", key: "match:o5", activity: "C", token: token("d7"), ts: t, broadcast: true)
        try await register(r, device: "p", key: "match:o6", activity: "P", token: token("e7"), ts: t)
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/faults", json: #"{"unavailableRate":1,"only":["broadcast"]}"#)
        try await score(r, "o5", 1, 0, ts: t + 1000)
        // Device pushes answered normally all along, on the same client.
        let (outlasted, _) = await scoring(r, "o6", after: t, until: r.settings.deadLetterStream) { _ in failedDeliveries(w, "match:o5") >= 3 }
        #expect(outlasted, "the outage never outlasted the deliveries: the test proves nothing")
        try await r.sandbox.post("/sandbox/faults", json: "{}")
        #expect(try await eventually(timeout: .seconds(60)) {
            guard let id = try await r.channelID("match:o5") else { return false }
            return state(try await r.channel(id))["homeScore"] as? Int == 1
        })
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        try await expectNothingLost(r, w, seen: "sending failed")
    }

    /// One channel's broadcasts answered 500 while broadcasts work (a request APNs fails for
    /// itself alone), on a worker with nothing else to send: nothing else shows the broadcast
    /// service at work, so the worker asks it (`APNsClient.probe`: a broadcast without a channel
    /// id, refused as such); the answer shows it working, and the event is dead-lettered after
    /// its deliveries instead of being retried every visibility timeout for ever.
    @Test func aBroadcastAPNsFailsForItselfOnAnIdleWorkerIsStillDeadLettered() async throws {
        let (r, w) = try await quickRig()
        defer { r.redis.close(); w.removeLogs() }
        let t = now() - 60_000
        try await register(r, device: "c", key: "match:o11", activity: "C", token: token("d6"), ts: t, broadcast: true)
        try await score(r, "o11", 1, 0, ts: t + 1000)
        #expect(await eventually { await r.drainedAll() })
        let id = try #require(try await r.channelID("match:o11"))
        let faults = try JSONSerialization.data(withJSONObject: ["failingChannels": [id]])
        try await r.sandbox.post("/sandbox/faults", json: String(decoding: faults, as: UTF8.self))
        try await score(r, "o11", 2, 0, ts: t + 2000)
        var letters = ""
        let dead = await eventually(timeout: .seconds(60)) {
            letters = await streamText(r, r.settings.deadLetterStream)
            return letters.contains("broadcast to match:o11")
        }
        #expect(dead, "the broadcast APNs kept failing on an idle worker was never dead-lettered")
        #expect(letters.contains("kept failing") && letters.contains("InternalServerError"), "\(letters.prefix(1000))")
        #expect(await w.stop() == 0)
    }

    /// One device token's pushes answered 500 while device pushes work, on a worker with
    /// nothing else to send: the probe (a push to a token no device has, refused as a bad
    /// token) shows the service at work, so the token is recorded as failed after its
    /// `fanout.token_attempts` (2), as before.
    @Test func aTokenAPNsFailsForItselfIsStillRecordedAsFailed() async throws {
        let (r, w) = try await quickRig()
        defer { r.redis.close(); w.removeLogs() }
        let t = now() - 60_000
        let failing = token("b8")
        try await register(r, device: "p", key: "match:o8", activity: "P", token: failing, ts: t)
        #expect(await eventually { await r.drainedAll() })
        try await r.sandbox.post("/sandbox/faults", json: #"{"failingTokens":["\#(failing)"]}"#)
        try await score(r, "o8", 1, 0, ts: t + 1000)
        var failures = ""
        let recorded = await eventually(timeout: .seconds(60)) {
            failures = await streamText(r, r.settings.keys.sendFailures)
            return failures.contains("match:o8") && failures.contains(String(failing.prefix(8)))
        }
        #expect(recorded, "the token APNs kept failing was never recorded as failed: \(failures.prefix(1000))")
        #expect(failures.contains("still failing after 2 attempts"), "\(failures.prefix(1000))")
        // The app's backend hears of it, with the whole token.
        let given = try await outcomes(r).filter { $0["type"] == "token.failed" }
        #expect(given.count == 1 && given[0]["token"] == failing && given[0]["key"] == "match:o8"
                && given[0]["reason"]?.contains("still failing after 2 attempts") == true, "\(given)")
        #expect(await w.stop() == 0)
    }

    /// A key limited to production, used against a development endpoint (every request answers
    /// 403 `BadEnvironmentKeyIdInToken`): a setting, not an outage. No channel can be made, so
    /// the broadcast key's device gets per-token pushes; they and the per-token key's device
    /// are recorded as failed with that reason, nothing is dead-lettered, nothing stays pending.
    @Test func aKeyForTheOtherEnvironmentFailsItsWorkInsteadOfHoldingIt() async throws {
        let (r, w) = try await quickRig(["--key-environment", "production"])
        defer { r.redis.close(); w.removeLogs() }
        let t = now() - 60_000
        let (onChannel, perToken) = (token("a8"), token("c8"))
        try await register(r, device: "c", key: "match:o12", activity: "C", token: onChannel, ts: t, broadcast: true)
        try await register(r, device: "p", key: "match:o13", activity: "P", token: perToken, ts: t)
        try await score(r, "o12", 1, 0, ts: t + 1000)
        try await score(r, "o13", 1, 0, ts: t + 1000)
        var failures = ""
        let settled = await eventually(timeout: .seconds(60)) {
            failures = await streamText(r, r.settings.keys.sendFailures)
            return failures.contains(String(onChannel.prefix(8))) && failures.contains(String(perToken.prefix(8)))
        }
        #expect(settled, "failures: \(failures.prefix(1000))")
        #expect(failures.contains("BadEnvironmentKeyIdInToken"), "\(failures.prefix(1000))")
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() }, "work for the other environment stayed pending")
        let dead = await streamText(r, r.settings.deadLetterStream)
        #expect(!dead.contains("match:o1"), "dead letters: \(dead.prefix(1000))")
        #expect(await w.stop() == 0)
        #expect(jsonLogLines(w.stderr).contains { $0["msg"]?.hasPrefix("APNs key limited to the other environment") == true })
    }

    /// APNs refusing our credentials (a sandbox that expects another team: every request, channel
    /// management included, answers 403 `InvalidProviderToken`) is no answer about the work: for
    /// longer than the deliveries and the tokens' attempts allow, nothing is dead-lettered or
    /// recorded as failed; once the credentials are accepted again, the broadcast key's channel
    /// and the per-token key's devices show their scores, each token's update delivered once.
    @Test func apnsRefusingTheProviderTokenLosesNothing() async throws {
        let (r, refusing, w) = try await outage(["--delivery-log", "1000"])
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        refusing.close()
        let wrongTeam = try await SandboxProcess(sharing: r.sandbox, port: refusing.port, arguments: ["--team-id", "OTHERTEAM1"])
        let t = now() - 60_000
        let devices = [token("b9"), token("c9")]
        try await registerBothKinds(r, channelKey: "match:o9", channelToken: token("a9"), tokenKey: "match:o10", devices: devices, ts: t)
        try await score(r, "o9", 1, 0, ts: t + 1000)
        try await score(r, "o10", 2, 0, ts: t + 1000)
        #expect(await eventually(timeout: .seconds(60)) { failedDeliveries(w, "match:o9") >= 3 && tokensWaitedPastTheirAttempts(w, "match:o10") },
                "the refusal never outlasted the limits: the test proves nothing")
        #expect(jsonLogLines(w.stderr).contains { ($0["error"] ?? $0["reason"] ?? "").contains("InvalidProviderToken") },
                "the refusal's reason was never logged")
        wrongTeam.child.kill(signal: SIGKILL)
        _ = await wrongTeam.child.waitForExit(timeout: .seconds(10))
        let sandbox = try await SandboxProcess(sharing: r.sandbox, port: refusing.port)
        let back = Rig(server: r.server, redis: r.redis, sandbox: sandbox, settings: r.settings)
        try await expectBothKindsShown(back, w, channelKey: "match:o9", channelHome: 1, devices: devices, deviceHome: 2)
    }
}

extension SendTests {
    /// The slices stream's pending entries: (id, consumer, deliveries).
    func pendingSlices(_ r: Rig) async throws -> [(id: String, consumer: String, deliveries: Int64)] {
        let reply = try await r.redis.send(RedisCommand("XPENDING", r.settings.keys.slices, r.settings.group, "-", "+", 100))
        return (reply.array ?? []).compactMap { item in
            guard let a = item.array, a.count == 4, let id = a[0].string, let c = a[1].string, let n = a[3].int else { return nil }
            return (id, c, n)
        }
    }

    /// A fan-out's slice whose tokens wait through an APNs outage longer than ten visibility
    /// timeouts stays this worker's: its idle time is kept below the timeout the whole while, so
    /// neither this worker's claims nor any other's take it (its deliveries stay 1), nor the
    /// event's entry its fan-out acknowledges at the end, and once APNs
    /// answers every device is sent its update once.
    @Test func aWorkerNeverClaimsTheSlicesItHoldsThroughAnAPNsOutage() async throws {
        let (r, refusing, w) = try await outage(["--delivery-log", "1000"])
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        let t = now() - 60_000
        let devices = (0..<3).map { token(String(format: "c%x", $0)) }
        for (i, device) in devices.enumerated() {
            try await register(r, device: "d\(i)", key: "match:o9", activity: "A\(i)", token: device, ts: t)
        }
        try await score(r, "o9", 1, 0, ts: t + 1000)
        #expect(await eventually(timeout: .seconds(10)) { (try? await pendingSlices(r).isEmpty == false) ?? false })
        // 7 s: fourteen visibility timeouts (500 ms), past the ten after which a stuck delivery is let go.
        let until = ContinuousClock.now + .seconds(7)
        var most: Int64 = 0, owners = Set<String>()
        while ContinuousClock.now < until {
            for p in try await pendingSlices(r) {
                most = max(most, p.deliveries)
                owners.insert(p.consumer)
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(most == 1 && owners.count == 1, "deliveries \(most), consumers \(owners)")
        // Nor its event's entry, pending until the last slice acknowledges it.
        #expect(!jsonLogLines(w.stderr).contains { ($0["msg"] ?? "").hasPrefix("claimed idle") }, "\(w.stderr.suffix(3000))")
        let back = try await endOutage(r, refusing) { true }
        #expect(try await eventually(timeout: .seconds(60)) {
            for device in devices where state(try await back.device(device))["homeScore"] as? Int != 1 { return false }
            return true
        })
        #expect(await eventually(timeout: .seconds(30)) { await drained(back.redis, back.settings) })
        let received = try await back.sandbox.deviceDeliveries().filter { $0.event == "update" }
        #expect(received.count == devices.count, "\(received)")
        try await expectNothingLost(back, w)
    }
}
