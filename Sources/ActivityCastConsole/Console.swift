import ActivityCastCore
import ActivityCastInspect
import ActivityCastSettings
import Foundation
import Hummingbird
import Logging
import RedisClient
import Synchronization

/// `activitycast console`: the ops console in the browser (docs/operations.md, "The console").
/// Server-rendered pages over what `inspect`, `top`, `trace` and `deadletters` read — Redis and
/// the workers' `/metrics`, never the worker's code — on Hummingbird.
public struct Console: Sendable {
    let settings: Settings
    let redis: RedisConnection
    let auth: ConsoleAuth
    let logger: Logger
    let reader: TopReader
    let readings: ConsoleReadings

    /// Requests' bodies are small forms: anything larger is refused.
    static let maxBody = 64 * 1024
    /// Dead letters per page, and entries a filter reads per request.
    static let lettersPerPage = 50
    static let filterScan = 10_000
    /// Keys listed, and entries of the keys index a search reads per request.
    static let keysListed = 200
    static let keySearchScan = 20_000

    public init(settings: Settings, redis: RedisConnection, token: String?, logger: Logger) {
        self.settings = settings
        self.redis = redis
        let host = settings.console.listen.host
        auth = ConsoleAuth(token: token, loopbackOnly: ConsoleAuth.isLoopback(host), allowActions: settings.console.allowActions)
        self.logger = logger
        reader = TopReader(inspector: Inspector(settings: settings, redis: redis),
                           endpoints: settings.console.metrics.compactMap(MetricsEndpoint.init), timeout: .seconds(2),
                           service: settings.console.metricsService)
        readings = ConsoleReadings(redisURL: settings.redisURL.description, interval: .milliseconds(settings.console.refreshMillis))
    }

    /// Serves until the process is asked to stop (SIGTERM, SIGINT). `onRunning` gets the port.
    public func run(onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let listen = settings.console.listen
        let app = Application(router: router(), configuration: .init(address: .hostname(listen.host, port: listen.port ?? 9310), serverName: nil),
                              onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) }, logger: logger)
        try await app.runService()
    }
}

/// The overview's readings, shared by every viewer: one read of Redis and the workers per
/// refresh period however many pages are open, rates from the reading before.
final class ConsoleReadings: Sendable {
    let state: Mutex<(top: TopState, at: ContinuousClock.Instant?, reading: Bool)>
    let interval: Duration

    init(redisURL: String, interval: Duration) {
        state = Mutex((TopState(redisURL: redisURL, interval: interval), nil, false))
        self.interval = interval
    }

    /// The state, read again when the last reading is older than most of a period.
    func current(_ reader: TopReader) async -> TopState {
        let due: Bool = state.withLock { s in
            let stale = s.at.map { ContinuousClock.now - $0 > interval * 0.8 } ?? true
            if stale, !s.reading { s.reading = true; return true }
            return false
        }
        if due {
            let reading = await reader.read()
            state.withLock { s in
                s.top.record(reading)
                (s.at, s.reading) = (reading.at, false)
            }
        }
        return state.withLock { $0.top }
    }
}
