import Foundation
import OpenSSLKit
import Testing

/// TLSSession against independent peers: the `openssl` command-line server and client, run as
/// child processes on 127.0.0.1 and killed by PID.
@Suite("Interop with openssl s_server / s_client")
struct OpenSSLInteropTests {
    /// `openssl s_server -rev` on a free loopback port; returns the child once it accepts.
    private func startReverseServer(
        certificate: String, key: String, alpn: String, in directory: SSLTestDirectory
    ) throws -> (child: SSLTestProcess.Running, port: UInt16) {
        let port = try SSLTestSockets.freeLoopbackPort()
        let child = try SSLTestProcess.Running([
            "openssl", "s_server", "-accept", "127.0.0.1:\(port)", "-naccept", "1",
            "-cert", certificate, "-key", key, "-alpn", alpn, "-rev",
        ], in: directory)
        return (child, port)
    }

    @Test("our client verifies and talks to openssl s_server (certificate from openssl req)", arguments: [
        "localhost", "127.0.0.1",
    ])
    func clientAgainstSServer(serverName: String) throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let certificate = directory.path("server.crt")
        let key = directory.path("server.key")
        // A certificate made by openssl itself, so the verification path is checked against
        // something this package did not generate.
        let made = try SSLTestProcess.run([
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", certificate, "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ], in: directory)
        try #require(made.status == 0, "openssl req failed: \(made.stderr)")

        let (server, port) = try startReverseServer(certificate: certificate, key: key, alpn: "h2", in: directory)
        defer { server.kill() }

        let fd = try SSLTestSockets.connectLoopback(port: port)
        defer { SSLTestSockets.close(fd) }
        let context = try TLSContext.client(caFile: certificate, alpn: ["h2"])
        let session = try TLSSession(context: context, fd: fd, serverName: serverName)
        try TLSDriver.handshake(session, fd: fd)
        #expect(session.negotiatedProtocol == "h2")
        #expect(session.protocolVersion == "TLSv1.3")

        // s_server -rev answers each line reversed.
        try TLSDriver.writeAll(session, Array("hello from ActivityCast\n".utf8), fd: fd)
        let (reply, _) = try TLSDriver.read(session, fd: fd) { $0.contains(UInt8(ascii: "\n")) }
        let text = String(decoding: reply, as: UTF8.self)
        #expect(text.contains("tsaCytivitcA morf olleh"), "got \(text.debugDescription)")
        session.shutdown()
    }

    @Test("TLS 1.2 with openssl s_server when the server caps the version")
    func tls12AgainstSServer() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let generated = try SelfSignedCertificate.generate(commonName: "tls12", dnsNames: ["localhost"], ipAddresses: [], days: 1)
        let certificate = try directory.write("cert.pem", generated.certificatePEM)
        let key = try directory.write("key.pem", generated.privateKeyPEM)
        let port = try SSLTestSockets.freeLoopbackPort()
        let server = try SSLTestProcess.Running([
            "openssl", "s_server", "-accept", "127.0.0.1:\(port)", "-naccept", "1",
            "-cert", certificate, "-key", key, "-alpn", "h2", "-rev", "-tls1_2",
        ], in: directory)
        defer { server.kill() }

        let fd = try SSLTestSockets.connectLoopback(port: port)
        defer { SSLTestSockets.close(fd) }
        let session = try TLSSession(context: try TLSContext.client(caFile: certificate, alpn: ["h2"]), fd: fd,
                                     serverName: "localhost")
        try TLSDriver.handshake(session, fd: fd)
        #expect(session.protocolVersion == "TLSv1.2")
        #expect(session.negotiatedProtocol == "h2")
        try TLSDriver.writeAll(session, Array("abc\n".utf8), fd: fd)
        let (reply, _) = try TLSDriver.read(session, fd: fd) { $0.contains(UInt8(ascii: "\n")) }
        #expect(String(decoding: reply, as: UTF8.self).hasPrefix("cba"))
    }

    @Test("minimumVersion .tls13 refuses a TLS 1.2-only openssl s_server")
    func minimumVersionEnforced() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let generated = try SelfSignedCertificate.generate(commonName: "tls12", dnsNames: ["localhost"], ipAddresses: [], days: 1)
        let certificate = try directory.write("cert.pem", generated.certificatePEM)
        let key = try directory.write("key.pem", generated.privateKeyPEM)
        let port = try SSLTestSockets.freeLoopbackPort()
        let server = try SSLTestProcess.Running([
            "openssl", "s_server", "-accept", "127.0.0.1:\(port)", "-naccept", "1",
            "-cert", certificate, "-key", key, "-rev", "-tls1_2",
        ], in: directory)
        defer { server.kill() }

        let fd = try SSLTestSockets.connectLoopback(port: port)
        defer { SSLTestSockets.close(fd) }
        let context = try TLSContext.client(caFile: certificate, minimumVersion: .tls13)
        let session = try TLSSession(context: context, fd: fd, serverName: "localhost")
        #expect(throws: TLSError.self) { try TLSDriver.handshake(session, fd: fd) }
    }

    @Test("openssl s_client verifies our server's generated certificate and gets h2 and data")
    func sClientAgainstOurServer() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let generated = try SelfSignedCertificate.generate(commonName: "sandbox", dnsNames: ["localhost"],
                                                           ipAddresses: ["127.0.0.1"], days: 1)
        let certificate = try directory.write("cert.pem", generated.certificatePEM)
        let context = try TLSContext.server(certificateChainPEM: generated.certificatePEM,
                                            privateKeyPEM: generated.privateKeyPEM, alpn: ["h2"])

        let (listener, port) = try SSLTestSockets.listenLoopback()
        defer { SSLTestSockets.close(listener) }
        let client = try SSLTestProcess.Running([
            "openssl", "s_client", "-connect", "127.0.0.1:\(port)", "-servername", "localhost",
            "-alpn", "h2", "-CAfile", certificate, "-verify_return_error", "-verify_hostname", "localhost",
            "-ign_eof",
        ], stdin: "ping\n", in: directory)
        defer { client.kill() }

        let fd = try SSLTestSockets.accept(from: listener)
        defer { SSLTestSockets.close(fd) }
        do {
            let session = try TLSSession(serverContext: context, fd: fd)
            try TLSDriver.handshake(session, fd: fd)
            #expect(session.negotiatedProtocol == "h2")
            let (request, _) = try TLSDriver.read(session, fd: fd) { $0.contains(UInt8(ascii: "\n")) }
            #expect(String(decoding: request, as: UTF8.self) == "ping\n")
            try TLSDriver.writeAll(session, Array("pong\n".utf8), fd: fd)
            #expect(session.shutdown())
        }

        #expect(client.wait(timeout: 10), "s_client did not exit after close_notify")
        let output = client.stdout()
        #expect(output.contains("ALPN protocol: h2"), "\(output)")
        #expect(output.contains("Verify return code: 0 (ok)"), "\(output)")
        #expect(output.contains("pong"))
        #expect(client.status == 0, "\(client.stderr())")
    }

    @Test("openssl s_client offering only http/1.1 is refused with no_application_protocol")
    func sClientWithoutH2IsRefused() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let generated = try SelfSignedCertificate.generate(commonName: "sandbox", dnsNames: ["localhost"],
                                                           ipAddresses: [], days: 1)
        let context = try TLSContext.server(certificateChainPEM: generated.certificatePEM,
                                            privateKeyPEM: generated.privateKeyPEM, alpn: ["h2"])
        let (listener, port) = try SSLTestSockets.listenLoopback()
        defer { SSLTestSockets.close(listener) }
        let client = try SSLTestProcess.Running([
            "openssl", "s_client", "-connect", "127.0.0.1:\(port)", "-alpn", "http/1.1",
        ], in: directory)
        defer { client.kill() }

        let fd = try SSLTestSockets.accept(from: listener)
        defer { SSLTestSockets.close(fd) }
        let session = try TLSSession(serverContext: context, fd: fd)
        do {
            try TLSDriver.handshake(session, fd: fd)
            Issue.record("handshake succeeded without ALPN agreement")
        } catch let error as TLSError {
            #expect(error.code == .noApplicationProtocol, "\(error)")
        }
        #expect(client.wait(timeout: 10))
        #expect(client.stderr().contains("no application protocol"), "\(client.stderr())")
    }
}
