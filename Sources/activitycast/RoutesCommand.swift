import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSettings
import ActivityCastWorker
import ArgumentParser

/// `activitycast routes show|check`: the built-in route files, and checking one (docs/routes.md).
struct RoutesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "routes",
        abstract: "Print a built-in route file, or check a route file (docs/routes.md).",
        subcommands: [Show.self, Check.self])

    /// The feeds that have routes.
    enum Feed: String, ExpressibleByArgument, CaseIterable {
        case sports, transit
        var kind: StreamKind { self == .sports ? .sports : .transit }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the built-in route file of a feed, to read or to copy and change.")

        @Argument(help: "sports or transit")
        var feed: Feed

        func run() {
            print(ShippedRoutes.text(for: feed.kind) ?? "", terminator: "")
        }
    }

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a route file as the worker would load it; exit 1 with file:line:column: reason if invalid.")

        @Argument(help: "The route file (YAML).")
        var file: String

        @Option(help: "The feed it routes: sports or transit.")
        var kind: Feed

        func run() throws {
            let routes: Routes
            do {
                routes = try SettingsLoader.loadRoutes(file: file, feed: kind.kind)
            } catch {
                throw CommandFailure("\(error)")
            }
            let unrouted = EntrySchema.types(of: kind.kind).map(\.name).filter { !routes.routedTypes.contains($0) }
            print("\(VisibleText.escaped(file, limit: 200)): ok, \(kind.rawValue) routes for \(routes.routedTypes.joined(separator: ", "))"
                + (unrouted.isEmpty ? "" : "; routed to nothing: \(unrouted.joined(separator: ", "))"))
        }
    }
}
