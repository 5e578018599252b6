import ActivityCastCore
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
        subcommands: [WorkerCommand.self, InspectCommand.self, PublishCommand.self, SendCommand.self, ChannelsCommand.self,
                      SandboxCommand.self, BenchCommand.self])

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

    func settings(extra: [String: String] = [:]) throws -> Settings {
        var overrides = extra
        if let redis { overrides["redis.url"] = redis }
        do {
            return try SettingsLoader.load(file: config, overrides: overrides)
        } catch let error as SettingsError {
            throw ValidationError(error.description)
        }
    }
}

/// A failure while running a command (not a usage mistake): printed as `Error: …`, exit 1.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
