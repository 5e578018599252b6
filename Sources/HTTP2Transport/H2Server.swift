#if canImport(Glibc)
import Glibc
#endif
import Foundation
import HTTP2Kit
import NetIO
import OpenSSLKit
import Synchronization

/// An answer to one request. `delay` holds it back (a slow server) without blocking the loop;
/// `connectionFault` misbehaves on the connection after answering; `maxConcurrentStreams`
/// sends new SETTINGS.
public struct H2Response: Sendable {
    public var status: Int
    public var headers: HTTP2HeaderList
    public var body: [UInt8]
    public var delay: Duration?
    public var connectionFault: H2ConnectionFault?
    public var maxConcurrentStreams: Int?

    public init(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = [], delay: Duration? = nil,
                connectionFault: H2ConnectionFault? = nil, maxConcurrentStreams: Int? = nil) {
        self.init(status: status, headerList: HTTP2HeaderList(headers), body: body, delay: delay, connectionFault: connectionFault,
                  maxConcurrentStreams: maxConcurrentStreams)
    }

    /// A response whose header fields are already bytes (no String per value).
    public init(status: Int, headerList: HTTP2HeaderList, body: [UInt8] = [], delay: Duration? = nil,
                connectionFault: H2ConnectionFault? = nil, maxConcurrentStreams: Int? = nil) {
        self.status = status
        self.headers = headerList
        self.body = body
        self.delay = delay
        self.connectionFault = connectionFault
        self.maxConcurrentStreams = maxConcurrentStreams
    }
}

/// Connection-level misbehaviour a handler can ask for (fault injection).
public enum H2ConnectionFault: Sendable, Equatable {
    /// GOAWAY with this debug data; streams after the current one are refused.
    case goAway(debugData: [UInt8])
    /// Drop the TCP connection at once (RST).
    case reset
}

/// What the server calls, on its I/O threads: keep it fast and thread-safe.
public protocol H2RequestHandler: Sendable {
    /// `openStreams`: streams open on the connection now, this one included; `requestNumber`:
    /// this request's position on its connection, from 1.
    func handle(_ request: HTTP2Request, connectionID: UInt64, openStreams: Int, requestNumber: Int) -> H2Response
    func connectionClosed(connectionID: UInt64)
}

extension H2RequestHandler {
    public func connectionClosed(connectionID: UInt64) {}
}

/// An HTTP/2 server over TLS (ALPN h2) on nghttp2: one acceptor thread and `threads` event-loop
/// threads, each polling its own connections. For the APNs sandbox and tests.
public final class H2Server: Sendable {
    public let port: Int
    private let listener: Int32
    private let loops: [ServerLoop]
    private let stopped = StopFlag()
    private let acceptWake = Wakeup()

    /// Binds `host:port` (port 0: any free port, see `port`) and starts serving.
    public init(host: String = "127.0.0.1", port: Int, tls: TLSContext?, threads: Int = 2, maxConcurrentStreams: Int = 1000,
                handler: any H2RequestHandler) throws {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var info: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &info) == 0, let ai = info else {
            throw StreamError.system(SystemError("getaddrinfo", errno: EINVAL, context: host))
        }
        defer { freeaddrinfo(info) }
        let fd = socket(ai.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw StreamError.system(SystemError("socket", errno: errno)) }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw StreamError.system(SystemError("bind", errno: e, context: "\(host):\(port)"))
        }
        guard listen(fd, 1024) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw StreamError.system(SystemError("listen", errno: e))
        }
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        let boundPort: UInt16 = withUnsafePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
        self.port = Int(boundPort)
        self.listener = fd
        self.loops = (0..<max(1, threads)).map { ServerLoop(index: $0, tls: tls, maxConcurrentStreams: maxConcurrentStreams, handler: handler) }
        let loops = self.loops
        let wake = acceptWake
        let stopped = self.stopped
        let thread = Thread {
            nameCurrentThread("h2-accept")
            var connectionID: UInt64 = 0
            while !stopped.value.load(ordering: .relaxed) {
                var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)]
                guard poll(&fds, 2, 1000) > 0, fds[0].revents & Int16(POLLIN) != 0 else { continue }
                let client = accept(fd, nil, nil)
                guard client >= 0 else { continue }
                _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                var on: Int32 = 1
                setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
                connectionID += 1
                // The loop with the fewest open connections (the first on a tie). Round robin over
                // every connection ever accepted let short-lived ones (an admin request, a finished
                // h2load) decide where a sender's connections went: both of a worker's landed on
                // one loop, and the sandbox served its fan-out with one thread.
                let loop = loops.min { $0.open.load(ordering: .relaxed) < $1.open.load(ordering: .relaxed) }!
                loop.adopt(fd: client, connectionID: connectionID)
            }
            Glibc.close(fd)
        }
        thread.name = "h2-accept"
        thread.start()
    }

    deinit { stop() }

    /// Stops accepting and closes every connection.
    public func stop() {
        guard !stopped.value.exchange(true, ordering: .relaxed) else { return }
        acceptWake.signal()
        loops.forEach { $0.stop() }
    }
}

final class StopFlag: Sendable {
    let value = Atomic<Bool>(false)
}

/// One event-loop thread of the server and the connections it owns.
final class ServerLoop: Sendable {
    /// Accepted sockets (descriptor, connection id) for this thread to adopt.
    private let incoming = Mailbox<Adopted>()
    let tls: TLSContext?
    let maxConcurrentStreams: Int
    let handler: any H2RequestHandler
    /// Connections this loop owns or is about to adopt (the accept thread balances on it).
    let open = Atomic<Int>(0)

    init(index: Int, tls: TLSContext?, maxConcurrentStreams: Int, handler: any H2RequestHandler) {
        self.tls = tls
        self.maxConcurrentStreams = maxConcurrentStreams
        self.handler = handler
        let thread = Thread { [self] in
            nameCurrentThread("h2-loop-\(index)")
            self.run()
        }
        thread.name = "h2-loop-\(index)"
        thread.start()
    }

    struct Adopted: Sendable {
        var fd: Int32
        var connectionID: UInt64
    }

    func adopt(fd: Int32, connectionID: UInt64) {
        open.add(1, ordering: .relaxed)
        if !incoming.post([Adopted(fd: fd, connectionID: connectionID)]) {
            open.subtract(1, ordering: .relaxed)
            Glibc.close(fd)
        }
    }

    func stop() { incoming.close() }

    private func run() {
        var connections: [ServerConnection] = []
        var fresh: [Adopted] = []
        while incoming.take(into: &fresh) {
            for a in fresh {
                if let c = ServerConnection(fd: a.fd, id: a.connectionID, tls: tls, maxConcurrentStreams: maxConcurrentStreams, handler: handler) {
                    connections.append(c)
                } else {
                    open.subtract(1, ordering: .relaxed)
                    Glibc.close(a.fd)
                }
            }
            fresh.removeAll(keepingCapacity: true)
            var fds = [pollfd(fd: incoming.wakeup.readFD, events: Int16(POLLIN), revents: 0)]
            var timeout: Int32 = 1000
            for c in connections {
                fds.append(pollfd(fd: c.pump.socket.fd, events: c.pump.pollEvents, revents: 0))
                if let due = c.nextDelayedDue { timeout = min(timeout, max(0, due.pollTimeoutMillis)) }
            }
            let n = poll(&fds, nfds_t(fds.count), timeout)
            if n > 0 && fds[0].revents != 0 { incoming.wakeup.drain() }
            var closed: [Int] = []
            for (i, c) in connections.enumerated() {
                let revents = n > 0 ? fds[i + 1].revents : 0
                if !c.step(revents: revents) { closed.append(i) }
            }
            for i in closed.reversed() {
                let c = connections.remove(at: i)
                open.subtract(1, ordering: .relaxed)
                c.close()
                handler.connectionClosed(connectionID: c.id)
            }
        }
        for c in connections {
            c.close()
            handler.connectionClosed(connectionID: c.id)
        }
        for a in incoming.drain() { Glibc.close(a.fd) }  // accepted but never adopted
    }
}

/// One accepted connection: TLS, an HTTP/2 server session, and answers held back by `delay`.
final class ServerConnection: HTTP2ServerDelegate {
    let id: UInt64
    let pump: H2Pump
    let session: HTTP2ServerSession
    let handler: any H2RequestHandler
    private var requests = 0
    private var delayed: [(due: Deadline, stream: Int32, response: H2Response)] = []
    private var resetNow = false

    init?(fd: Int32, id: UInt64, tls: TLSContext?, maxConcurrentStreams: Int, handler: any H2RequestHandler) {
        self.id = id
        self.handler = handler
        let socket = Socket(adopting: fd)
        do {
            let session = try HTTP2ServerSession(delegate: nil, maxConcurrentStreams: maxConcurrentStreams)
            self.session = session
            let tlsSession = try tls.map { try TLSSession(serverContext: $0, fd: fd) }
            self.pump = H2Pump(socket: socket, tls: tlsSession, session: session)
        } catch {
            return nil
        }
        // Unowned: this connection owns the session and outlives it (see unownedDelegate).
        session.unownedDelegate = self
    }

    var nextDelayedDue: Deadline? { delayed.map(\.due).min() }

    /// Handles readiness; false when the connection is over.
    func step(revents: Int16) -> Bool {
        do {
            if !pump.handshakeComplete {
                guard try pump.handshake() else { return true }
            }
            if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                if try !pump.readAvailable() { return false }
            }
            if resetNow { return false }
            if !delayed.isEmpty {
                let now = Deadline.now()
                var keep: [(due: Deadline, stream: Int32, response: H2Response)] = []
                for d in delayed {
                    if d.due <= now { try? session.respond(stream: d.stream, status: d.response.status, headerList: d.response.headers, body: d.response.body) }
                    else { keep.append(d) }
                }
                delayed = keep
            }
            try pump.flush()
            return !pump.isFinished
        } catch {
            return false
        }
    }

    func close() {
        if resetNow {
            // SO_LINGER 0: close sends RST instead of FIN.
            var l = linger(l_onoff: 1, l_linger: 0)
            setsockopt(pump.socket.fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
            pump.socket.close()
        } else {
            pump.close()
        }
    }

    func http2(_ session: HTTP2ServerSession, request: HTTP2Request) {
        requests += 1
        let response = handler.handle(request, connectionID: id, openStreams: session.activeStreams, requestNumber: requests)
        if response.connectionFault == .reset {
            resetNow = true  // no answer: the connection drops
            return
        }
        if let delay = response.delay, delay > .zero {
            delayed.append((Deadline.after(delay), request.stream, response))
        } else {
            try? session.respond(stream: request.stream, status: response.status, headerList: response.headers, body: response.body)
        }
        if let limit = response.maxConcurrentStreams { try? session.updateMaxConcurrentStreams(limit) }
        switch response.connectionFault {
        case .goAway(let debug)?:
            try? session.submitGoAway(lastStreamID: request.stream, errorCode: .noError, debugData: debug)
        case .reset?:
            resetNow = true
        case nil:
            break
        }
    }
}
