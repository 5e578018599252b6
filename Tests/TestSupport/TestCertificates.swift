import Foundation

/// A self-signed loopback certificate made by the `openssl` command (an independent
/// implementation), valid for `localhost` and `127.0.0.1`.
public struct TestCertificate: Sendable {
    public let directory: TemporaryDirectory
    public var certificatePath: String { directory.path + "/server.crt" }
    public var keyPath: String { directory.path + "/server.key" }

    public init() throws {
        directory = try TemporaryDirectory()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                       "-keyout", keyPath, "-out", certificatePath, "-days", "2", "-subj", "/CN=localhost",
                       "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw RedisServerError(description: "openssl req failed (\(p.terminationStatus))") }
    }

    public var redisTLS: RedisServer.TLSFiles {
        .init(certificate: certificatePath, key: keyPath, ca: certificatePath)
    }
}
