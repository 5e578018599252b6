import RedisClient
import Testing
import TestSupport

@Suite struct RedisTLSTests {
    @Test func redissWithAuthAgainstRedisTLSPort() async throws {
        let cert = try TestCertificate()
        defer { cert.directory.remove() }
        let server = try await RedisServer(extraArguments: ["--requirepass", "tlspass"], tls: cert.redisTLS)

        let url = try RedisURL("rediss://:tlspass@127.0.0.1:\(server.port)/1?ca=\(cert.certificatePath)")
        let redis = RedisConnection(configuration: RedisConfiguration(url: url))
        defer { redis.close() }
        try await redis.command("SET", "over-tls", [UInt8](repeating: 7, count: 100_000))
        #expect(try await redis.command("STRLEN", "over-tls") == .integer(100_000))
        let replies = try await redis.pipeline((0..<2000).map { RedisCommand("INCR", "n\($0 % 10)") })
        #expect(replies.count == 2000 && replies.last == .integer(200))
        #expect(try await redis.command("CLIENT", "INFO").string?.contains("db=1") == true)
    }

    @Test func anUntrustedCertificateIsRefused() async throws {
        let cert = try TestCertificate()
        defer { cert.directory.remove() }
        let server = try await RedisServer(tls: cert.redisTLS)
        // The system CAs don't know this self-signed certificate.
        let redis = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("rediss://127.0.0.1:\(server.port)"), connectTimeout: .seconds(2)))
        defer { redis.close() }
        await #expect {
            try await redis.command("PING")
        } throws: { error in
            (error as? RedisError)?.kind == .connectionFailed && "\(error)".lowercased().contains("verif")
        }
        // Explicitly turned off, it connects.
        let insecure = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("rediss://127.0.0.1:\(server.port)?verify=false")))
        defer { insecure.close() }
        #expect(try await insecure.command("PING") == .status("PONG"))
    }

    @Test func theCertificateMustNameTheHost() async throws {
        let cert = try TestCertificate()
        defer { cert.directory.remove() }
        let server = try await RedisServer(tls: cert.redisTLS)
        let url = try RedisURL("rediss://127.0.0.1:\(server.port)?ca=\(cert.certificatePath)&sni=not-this-host.example")
        let redis = RedisConnection(configuration: RedisConfiguration(url: url, connectTimeout: .seconds(2)))
        defer { redis.close() }
        await #expect(throws: RedisError.self) { try await redis.command("PING") }
    }
}
