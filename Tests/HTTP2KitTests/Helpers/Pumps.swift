import Foundation
import HTTP2Kit
import OpenSSLKit
#if canImport(Glibc)
import Glibc
#endif

struct PumpTimeout: Error, CustomStringConvertible {
    let description: String
}

/// Moves bytes between two sessions in memory (no socket, no TLS), the way an event loop would.
final class MemoryLink {
    let client: any HTTP2Session
    let server: any HTTP2Session
    private var buffer: [UInt8] = []
    private(set) var bytesToServer = 0
    private(set) var bytesToClient = 0

    init(client: any HTTP2Session, server: any HTTP2Session) {
        self.client = client
        self.server = server
        buffer.reserveCapacity(256 << 10)
    }

    /// One round: everything the client has goes to the server, then the other way. Returns
    /// whether any byte moved.
    @discardableResult
    func step() throws -> Bool {
        var moved = false
        buffer.removeAll(keepingCapacity: true)
        if try client.produceOutput(into: &buffer, limit: 256 << 10) > 0 {
            bytesToServer += buffer.count
            try server.receive(buffer)
            moved = true
        }
        buffer.removeAll(keepingCapacity: true)
        if try server.produceOutput(into: &buffer, limit: 256 << 10) > 0 {
            bytesToClient += buffer.count
            try client.receive(buffer)
            moved = true
        }
        return moved
    }

    /// Steps until nothing moves.
    func settle(maxRounds: Int = 100_000) throws {
        for _ in 0..<maxRounds {
            if try !step() { return }
        }
        throw PumpTimeout(description: "the sessions kept talking for \(maxRounds) rounds")
    }

    /// Steps (calling `between` before each round) until `done()` holds.
    func run(maxRounds: Int = 1_000_000, between: () throws -> Void = {}, until done: () -> Bool) throws {
        for _ in 0..<maxRounds {
            if done() { return }
            try between()
            try step()
        }
        if !done() { throw PumpTimeout(description: "condition not reached in \(maxRounds) rounds") }
    }
}

/// One end of a connection: a non-blocking socket, its TLS session and an HTTP/2 session, pumped
/// the way an event loop would pump it (read until want-read, feed `receive`; produce only when
/// the previous output has been written, so an OpenSSL retry always sees the same bytes).
final class TLSPump {
    let fd: Int32
    let tls: TLSSession
    let session: any HTTP2Session
    private var output: [UInt8] = []
    private var outputOffset = 0
    private let readBuffer: UnsafeMutableRawBufferPointer
    private(set) var peerClosed = false
    let outputLimit: Int

    init(fd: Int32, tls: TLSSession, session: any HTTP2Session, outputLimit: Int = 64 << 10) {
        self.fd = fd
        self.tls = tls
        self.session = session
        self.outputLimit = outputLimit
        readBuffer = .allocate(byteCount: 64 << 10, alignment: 16)
        output.reserveCapacity(outputLimit + 32 << 10)
    }

    deinit { readBuffer.deallocate() }

    var hasPendingOutput: Bool { outputOffset < output.count }
    /// Whether there is anything left to do on this connection.
    var isActive: Bool { !peerClosed && (session.wantsRead || session.wantsWrite || hasPendingOutput) }

    /// Reads and writes what can be done without blocking. Returns whether anything moved.
    @discardableResult
    func step() throws -> Bool {
        var progress = false
        reading: while !peerClosed {
            switch try tls.read(into: readBuffer) {
            case .bytes(let n):
                try session.receive(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
                progress = true
            case .wantRead, .wantWrite:
                break reading
            case .closed:
                peerClosed = true
            }
        }
        while true {
            if outputOffset == output.count {
                output.removeAll(keepingCapacity: true)
                outputOffset = 0
                if try session.produceOutput(into: &output, limit: outputLimit) == 0 { break }
            }
            let result = try output.withUnsafeBytes { raw in
                try tls.write(UnsafeRawBufferPointer(rebasing: raw[outputOffset...]))
            }
            switch result {
            case .bytes(let n):
                outputOffset += n
                progress = true
            case .wantRead, .wantWrite:
                return progress
            case .closed:
                peerClosed = true
                return progress
            }
        }
        return progress
    }

    /// Completes a TLS handshake on its own socket (for a peer in another thread or process).
    static func handshake(_ tls: TLSSession, fd: Int32, timeout: Duration = .seconds(10)) throws {
        let deadline = ContinuousClock.now + timeout
        while true {
            let progress = try tls.handshake()
            if progress == .done { return }
            guard ContinuousClock.now < deadline else { throw PumpTimeout(description: "TLS handshake timed out") }
            TestSockets.poll([fd], writable: [progress == .wantWrite], timeoutMillis: 100)
        }
    }

    /// Handshakes both ends of an in-process pair (same thread).
    static func handshake(client: TLSSession, server: TLSSession, clientFD: Int32, serverFD: Int32) throws {
        var clientDone = false
        var serverDone = false
        let deadline = ContinuousClock.now + .seconds(10)
        while !(clientDone && serverDone) {
            if !clientDone { clientDone = try client.handshake() == .done }
            if !serverDone { serverDone = try server.handshake() == .done }
            guard ContinuousClock.now < deadline else { throw PumpTimeout(description: "TLS handshake timed out") }
            if !(clientDone && serverDone) {
                TestSockets.poll([clientFD, serverFD], writable: [false, false], timeoutMillis: 5)
            }
        }
    }

    /// Pumps `pumps` on this thread until `done()` holds, polling when nothing moved.
    static func run(_ pumps: [TLSPump], timeout: Duration = .seconds(60), between: () throws -> Void = {},
                    until done: () -> Bool) throws {
        let deadline = ContinuousClock.now + timeout
        while !done() {
            guard ContinuousClock.now < deadline else { throw PumpTimeout(description: "condition not reached in \(timeout)") }
            try between()
            var progress = false
            for pump in pumps where try pump.step() { progress = true }
            if !progress && !done() {
                TestSockets.poll(pumps.map(\.fd), writable: pumps.map(\.hasPendingOutput), timeoutMillis: 10)
            }
        }
    }
}

/// A client and a server session connected by TLS over a non-blocking AF_UNIX socketpair, both
/// pumped on the test thread. `close()` releases the TLS sessions, then the descriptors.
final class TLSPair {
    let clientFD: Int32
    let serverFD: Int32
    let client: TLSPump
    let server: TLSPump

    init(client clientSession: any HTTP2Session, server serverSession: any HTTP2Session) throws {
        let certificate = try SelfSignedCertificate.make(commonName: "HTTP2Kit test", dnsNames: ["localhost"],
                                                         ipAddresses: ["127.0.0.1"], days: 2)
        let serverContext = try TLSContext.server(certificateChainPEM: certificate.certificatePEM,
                                                  privateKeyPEM: certificate.privateKeyPEM, alpn: ["h2"])
        let clientContext = try TLSContext.client(trustedCertificatesPEM: certificate.certificatePEM, alpn: ["h2"])
        (clientFD, serverFD) = try TestSockets.nonBlockingPair()
        do {
            let clientTLS = try TLSSession(context: clientContext, fd: clientFD, serverName: "localhost")
            let serverTLS = try TLSSession(serverContext: serverContext, fd: serverFD)
            try TLSPump.handshake(client: clientTLS, server: serverTLS, clientFD: clientFD, serverFD: serverFD)
            guard clientTLS.negotiatedProtocol == "h2" else {
                throw PumpTimeout(description: "ALPN agreed \(clientTLS.negotiatedProtocol ?? "nothing")")
            }
            client = TLSPump(fd: clientFD, tls: clientTLS, session: clientSession)
            server = TLSPump(fd: serverFD, tls: serverTLS, session: serverSession)
        } catch {
            TestSockets.close(clientFD)
            TestSockets.close(serverFD)
            throw error
        }
    }

    func run(timeout: Duration = .seconds(60), between: () throws -> Void = {}, until done: () -> Bool) throws {
        try TLSPump.run([client, server], timeout: timeout, between: between, until: done)
    }

    deinit {
        TestSockets.close(clientFD)
        TestSockets.close(serverFD)
    }
}
