import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import Testing

@Suite struct AdminAPITests {
    let f: Fixture
    init() throws { f = try Fixture() }

    private func admin(_ s: SandboxState, _ method: String, _ path: String, _ body: String = "") -> SandboxResponse {
        s.handle(SandboxRequest(method: method, path: path, body: bytes(body)), nowMillis: Fixture.now)
    }

    @Test func faultsRoundTrip() throws {
        let s = f.sandbox()
        let posted = admin(s, "POST", "/sandbox/faults", #"{"tooManyRequestsRate":1,"goAwayAfterStreams":50,"unregisteredTokens":{"\#(Fixture.token.uppercased())":1700000000000},"seed":7}"#)
        #expect(posted.status == 200 && posted.header("content-type") == "application/json")
        let read = admin(s, "GET", "/sandbox/faults")
        let decoded = try JSONDecoder().decode(SandboxFaults.self, from: Data(read.body))
        #expect(decoded == SandboxFaults(tooManyRequestsRate: 1, goAwayAfterStreams: 50, unregisteredTokens: [Fixture.token: 1_700_000_000_000], seed: 7))
        #expect(s.faults == decoded)
        #expect(s.handle(try f.devicePush(), nowMillis: Fixture.now).reason == "TooManyRequests")
        // Omitted keys take their defaults: this clears everything.
        #expect(admin(s, "POST", "/sandbox/faults", "{}").status == 200)
        #expect(s.faults == SandboxFaults())
        #expect(s.handle(try f.devicePush(), nowMillis: Fixture.now).status == 200)
        // Refused bodies leave the faults alone.
        #expect(admin(s, "POST", "/sandbox/faults", #"{"tooManyRequestsRate":2}"#).status == 400)
        #expect(admin(s, "POST", "/sandbox/faults", #"{"tooManyRequestsRate":"high"}"#).status == 400)
        #expect(admin(s, "POST", "/sandbox/faults", "nope").status == 400)
        #expect(s.faults == SandboxFaults())
    }

    /// POST replaces the whole set and says so by answering with every fault in force; PATCH
    /// changes only the faults it names.
    @Test func postReplacesTheWholeSetAndPatchChangesOnlyWhatItNames() throws {
        let s = f.sandbox()
        func faults(_ r: SandboxResponse) throws -> SandboxFaults { try JSONDecoder().decode(SandboxFaults.self, from: Data(r.body)) }
        var r = admin(s, "POST", "/sandbox/faults", #"{"internalErrorRate":0.5,"goAwayAfterStreams":100,"unregisteredTokens":{"\#(Fixture.token)":1}}"#)
        #expect(r.status == 200)
        // The answer names every fault, those left at their defaults (null when unset) included.
        let named = try #require(r.json)
        #expect(Set(named.keys) == SandboxFaults.keys, "\(named)")
        #expect(named["tooManyRequestsRate"] as? Double == 0 && named["seed"] is NSNull && named["goAwayAfterStreams"] as? Int == 100)

        // PATCH: one fault changes, the others stay.
        r = admin(s, "PATCH", "/sandbox/faults", #"{"tooManyRequestsRate":0.25}"#)
        #expect(r.status == 200)
        let expected = SandboxFaults(tooManyRequestsRate: 0.25, internalErrorRate: 0.5, goAwayAfterStreams: 100,
                                     unregisteredTokens: [Fixture.token: 1])
        #expect(try faults(r) == expected && s.faults == expected)
        // null resets one fault to its default.
        r = admin(s, "PATCH", "/sandbox/faults", #"{"goAwayAfterStreams":null,"internalErrorRate":null}"#)
        #expect(try faults(r) == SandboxFaults(tooManyRequestsRate: 0.25, unregisteredTokens: [Fixture.token: 1]))
        // All or nothing: an invalid value, a wrong type or an unknown key changes nothing.
        for bad in [#"{"internalErrorRate":0.5,"tooManyRequestsRate":2}"#, #"{"resetRate":"often"}"#, #"{"tooManyRequestRate":1}"#, "[]"] {
            #expect(admin(s, "PATCH", "/sandbox/faults", bad).status == 400, "\(bad)")
            #expect(s.faults == SandboxFaults(tooManyRequestsRate: 0.25, unregisteredTokens: [Fixture.token: 1]), "\(bad)")
        }
        // A misspelt key in a POST no longer resets everything silently either.
        #expect(admin(s, "POST", "/sandbox/faults", #"{"tooManyRequestRate":1}"#).status == 400)
        #expect(s.faults.tooManyRequestsRate == 0.25)
        // POST replaces everything: what it omits is off again.
        r = admin(s, "POST", "/sandbox/faults", #"{"unavailableRate":1}"#)
        #expect(try faults(r) == SandboxFaults(unavailableRate: 1) && s.faults == SandboxFaults(unavailableRate: 1))
        #expect(admin(s, "DELETE", "/sandbox/faults").status == 405)
    }

    /// A PATCH that names no seed leaves the fault sequence where it is; one that does restarts it.
    @Test func patchRestartsTheFaultSequenceOnlyWithASeed() throws {
        func outcomes(_ s: SandboxState, _ n: Int) throws -> [Int] {
            try (0..<n).map { _ in s.handle(try f.devicePush(), nowMillis: Fixture.now).status }
        }
        let s = f.sandbox()
        #expect(admin(s, "POST", "/sandbox/faults", #"{"tooManyRequestsRate":0.5,"seed":42}"#).status == 200)
        let first = try outcomes(s, 40)
        #expect(first.contains(429) && first.contains(200))
        #expect(admin(s, "POST", "/sandbox/faults", #"{"tooManyRequestsRate":0.5,"seed":42}"#).status == 200)
        let twenty = try outcomes(s, 20)
        #expect(twenty == Array(first.prefix(20)))
        #expect(admin(s, "PATCH", "/sandbox/faults", #"{"slowResponseDelayMillis":0}"#).status == 200)
        #expect(try outcomes(s, 20) == Array(first.suffix(20)))
        #expect(admin(s, "PATCH", "/sandbox/faults", #"{"seed":42}"#).status == 200)
        #expect(try outcomes(s, 20) == Array(first.prefix(20)))
    }

    @Test func unregisterThenPush() throws {
        let s = f.sandbox()
        let r = admin(s, "POST", "/sandbox/unregister", #"{"token":"\#(Fixture.token)","timestamp":1732233500000}"#)
        #expect(r.status == 200)
        let push = s.handle(try f.devicePush(), nowMillis: Fixture.now)
        #expect(push.status == 410 && push.reason == "Unregistered" && push.json?["timestamp"] as? Int64 == 1_732_233_500_000)
        #expect(s.faults.unregisteredTokens[Fixture.token] == 1_732_233_500_000)
        // Timestamp defaults to now; bad tokens are refused.
        let other = String(repeating: "cd", count: 32)
        #expect(admin(s, "POST", "/sandbox/unregister", #"{"token":"\#(other)"}"#).status == 200)
        #expect(s.faults.unregisteredTokens[other] == Fixture.now)
        #expect(admin(s, "POST", "/sandbox/unregister", #"{"token":"xyz"}"#).status == 400)
        #expect(admin(s, "POST", "/sandbox/unregister", #"{"timestamp":1}"#).status == 400)
    }

    @Test func viewsDeliveriesAndStats() throws {
        let s = f.sandbox()
        for ts in [Int64(10), 20, 15] {
            _ = s.handle(try f.devicePush(body: update(timestamp: ts, state: ["score": .string("\(ts)")])), nowMillis: Fixture.now)
        }
        let device = admin(s, "GET", "/sandbox/devices/\(Fixture.token)")
        #expect(device.status == 200)
        let view = try #require(device.json)
        #expect((view["contentState"] as? [String: Any])?["score"] as? String == "20")
        #expect(view["timestamp"] as? Int == 20 && view["timestampRegressionsIgnored"] as? Int == 1)
        #expect(view["state"] as? String == "active" && view["tier"] as? String == "standard")
        #expect(admin(s, "GET", "/sandbox/devices/\(String(repeating: "ee", count: 32))").status == 404)

        let deliveries = admin(s, "GET", "/sandbox/deliveries?limit=2")
        let list = try #require(deliveries.json?["deliveries"] as? [[String: Any]])
        #expect(list.map { $0["timestamp"] as? Int } == [20, 15])
        #expect(list.last?["displayed"] as? Bool == false)
        #expect((admin(s, "GET", "/sandbox/deliveries").json?["deliveries"] as? [Any])?.count == 3)
        #expect(admin(s, "GET", "/sandbox/deliveries?limit=x").status == 400)

        let stats = try #require(admin(s, "GET", "/sandbox/stats").json)
        #expect(stats["requests"] as? Int == 3 && stats["delivered"] as? Int == 3 && stats["notDisplayed"] as? Int == 1)
        #expect((stats["byStatus"] as? [String: Any])?["200"] as? Int == 3)
        // Admin requests are not counted.
        #expect(s.stats.requests == 3)
    }

    /// A reader pages through every delivery after the last one it saw, with the receipt time in
    /// µs and the content-state it carried, and learns how many the ring overwrote meanwhile.
    @Test func deliveriesPageBySequenceWithReceiptTimesAndContentState() throws {
        let s = f.sandbox { $0.deliveryLogCapacity = 4 }
        #expect(admin(s, "GET", "/sandbox/deliveries?since=0").json?["last"] as? Int == 0)
        let channel = try f.createChannel(s, policy: 0)
        for i in 1...3 {
            let pushed = s.handle(try f.devicePush(body: update(timestamp: Int64(i), state: ["clock": .string("n\(i)")])),
                                  nowMicros: Fixture.now * 1000 + Int64(i))
            #expect(pushed.status == 200)
        }
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel), body: update(timestamp: 4, state: ["clock": "n4"])),
                         nowMicros: Fixture.now * 1000 + 4).status == 200)

        let page = try #require(admin(s, "GET", "/sandbox/deliveries?since=1&limit=2").json)
        let list = try #require(page["deliveries"] as? [[String: Any]])
        #expect(list.map { $0["sequence"] as? Int } == [2, 3])
        #expect(list.map { $0["receivedMicros"] as? Int } == [2, 3].map { Int(Fixture.now) * 1000 + $0 })
        #expect(list.map { $0["timeMillis"] as? Int } == [Int(Fixture.now), Int(Fixture.now)])
        #expect(list.map { ($0["contentState"] as? [String: Any])?["clock"] as? String } == ["n2", "n3"])
        #expect(page["overwritten"] as? Int == 0 && page["last"] as? Int == 4)
        let rest = try #require(admin(s, "GET", "/sandbox/deliveries?since=3").json?["deliveries"] as? [[String: Any]])
        #expect(rest.count == 1 && rest[0]["kind"] as? String == "broadcast" && rest[0]["target"] as? String == channel)
        #expect((rest[0]["contentState"] as? [String: Any])?["clock"] as? String == "n4")
        #expect((admin(s, "GET", "/sandbox/deliveries?since=4").json?["deliveries"] as? [Any])?.isEmpty == true)

        // Two more: the ring (4) drops 1 and 2; a reader that stopped at 0 is told it missed them.
        for i in 5...6 { _ = s.handle(try f.devicePush(body: update(timestamp: Int64(i))), nowMicros: Fixture.now * 1000 + Int64(i)) }
        let late = try #require(admin(s, "GET", "/sandbox/deliveries?since=0&limit=100").json)
        #expect((late["deliveries"] as? [[String: Any]])?.map { $0["sequence"] as? Int } == [3, 4, 5, 6])
        #expect(late["overwritten"] as? Int == 2)
        #expect(admin(s, "GET", "/sandbox/deliveries?since=-1").status == 400)
        // Without `since`: the newest N, as before, now with their sequence numbers.
        #expect((admin(s, "GET", "/sandbox/deliveries?limit=1").json?["deliveries"] as? [[String: Any]])?.first?["sequence"] as? Int == 6)
    }

    /// `/sandbox/stats` says how many device pushes were accepted and when the newest of them had
    /// arrived (the latest receipt time, even if pushes are handled out of order); rejected pushes
    /// and broadcasts leave that time alone.
    @Test func statsCarryTheLastDevicePushReceipt() throws {
        let s = f.sandbox { $0.deliveryLogCapacity = 0 }
        #expect(admin(s, "GET", "/sandbox/stats").json?["lastDevicePushMicros"] as? Int == 0)
        let base = Fixture.now * 1000
        for (i, micros) in [base + 30, base + 10].enumerated() {
            let token = String(repeating: i == 0 ? "a1" : "b2", count: 32)
            #expect(s.handle(try f.devicePush(token: token), nowMicros: micros).status == 200)
        }
        // Refused (bad token) and a broadcast: not device pushes that arrived.
        #expect(s.handle(try f.devicePush(token: "zz"), nowMicros: base + 50).status == 400)
        let channel = try f.createChannel(s, policy: 0)
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel)), nowMicros: base + 60).status == 200)
        let stats = try #require(admin(s, "GET", "/sandbox/stats").json)
        #expect(stats["devicePushes"] as? Int == 2)
        #expect(stats["lastDevicePushMicros"] as? Int == Int(base + 30))
        #expect(s.stats.lastDevicePushMicros == base + 30)
    }

    @Test func channelViewsWithPercentEncodedIDs() throws {
        let s = f.sandbox()
        var id = ""
        // Create until the id has a '/' or '+', to exercise decoding (base64 of 16 random bytes: almost always).
        for _ in 0..<50 {
            id = try f.createChannel(s, policy: 1)
            if id.contains("/") || id.contains("+") { break }
        }
        let encoded = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        _ = s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: id, expiration: "1732240000"),
                                 body: update(timestamp: 5, state: ["x": 1])), nowMillis: Fixture.now)
        let r = admin(s, "GET", "/sandbox/channels/\(encoded)")
        #expect(r.status == 200)
        #expect(r.json?["id"] as? String == id && r.json?["messageStoragePolicy"] as? Int == 1)
        #expect((r.json?["contentState"] as? [String: Any])?["x"] as? Int == 1)
        #expect(admin(s, "GET", "/sandbox/channels/AAAA").status == 404)
    }

    @Test func tiersAndErrors() throws {
        let s = f.sandbox()
        let r = admin(s, "POST", "/sandbox/tier", #"{"token":"\#(Fixture.token)","tier":"frequent"}"#)
        #expect(r.status == 200 && r.json?["budgetPerHour"] as? Int == 120)
        _ = s.handle(try f.devicePush(), nowMillis: Fixture.now)
        #expect(s.deviceView(token: Fixture.token)?.tier == .frequent)
        #expect(admin(s, "POST", "/sandbox/tier", #"{"token":"\#(Fixture.token)","tier":"turbo"}"#).status == 400)
        #expect(admin(s, "GET", "/sandbox/tier").status == 405)
        #expect(admin(s, "DELETE", "/sandbox/stats").status == 405)
        #expect(admin(s, "GET", "/sandbox/nothing").status == 404)
        #expect(admin(s, "GET", "/sandbox/devices/").status == 404)
        let error = admin(s, "GET", "/sandbox/nothing").json?["error"] as? String
        #expect(error?.contains("/sandbox/nothing") == true)
    }
}
