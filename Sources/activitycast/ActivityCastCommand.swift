import ActivityCastCore
import ActivityCastSettings
import ActivityCastWorker
import ArgumentParser
import Foundation
import Logging
import RedisClient

@main
struct ActivityCastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activitycast",
        abstract: "Live Activity push backend: Redis stream workers that keep iOS Live Activities current through APNs.",
        subcommands: [WorkerCommand.self, InspectCommand.self, TopCommand.self, PublishCommand.self, SendCommand.self, ChannelsCommand.self,
                      SandboxCommand.self, BenchCommand.self, RoutesCommand.self])

    /// argument-parser's own entry point, after one process-wide setting: a server ignores
    /// SIGPIPE (output to a closed pipe, a peer gone) and handles EPIPE where it writes, instead
    /// of being killed with entries in flight.
    static func main() async {
        signal(SIGPIPE, SIG_IGN)
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// Options every Redis-facing command takes.
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: "Configuration file (YAML). Also ACTIVITYCAST_CONFIG.")
    var config: String?

    @Option(name: .long, help: "Redis URL: redis://[user[:password]@]host:port[/db] or rediss://… Also ACTIVITYCAST_REDIS_URL.")
    var redis: String?

    /// Loads the settings, stopping with a usage error when one is wrong, and logs their warnings
    /// (a misspelt `ACTIVITYCAST_*` variable) to stderr at once, in the configured log format.
    func settings(extra: [String: String] = [:]) throws -> Settings {
        var overrides = extra
        if let redis { overrides["redis.url"] = redis }
        let settings: Settings
        do {
            settings = try SettingsLoader.load(file: config, overrides: overrides)
        } catch let error as SettingsError {
            throw ValidationError(error.description)
        }
        if !settings.warnings.isEmpty {
            // Its own handler, not the bootstrapped one: most commands bootstrap logging only
            // after this, and some never do.
            let format = LineLogHandler.Format(rawValue: settings.logFormat) ?? .text
            let logger = Logger(label: "settings") { LineLogHandler(label: $0, level: .warning, format: format) }
            for warning in settings.warnings { logger.warning("\(warning)") }
        }
        return settings
    }
}

/// A failure while running a command (not a usage mistake): printed as `Error: …`, exit 1.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
