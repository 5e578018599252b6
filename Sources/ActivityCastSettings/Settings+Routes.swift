import ActivityCastCore
import ActivityCastRoutes

extension Settings {
    /// The routes of both feeds: the files `routes.sports` and `routes.transit` name, else the
    /// built-in ones. Called once at start: an unreadable file throws a `SettingsError`, an invalid
    /// one a `RouteError` (`file:line:column: reason`).
    public func loadRoutes() throws -> RouteSet {
        RouteSet(sports: try SettingsLoader.loadRoutes(file: sportsRoutesFile, feed: .sports),
                 transit: try SettingsLoader.loadRoutes(file: transitRoutesFile, feed: .transit))
    }
}

extension SettingsLoader {
    /// The routes of one feed from a file (the edge where route files are read), or the built-in
    /// routes when `file` is nil. Also `activitycast routes check`.
    public static func loadRoutes(file: String?, feed: StreamKind) throws -> Routes {
        guard let file else {
            guard let routes = RouteSet.shipped.routes(for: feed) else {
                throw SettingsError(description: "\(feed.rawValue) is not a feed with routes (sports or transit)")
            }
            return routes
        }
        guard feed != .registrations else {
            throw SettingsError(description: "\(feed.rawValue) is not a feed with routes (sports or transit)")
        }
        return try Routes(yaml: try readFile(file, noun: "routes file"), file: file, feed: feed)
    }
}
