import Foundation

/// A real `prometheus` (Debian's package) on a free loopback port, with a configuration the test
/// writes and its own temporary storage directory; stopped by PID (SIGTERM with `stop()`,
/// SIGKILL in `deinit` when a test fails before that, and by the child registry at exit).
public final class PrometheusProcess: @unchecked Sendable {
    public static let executable = "/usr/bin/prometheus"
    public let directory: TemporaryDirectory
    public let port: Int
    public let child: ChildProcess

    /// Fails with what to install when Debian's prometheus package is missing (CI installs it with
    /// scripts/install-deps.sh): a test that needs it must not pass without it.
    public static func requireInstalled() throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw RedisServerError(description: "\(executable) not found: install Debian's prometheus package (scripts/install-deps.sh does)")
        }
    }

    /// Starts prometheus with `config`, the text of its prometheus.yml.
    public init(config: String) async throws {
        try PrometheusProcess.requireInstalled()
        directory = try TemporaryDirectory()
        let configPath = "\(directory.path)/prometheus.yml"
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        let directory = self.directory
        do {
            (child, port) = try await startOnFreeLoopbackPort("prometheus", timeout: .seconds(60), launch: { port in
                try ChildProcess(executable: PrometheusProcess.executable,
                                 arguments: ["--config.file=\(configPath)", "--storage.tsdb.path=\(directory.path)/data",
                                             "--storage.tsdb.retention.time=1h", "--web.listen-address=127.0.0.1:\(port)"],
                                 logName: "prometheus")
            }, ready: { $0.stderr.contains("Server is ready to receive web requests.") }, lastWords: { String($0.stderr.suffix(1000)) })
        } catch {
            directory.remove()  // no deinit for an object whose init threw
            throw error
        }
    }

    deinit {
        child.kill(signal: SIGKILL)
        child.removeLogs()
        directory.remove()
    }

    /// SIGTERM by PID, SIGKILL if it has not exited within `grace`. Its exit status.
    @discardableResult
    public func stop(grace: Duration = .seconds(10)) async -> Int32? { await child.stop(grace: grace) }

    /// GET on the HTTP API (`/api/v1/…`) with curl; the `data` of a `"status": "success"` answer.
    public func api(_ path: String, _ parameters: [(String, String)] = []) async throws -> Any {
        var arguments = ["-s", "-m", "10", "-G"]
        for (name, value) in parameters { arguments += ["--data-urlencode", "\(name)=\(value)"] }
        arguments.append("http://127.0.0.1:\(port)\(path)")
        let curl = try ChildProcess(executable: "/usr/bin/curl", arguments: arguments, logName: "curl")
        defer { curl.removeLogs() }
        guard await curl.waitForExit(timeout: .seconds(20)) == 0 else { throw RedisServerError(description: "curl \(path) failed: \(curl.stderr)") }
        let body = curl.stdout
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
              object["status"] as? String == "success", let data = object["data"] else {
            throw RedisServerError(description: "GET \(path) \(parameters): \(body.prefix(500))")
        }
        return data
    }

    /// An instant query (`/api/v1/query`): each series' labels and value.
    public func query(_ promql: String) async throws -> [(labels: [String: String], value: Double)] {
        let data = try await api("/api/v1/query", [("query", promql)])
        guard let result = (data as? [String: Any])?["result"] as? [[String: Any]] else {
            throw RedisServerError(description: "query \(promql): not a vector: \(data)")
        }
        return result.map { series in
            let labels = series["metric"] as? [String: String] ?? [:]
            let pair = series["value"] as? [Any] ?? []
            return (labels, Double(pair.last as? String ?? "") ?? .nan)
        }
    }
}
