import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Plain POSIX socket helpers for the HTTP2Kit tests (the tests own every descriptor they open).
enum TestSockets {
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ what: String) { description = "\(what): \(String(cString: strerror(errno))) (errno \(errno))" }
        init(message: String) { description = message }
    }

    /// A connected AF_UNIX stream pair, both ends non-blocking.
    static func nonBlockingPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { throw Failure("socketpair") }
        try setNonBlocking(fds[0])
        try setNonBlocking(fds[1])
        return (fds[0], fds[1])
    }

    static func setNonBlocking(_ fd: Int32) throws {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { throw Failure("fcntl(O_NONBLOCK)") }
    }

    static func close(_ fd: Int32) {
        if fd >= 0 { _ = Glibc.close(fd) }
    }

    /// A non-blocking TCP socket listening on 127.0.0.1 at a kernel-chosen port: (fd, port).
    static func listenLoopback() throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket") }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 64) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ok else {
            let failure = Failure("bind/listen")
            close(fd)
            throw failure
        }
        try setNonBlocking(fd)
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// poll(2) on several descriptors; `writable[i]` adds POLLOUT for `fds[i]`.
    static func poll(_ fds: [Int32], writable: [Bool], timeoutMillis: Int32) {
        var entries = fds.enumerated().map { index, fd in
            pollfd(fd: fd, events: Int16(POLLIN) | (writable[index] ? Int16(POLLOUT) : 0), revents: 0)
        }
        _ = Glibc.poll(&entries, nfds_t(entries.count), timeoutMillis)
    }
}

/// A flag shared between the test and its server threads.
final class StopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    var isStopped: Bool { lock.withLock { stopped } }
    func stop() { lock.withLock { stopped = true } }
}

/// A counter shared between threads.
final class SharedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    private var messages: [String] = []
    func add(_ n: Int = 1) { lock.withLock { value += n } }
    var count: Int { lock.withLock { value } }
    func note(_ message: String) { lock.withLock { messages.append(message) } }
    var notes: [String] { lock.withLock { messages } }
}

/// CPU time used by the calling thread, in seconds.
func threadCPUSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// CPU time (user + system) used so far by process `pid`, from /proc, in seconds.
func processCPUSeconds(_ pid: pid_t) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return 0 }
    // Fields after the command name: state is field 3; utime and stime are fields 14 and 15.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
