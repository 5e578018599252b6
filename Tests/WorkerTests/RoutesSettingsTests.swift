import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import Testing
import TestSupport

/// `routes.sports` / `routes.transit`: built-in routes by default, a file's routes when set, and a
/// clear error for a file that can't be read or is invalid.
@Suite struct RoutesSettingsTests {
    static let broken = """
        feed: sports
        storage-policy: no-storage
        types:
          match.score:
            key: "match:{match}"
            event: update
            priority: critical
            content-state:
              homeScore: int home_scor

        """

    @Test func builtInRoutesByDefault() throws {
        let settings = try SettingsLoader.load(file: nil, environment: [:])
        #expect(settings.sportsRoutesFile == nil && settings.transitRoutesFile == nil)
        let routes = try settings.loadRoutes()
        #expect(routes.sports.file == "<built-in sports routes>" && routes.transit.file == "<built-in transit routes>")
        #expect(routes.transit.storagePolicy == .latestMessage)
    }

    @Test func aRouteFileFromTheEnvironmentOrTheConfigurationFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let sports = dir.path + "/sports.yaml"
        try Self.broken.replacingOccurrences(of: "home_scor", with: "home_score").write(toFile: sports, atomically: true, encoding: .utf8)
        let transit = dir.path + "/transit.yaml"
        try ShippedRoutes.transit.write(toFile: transit, atomically: true, encoding: .utf8)
        let config = dir.path + "/ac.yaml"
        try "routes:\n  transit: \(transit)\n".write(toFile: config, atomically: true, encoding: .utf8)

        let settings = try SettingsLoader.load(file: config, environment: ["ACTIVITYCAST_ROUTES_SPORTS": sports])
        #expect(settings.sportsRoutesFile == sports && settings.transitRoutesFile == transit)
        let routes = try settings.loadRoutes()
        #expect(routes.sports.file == sports && routes.sports.routedTypes == ["match.score"])
        #expect(routes.transit.file == transit && routes.transit.routedTypes.count == 8)

        // The file's routes are the ones used: its match.score sets only homeScore.
        let raw = [RawField("type", "match.score"), RawField("ts", "1"), RawField("match", "m"), RawField("home_score", "2"),
                   RawField("away_score", "1")]
        let entry = try EntryDecoder().decode(kind: .sports, fields: raw).get()
        #expect(try routes.plan(entry: entry, fields: raw).get()?.contentState == ["homeScore": 2])
    }

    static func line(of prefix: String, in text: String) -> Int {
        (text.split(separator: "\n", omittingEmptySubsequences: false).firstIndex { $0.hasPrefix(prefix) } ?? -1) + 1
    }

    @Test func anInvalidFileGivesItsPathLineColumnAndReason() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/sports.yaml"
        try Self.broken.write(toFile: file, atomically: true, encoding: .utf8)
        let settings = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_ROUTES_SPORTS": file])
        #expect {
            try settings.loadRoutes()
        } throws: { error in
            "\(error)" == "\(file):9:18: match.score: content-state 'homeScore': unknown field 'home_scor' for match.score "
                + "(did you mean home_score?)"
        }
    }

    @Test func anUnreadableOrEmptySettingIsAnError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let missing = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_ROUTES_TRANSIT": dir.path + "/none.yaml"])
        #expect { try missing.loadRoutes() } throws: { error in
            "\(error)" == "cannot read the routes file \(dir.path)/none.yaml: No such file or directory"
        }
        let directory = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_ROUTES_TRANSIT": dir.path])
        #expect { try directory.loadRoutes() } throws: { "\($0)" == "\(dir.path) is a directory, not a routes file" }
        #expect { try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_ROUTES_SPORTS": ""]) } throws: { error in
            "\(error)" == "setting routes.sports (from ACTIVITYCAST_ROUTES_SPORTS): must be the path of a route file; "
                + "leave it unset for the built-in routes"
        }
        // A transit file given for sports names the mismatch.
        let transit = dir.path + "/transit.yaml"
        try ShippedRoutes.transit.write(toFile: transit, atomically: true, encoding: .utf8)
        let swapped = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_ROUTES_SPORTS": transit])
        #expect { try swapped.loadRoutes() } throws: { error in
            "\(error)" == "\(transit):\(Self.line(of: "feed:", in: ShippedRoutes.transit)):7: this file routes the transit feed, not sports"
        }
    }
}
