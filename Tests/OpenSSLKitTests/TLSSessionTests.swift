import Foundation
import OpenSSLKit
import Testing

/// Client and server `TLSSession`s talking over a non-blocking AF_UNIX socketpair, both driven
/// from the test thread.
@Suite("TLSSession over a socketpair")
struct TLSSessionTests {
    /// One certificate for localhost, 127.0.0.1 and ::1, written to a fresh directory.
    struct Fixture {
        let directory: SSLTestDirectory
        let certificatePEM: String
        let keyPEM: String
        let certificateFile: String
        let keyFile: String

        init() throws {
            directory = try SSLTestDirectory()
            let generated = try SelfSignedCertificate.generate(
                commonName: "ActivityCast test", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1", "::1"], days: 2)
            certificatePEM = generated.certificatePEM
            keyPEM = generated.privateKeyPEM
            certificateFile = try directory.write("cert.pem", certificatePEM)
            keyFile = try directory.write("key.pem", keyPEM)
        }

        func serverContext(alpn: [String] = ["h2"], requireALPN: Bool = true) throws -> TLSContext {
            try TLSContext.server(certificatePEMFile: certificateFile, keyPEMFile: keyFile, alpn: alpn,
                                  requireALPN: requireALPN)
        }

        func trustingClient(alpn: [String] = ["h2"], requireALPN: Bool = true) throws -> TLSContext {
            try TLSContext.client(caFile: certificateFile, alpn: alpn, requireALPN: requireALPN)
        }
    }

    /// Two sessions over a fresh socketpair; `close()` releases the sessions, then the fds.
    /// A client and a server session over a socketpair. Each descriptor is closed exactly once
    /// (`close()` may be called again, and from `deinit`): tests run in parallel, and closing a
    /// number twice would close whatever another test opened under it meanwhile (a key file being
    /// read, a socket).
    final class Pair {
        var client: TLSSession?
        var server: TLSSession?
        let clientFD: Int32
        let serverFD: Int32
        private var clientOpen = true
        private var serverOpen = true

        init(client clientContext: TLSContext, server serverContext: TLSContext, serverName: String?) throws {
            (clientFD, serverFD) = try SSLTestSockets.nonBlockingPair()
            do {
                client = try TLSSession(context: clientContext, fd: clientFD, serverName: serverName)
                server = try TLSSession(serverContext: serverContext, fd: serverFD)
            } catch {
                close()
                throw error
            }
        }

        func handshake() -> TLSDriver.PairOutcome {
            TLSDriver.handshake(client: client!, server: server!)
        }

        func close() {
            client = nil
            server = nil
            closeClientSocket()
            closeServerSocket()
        }

        func closeClientSocket() {
            if clientOpen { SSLTestSockets.close(clientFD) }
            clientOpen = false
        }

        func closeServerSocket() {
            if serverOpen { SSLTestSockets.close(serverFD) }
            serverOpen = false
        }

        deinit { close() }
    }

    @Test("handshake with a trusted self-signed certificate negotiates h2 and TLS 1.3")
    func trustedHandshake() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: "localhost")
        defer { pair.close() }

        let outcome = pair.handshake()
        #expect(outcome.clientError == nil)
        #expect(outcome.serverError == nil)
        #expect(outcome.bothDone)
        #expect(pair.client?.negotiatedProtocol == "h2")
        #expect(pair.server?.negotiatedProtocol == "h2")
        #expect(pair.client?.protocolVersion == "TLSv1.3")
        #expect(pair.server?.protocolVersion == "TLSv1.3")
        #expect(pair.client?.isHandshakeComplete == true)
        #expect(pair.client?.cipherSuite?.hasPrefix("TLS_") == true)
    }

    @Test("certificates given as PEM text work like files")
    func pemTextContexts() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let server = try TLSContext.server(certificateChainPEM: fixture.certificatePEM, privateKeyPEM: fixture.keyPEM,
                                           alpn: ["h2"])
        let client = try TLSContext.client(trustedCertificatesPEM: fixture.certificatePEM, alpn: ["h2"])
        let pair = try Pair(client: client, server: server, serverName: "localhost")
        defer { pair.close() }
        let outcome = pair.handshake()
        #expect(outcome.bothDone)
        #expect(outcome.clientError == nil)
        #expect(pair.client?.negotiatedProtocol == "h2")
    }

    @Test("an untrusted certificate fails with certificate verify failed")
    func untrustedCertificate() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        // Trusts a different self-signed certificate only.
        let other = try SelfSignedCertificate.generate(commonName: "other", dnsNames: ["localhost"], ipAddresses: [], days: 2)
        let otherFile = try fixture.directory.write("other.pem", other.certificatePEM)
        let client = try TLSContext.client(caFile: otherFile, alpn: ["h2"])
        let pair = try Pair(client: client, server: try fixture.serverContext(), serverName: "localhost")
        defer { pair.close() }

        let outcome = pair.handshake()
        let error = try #require(outcome.clientError)
        #expect(error.code == .certificateVerificationFailed)
        #expect(error.description.contains("certificate verify failed"))
        #expect(error.message.contains("self-signed certificate"))
        #expect(!outcome.clientDone)
        // The server learns about it from the client's alert.
        #expect(outcome.serverError != nil)
        #expect(!outcome.serverDone)
    }

    @Test("the system CA store does not trust a fresh self-signed certificate")
    func systemStoreRejectsSelfSigned() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try TLSContext.client(alpn: ["h2"]), server: try fixture.serverContext(),
                            serverName: "localhost")
        defer { pair.close() }
        let error = try #require(pair.handshake().clientError)
        #expect(error.code == .certificateVerificationFailed)
    }

    @Test("a host name the certificate does not list fails verification", arguments: [
        "example.com", "localhost.example", "127.0.0.2", "::2",
    ])
    func hostnameMismatch(serverName: String) throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: serverName)
        defer { pair.close() }

        let error = try #require(pair.handshake().clientError)
        #expect(error.code == .certificateVerificationFailed)
        #expect(error.message.contains("mismatch"), "\(error)")
    }

    @Test("DNS and IP subjectAltNames both verify", arguments: ["localhost", "LOCALHOST", "127.0.0.1", "::1"])
    func namesThatMatch(serverName: String) throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: serverName)
        defer { pair.close() }
        let outcome = pair.handshake()
        #expect(outcome.clientError == nil)
        #expect(outcome.bothDone)
    }

    @Test("verifyPeer: false accepts an untrusted certificate and any name")
    func noVerification() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let client = try TLSContext.client(verifyPeer: false, alpn: ["h2"])
        let pair = try Pair(client: client, server: try fixture.serverContext(), serverName: "not-the-name.example")
        defer { pair.close() }
        let outcome = pair.handshake()
        #expect(outcome.clientError == nil)
        #expect(outcome.bothDone)
        #expect(pair.client?.negotiatedProtocol == "h2")
    }

    @Test("the server picks its own preference among the client's protocols")
    func alpnServerPreference() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(alpn: ["http/1.1", "h2"]),
                            server: try fixture.serverContext(alpn: ["h2", "http/1.1"]), serverName: "localhost")
        defer { pair.close() }
        #expect(pair.handshake().bothDone)
        #expect(pair.client?.negotiatedProtocol == "h2")
    }

    @Test("no protocol in common: both sides fail with noApplicationProtocol")
    func alpnNoOverlap() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(alpn: ["http/1.1"]), server: try fixture.serverContext(),
                            serverName: "localhost")
        defer { pair.close() }
        let outcome = pair.handshake()
        #expect(outcome.serverError?.code == .noApplicationProtocol)
        #expect(outcome.clientError?.code == .noApplicationProtocol)
    }

    @Test("a server requiring ALPN rejects a client that offers none")
    func alpnMissingFromClient() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(alpn: []), server: try fixture.serverContext(),
                            serverName: "localhost")
        defer { pair.close() }
        let outcome = pair.handshake()
        #expect(outcome.serverError?.code == .noApplicationProtocol)
        #expect(outcome.clientError != nil)
        #expect(!outcome.serverDone)
    }

    @Test("a client requiring ALPN fails when the server selects none; optional ALPN passes")
    func alpnMissingFromServer() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let required = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(alpn: []),
                                serverName: "localhost")
        defer { required.close() }
        #expect(required.handshake().clientError?.code == .noApplicationProtocol)

        let optional = try Pair(client: try fixture.trustingClient(requireALPN: false),
                                server: try fixture.serverContext(alpn: []), serverName: "localhost")
        defer { optional.close() }
        let outcome = optional.handshake()
        #expect(outcome.bothDone)
        #expect(optional.client?.negotiatedProtocol == nil)
    }

    @Test("megabytes both ways at once, with partial writes and wants, arrive intact; close_notify reads as .closed")
    func largeTransferAndShutdown() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: "localhost")
        defer { pair.close() }
        #expect(pair.handshake().bothDone)
        let client = try #require(pair.client)
        let server = try #require(pair.server)

        let toServer = TLSDriver.pattern(count: 4 << 20, seed: 0x1234_5678)
        let toClient = TLSDriver.pattern(count: 3 << 20, seed: 0x8765_4321)
        var clientSide = Endpoint(session: client, outgoing: toServer)
        var serverSide = Endpoint(session: server, outgoing: toClient)

        var idleRounds = 0
        while !(clientSide.finished(expecting: toClient.count) && serverSide.finished(expecting: toServer.count)) {
            let clientMoved = try clientSide.step()
            let serverMoved = try serverSide.step()
            let progressed = clientMoved || serverMoved
            idleRounds = progressed ? 0 : idleRounds + 1
            try #require(idleRounds < 1_000, "no progress: stalled transfer")
        }
        #expect(serverSide.received == toServer)
        #expect(clientSide.received == toClient)
        // The socketpair buffer is far smaller than the payload: the write paths were exercised.
        #expect(clientSide.partialWrites + clientSide.wantWrites > 0)
        #expect(serverSide.partialWrites + serverSide.wantWrites > 0)
        #expect(clientSide.wantReads + serverSide.wantReads > 0)

        // Clean close: client sends close_notify, server reads .closed, and back.
        #expect(client.shutdown())
        #expect(try readOnce(server) == .closed)
        #expect(server.peerClosed)
        #expect(server.shutdown())
        #expect(try readOnce(client) == .closed)
        // Reading again after close keeps saying so.
        #expect(try readOnce(client) == .closed)
    }

    @Test("pendingReadableBytes reports plaintext already decrypted inside OpenSSL")
    func pendingBytes() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: "localhost")
        defer { pair.close() }
        #expect(pair.handshake().bothDone)
        let client = try #require(pair.client)
        let server = try #require(pair.server)

        let message = Array("0123456789".utf8)
        #expect(try message.withUnsafeBytes { try client.write($0) } == .bytes(10))
        var small = [UInt8](repeating: 0, count: 4)
        // The server may first have to process the client's post-handshake messages.
        var first: TLSIO = .wantRead
        for _ in 0..<10 where first == .wantRead {
            first = try small.withUnsafeMutableBytes { try server.read(into: $0) }
        }
        #expect(first == .bytes(4))
        #expect(server.pendingReadableBytes == 6)
        #expect(server.hasBufferedInput)
        var rest = [UInt8](repeating: 0, count: 16)
        #expect(try rest.withUnsafeMutableBytes { try server.read(into: $0) } == .bytes(6))
        #expect(Array(small + rest.prefix(6)) == message)
        #expect(server.pendingReadableBytes == 0)
        #expect(try readOnce(server) == .wantRead)
    }

    @Test("a peer that vanishes without close_notify is an unexpectedEOF error, not .closed")
    func unexpectedEOF() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: "localhost")
        defer { pair.close() }
        #expect(pair.handshake().bothDone)
        // Let the client consume the server's session tickets first: closing a socket with
        // unread input makes the kernel reset the connection (ECONNRESET, a .systemError).
        #expect(try readOnce(try #require(pair.client)) == .wantRead)
        // Drop the client without SSL_shutdown, then close its socket.
        pair.client = nil
        pair.closeClientSocket()
        let server = try #require(pair.server)
        var caught: (any Error)?
        // The client's FIN may take a moment to arrive when the machine is busy (a full suite on
        // two cores, where whole-process stalls of seconds were seen): wait for it up to 10 s
        // rather than ten tries at once.
        for _ in 0..<1000 {
            do {
                let result = try readOnce(server)
                if result == .wantRead { Thread.sleep(forTimeInterval: 0.01); continue }
                Issue.record("expected an error, got \(result)")
            } catch {
                caught = error
            }
            break
        }
        let error = try #require(caught as? TLSError)
        #expect(error.code == .unexpectedEOF, "\(error)")
        // Best-effort shutdown after a failure must not crash and reports that nothing was sent.
        #expect(!server.shutdown())
    }

    @Test("writing to a peer that closed raises EPIPE as an error instead of killing the process with SIGPIPE")
    func noSigpipe() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let pair = try Pair(client: try fixture.trustingClient(), server: try fixture.serverContext(), serverName: "localhost")
        defer { pair.close() }
        #expect(pair.handshake().bothDone)
        pair.server = nil
        pair.closeServerSocket()
        let client = try #require(pair.client)
        let payload = [UInt8](repeating: 7, count: 64 * 1024)
        var thrown: TLSError?
        for _ in 0..<100 {
            do {
                _ = try payload.withUnsafeBytes { try client.write($0) }
            } catch {
                thrown = error as? TLSError
                break
            }
        }
        let error = try #require(thrown)
        #expect(error.code == .systemError)
        #expect(error.systemErrno == EPIPE)
    }

    @Test("a server context cannot make a client session and vice versa")
    func rolesAreChecked() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let (a, b) = try SSLTestSockets.nonBlockingPair()
        defer {
            SSLTestSockets.close(a)
            SSLTestSockets.close(b)
        }
        #expect(throws: TLSError.self) { _ = try TLSSession(context: try fixture.serverContext(), fd: a, serverName: "x") }
        #expect(throws: TLSError.self) { _ = try TLSSession(serverContext: try fixture.trustingClient(), fd: a) }
    }

    @Test("bad configuration fails with readable errors")
    func configurationErrors() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let missing = fixture.directory.path("missing.pem")
        #expect(throws: TLSError.self) { _ = try TLSContext.client(caFile: missing) }
        let missingErrorCaught = caughtTLSError { () throws(TLSError) in _ = try TLSContext.server(certificatePEMFile: missing, keyPEMFile: fixture.keyFile) }
        let missingError = try #require(missingErrorCaught, "a missing certificate file was accepted")
        #expect(missingError.code == .configuration)
        #expect(missingError.message.contains("missing.pem"))
        // A key that does not belong to the certificate.
        let otherKey = try ES256PrivateKey.generate().pkcs8PEM()
        let mismatchCaught = caughtTLSError { () throws(TLSError) in _ = try TLSContext.server(certificateChainPEM: fixture.certificatePEM, privateKeyPEM: otherKey) }
        let mismatch = try #require(mismatchCaught, "a mismatched key was accepted")
        #expect(mismatch.code == .configuration)
        #expect(!mismatch.description.contains("PRIVATE KEY"))
        #expect(throws: TLSError.self) { _ = try TLSContext.client(alpn: [""]) }
        #expect(throws: TLSError.self) { _ = try TLSContext.client(alpn: [String(repeating: "a", count: 256)]) }
    }
}

/// Reads once with a 64 KiB buffer.
private func readOnce(_ session: TLSSession) throws -> TLSIO {
    var buffer = [UInt8](repeating: 0, count: 65_536)
    return try buffer.withUnsafeMutableBytes { try session.read(into: $0) }
}

/// One side of the bidirectional transfer: writes its outgoing bytes, reads everything offered.
private struct Endpoint {
    let session: TLSSession
    let outgoing: [UInt8]
    var sent = 0
    var received: [UInt8] = []
    var partialWrites = 0
    var wantWrites = 0
    var wantReads = 0
    private var readBuffer = [UInt8](repeating: 0, count: 32 * 1024)

    init(session: TLSSession, outgoing: [UInt8]) {
        self.session = session
        self.outgoing = outgoing
    }

    func finished(expecting incoming: Int) -> Bool {
        sent == outgoing.count && received.count >= incoming
    }

    /// Writes what it can (up to 1 MiB per call), then reads until OpenSSL wants the socket.
    /// Returns whether anything moved.
    mutating func step() throws -> Bool {
        var progressed = false
        let session = self.session
        if sent < outgoing.count {
            let chunk = min(outgoing.count - sent, 1 << 20)
            let start = sent
            let result = try outgoing.withUnsafeBytes { raw in
                try session.write(UnsafeRawBufferPointer(rebasing: raw[start..<(start + chunk)]))
            }
            switch result {
            case .bytes(let count):
                sent += count
                progressed = count > 0
                if count < chunk { partialWrites += 1 }
            case .wantWrite: wantWrites += 1
            case .wantRead: wantReads += 1
            case .closed: throw TLSDriver.Timeout(description: "closed while writing")
            }
        }
        reading: while true {
            let result = try readBuffer.withUnsafeMutableBytes { try session.read(into: $0) }
            switch result {
            case .bytes(let count):
                received += readBuffer.prefix(count)
                progressed = true
            case .wantRead:
                wantReads += 1
                break reading
            case .wantWrite:
                wantWrites += 1
                break reading
            case .closed:
                throw TLSDriver.Timeout(description: "closed while reading")
            }
        }
        return progressed
    }
}
