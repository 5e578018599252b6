import ActivityCastBench
import ArgumentParser
import Foundation

@main
struct ActivityCastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activitycast",
        abstract: "Live Activity push backend: Redis stream workers that keep iOS Live Activities current through APNs.",
        version: ActivityCastVersion.description,
        subcommands: [WorkerCommand.self, InspectCommand.self, TopCommand.self, TraceCommand.self, DeadLettersCommand.self, ConsoleCommand.self, PublishCommand.self, SendCommand.self, ChannelsCommand.self,
                      SandboxCommand.self, BenchCommand.self, RoutesCommand.self])

    /// argument-parser's own entry point, after one process-wide setting: a server ignores
    /// SIGPIPE (output to a closed pipe, a peer gone) and handles EPIPE where it writes, instead
    /// of being killed with entries in flight.
    static func main() async {
        signal(SIGPIPE, SIG_IGN)
        var command: any ParsableCommand
        do { command = try parseAsRoot() } catch { exit(withError: error) }
        do {
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // An error from a subcommand's run (a setting that is wrong) comes with that
            // subcommand's usage, not the root's.
            let code = exitCode(for: error)
            guard error is ValidationError else { exit(withError: error) }
            let usage = usageString(for: type(of: command))
            // The command's path: the usage's words before its first argument or option.
            let path = usage.split(separator: " ").prefix { !"[<-".contains($0.first ?? "-") }.joined(separator: " ")
            FileHandle.standardError.write(Data("Error: \(message(for: error))\nUsage: \(usage)\n  See '\(path) --help' for more information.\n".utf8))
            Foundation.exit(code.rawValue)
        }
    }
}
