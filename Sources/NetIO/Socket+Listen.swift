#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Listening sockets: what a small server above NetIO needs (the workers' ops endpoints) without
/// importing a C module itself.
extension Socket {
    /// A non-blocking TCP socket listening on `host:port` (`SO_REUSEADDR`, close-on-exec). Port 0
    /// takes a free port (`localPort` tells which). Throws with the address when it can't bind.
    public static func listenTCP(host: String, port: Int, backlog: Int32 = 64) throws -> Socket {
        try eachAddress(host: host, port: port, passive: true,
                        none: StreamError.system(SystemError("bind", errno: EADDRNOTAVAIL, context: "\(host):\(port)"))) { sock, info in
            var on: Int32 = 1
            setsockopt(sock.fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            guard bind(sock.fd, info.ai_addr, info.ai_addrlen) == 0 else {
                throw StreamError.system(SystemError("bind", errno: errno, context: "\(host):\(port)"))
            }
            guard listen(sock.fd, backlog) == 0 else {
                throw StreamError.system(SystemError("listen", errno: errno, context: "\(host):\(port)"))
            }
        }
    }

    /// The local port this socket is bound to (0 if unknown).
    public var localPort: Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { return 0 }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) } }
        case AF_INET6:
            return withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) } }
        default:
            return 0
        }
    }

    /// Takes one pending connection, non-blocking and close-on-exec; nil when none is waiting (or
    /// it went away before it was taken). Retries EINTR.
    public func accept() throws -> Socket? {
        while true {
            // accept4 is not in Glibc's Swift module: the flags are set after the fact. (Until
            // FD_CLOEXEC is set, a child another thread execs would inherit the descriptor; a
            // worker starts no children.)
            let fd = Glibc.accept(self.fd, nil, nil)
            if fd >= 0 {
                let socket = Socket(adopting: fd)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                return socket
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO: return nil
            // Out of descriptors or memory: a condition that passes; the caller sleeps a little.
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return nil
            default: throw StreamError.system(SystemError("accept", errno: errno))
            }
        }
    }
}

/// What one descriptor waits for in `pollSockets`.
public struct PollInterest: Sendable {
    public var fd: Int32
    public var writing: Bool
    public init(fd: Int32, writing: Bool) { self.fd = fd; self.writing = writing }
}

/// Waits until one of `interests` is ready or `deadline` passes; returns, per interest, whether it
/// is ready (readable/writable, or in error or hung up: the next read or write tells). Retries EINTR.
public func pollSockets(_ interests: [PollInterest], until deadline: Deadline) throws -> [Bool] {
    var fds = interests.map { pollfd(fd: $0.fd, events: Int16($0.writing ? POLLOUT : POLLIN), revents: 0) }
    while true {
        let n = fds.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), deadline.pollTimeoutMillis) }
        if n >= 0 { return fds.map { $0.revents != 0 } }
        if errno != EINTR { throw StreamError.system(SystemError("poll", errno: errno)) }
    }
}
