import Foundation
import RedisClient

/// A real `redis-server` on a free loopback port, with nothing persisted unless asked. Killed by
/// PID when the test's reference goes away (`deinit`), or earlier with `stop()`/`crash()`.
///
/// With `ACTIVITYCAST_TEST_REDIS_CLUSTER=N` in the environment, a plain server (no extra
/// arguments, no TLS) is a Redis Cluster of N primaries instead (`RedisClusterServers`, no
/// replicas), and `url`/`urlString` name every node as a seed: the suites written against one
/// Redis then run on a cluster unchanged (.ci/run runs those that can; docs/cluster.md). Such a
/// cluster can be stopped but not restarted as one server (`start()` throws).
public final class RedisServer: @unchecked Sendable {
    /// The primaries a plain server is made of (`ACTIVITYCAST_TEST_REDIS_CLUSTER`); nil: one server.
    public static let clusterPrimaries: Int? = ProcessInfo.processInfo.environment["ACTIVITYCAST_TEST_REDIS_CLUSTER"]
        .flatMap(Int.init).flatMap { $0 >= 1 ? $0 : nil }
    /// Set when this "server" is a cluster.
    public let cluster: RedisClusterServers?
    public struct TLSFiles: Sendable {
        public var certificate: String
        public var key: String
        public var ca: String
        public init(certificate: String, key: String, ca: String) { self.certificate = certificate; self.key = key; self.ca = ca }
    }

    public let port: Int
    public let extraArguments: [String]
    public let tls: TLSFiles?
    private let lock = NSLock()
    private var process: ChildProcess?

    /// Starts a server; `extraArguments` go on its command line (e.g. `--requirepass secret`).
    public init(extraArguments: [String] = [], tls: TLSFiles? = nil) async throws {
        self.extraArguments = extraArguments
        self.tls = tls
        if extraArguments.isEmpty, tls == nil, let n = RedisServer.clusterPrimaries {
            let cluster = try await RedisClusterServers(primaries: n, replicasPerPrimary: 0)
            self.cluster = cluster
            port = cluster.ports[0]
            return
        }
        cluster = nil
        var lastError: Error?
        for _ in 0..<5 {
            let port = freeLoopbackPort()
            do {
                process = try await RedisServer.launch(port: port, extra: extraArguments, tls: tls)
                self.port = port
                return
            } catch {
                lastError = error  // the port was taken in between: try another
            }
        }
        throw lastError!
    }

    deinit {
        process?.kill(signal: SIGKILL)
        process?.removeLogs()
    }

    /// The server's PID (a cluster's first node's).
    public var pid: Int32? { cluster.map { $0.pid(port) } ?? lock.withLock { process?.pid } }

    /// `redis://127.0.0.1:PORT` (or `rediss://` with the test CA for a TLS server; every node as
    /// a seed for a cluster).
    public var url: RedisURL {
        if let cluster { return try! RedisURL(cluster.urlString(seeds: cluster.ports.count)) }
        var url = RedisURL(tls: tls != nil, host: "127.0.0.1", port: port)
        if let tls { url.caFile = tls.ca }
        return url
    }

    public var urlString: String {
        if let cluster { return cluster.urlString(seeds: cluster.ports.count) }
        return tls.map { "rediss://127.0.0.1:\(port)?ca=\($0.ca)" } ?? "redis://127.0.0.1:\(port)"
    }

    /// Stops the server by PID (SIGTERM, then SIGKILL).
    public func stop() async {
        if let cluster { await cluster.stop(); return }
        let p = lock.withLock { () -> ChildProcess? in defer { process = nil }; return process }
        await p?.stop()
        p?.removeLogs()
    }

    /// Kills the server outright (SIGKILL) as a crash would.
    public func crash() async {
        if let cluster { await cluster.stop(); return }
        let p = lock.withLock { () -> ChildProcess? in defer { process = nil }; return process }
        p?.kill(signal: SIGKILL)
        _ = await p?.waitForExit(timeout: .seconds(5))
        p?.removeLogs()
    }

    /// Starts it again on the same port, empty (nothing is persisted).
    public func start() async throws {
        if cluster != nil { throw RedisServerError(description: "a test cluster can't be restarted as one server (ACTIVITYCAST_TEST_REDIS_CLUSTER)") }
        let p = try await RedisServer.launch(port: port, extra: extraArguments, tls: tls)
        lock.withLock { process = p }
    }

    public func connection() -> RedisConnection {
        RedisConnection(configuration: RedisConfiguration(url: url, connectTimeout: .seconds(2), commandTimeout: .seconds(5)))
    }

    private static func launch(port: Int, extra: [String], tls: TLSFiles?) async throws -> ChildProcess {
        // A file name nothing writes (no saves): a stray dump.rdb in the working directory (a
        // redis-server run by hand there) is never loaded into a test's Redis.
        var args = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
                    "--dbfilename", "activitycast-test-never-saved.rdb"]
        if let tls {
            args += ["--port", "0", "--tls-port", String(port), "--tls-cert-file", tls.certificate,
                     "--tls-key-file", tls.key, "--tls-ca-cert-file", tls.ca, "--tls-auth-clients", "no"]
        } else {
            args += ["--port", String(port)]
        }
        args += extra
        let child = try ChildProcess(executable: redisServerPath(), arguments: args, logName: "redis-\(port)")
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if !child.isRunning {
                let log = child.stdout + child.stderr
                child.removeLogs()
                throw RedisServerError(description: "redis-server on port \(port) exited: \(log.suffix(500))")
            }
            if loopbackPortAccepts(port) {
                // Another test's server may have taken the port between our check and our bind:
                // then this child exits, and the one answering is not ours. Ask it for its PID.
                switch await answeringPID(port: port, tls: tls) {
                case .some(let pid?) where pid == child.pid: return child
                case .some(nil) where child.isRunning: return child  // answers, but won't say (AUTH): ours if it runs
                default: if !child.isRunning { continue }
                }
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        child.kill(signal: SIGKILL)
        throw RedisServerError(description: "redis-server on port \(port) did not start within 10 s")
    }

    /// The PID of the redis-server answering on `port` (`INFO server`); `.some(nil)` when it
    /// answers with an error (it wants AUTH), nil when it doesn't answer.
    private static func answeringPID(port: Int, tls: TLSFiles?) async -> Int32?? {
        var url = RedisURL(tls: tls != nil, host: "127.0.0.1", port: port)
        if let tls { url.caFile = tls.ca }
        let connection = RedisNodeConnection(configuration: RedisConfiguration(url: url, connectTimeout: .seconds(1), commandTimeout: .seconds(2)))
        defer { connection.close() }
        guard let reply = try? await connection.pipeline([RedisCommand("INFO", "server")])[0] else { return nil }
        guard let info = reply.string else { return .some(nil) }
        for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("process_id:") {
            return .some(Int32(line.dropFirst("process_id:".count)))
        }
        return .some(nil)
    }

    static func redisServerPath() throws -> String {
        for candidate in ["/usr/bin/redis-server", "/usr/local/bin/redis-server"] where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        throw RedisServerError(description: "redis-server not found: install it (apt-get install redis-server)")
    }
}

public struct RedisServerError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}
