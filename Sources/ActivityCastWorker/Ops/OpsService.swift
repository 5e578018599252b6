import ActivityCastSettings
import APNs
import Logging
import OpsHTTP
import RedisClient
import Synchronization

/// A worker's ops endpoints on `ops.listen` (docs/operations.md, "Metrics and probes"):
///
/// - `/metrics`: the Prometheus text format (`WorkerMetrics`).
/// - `/healthz` (liveness): 503 only when the worker itself is stuck — its read loop has made no
///   progress for `livenessLimit`, or an APNs event loop has not turned for `loopLimit`. A Redis
///   outage is not that: reads fail and are retried, which is progress. 200 while draining (the
///   shutdown deadline bounds it).
/// - `/readyz` (readiness): 503 with the reason while draining after SIGTERM, while Redis does not
///   answer the monitor's `PING` (1 s timeout, checked every second), or while the consumer
///   group is missing on an input stream; 200 otherwise. It recovers by itself.
///
/// The HTTP server runs on a thread of its own; the handlers only read state kept up to date by
/// the worker and the monitor, so a scrape never waits for Redis.
public final class OpsService: Sendable {
    public let listen: OpsListen
    private let worker: Worker
    private let monitor: GroupMonitor
    private let metrics = WorkerMetrics()
    private let server: OpsHTTPServer
    private let monitorTask = Mutex<Task<Void, Never>?>(nil)
    private let logger: Logger


    public init(worker: Worker, listen: OpsListen, logger: Logger) {
        self.worker = worker
        self.listen = listen
        self.logger = logger
        self.monitor = GroupMonitor(settings: worker.settings, consumer: worker.consumer,
                                    watched: worker.stats.streams.keys.sorted())
        let probes = Probes(worker: worker, monitor: monitor, metrics: metrics)
        server = OpsHTTPServer(host: listen.host, routes: [
            "/metrics": { probes.metricsResponse() },
            "/healthz": { probes.healthResponse() },
            "/readyz": { probes.readinessResponse() },
        ])
    }

    /// Listens and starts checking Redis. Throws when the address can't be listened on.
    public func start() throws {
        try server.start(port: listen.port ?? 0)
        let monitor = self.monitor
        monitorTask.withLock { $0 = Task { await monitor.run() } }
        logger.info("ops endpoints listening", metadata: ["listen": "\(listen.host):\(server.port)", "paths": "/metrics /healthz /readyz"])
    }

    /// The port it listens on (after `start`).
    public var port: Int { server.port }

    public func stop() {
        monitorTask.withLock { $0?.cancel(); $0 = nil }
        server.stop()
    }

}

/// The handlers (on the server's thread; they never wait). They hold what they read, not the
/// service, so the server's routes make no cycle with it.
struct Probes: Sendable {
    let worker: Worker
    let monitor: GroupMonitor
    let metrics: WorkerMetrics

    /// How long the read loop may go without progress before `/healthz` fails:
    /// 3 × max(`worker.block_ms`, 1 s) + `redis.connect_timeout_ms` + `redis.command_timeout_ms`
    /// + 30 s. A read round takes at most its block time plus the command timeout (plus a
    /// reconnect), so only a loop that hangs gets there.
    var livenessLimit: Duration {
        let s = worker.settings
        return max(s.block, .seconds(1)) * 3 + s.connectTimeout + s.commandTimeout + .seconds(30)
    }

    /// Why the worker is not ready, or nil.
    func notReadyReason() -> String? {
        let now = ContinuousClock.now
        return Self.notReady(stopping: worker.isStopping, check: monitor.lastReadiness.map { ($0.problem, now - $0.checkedAt) },
                             refusal: worker.refusal.map { ($0.reason, now - $0.at) },
                             refusalWindow: worker.settings.visibilityTimeout + worker.settings.claimInterval + .seconds(10))
    }

    /// The readiness answer from plain values: why not ready, or nil. `check`: the monitor's
    /// last problem and its age; `refusal`: Redis's last refusal of the worker's writes and its
    /// age, which counts for `refusalWindow` (refused entries are claimed and tried again within
    /// the visibility timeout and a claim interval: a refusal older than that is over).
    static func notReady(stopping: Bool, check: (problem: String?, age: Duration)?, refusal: (refusal: RedisRefusal, age: Duration)?,
                         refusalWindow: Duration) -> String? {
        if stopping { return "draining after a stop request (SIGTERM)" }
        guard let check else { return "starting: Redis not checked yet" }
        if check.age > .seconds(5) { return "Redis check unanswered for \(Int(check.age.seconds)) s" }
        if let problem = check.problem { return problem }
        if let refusal, refusal.age <= refusalWindow {
            let what = refusal.refusal.kind == .outOfMemory ? "Redis is out of memory and refuses writes" : "Redis refuses writes"
            let todo = refusal.refusal.kind == .outOfMemory ? ": raise maxmemory (docs/operations.md, 'Redis memory')" : ""
            return "\(what) (\(refusal.refusal.kind.rawValue): \(refusal.refusal.message.prefix(200))); entries stay pending\(todo)"
        }
        return nil
    }

    func readinessResponse() -> HTTPResponse {
        if let reason = notReadyReason() { return HTTPResponse(status: 503, text: "not ready: \(reason)\n") }
        return HTTPResponse(status: 200, text: "ready\n")
    }

    /// How long an APNs event loop may go without a turn before `/healthz` fails: it turns at
    /// least every second, and blocks only while it opens a connection (each bounded by the connect
    /// timeout, one after another for the loop's connections), so 30 s more than that.
    static func loopLimit(_ configuration: APNsClientConfiguration) -> Duration {
        let perLoop = (configuration.connections + configuration.threads - 1) / max(1, configuration.threads)
        return configuration.connectTimeout * (perLoop + 1) + .seconds(30)
    }

    func healthResponse() -> HTTPResponse {
        let loops = (worker.apns?.clients ?? []).map { c in (endpoint: "\(c.configuration.endpoint)", stall: c.longestLoopStall, limit: Self.loopLimit(c.configuration)) }
        return Self.health(draining: worker.isStopping, readIdle: worker.sinceProgress, readLimit: livenessLimit, loops: loops)
    }

    /// The liveness answer from plain values: 503 naming what is stuck, else 200.
    static func health(draining: Bool, readIdle: Duration, readLimit: Duration,
                       loops: [(endpoint: String, stall: Duration, limit: Duration)]) -> HTTPResponse {
        if draining { return HTTPResponse(status: 200, text: "ok (draining)\n") }
        var stuck: [String] = []
        if readIdle > readLimit {
            stuck.append("the read loop has made no progress for \(Int(readIdle.seconds)) s (limit \(Int(readLimit.seconds)) s)")
        }
        for loop in loops where loop.stall > loop.limit {
            stuck.append("an APNs event loop (\(loop.endpoint)) has not turned for \(Int(loop.stall.seconds)) s (limit \(Int(loop.limit.seconds)) s)")
        }
        if !stuck.isEmpty { return HTTPResponse(status: 503, text: "stuck: \(stuck.joined(separator: "; "))\n") }
        return HTTPResponse(status: 200, text: "ok\n")
    }

    func metricsResponse() -> HTTPResponse {
        let inputs = WorkerMetrics.Inputs(streams: monitor.lastViews?.streams ?? [:], ready: notReadyReason() == nil,
                                          sinceProgress: worker.sinceProgress.seconds, inFlight: worker.inFlight.load(ordering: .relaxed),
                                          schedule: monitor.lastSchedule, channels: monitor.lastChannels, redisMemory: monitor.lastMemory)
        return HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8",
                            body: metrics.render(worker: worker, inputs: inputs))
    }
}
