import Foundation
import Synchronization

/// A child process that is always stopped by its PID: on `stop()`, in `deinit`, and (for a test
/// process that exits early) by an `atexit` hook that kills every child still registered.
///
/// Spawned with `posix_spawn` and an empty signal mask: `Foundation.Process` started from a
/// Dispatch thread hands the child that thread's blocked-signal mask, and a child with SIGTERM
/// blocked can't be stopped gracefully.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    public let stdoutPath: String
    public let stderrPath: String
    // Guarded by `lock`.
    private let lock = NSLock()
    private var exitStatus: Int32?

    /// Where the child's output goes: files (readable as `stdout`/`stderr`), a pipe whose
    /// reading end is already closed, so every write fails with EPIPE (a log reader that died),
    /// or a pipe whose reading end stays open and is never read, so writes block once its
    /// buffer (64 KiB) is full (a log reader that hangs).
    public enum Output: Sendable { case files, closedPipe, unreadPipe }
    /// The reading end of an `unreadPipe`, held until the child is gone.
    private let heldPipe: Int32

    /// `stdin`: a file the child reads as its standard input (default: /dev/null).
    public init(executable: String, arguments: [String], environment: [String: String]? = nil, directory: String? = nil,
                logName: String = "child", output: Output = .files, stdin: String = "/dev/null") throws {
        let dir = directory ?? FileManager.default.temporaryDirectory.path
        let stamp = UUID().uuidString.prefix(8)
        stdoutPath = "\(dir)/\(logName)-\(stamp).out"
        stderrPath = "\(dir)/\(logName)-\(stamp).err"

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin, O_RDONLY, 0)
        var pipeFDs: [Int32] = [-1, -1]
        switch output {
        case .files:
            posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        case .closedPipe, .unreadPipe:
            guard pipe(&pipeFDs) == 0 else { throw RedisServerError(description: "pipe: \(String(cString: strerror(errno)))") }
            posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
            posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 2)
            posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
            posix_spawn_file_actions_addclose(&actions, pipeFDs[1])
        }
        // Nobody reads. A closed pipe: the child's writes fail with EPIPE (and SIGPIPE unless it
        // ignores it). An unread one: its reading end stays open here, so writes block once it is full.
        heldPipe = output == .unreadPipe ? pipeFDs[0] : -1
        defer {
            if pipeFDs[1] >= 0 { close(pipeFDs[1]) }
            if pipeFDs[0] >= 0 && output == .closedPipe { close(pipeFDs[0]) }
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var env = ProcessInfo.processInfo.environment
        if let environment { env.merge(environment) { _, new in new } }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let rc = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            if heldPipe >= 0 { close(heldPipe) }
            throw RedisServerError(description: "cannot start \(executable): \(String(cString: strerror(rc)))")
        }
        // Held by this process only, not by children spawned later.
        if heldPipe >= 0 { _ = fcntl(heldPipe, F_SETFD, FD_CLOEXEC) }
        pid = child
        ChildRegistry.shared.add(child)
    }

    deinit {
        if reap(block: false) == nil {
            Glibc.kill(pid, SIGKILL)
            _ = reap(block: true)
        }
        ChildRegistry.shared.remove(pid)
        if heldPipe >= 0 { close(heldPipe) }
    }

    /// The exit status once the child has exited (collecting it with `waitpid`), else nil.
    @discardableResult
    private func reap(block: Bool) -> Int32? {
        lock.lock(); defer { lock.unlock() }
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        let r = waitpid(pid, &status, block ? 0 : WNOHANG)
        guard r == pid else { return nil }
        // Exited: its code; killed by a signal: 128 + the signal, as a shell reports it.
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        exitStatus = code
        ChildRegistry.shared.remove(pid)
        return code
    }

    public var isRunning: Bool { reap(block: false) == nil }

    /// The exit status (128 + the signal when killed), or nil while the child runs; `blocking`
    /// waits for it to exit.
    public func status(blocking: Bool = false) -> Int32? { reap(block: blocking) }

    /// Sends `signal` to this child's PID if it is still running.
    public func kill(signal: Int32) {
        if isRunning { Glibc.kill(pid, signal) }
    }

    /// Waits up to `timeout` for the child to exit; its exit status, or nil if still running.
    public func waitForExit(timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = reap(block: false) { return status }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Sends `signal` and returns how long the child took to exit after it, as the kernel saw it:
    /// a thread of its own blocks in `waitid(WNOWAIT)` (which leaves the child to be reaped), so
    /// the figure doesn't include the test's own wake-ups, which on a loaded cooperative pool lag
    /// by hundreds of milliseconds. Nil if it hasn't exited within `timeout`.
    public func timeExit(afterSignal signal: Int32, timeout: Duration) async -> Duration? {
        let exited = Mutex<ContinuousClock.Instant?>(nil)
        let done = DispatchSemaphore(value: 0)
        let pid = pid
        let watcher = Thread {
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            exited.withLock { $0 = .now }
            done.signal()
        }
        watcher.start()
        let sent = ContinuousClock.now
        kill(signal: signal)
        let finished = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            DispatchQueue.global().async {
                let nanoseconds = UInt64(timeout.components.seconds) * 1_000_000_000 + UInt64(timeout.components.attoseconds / 1_000_000_000)
                continuation.resume(returning: done.wait(timeout: .now() + .nanoseconds(Int(nanoseconds))) == .success)
            }
        }
        guard finished, let at = exited.withLock({ $0 }) else { return nil }
        return at - sent
    }

    /// SIGTERM, then SIGKILL if it hasn't exited within `grace`. Returns the exit status; when
    /// it isn't 0, the end of the child's stderr is printed (its log is usually removed after).
    @discardableResult
    public func stop(grace: Duration = .seconds(5)) async -> Int32? {
        let running = isRunning
        kill(signal: SIGTERM)
        var status = await waitForExit(timeout: grace)
        if status == nil {
            kill(signal: SIGKILL)
            status = await waitForExit(timeout: .seconds(5))
        }
        if status != 0 {
            let lines = stderr.split(separator: "\n", omittingEmptySubsequences: false)
            // A crash: the backtrace's head (what crashed, and the crashed thread's frames), not
            // its end (registers and images).
            let crash = lines.firstIndex { $0.contains("*** Program crashed") }
            let tail = (crash.map { lines[$0...].prefix(60) } ?? lines.suffix(30)).joined(separator: "\n")
            print("child \(pid) (\((stderrPath as NSString).lastPathComponent)) \(running ? "stopped" : "had already exited") with status \(status.map(String.init) ?? "none"); the end of its stderr:\n\(tail)")
        }
        return status
    }

    public var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Removes the child's log files, unless ACTIVITYCAST_TEST_KEEP_LOGS is set (to read them after a failure).
    public func removeLogs() {
        if ProcessInfo.processInfo.environment["ACTIVITYCAST_TEST_KEEP_LOGS"] != nil { return }
        try? FileManager.default.removeItem(atPath: stdoutPath)
        try? FileManager.default.removeItem(atPath: stderrPath)
    }
}

/// Every child still running, so a test process that exits early kills them by PID.
final class ChildRegistry: @unchecked Sendable {
    static let shared: ChildRegistry = {
        let r = ChildRegistry()
        atexit { ChildRegistry.shared.killAll() }
        return r
    }()
    // Guarded by `lock`.
    private let lock = NSLock()
    private var pids: Set<pid_t> = []

    func add(_ pid: pid_t) { lock.lock(); pids.insert(pid); lock.unlock() }
    func remove(_ pid: pid_t) { lock.lock(); pids.remove(pid); lock.unlock() }
    func killAll() {
        lock.lock(); let all = pids; pids = []; lock.unlock()
        for pid in all { Glibc.kill(pid, SIGKILL) }
    }
}

/// A server child on a free loopback port. The port can be taken between choosing it and binding
/// it (another test), so a child that isn't `ready` within `timeout` (or exits) is killed and
/// another port tried, five times; then it throws with the child's last words (`lastWords`).
public func startOnFreeLoopbackPort(_ what: String, timeout: Duration, launch: (Int) throws -> ChildProcess,
                                    ready: (ChildProcess) -> Bool, lastWords: (ChildProcess) -> String) async throws
    -> (child: ChildProcess, port: Int) {
    var lastError = ""
    for _ in 0..<5 {
        let port = freeLoopbackPort()
        let child = try launch(port)
        let up = await eventually(timeout: timeout) { ready(child) || !child.isRunning }
        if up, child.isRunning { return (child, port) }
        lastError = lastWords(child)
        child.kill(signal: SIGKILL)
        _ = await child.waitForExit(timeout: .seconds(5))
        child.removeLogs()
    }
    throw RedisServerError(description: "\(what) did not start: \(lastError)")
}

/// A loopback TCP port that was free a moment ago (bound to port 0, then released).
public func freeLoopbackPort() -> Int {
    let reserved = RefusingLoopbackPort()
    defer { reserved.close() }
    return reserved.port
}

/// A loopback port that refuses connections for as long as this is held: bound, never listening,
/// so no server a parallel test starts can take it (a port found free and let go can be). Close
/// it when done.
public final class RefusingLoopbackPort: Sendable {
    public let port: Int
    /// -1 once closed: a second `close()` must not close whatever descriptor (a parallel test's
    /// socket) has the number by then.
    private let fd: Atomic<Int32>

    public init() {
        // Close-on-exec: a child started meanwhile (a worker under test) must not hold the port.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        precondition(fd >= 0)
        self.fd = Atomic(fd)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        precondition(ok, "cannot bind a loopback socket")
        port = Int(UInt16(bigEndian: addr.sin_port))
    }

    /// Idempotent.
    public func close() {
        let fd = self.fd.exchange(-1, ordering: .sequentiallyConsistent)
        if fd >= 0 { _ = Glibc.close(fd) }
    }
}

/// True when something accepts TCP connections on 127.0.0.1:`port`.
public func loopbackPortAccepts(_ port: Int) -> Bool { withLoopbackSocket(port, connect) }

/// True when a fresh TCP socket's `call` (`bind`, `connect`) with 127.0.0.1:`port` succeeds; the
/// socket is closed after.
func withLoopbackSocket(_ port: Int, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = in_port_t(UInt16(port).bigEndian)
    return withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// A fresh temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String
    public init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("activitycast-test-\(UUID().uuidString.prefix(12))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}
