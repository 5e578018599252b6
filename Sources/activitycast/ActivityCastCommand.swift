import ActivityCastBench
import ArgumentParser
import Foundation

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
