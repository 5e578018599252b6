import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Plain POSIX socket helpers for the TLS tests (the tests own every descriptor they open).
enum SSLTestSockets {
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ what: String) {
            description = "\(what): \(String(cString: strerror(errno))) (errno \(errno))"
        }
        init(message: String) { description = message }
    }

    /// A connected AF_UNIX stream pair, both ends non-blocking.
    static func nonBlockingPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else {
            throw Failure("socketpair")
        }
        try setNonBlocking(fds[0])
        try setNonBlocking(fds[1])
        return (fds[0], fds[1])
    }

    static func setNonBlocking(_ fd: Int32) throws {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw Failure("fcntl(O_NONBLOCK)")
        }
    }

    static func close(_ fd: Int32) {
        if fd >= 0 { _ = Glibc.close(fd) }
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// A TCP socket listening on 127.0.0.1 at a kernel-chosen port: (fd, port).
    static func listenLoopback() throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket") }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let failure = Failure("bind/listen")
            close(fd)
            throw failure
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            let failure = Failure("getsockname")
            close(fd)
            throw failure
        }
        return (fd, UInt16(bigEndian: actual.sin_port))
    }

    /// A loopback TCP port that was free a moment ago (bind to port 0, read it, close).
    static func freeLoopbackPort() throws -> UInt16 {
        let (fd, port) = try listenLoopback()
        close(fd)
        return port
    }

    /// Connects to 127.0.0.1:port, retrying until `timeout` (the server may still be starting),
    /// and returns the connected socket in non-blocking mode.
    static func connectLoopback(port: UInt16, timeout: TimeInterval = 10) throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw Failure("socket") }
            var address = loopback(port: port)
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if result == 0 {
                try setNonBlocking(fd)
                return fd
            }
            let failure = Failure("connect to 127.0.0.1:\(port)")
            close(fd)
            if Date() >= deadline { throw failure }
            usleep(20_000)
        }
    }

    /// Accepts one connection within `timeout`; the accepted socket is non-blocking.
    static func accept(from listener: Int32, timeout: TimeInterval = 10) throws -> Int32 {
        guard wait(listener, readable: true, timeout: timeout) else {
            throw Failure(message: "no connection within \(timeout) s")
        }
        let fd = Glibc.accept(listener, nil, nil)
        guard fd >= 0 else { throw Failure("accept") }
        try setNonBlocking(fd)
        return fd
    }

    /// poll(2) for one descriptor: true if it became ready (or has an error/hangup to report).
    static func wait(_ fd: Int32, readable: Bool, timeout: TimeInterval) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(readable ? POLLIN : POLLOUT), revents: 0)
        let result = poll(&entry, 1, Int32(max(0, timeout * 1000)))
        return result > 0
    }
}
