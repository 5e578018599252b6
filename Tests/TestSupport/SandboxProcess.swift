import Foundation

/// `activitycast sandbox` as a child process on a free loopback port, with its key and
/// certificate in a temporary directory; stopped by PID.
public final class SandboxProcess: @unchecked Sendable {
    public let directory: TemporaryDirectory
    public let port: Int
    public let child: ChildProcess

    public init(arguments: [String] = []) async throws {
        directory = try TemporaryDirectory()
        let directory = self.directory
        do {
            (child, port) = try await startOnFreeLoopbackPort("the sandbox", timeout: .seconds(20), launch: { port in
                try ChildProcess(executable: try activitycastExecutable(), arguments: ["sandbox"] + arguments,
                                 environment: ["ACTIVITYCAST_SANDBOX_DIR": directory.path, "ACTIVITYCAST_SANDBOX_LISTEN": "127.0.0.1:\(port)"],
                                 logName: "sandbox")
            }, ready: { $0.stdout.contains("listening") }, lastWords: { String(($0.stdout + $0.stderr).suffix(500)) })
        } catch {
            directory.remove()  // no deinit for an object whose init threw
            throw error
        }
    }

    /// Another sandbox with `other`'s key and certificate (its directory, which both then
    /// remove), on `port`: a worker set up for `127.0.0.1:<port>` and `other`'s directory
    /// reaches it, e.g. once a port that refused connections (`RefusingLoopbackPort`) is closed.
    public init(sharing other: SandboxProcess, port: Int, arguments: [String] = []) async throws {
        directory = other.directory
        self.port = port
        child = try ChildProcess(executable: try activitycastExecutable(), arguments: ["sandbox"] + arguments,
                                 environment: ["ACTIVITYCAST_SANDBOX_DIR": directory.path, "ACTIVITYCAST_SANDBOX_LISTEN": "127.0.0.1:\(port)"],
                                 logName: "sandbox")
        let child = self.child
        guard await eventually(timeout: .seconds(20), { child.stdout.contains("listening") || !child.isRunning }), child.isRunning else {
            let words = String((child.stdout + child.stderr).suffix(500))
            child.kill(signal: SIGKILL)
            throw RedisServerError(description: "the sandbox did not start on port \(port): \(words)")
        }
    }

    deinit {
        child.kill(signal: SIGKILL)
        child.removeLogs()
        directory.remove()
    }

    /// The settings that point a worker (or `send`) at this sandbox.
    public var settings: [String: String] {
        ["sandbox.dir": directory.path, "sandbox.listen": "127.0.0.1:\(port)"]
    }

    /// GET on the admin API (`/sandbox/devices/<token>`, `/sandbox/channels/<id>`, …) with curl
    /// over HTTP/2 and TLS, trusting the sandbox's certificate. nil when it answers 404.
    public func get(_ path: String) async throws -> [String: Any]? {
        let curl = try ChildProcess(executable: "/usr/bin/curl",
                                    arguments: ["-s", "--http2", "--cacert", "\(directory.path)/cert.pem", "-w", "\n%{http_code}",
                                                "https://127.0.0.1:\(port)\(path)"], logName: "curl")
        defer { curl.removeLogs() }
        guard await curl.waitForExit(timeout: .seconds(20)) == 0 else { throw RedisServerError(description: "curl \(path) failed: \(curl.stderr)") }
        var lines = curl.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let code = lines.popLast().map(String.init) ?? ""
        if code == "404" { return nil }
        let body = lines.joined(separator: "\n")
        guard code == "200", let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else {
            throw RedisServerError(description: "GET \(path): \(code) \(body.prefix(300))")
        }
        return object
    }

    /// POST to the admin API (faults, unregister) with a JSON body.
    public func post(_ path: String, json: String) async throws {
        let curl = try ChildProcess(executable: "/usr/bin/curl",
                                    arguments: ["-s", "--http2", "--cacert", "\(directory.path)/cert.pem", "-X", "POST", "-d", json,
                                                "-H", "content-type: application/json", "https://127.0.0.1:\(port)\(path)"], logName: "curl")
        defer { curl.removeLogs() }
        guard await curl.waitForExit(timeout: .seconds(20)) == 0 else { throw RedisServerError(description: "curl POST \(path) failed: \(curl.stderr)") }
    }
}
