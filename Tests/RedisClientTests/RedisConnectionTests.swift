import Foundation
import HiredisCodec
import RedisClient
import Testing
import TestSupport

@Suite struct RedisConnectionTests {
    @Test func typedRepliesAreBinarySafe() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }

        let binary: [UInt8] = [0, 13, 10, 255, 36, 42, 0]
        let replies = try await redis.pipeline([
            RedisCommand("SET", "k", binary),
            RedisCommand("GET", "k"),
            RedisCommand("GET", "missing"),
            RedisCommand("INCRBY", "n", 41),
            RedisCommand("RPUSH", "l", "a", ""),
            RedisCommand("LRANGE", "l", 0, -1),
            RedisCommand("HGET", "k", "f"),
        ])
        #expect(replies[0] == .status("OK"))
        #expect(replies[1] == .bulk(binary))
        #expect(replies[2] == .null)
        #expect(replies[3] == .integer(41))
        #expect(replies[5] == .array([.bulk(Array("a".utf8)), .bulk([])]))
        #expect(replies[6].errorMessage?.hasPrefix("WRONGTYPE") == true)
        await #expect(throws: RedisError.self) { try await redis.send(RedisCommand("HGET", "k", "f")) }
    }

    @Test func pipelinesManyCommandsInFewRoundTrips() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        _ = try await redis.command("PING")
        let before = redis.stats.roundTrips
        let commands = (0..<10_000).map { RedisCommand("SET", "key:\($0)", "value-\($0)") }
        let replies = try await redis.pipeline(commands)
        #expect(replies.count == 10_000 && replies.allSatisfy { $0 == .status("OK") })
        #expect(redis.stats.roundTrips - before == 1)
        #expect(try await redis.command("GET", "key:9999") == .bulk(Array("value-9999".utf8)))
    }

    @Test func concurrentCallersEachGetTheirOwnReplies() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                group.addTask {
                    let r = try await redis.pipeline([RedisCommand("SET", "c\(i)", i), RedisCommand("INCR", "c\(i)"), RedisCommand("GET", "c\(i)")])
                    #expect(r[1] == .integer(Int64(i + 1)))
                    #expect(r[2].int == Int64(i + 1))
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func scriptsRunBySHAAndSurviveAFlush() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let script = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        #expect(script.sha1.count == 40)
        // Never loaded: the first call meets NOSCRIPT and falls back to EVAL.
        #expect(try await redis.send(.script(script, keys: ["s"], args: [5])) == .integer(5))
        let loaded = try await redis.send(RedisCommand("SCRIPT", "EXISTS", script.sha1))
        #expect(loaded == .array([.integer(1)]))
        #expect(try await redis.send(.script(script, keys: ["s"], args: [2])) == .integer(7))
        _ = try await redis.command("SCRIPT", "FLUSH")
        #expect(try await redis.send(.script(script, keys: ["s"], args: [1])) == .integer(8))
    }

    @Test func authenticatesWithPasswordAndACLUserAndSelectsTheDatabase() async throws {
        let server = try await RedisServer(extraArguments: ["--requirepass", "s3cret"])
        // Without credentials: commands fail with NOAUTH.
        let anonymous = server.connection()
        defer { anonymous.close() }
        let noauth = try await anonymous.pipeline([RedisCommand("PING")])[0]
        #expect(noauth.errorMessage?.contains("NOAUTH") == true)

        var url = server.url
        url.password = "wrong"
        let bad = RedisConnection(configuration: RedisConfiguration(url: url))
        defer { bad.close() }
        await #expect {
            try await bad.command("PING")
        } throws: { error in
            guard let e = error as? RedisError else { return false }
            return e.kind == .authentication && !e.message.contains("wrong")
        }

        url.password = "s3cret"
        url.database = 2
        let good = RedisConnection(configuration: RedisConfiguration(url: url))
        defer { good.close() }
        try await good.command("SET", "where", "db2")
        let admin = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("redis://:s3cret@127.0.0.1:\(server.port)")))
        defer { admin.close() }
        #expect(try await admin.command("GET", "where") == .null)  // db 0
        try await admin.command("ACL", "SETUSER", "feeder", "on", ">pw2", "~*", "+@all")
        let acl = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("redis://feeder:pw2@127.0.0.1:\(server.port)/2")))
        defer { acl.close() }
        #expect(try await acl.command("GET", "where") == .bulk(Array("db2".utf8)))
        #expect(try await acl.command("ACL", "WHOAMI") == .bulk(Array("feeder".utf8)))
    }

    @Test func connectFailureIsQuickAndClear() async throws {
        let refusing = RefusingLoopbackPort()  // nothing listens here, and nothing can start to
        defer { refusing.close() }
        let port = refusing.port
        let redis = RedisConnection(configuration: RedisConfiguration(url: RedisURL(host: "127.0.0.1", port: port), connectTimeout: .seconds(1)))
        defer { redis.close() }
        let start = ContinuousClock.now
        await #expect {
            try await redis.command("PING")
        } throws: { error in
            (error as? RedisError)?.kind == .connectionFailed && "\(error)".contains("127.0.0.1:\(port)")
        }
        #expect(ContinuousClock.now - start < .seconds(30))  // not a hang (loose: the suite runs in parallel)
    }

    @Test func aSilentServerTimesOut() async throws {
        // A listening socket that accepts (the kernel completes the handshake) but never answers.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        #expect(listen(fd, 8) == 0)
        let port = Int(UInt16(bigEndian: addr.sin_port))
        let redis = RedisConnection(configuration: RedisConfiguration(url: RedisURL(host: "127.0.0.1", port: port), commandTimeout: .milliseconds(300)))
        defer { redis.close() }
        let start = ContinuousClock.now
        await #expect {
            try await redis.command("PING")
        } throws: { error in
            (error as? RedisError)?.kind == .timeout
        }
        let elapsed = ContinuousClock.now - start
        #expect(elapsed >= .milliseconds(250))  // it waited for the timeout (no upper bound: the suite runs in parallel)
    }

    @Test func reconnectsAfterARestart() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        try await redis.command("SET", "a", "1")
        await server.crash()
        // While it is down: a clear connection error, not a hang.
        await #expect {
            try await redis.command("PING")
        } throws: { error in
            (error as? RedisError)?.isConnectionProblem == true
        }
        try await server.start()
        let back = await eventually(timeout: .seconds(10)) { (try? await redis.command("PING")) == .status("PONG") }
        #expect(back)
        #expect(redis.stats.connects >= 2)
    }

    @Test func streamHelpersParseGroupsReadsClaimsAndPending() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        try await redis.ensureGroup(stream: "s", group: "g")
        try await redis.ensureGroup(stream: "s", group: "g")  // idempotent
        for i in 0..<5 { try await redis.command("XADD", "s", "*", "n", i, "bin", [UInt8]([0, 1, 2])) }
        let reads = try await redis.readGroup(group: "g", consumer: "c1", count: 3, block: .milliseconds(10), streams: [("s", ">")])
        #expect(reads.count == 1 && reads[0].stream == "s" && reads[0].entries.count == 3)
        #expect(reads[0].entries[0].fields == [Array("n".utf8), Array("0".utf8), Array("bin".utf8), [0, 1, 2]])
        let empty = try await redis.readGroup(group: "g", consumer: "c1", count: 10, block: .milliseconds(10), streams: [("s", ">")])
        #expect(empty.first?.entries.count == 2)
        let none = try await redis.readGroup(group: "g", consumer: "c1", count: 10, block: .milliseconds(10), streams: [("s", ">")])
        #expect(none.isEmpty)  // BLOCK timed out: a null reply

        let pending = try StreamReplies.pending(try await redis.send(.xpending(stream: "s", group: "g", count: 10)))
        #expect(pending.count == 5 && pending.allSatisfy { $0.consumer == "c1" && $0.deliveries == 1 })
        try await Task.sleep(for: .milliseconds(30))
        let claim = try StreamReplies.autoclaim(try await redis.send(.xautoclaim(stream: "s", group: "g", consumer: "c2", minIdle: .milliseconds(10), start: "0-0", count: 2)))
        #expect(claim.entries.count == 2 && claim.nextCursor != "0-0")
        let after = try StreamReplies.pending(try await redis.send(.xpending(stream: "s", group: "g", count: 10, consumer: "c2")))
        #expect(after.count == 2 && after.allSatisfy { $0.deliveries == 2 })
        #expect(try await redis.send(.xack(stream: "s", group: "g", ids: claim.entries.map(\.id))) == .integer(2))
    }
}
