@testable import ActivityCastWorker
import RedisClient
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

/// Readiness from plain values (`Probes.notReady`), and Redis's memory read from `INFO memory`.
@Suite struct ReadinessTests {
    let oom = RedisRefusal(errorReply: "OOM command not allowed when used memory > 'maxmemory'.")!

    @Test func notReadyWhileRedisRefusesWritesAndReadyOnceThatIsOld() {
        let window = Duration.seconds(45)
        #expect(Probes.notReady(stopping: false, check: (nil, .seconds(1)), refusal: nil, refusalWindow: window) == nil)
        let full = Probes.notReady(stopping: false, check: (nil, .seconds(1)), refusal: (oom, .seconds(2)), refusalWindow: window)
        #expect(full?.contains("Redis is out of memory and refuses writes (out_of_memory") == true, "\(full ?? "ready")")
        // Nothing refused for longer than a claim cycle: the refusal is over.
        #expect(Probes.notReady(stopping: false, check: (nil, .seconds(1)), refusal: (oom, .seconds(46)), refusalWindow: window) == nil)
        let readOnly = RedisRefusal(errorReply: "READONLY You can't write against a read only replica.")!
        #expect(Probes.notReady(stopping: false, check: (nil, .zero), refusal: (readOnly, .zero), refusalWindow: window)?.hasPrefix("Redis refuses writes (not_writable") == true)
        // Draining, an unchecked or stale Redis, and the monitor's own problem come first.
        #expect(Probes.notReady(stopping: true, check: (nil, .zero), refusal: (oom, .zero), refusalWindow: window)?.hasPrefix("draining") == true)
        #expect(Probes.notReady(stopping: false, check: nil, refusal: nil, refusalWindow: window)?.hasPrefix("starting") == true)
        #expect(Probes.notReady(stopping: false, check: (nil, .seconds(6)), refusal: nil, refusalWindow: window) == "Redis check unanswered for 6 s")
        #expect(Probes.notReady(stopping: false, check: ("consumer group g missing on s", .zero), refusal: (oom, .zero), refusalWindow: window)
                == "consumer group g missing on s")
    }

    @Test func redisMemoryIsReadFromInfo() {
        let info = "# Memory\r\nused_memory:1234567\r\nused_memory_human:1.18M\r\nmaxmemory:2147483648\r\nmaxmemory_human:2.00G\r\nmaxmemory_policy:noeviction\r\n"
        #expect(RedisMemory(info: info) == RedisMemory(used: 1_234_567, max: 2_147_483_648, policy: "noeviction"))
        #expect(RedisMemory(info: "used_memory:5\nmaxmemory:0\n")?.max == 0)
        #expect(RedisMemory(info: "used_memory:5\r\n") == nil, "no maxmemory line")
        // A cluster's primaries: the one nearest its limit, else (no limits) the most used.
        let a = RedisMemory(used: 900, max: 1000, policy: "noeviction"), b = RedisMemory(used: 1500, max: 4000, policy: "noeviction")
        #expect(RedisMemory.fullest([b, a]) == a)
        #expect(RedisMemory.fullest([RedisMemory(used: 7, max: 0, policy: ""), RedisMemory(used: 9, max: 0, policy: "")])?.used == 9)
        #expect(RedisMemory.fullest([RedisMemory(used: 99, max: 0, policy: ""), b]) == b)
        #expect(RedisMemory.fullest([]) == nil)
        #expect(RedisMemory(info: "used_memory:x\r\nmaxmemory:0\r\n") == nil)
    }
}
