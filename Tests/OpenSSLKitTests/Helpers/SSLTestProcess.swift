import Foundation
#if canImport(Glibc)
import Glibc
#endif

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
        return Result(status: timedOut ? -1 : child.process.terminationStatus,
                      stdout: child.stdout(), stderr: child.stderr(), timedOut: timedOut)
    }

    /// A started child; call `kill()` in a `defer` (it is idempotent).
    final class Running {
        let process = Process()
        let pid: Int32
        private let stdoutPath: String
        private let stderrPath: String

        init(_ arguments: [String], stdin: String = "", in directory: SSLTestDirectory) throws {
            let tag = UUID().uuidString
            stdoutPath = directory.path("child-\(tag).out")
            stderrPath = directory.path("child-\(tag).err")
            let stdinPath = try directory.write("child-\(tag).in", stdin)
            _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
            _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
            guard let input = FileHandle(forReadingAtPath: stdinPath),
                  let output = FileHandle(forWritingAtPath: stdoutPath),
                  let errors = FileHandle(forWritingAtPath: stderrPath) else {
                throw Failure.notStarted("cannot open capture files")
            }
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = arguments
            process.standardInput = input
            process.standardOutput = output
            process.standardError = errors
            do {
                try process.run()
            } catch {
                throw Failure.notStarted("\(arguments.first ?? "?"): \(error)")
            }
            pid = process.processIdentifier
            // The child holds its own copies of the descriptors.
            try? input.close()
            try? output.close()
            try? errors.close()
        }

        /// Waits up to `timeout` for the child to exit; true if it did.
        func wait(timeout: TimeInterval) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            while process.isRunning {
                if Date() >= deadline { return false }
                usleep(5_000)
            }
            return true
        }

        /// SIGKILL to this child's PID (if still running), then reap it.
        func kill() {
            if process.isRunning {
                _ = Glibc.kill(pid, SIGKILL)
                process.waitUntilExit()
            }
        }

        func stdout() -> String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
        func stderr() -> String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

        deinit { kill() }
    }
}
