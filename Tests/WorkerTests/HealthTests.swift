@testable import ActivityCastWorker
import APNs
import Testing

/// The liveness answer from plain values (`Probes.health`): what makes a worker "stuck".
@Suite struct HealthTests {
    @Test func stuckOnlyWhenALoopStopsTurning() {
        let ok = Probes.health(draining: false, readIdle: .seconds(2), readLimit: .seconds(40),
                               loops: [("api.push.apple.com:443", .milliseconds(900), .seconds(40))])
        #expect(ok.status == 200)
        let read = Probes.health(draining: false, readIdle: .seconds(41), readLimit: .seconds(40), loops: [])
        #expect(read.status == 503)
        #expect(String(decoding: read.body, as: UTF8.self).contains("the read loop has made no progress for 41 s (limit 40 s)"))
        let loop = Probes.health(draining: false, readIdle: .zero, readLimit: .seconds(40),
                                 loops: [("a:443", .seconds(1), .seconds(40)), ("b:443", .seconds(45), .seconds(40))])
        #expect(loop.status == 503)
        #expect(String(decoding: loop.body, as: UTF8.self).contains("an APNs event loop (b:443) has not turned for 45 s (limit 40 s)"))
        #expect(!String(decoding: loop.body, as: UTF8.self).contains("a:443"))
        // Draining is bounded by the shutdown deadline: not a reason to restart.
        #expect(Probes.health(draining: true, readIdle: .seconds(99), readLimit: .seconds(40), loops: []).status == 200)
    }

    @Test func theLoopLimitCoversConnectingEveryConnectionOfALoop() {
        var c = APNsClientConfiguration(endpoint: APNsEndpoint(host: "127.0.0.1", port: 1), connections: 4)
        c.threads = 2
        c.connectTimeout = .seconds(5)
        // Two connections per loop, each may take the connect timeout, plus 30 s.
        #expect(Probes.loopLimit(c) == .seconds(45))
    }
}
