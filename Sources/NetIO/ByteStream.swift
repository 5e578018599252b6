import OpenSSLKit

/// A connected byte stream with deadlines: plain TCP or TLS over TCP. Used by one I/O thread.
public protocol ByteStream: AnyObject {
    /// Writes every byte before `deadline`, or throws.
    func writeAll(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws
    /// Reads at least one byte before `deadline`; returns how many. Throws `closedByPeer` at EOF.
    func readSome(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int
    func close()
}

/// TCP without TLS.
public final class PlainStream: ByteStream {
    public let socket: Socket

    public init(socket: Socket) { self.socket = socket }

    public func writeAll(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws {
        var offset = 0
        while offset < bytes.count {
            switch try socket.write(UnsafeRawBufferPointer(rebasing: bytes[offset...])) {
            case .bytes(let n): offset += n
            case .closed: throw StreamError.closedByPeer
            case .wouldBlock:
                guard try socket.wait(forWriting: true, until: deadline) else { throw StreamError.timedOut("writing") }
            }
        }
    }

    public func readSome(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int {
        while true {
            switch try socket.read(into: buffer) {
            case .bytes(let n): return n
            case .closed: throw StreamError.closedByPeer
            case .wouldBlock:
                guard try socket.wait(forWriting: false, until: deadline) else { throw StreamError.timedOut("waiting for a reply") }
            }
        }
    }

    public func close() { socket.close() }
}

/// TLS (OpenSSL) over a non-blocking TCP socket.
public final class TLSStream: ByteStream {
    public let socket: Socket
    private let session: TLSSession

    /// Connects TLS on `socket` and completes the handshake before `deadline`.
    public init(socket: Socket, context: TLSContext, serverName: String?, deadline: Deadline) throws {
        self.socket = socket
        do {
            self.session = try TLSSession(context: context, fd: socket.fd, serverName: serverName)
        } catch {
            throw StreamError.tls("\(error)")
        }
        while true {
            let progress: TLSProgress
            do { progress = try session.handshake() } catch { throw StreamError.tls("handshake failed: \(error)") }
            switch progress {
            case .done: return
            case .wantRead:
                guard try socket.wait(forWriting: false, until: deadline) else { throw StreamError.timedOut("in the TLS handshake") }
            case .wantWrite:
                guard try socket.wait(forWriting: true, until: deadline) else { throw StreamError.timedOut("in the TLS handshake") }
            }
        }
    }

    public var negotiatedProtocol: String? { session.negotiatedProtocol }

    public func writeAll(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws {
        var offset = 0
        while offset < bytes.count {
            let io: TLSIO
            do { io = try session.write(UnsafeRawBufferPointer(rebasing: bytes[offset...])) } catch { throw StreamError.tls("\(error)") }
            switch io {
            case .bytes(let n): offset += n
            case .closed: throw StreamError.closedByPeer
            case .wantRead:
                guard try socket.wait(forWriting: false, until: deadline) else { throw StreamError.timedOut("writing") }
            case .wantWrite:
                guard try socket.wait(forWriting: true, until: deadline) else { throw StreamError.timedOut("writing") }
            }
        }
    }

    public func readSome(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int {
        while true {
            let io: TLSIO
            do { io = try session.read(into: buffer) } catch { throw StreamError.tls("\(error)") }
            switch io {
            case .bytes(let n): return n
            case .closed: throw StreamError.closedByPeer
            case .wantRead:
                guard try socket.wait(forWriting: false, until: deadline) else { throw StreamError.timedOut("waiting for a reply") }
            case .wantWrite:
                guard try socket.wait(forWriting: true, until: deadline) else { throw StreamError.timedOut("waiting for a reply") }
            }
        }
    }

    public func close() {
        session.shutdown()
        socket.close()
    }
}
