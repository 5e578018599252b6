import ActivityCastCommandSupport
import ActivityCastConsole
import ActivityCastInspect
import ActivityCastSettings
import ArgumentParser
import Foundation
import Logging
import RedisClient

/// `activitycast console`: the ops console in the browser.
struct ConsoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console",
        abstract: "Serve the ops console: queue state, workers, activity keys with their trails, devices and dead letters, in a browser.",
        discussion: """
        Read-only unless actions are allowed (--allow-actions, console.allow_actions). The operator \
        token comes from ACTIVITYCAST_CONSOLE_TOKEN or --token-file: actions need it, and beyond \
        loopback every page does (a listener beyond loopback without one is refused).
        """)

    @OptionGroup var common: CommonOptions

    @Option(help: "host:port to listen on (console.listen; default 127.0.0.1:9310).")
    var listen: String?

    @Option(help: "A worker's /metrics URL (repeat for each worker; console.metrics).")
    var metrics: [String] = []

    @Option(help: "A headless Service's host:port whose every address is a worker's ops port (console.metrics_service).")
    var metricsService: String?

    @Flag(help: "Allow replaying and discarding dead letters (console.allow_actions).")
    var allowActions = false

    @Option(help: "A file holding the operator token (instead of ACTIVITYCAST_CONSOLE_TOKEN).")
    var tokenFile: String?

    func run() async throws {
        var settings = try common.settings()
        if let listen {
            guard let parsed = OpsListen(parsing: listen), parsed.port != nil else { throw ValidationError("--listen must be host:port, got '\(listen)'") }
            settings.console.listen = parsed
        }
        if !metrics.isEmpty { settings.console.metrics = metrics }
        if let metricsService {
            guard let s = OpsListen(parsing: metricsService), let port = s.port, port > 0 else {
                throw ValidationError("--metrics-service must be host:port, got '\(metricsService)'")
            }
            settings.console.metricsService = (s.host, port)
        }
        if allowActions { settings.console.allowActions = true }
        for url in settings.console.metrics where MetricsEndpoint(url) == nil {
            throw ValidationError("'\(url)' is not a metrics URL (http://HOST:PORT/metrics)")
        }
        var token = settings.console.token
        if let tokenFile {
            do { token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) }
            catch { throw CommandFailure("--token-file \(tokenFile): \(error.localizedDescription)") }
        }
        if let problem = ConsoleAuth.startProblem(host: settings.console.listen.host, token: token, allowActions: settings.console.allowActions) {
            throw CommandFailure("console: \(problem)")
        }
        var logger = Logger(label: "activitycast.console")
        logger.logLevel = Logger.Level(rawValue: settings.logLevel) ?? .info
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let console = Console(settings: settings, redis: redis, token: token, logger: logger)
        let actions = settings.console.allowActions ? "actions allowed with the token" : "read-only"
        let (host, redisURL) = (settings.console.listen.host, settings.redisURL.description)
        try await console.run { port in
            FileHandle.standardOutput.write(Data("console listening on http://\(host):\(port) (\(actions); Redis \(redisURL))\n".utf8))
        }
    }
}
