#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An owned, non-blocking socket descriptor. Closed on deinit.
///
/// Not Sendable: a socket belongs to the one I/O thread that drives it.
public final class Socket {
    public let fd: Int32
    private var closed = false

    public init(adopting fd: Int32) { self.fd = fd }

    deinit { close() }

    public func close() {
        guard !closed else { return }
        closed = true
        _ = Glibc.close(fd)
    }

    /// Connects to `host:port` over TCP, trying each address in turn, within `timeout`.
    public static func connectTCP(host: String, port: Int, timeout: Duration) throws -> Socket {
        let deadline = Deadline.after(timeout)
        return try eachAddress(host: host, port: port, passive: false,
                               none: StreamError.system(SystemError("connect", errno: ECONNREFUSED, context: "\(host):\(port)"))) { sock, info in
            try sock.finishConnect(info.ai_addr, info.ai_addrlen, deadline: deadline, what: "\(host):\(port)")
            sock.setNoDelay()
        }
    }

    /// Resolves `host:port` for TCP (`passive`: an address to listen on; an empty host is any)
    /// and tries each address in turn: a non-blocking, close-on-exec socket of its family, then
    /// `use`. Returns the first socket `use` accepts; throws the last error (`none` if there was
    /// no address to try).
    static func eachAddress(host: String, port: Int, passive: Bool, none: Error,
                            _ use: (Socket, addrinfo) throws -> Void) throws -> Socket {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        if passive { hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV }
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(passive && host.isEmpty ? nil : host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            // A name that doesn't resolve says so, in the resolver's words, not as "no route".
            let text = rc == 0 ? "no addresses" : String(cString: gai_strerror(rc))
            throw StreamError.system(SystemError("getaddrinfo", errno: passive ? EADDRNOTAVAIL : EHOSTUNREACH, context: host,
                                                 reason: "cannot resolve '\(host)' (DNS): \(text)"))
        }
        defer { freeaddrinfo(list) }
        var lastError = none
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            cursor = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd < 0 { lastError = StreamError.system(SystemError("socket", errno: errno)); continue }
            let sock = Socket(adopting: fd)
            do {
                try use(sock, info.pointee)
                return sock
            } catch {
                lastError = error
            }
        }
        throw lastError
    }

    /// Every address `host` resolves to, numeric (`10.0.3.7`, `fd00::7`), in the resolver's
    /// order without repeats: a headless Service's name gives each of its pods.
    public static func addresses(of host: String) throws -> [String] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &list)
        guard rc == 0 else {
            throw StreamError.system(SystemError("getaddrinfo", errno: EHOSTUNREACH, context: host,
                                                 reason: "cannot resolve '\(host)' (DNS): \(String(cString: gai_strerror(rc)))"))
        }
        defer { freeaddrinfo(list) }
        var out: [String] = []
        var cursor = list
        while let info = cursor {
            cursor = info.pointee.ai_next
            var name = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(info.pointee.ai_addr, info.pointee.ai_addrlen, &name, socklen_t(name.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if !out.contains(text) { out.append(text) }
            }
        }
        return out
    }

    private func finishConnect(_ address: UnsafeMutablePointer<sockaddr>?, _ length: socklen_t, deadline: Deadline, what: String) throws {
        if connect(fd, address, length) == 0 { return }
        guard errno == EINPROGRESS else { throw StreamError.system(SystemError("connect", errno: errno, context: what)) }
        guard try wait(forWriting: true, until: deadline) else { throw StreamError.timedOut("connecting to \(what)") }
        var error: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size)
        if error != 0 { throw StreamError.system(SystemError("connect", errno: error, context: what)) }
    }

    public func setNoDelay() {
        var on: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Waits until the socket is readable (or writable); false on timeout. Retries EINTR.
    public func wait(forWriting: Bool, until deadline: Deadline) throws -> Bool {
        while true {
            var p = pollfd(fd: fd, events: Int16(forWriting ? POLLOUT : POLLIN), revents: 0)
            let n = poll(&p, 1, deadline.pollTimeoutMillis)
            if n > 0 { return true }
            if n == 0 { return false }
            if errno != EINTR { throw StreamError.system(SystemError("poll", errno: errno)) }
        }
    }

    public enum IO: Equatable { case bytes(Int), wouldBlock, closed }

    /// One non-blocking read. Retries EINTR; EAGAIN becomes `.wouldBlock`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> IO {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case ECONNRESET: return .closed
            default: throw StreamError.system(SystemError("read", errno: errno))
            }
        }
    }

    /// One non-blocking write. Retries EINTR; EAGAIN becomes `.wouldBlock`.
    public func write(_ buffer: UnsafeRawBufferPointer) throws -> IO {
        while true {
            let n = send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .bytes(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case EPIPE, ECONNRESET: return .closed
            default: throw StreamError.system(SystemError("send", errno: errno))
            }
        }
    }
}
