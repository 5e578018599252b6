#if canImport(Glibc)
import Glibc
#endif
import HTTP2Kit
import NetIO
import OpenSSLKit
import Synchronization

/// Moves bytes between one socket (through TLS, or plain for tests) and one HTTP/2 session, for
/// the event-loop thread that owns all three. Tracks OpenSSL's wants separately from nghttp2's:
/// a TLS read can need the socket writable and a TLS write can need it readable.
public final class H2Pump {
    public let socket: Socket
    public let session: any HTTP2Session
    private let tls: TLSSession?
    private var out: [UInt8] = []
    private var outOffset = 0
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var tlsWantsRead = false
    private var tlsWantsWrite = false
    public private(set) var handshakeComplete: Bool
    /// Soft cap on output produced ahead of the socket.
    private let outputLimit = 256 * 1024

    public init(socket: Socket, tls: TLSSession?, session: any HTTP2Session) {
        self.socket = socket
        self.tls = tls
        self.session = session
        self.handshakeComplete = tls == nil
    }

    /// Advances the TLS handshake; true once it is done (then `negotiatedProtocol` is set).
    public func handshake() throws -> Bool {
        guard let tls, !handshakeComplete else { return true }
        tlsWantsRead = false
        tlsWantsWrite = false
        switch try tls.handshake() {
        case .done: handshakeComplete = true
        case .wantRead: tlsWantsRead = true
        case .wantWrite: tlsWantsWrite = true
        }
        return handshakeComplete
    }

    public var negotiatedProtocol: String? { tls?.negotiatedProtocol }

    /// Reads everything available now and feeds it to the session (its delegate callbacks fire
    /// from here). Returns false once the peer has closed the connection.
    public func readAvailable() throws -> Bool {
        tlsWantsRead = false
        while true {
            let n: Int
            if let tls {
                let io = try readBuffer.withUnsafeMutableBytes { try tls.read(into: $0) }
                switch io {
                case .bytes(let k): n = k
                case .wantRead: tlsWantsRead = true; return true
                case .wantWrite: tlsWantsWrite = true; return true
                case .closed: return false
                }
            } else {
                switch try readBuffer.withUnsafeMutableBytes({ try socket.read(into: $0) }) {
                case .bytes(let k): n = k
                case .wouldBlock: return true
                case .closed: return false
                }
            }
            try readBuffer.withUnsafeBytes { try session.receive(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
        }
    }

    /// Produces the session's pending frames and writes what the socket takes. Returns true while
    /// bytes are still waiting for the socket.
    @discardableResult
    public func flush() throws -> Bool {
        tlsWantsWrite = false
        while true {
            if outOffset == out.count {
                out.removeAll(keepingCapacity: true)
                outOffset = 0
                if try session.produceOutput(into: &out, limit: outputLimit) == 0 { return false }
            }
            let io: TLSIO
            if let tls {
                io = try out.withUnsafeBytes { try tls.write(UnsafeRawBufferPointer(rebasing: $0[outOffset...])) }
            } else {
                switch try out.withUnsafeBytes({ try socket.write(UnsafeRawBufferPointer(rebasing: $0[outOffset...])) }) {
                case .bytes(let k): io = .bytes(k)
                case .wouldBlock: io = .wantWrite
                case .closed: io = .closed
                }
            }
            switch io {
            case .bytes(let k): outOffset += k
            case .wantWrite: tlsWantsWrite = true; return true
            case .wantRead: tlsWantsRead = true; return true
            case .closed: throw StreamError.closedByPeer
            }
        }
    }

    public var hasPendingOutput: Bool { outOffset < out.count || session.wantsWrite }

    /// What to poll the socket for.
    public var pollEvents: Int16 {
        var events: Int16 = 0
        if session.wantsRead || tlsWantsRead || !handshakeComplete { events |= Int16(POLLIN) }
        if outOffset < out.count || tlsWantsWrite { events |= Int16(POLLOUT) }
        if !handshakeComplete && !tlsWantsRead && !tlsWantsWrite { events |= Int16(POLLOUT) }
        return events
    }

    /// True when the session is done both ways and everything was written: close now.
    public var isFinished: Bool { !session.wantsRead && !session.wantsWrite && outOffset == out.count }

    public func close() {
        tls?.shutdown()
        socket.close()
    }
}

/// A self-pipe that wakes a thread blocked in poll(2) when another thread hands it work.
public final class Wakeup: @unchecked Sendable {
    // The two descriptors never change after init; writes and reads are atomic syscalls.
    public let readFD: Int32
    private let writeFD: Int32

    public init() {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { fatalError("pipe: \(errno)") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        Glibc.close(readFD)
        Glibc.close(writeFD)
    }

    public func signal() {
        var byte: UInt8 = 1
        _ = Glibc.write(writeFD, &byte, 1)  // a full pipe already means "wake up"
    }

    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 256)
        while Glibc.read(readFD, &buffer, buffer.count) > 0 {}
    }
}

/// Hands items to one event-loop thread: producers append under a lock and wake the thread's
/// poll(2) through `wakeup`; the thread takes everything posted at once.
public final class Mailbox<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        var closed = false
    }
    private let state = Mutex(State())
    public let wakeup = Wakeup()

    public init() {}

    /// Posts `new`; returns false (and keeps nothing) once the mailbox is closed.
    @discardableResult
    public func post(_ new: [Item]) -> Bool {
        guard !new.isEmpty else { return true }
        let posted = state.withLock { s -> Bool in
            if s.closed { return false }
            if s.items.isEmpty {
                s.items = new  // shares the caller's buffer: no reference counting per item
            } else {
                s.items.append(contentsOf: new)
            }
            return true
        }
        if posted { wakeup.signal() }
        return posted
    }

    /// Refuses further posts and wakes the thread.
    public func close() {
        state.withLock { $0.closed = true }
        wakeup.signal()
    }

    /// Moves what was posted into `queue`; false once closed (then call `drain`).
    public func take(into queue: inout [Item]) -> Bool {
        state.withLock { s -> Bool in
            if s.closed { return false }
            if queue.isEmpty {
                // Hand the whole array over (no copy, no reference counting per item); the
                // caller's empty array, with its capacity, becomes the next inbox.
                swap(&queue, &s.items)
            } else if !s.items.isEmpty {
                queue.append(contentsOf: s.items)
                s.items.removeAll(keepingCapacity: true)
            }
            return true
        }
    }

    /// What was posted and never taken (after `close`).
    public func drain() -> [Item] {
        state.withLock { s in
            defer { s.items = [] }
            return s.items
        }
    }
}
