import RedisClient
import Testing

@Suite struct RedisURLTests {
    @Test func parsesEveryPart() throws {
        let url = try RedisURL("redis://alice:s3cr%40t@cache.internal:6380/3")
        #expect(url.tls == false)
        #expect(url.host == "cache.internal")
        #expect(url.port == 6380)
        #expect(url.username == "alice")
        #expect(url.password == "s3cr@t")
        #expect(url.database == 3)
    }

    @Test func defaultsAndPasswordOnly() throws {
        let url = try RedisURL("redis://secret@localhost")
        #expect(url.port == 6379 && url.database == 0 && url.username == nil && url.password == "secret")
        let colon = try RedisURL("redis://:secret@localhost:7000")
        #expect(colon.username == nil && colon.password == "secret" && colon.port == 7000)
    }

    @Test func tlsOptionsAndIPv6() throws {
        let url = try RedisURL("rediss://[::1]:6390?ca=/etc/ca.pem&sni=redis.example")
        #expect(url.tls && url.host == "::1" && url.port == 6390 && url.caFile == "/etc/ca.pem" && url.serverName == "redis.example" && url.verifyPeer)
        #expect(try RedisURL("rediss://h:1?verify=false").verifyPeer == false)
    }

    @Test(arguments: [
        ("http://localhost", "scheme"),
        ("redis://", "host is missing"),
        ("redis://h:0", "port must be 1-65535"),
        ("redis://h:99999", "port must be 1-65535"),
        ("redis://h:12ab", "port must be 1-65535"),
        ("redis://h/x", "database must be a number"),
        ("redis://h?ca=/x", "apply to rediss:// only"),
        ("rediss://h?bogus=1", "unknown option 'bogus'"),
        ("rediss://h?verify=maybe", "verify must be true or false"),
        ("redis://u:p%zz@h", "bad percent-escape"),
    ])
    func rejectsWithAReason(input: String, reason: String) {
        #expect {
            try RedisURL(input)
        } throws: { error in
            "\(error)".contains(reason)
        }
    }

    @Test func neverPrintsThePassword() throws {
        let url = try RedisURL("redis://bob:hunter2@h:1")
        #expect(!url.description.contains("hunter2"))
        #expect(url.description == "redis://bob:***@h:1")
        // Not even when the URL fails to parse.
        #expect {
            try RedisURL("redis://bob:hunter2@h:notaport")
        } throws: { error in
            !"\(error)".contains("hunter2")
        }
    }

    @Test func backoffGrowsIsCappedAndJittered() {
        let b = RedisConfiguration.Backoff(initial: .milliseconds(100), maximum: .seconds(2))
        #expect(b.delay(afterFailures: 0, random: 1) == .zero)
        #expect(b.delay(afterFailures: 1, random: 1) == .milliseconds(100))
        #expect(b.delay(afterFailures: 3, random: 1) == .milliseconds(400))
        #expect(b.delay(afterFailures: 10, random: 1) == .seconds(2))
        #expect(b.delay(afterFailures: 50, random: 1) == .seconds(2))
        #expect(b.delay(afterFailures: 10, random: 0) == .seconds(1))  // jitter: half to all of it
    }
}
