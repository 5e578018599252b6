import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport

/// Child processes for interop tests (openssl, python3), always found through PATH and always
/// stopped by their own PID, never by name.
enum SSLTestProcess {
    struct Result {
        let status: Int32
        let stdout: String
        let stderr: String
        let timedOut: Bool
    }

    enum Failure: Error, CustomStringConvertible {
        case notStarted(String)
        var description: String {
            switch self {
            case .notStarted(let why): "cannot start child process: \(why)"
            }
        }
    }

    /// Runs `arguments` (arguments[0] resolved through PATH by /usr/bin/env) to completion,
    /// feeding `stdin`, with stdout/stderr captured through files in `directory` (no pipe can
    /// fill up and stall the child). Kills the child by PID if it outlives `timeout`.
    static func run(
        _ arguments: [String],
        stdin: String = "",
        in directory: SSLTestDirectory,
        timeout: TimeInterval = 30
    ) throws -> Result {
        let child = try Running(arguments, stdin: stdin, in: directory)
        defer { child.kill() }
        let timedOut = !child.wait(timeout: timeout)
        if timedOut { child.kill() }
        return Result(status: timedOut ? -1 : child.status ?? -1,
                      stdout: child.stdout(), stderr: child.stderr(), timedOut: timedOut)
    }

    /// A started child (`ChildProcess`: spawned with `posix_spawn`, reaped with `waitpid`); call
    /// `kill()` in a `defer` (it is idempotent).
    final class Running {
        private let child: ChildProcess

        init(_ arguments: [String], stdin: String = "", in directory: SSLTestDirectory) throws {
            let input = try directory.write("child-\(UUID().uuidString).in", stdin)
            do {
                child = try ChildProcess(executable: "/usr/bin/env", arguments: arguments, directory: directory.url.path,
                                         logName: "child", stdin: input)
            } catch {
                throw Failure.notStarted("\(arguments.first ?? "?"): \(error)")
            }
        }

        /// Waits up to `timeout` for the child to exit; true if it did.
        func wait(timeout: TimeInterval) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            while child.isRunning {
                if Date() >= deadline { return false }
                usleep(5_000)
            }
            return true
        }

        /// The exit status once exited (128 + the signal when killed), else nil.
        var status: Int32? { child.status() }

        /// SIGKILL to this child's PID (if still running), then reap it.
        func kill() {
            child.kill(signal: SIGKILL)
            _ = child.status(blocking: true)
        }

        func stdout() -> String { (try? String(contentsOfFile: child.stdoutPath, encoding: .utf8)) ?? "" }
        func stderr() -> String { (try? String(contentsOfFile: child.stderrPath, encoding: .utf8)) ?? "" }
    }
}
