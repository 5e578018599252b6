import Foundation
import Synchronization

/// Turns POSIX signals into callbacks on a thread of its own: a handler writes each signal's
/// number to a pipe (`write` is async-signal-safe) and the thread calls `handler` with it. Not
/// dispatch signal sources: a source needs its signal blocked in every thread, and threads
/// started before it (Redis's I/O) don't block it, so a signal the kernel gave one of them was
/// ignored and lost (`activitycast top` missed a Ctrl-C in CI). One per process. The worker's
/// SIGTERM/SIGINT have a handler of their own (`StopSignals`: a second one exits at once).
final class SignalWatcher: Sendable {
    /// The pipe's end the handler writes to (-1: no watcher yet).
    private static let pipeWrite = Atomic<Int32>(-1)
    private let signals: [Int32]

    init(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        self.signals = signals
        Self.pipeWrite.store(SignalPipe.open(thread: "signals") { handler(Int32($0)) }, ordering: .sequentiallyConsistent)
        for sig in signals {
            signal(sig) { sig in
                var byte = UInt8(truncatingIfNeeded: sig)
                _ = write(SignalWatcher.pipeWrite.load(ordering: .sequentiallyConsistent), &byte, 1)
            }
        }
    }

    /// Later signals are ignored (a process that is stopping finishes its stop).
    func cancel() { for sig in signals { signal(sig, SIG_IGN) } }
}

/// A pipe from a signal handler to a thread: the handler writes a byte to the returned end
/// (`write` is async-signal-safe), and a thread of its own, `thread`, calls `onByte` with each
/// byte it reads. Both ends close on exec.
enum SignalPipe {
    static func open(thread name: String, onByte: @escaping @Sendable (UInt8) -> Void) -> Int32 {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { fatalError("pipe: \(String(cString: strerror(errno)))") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let readEnd = fds[0]
        let thread = Thread {
            var byte: UInt8 = 0
            while true {
                let n = read(readEnd, &byte, 1)
                if n == 1 { onByte(byte) } else if n == 0 || errno != EINTR { return }
            }
        }
        thread.name = name
        thread.start()
        return fds[1]
    }
}
