import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import Testing

@Suite struct FaultTests {
    let f: Fixture
    init() throws { f = try Fixture() }

    /// Sends `n` valid pushes (each to its own token, so all would succeed) and returns the statuses.
    private func run(_ s: SandboxState, _ n: Int, connections: UInt64 = 16) throws -> [SandboxResponse] {
        let headers = try f.deviceHeaders()
        return try (0..<n).map { i in
            let token = String(repeating: "0", count: 56) + String(UInt32(i), radix: 16).leftPadded(to: 8)
            return s.handle(try f.devicePush(token: token, headers: headers, connection: UInt64(i) % connections), nowMillis: Fixture.now)
        }
    }

    @Test func ratesZeroAndOneAreExact() throws {
        let never = f.sandbox()
        #expect(try run(never, 10_000).allSatisfy { $0.status == 200 && $0.delay == nil && $0.connectionFault == nil })
        for (faults, status, reason) in [
            (SandboxFaults(tooManyRequestsRate: 1), 429, "TooManyRequests"),
            (SandboxFaults(internalErrorRate: 1), 500, "InternalServerError"),
            (SandboxFaults(unavailableRate: 1), 503, "ServiceUnavailable"),
        ] {
            let s = f.sandbox { $0.faults = faults }
            let responses = try run(s, 10_000)
            #expect(responses.allSatisfy { $0.status == status && $0.reason == reason })
            #expect(s.stats.faultsInjected == 10_000 && s.stats.delivered == 0)
        }
        let slow = f.sandbox { $0.faults = SandboxFaults(slowResponseRate: 1, slowResponseDelayMillis: 250) }
        #expect(try run(slow, 1000).allSatisfy { $0.status == 200 && $0.delay == .milliseconds(250) })
    }

    @Test func ratesAreRoughlyRespectedWithAFixedSeed() throws {
        let faults = SandboxFaults(tooManyRequestsRate: 0.10, internalErrorRate: 0.05, unavailableRate: 0.02, slowResponseRate: 0.20,
                                   slowResponseDelayMillis: 100, resetRate: 0.01, seed: 42)
        let s = f.sandbox { $0.faults = faults }
        let responses = try run(s, 10_000)
        func count(_ p: (SandboxResponse) -> Bool) -> Int { responses.filter(p).count }
        let resets = count { $0.connectionFault == .reset }
        // Each share within ±4 standard deviations of its expectation (n = 10,000).
        #expect(abs(resets - 100) <= 40)
        let answered = 10_000 - resets
        func near(_ observed: Int, _ rate: Double) -> Bool {
            let expected = Double(answered) * rate
            return abs(Double(observed) - expected) <= 4 * (expected * (1 - rate)).squareRoot()
        }
        #expect(near(count { $0.status == 429 }, 0.10))
        #expect(near(count { $0.status == 500 }, 0.05))
        #expect(near(count { $0.status == 503 }, 0.02))
        #expect(near(count { $0.delay != nil }, 0.20))
        #expect(near(count { $0.status == 200 }, 0.83))
        // Resets answer nothing.
        #expect(responses.filter { $0.connectionFault == .reset }.allSatisfy { $0.status == 0 && $0.headers.isEmpty })
        let stats = s.stats
        #expect(stats.connectionResets == resets && stats.requests == 10_000)
        #expect(stats.byStatus.values.reduce(0, +) == 10_000 - resets)

        // The same seed gives the same run; another seed a different one.
        let again = try run(f.sandbox { $0.faults = faults }, 10_000)
        #expect(again.map(\.status) == responses.map(\.status))
        var other = faults
        other.seed = 43
        #expect(try run(f.sandbox { $0.faults = other }, 10_000).map(\.status) != responses.map(\.status))
        // updateFaults with a seed restarts the sequence.
        s.updateFaults(faults)
        #expect(try run(s, 1000).map(\.status) == responses.prefix(1000).map(\.status))
    }

    @Test func goAwayAfterStreamsIsPerConnection() throws {
        let s = f.sandbox { $0.faults.goAwayAfterStreams = 3 }
        let goAway = ConnectionFault.goAway(debugData: bytes(#"{"reason":"Shutdown"}"#))
        var results: [SandboxResponse] = []
        for i in 0..<5 {
            results.append(s.handle(try f.devicePush(body: update(timestamp: Int64(i)), connection: 7), nowMillis: Fixture.now))
        }
        #expect(results.map(\.status) == [200, 200, 200, 503, 503])
        #expect(results.map(\.connectionFault) == [nil, nil, goAway, nil, nil])
        #expect(results[3].reason == "Shutdown")
        // Another connection starts its own count; a closed one is forgotten.
        #expect(s.handle(try f.devicePush(connection: 8), nowMillis: Fixture.now).status == 200)
        s.connectionClosed(7)
        #expect(s.handle(try f.devicePush(connection: 7), nowMillis: Fixture.now).status == 200)
        #expect(s.stats.goAways == 1)
    }

    @Test func faultsComeAfterRoutingAndBeforeValidation() throws {
        let s = f.sandbox { $0.faults.tooManyRequestsRate = 1 }
        // A bad path is still 404; a request with no token at all still gets the fault.
        #expect(s.handle(SandboxRequest(method: "POST", path: "/nowhere"), nowMillis: Fixture.now).status == 404)
        #expect(s.handle(SandboxRequest(method: "POST", path: "/3/device/xyz"), nowMillis: Fixture.now).reason == "TooManyRequests")
        // Faults can be switched off at run time.
        s.updateFaults(SandboxFaults())
        #expect(s.handle(try f.devicePush(), nowMillis: Fixture.now).status == 200)
    }

    /// `only` limits the per-request faults to some kinds of request; the others are answered as usual.
    @Test func faultsCanBeLimitedToSomeKindsOfRequest() throws {
        let s = f.sandbox()
        let channel = try f.createChannel(s, policy: 0)
        s.updateFaults(SandboxFaults(unavailableRate: 1, slowResponseRate: 1, slowResponseDelayMillis: 300, only: [.broadcast]))
        let b = s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel)), nowMillis: Fixture.now)
        #expect(b.status == 503 && b.delay == .milliseconds(300))
        let d = s.handle(try f.devicePush(), nowMillis: Fixture.now)
        #expect(d.status == 200 && d.delay == nil)
        let c = s.handle(try f.channelRequest("GET", channel: channel), nowMillis: Fixture.now)
        #expect(c.status == 200 && c.delay == nil)
        s.updateFaults(SandboxFaults(tooManyRequestsRate: 1, only: [.device, .channels]))
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel)), nowMillis: Fixture.now).status == 200)
        #expect(s.handle(try f.devicePush(), nowMillis: Fixture.now).status == 429)
        #expect(s.handle(try f.channelRequest("GET", channel: channel), nowMillis: Fixture.now).status == 429)
        // As JSON (`POST /sandbox/faults`): the kinds by name; an unknown kind is refused.
        let decoded = try JSONDecoder().decode(SandboxFaults.self, from: Data(#"{"slowResponseRate":1,"only":["broadcast"]}"#.utf8))
        #expect(decoded.only == [.broadcast] && decoded.slowResponseRate == 1)
        #expect(throws: (any Error).self) { try JSONDecoder().decode(SandboxFaults.self, from: Data(#"{"only":["pushes"]}"#.utf8)) }
        let again = try JSONDecoder().decode(SandboxFaults.self, from: try JSONEncoder().encode(decoded))
        #expect(again == decoded)
    }

    @Test func invalidFaultsAreDescribed() {
        #expect(SandboxFaults(tooManyRequestsRate: 1.5).problem != nil)
        #expect(SandboxFaults(resetRate: -0.1).problem != nil)
        #expect(SandboxFaults(goAwayAfterStreams: 0).problem != nil)
        #expect(SandboxFaults(unregisteredTokens: ["xyz": 1]).problem != nil)
        #expect(SandboxFaults(tooManyRequestsRate: 0.5, unregisteredTokens: [Fixture.token: 1]).problem == nil)
    }
}

extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
