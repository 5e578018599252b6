@testable import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// A delivery that outlives the visibility timeout stays its worker's (`EntriesInHand`).
extension SendTests {
    /// APNs answers every push 1.5 s late, five visibility timeouts (300 ms), with two workers
    /// claiming idle entries every 100 ms and `worker.max_deliveries` 2: the worker that read the
    /// update keeps it claimed while its push is under way, so the other never claims it, it
    /// is delivered once, the device gets it once, and nothing is dead-lettered.
    @Test func aDeliveryLongerThanTheVisibilityTimeoutIsNotClaimedFromItsWorker() async throws {
        let r = try await rig(["--slow-rate", "1", "--slow-ms", "1500", "--delivery-log", "1000"])
        defer { r.redis.close() }
        let quick = ["worker.visibility_timeout_ms": "300", "worker.claim_interval_ms": "100", "worker.max_deliveries": "2",
                     "log.level": "info"]
        let w1 = try r.worker("w1", quick), w2 = try r.worker("w2", quick)
        defer { w1.removeLogs(); w2.removeLogs() }
        let t = now() - 60_000
        let device = token("c7")
        try await register(r, device: "d", key: "match:h1", activity: "A", token: device, ts: t)
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })

        try await score(r, "h1", 1, 0, ts: t + 1000)
        #expect(await eventually(timeout: .seconds(30)) { await r.drainedAll() })
        try await Task.sleep(for: .seconds(1))
        let all = try await r.sandbox.deviceDeliveries()
        let received = all.filter { $0.target == device && $0.event == "update" }
        #expect(received.count == 1, "the device got the update \(received.count) times: \(all)")
        #expect(state(try await r.device(device))["homeScore"] as? Int == 1)
        let dead = try await r.redis.send(RedisCommand("XRANGE", r.settings.deadLetterStream, "-", "+", "COUNT", 5))
        #expect(dead.array?.isEmpty == true, "dead letters: \(String(describing: dead).prefix(1000))")
        #expect(await w1.stop() == 0)
        #expect(await w2.stop() == 0)
        let claims = (jsonLogLines(w1.stderr) + jsonLogLines(w2.stderr)).filter { ($0["msg"] ?? "").hasPrefix("claimed idle") }
        #expect(claims.isEmpty, "\(claims.count) claims: \(claims.prefix(3))")
    }
}

/// What a worker holds, as plain values.
@Suite struct EntriesInHandValueTests {
    @Test func anEntryIsTakenOnceAndKeptClaimedForTenTimeouts() {
        let held = EntriesInHand(visibilityTimeout: .seconds(1))
        #expect(held.take("s", ["1-0", "2-0"]) == ["1-0", "2-0"])
        // Its own claim hands 2-0 back while its delivery goes on: not started twice.
        #expect(held.take("s", ["2-0", "3-0"]) == ["3-0"])
        #expect(held.take("t", ["2-0"]) == ["2-0"])
        let now = ContinuousClock.now
        #expect(held.toKeep(now: now).sorted { $0.stream < $1.stream }.map { "\($0.stream) \($0.ids)" } == ["s [\"1-0\", \"2-0\", \"3-0\"]", "t [\"2-0\"]"])
        // Held ten visibility timeouts: no longer kept, the fleet may take it over.
        #expect(held.toKeep(now: now + .seconds(11)).isEmpty)
        held.release("s", ["1-0", "2-0", "3-0"])
        #expect(held.toKeep(now: now).map(\.stream) == ["t"])
        #expect(held.take("s", ["2-0"]) == ["2-0"])
    }
}

extension EntriesInHandValueTests {
    /// A handed-off entry (its fan-out's slices under way) is kept claimed but is not in hand: a
    /// delivery of it again is processed. It is kept until it is gone from this consumer's
    /// pending entries, or for ten timeouts; while APNs is unusable that clock stands still.
    @Test func aHandedOffEntryIsKeptButNotInHandAndAnOutageStopsTheClock() {
        let held = EntriesInHand(visibilityTimeout: .seconds(1))
        held.handOff("s", ["5-0"])
        #expect(held.take("s", ["5-0"]) == ["5-0"])
        held.release("s", ["5-0"])
        let start = ContinuousClock.now
        #expect(held.toKeep(now: start).map { "\($0.stream) \($0.ids)" } == ["s [\"5-0\"]"])
        _ = held.take("s", ["6-0"])
        // Nine seconds of outage: the clocks restart, so eleven seconds after the start both are still kept.
        held.restartClocks(now: start + .seconds(9))
        #expect(held.toKeep(now: start + .seconds(11)).map { "\($0.stream) \($0.ids)" } == ["s [\"5-0\", \"6-0\"]"])
        #expect(held.toKeep(now: start + .seconds(20)).isEmpty)
        // Acknowledged by another worker's last slice: dropped.
        held.handOff("t", ["7-0"])
        held.dropHandOffs("t", ["7-0"])
        #expect(held.toKeep(now: start + .seconds(9)).map(\.stream) == ["s"])
    }
}
