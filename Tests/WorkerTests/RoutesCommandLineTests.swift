import ActivityCastRoutes
import Foundation
import Testing
import TestSupport

/// `activitycast routes show|check`, and the worker refusing to start with a broken route file.
@Suite struct RoutesCommandLineTests {
    /// Runs the binary with `ACTIVITYCAST_*` settings and returns (status, stdout, stderr).
    func run(_ arguments: [String], settings: [String: String] = [:]) async throws -> (Int32, String, String) {
        var env = ["ACTIVITYCAST_LOG_FORMAT": "json"]
        for (k, v) in settings { env["ACTIVITYCAST_" + k.uppercased().replacingOccurrences(of: ".", with: "_")] = v }
        let child = try ChildProcess(executable: try activitycastExecutable(), arguments: arguments, environment: env, logName: "routes")
        defer { child.removeLogs() }
        guard let status = await child.waitForExit(timeout: .seconds(60)) else {
            await child.stop()
            Issue.record("activitycast \(arguments) did not finish")
            return (-1, "", "")
        }
        return (status, child.stdout, child.stderr)
    }

    static let broken = """
        feed: sports
        storage-policy: no-storage
        types:
          match.started:
            key: "match:{match}"
            event: start
            priority: critical
            attributes-type: MatchActivityAttributes
            followers: ["team:{home}", "team:{away}"]

        """

    @Test func showPrintsTheBuiltInFiles() async throws {
        for feed in ["sports", "transit"] {
            let (status, out, err) = try await run(["routes", "show", feed])
            #expect(status == 0, "\(err)")
            #expect(out == (feed == "sports" ? ShippedRoutes.sports : ShippedRoutes.transit))
        }
        let (status, _, err) = try await run(["routes", "show", "registrations"])
        #expect(status != 0 && err.contains("registrations"), "\(err)")
    }

    @Test func checkAcceptsAGoodFileAndRejectsABrokenOneWithItsLine() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let good = dir.path + "/transit.yaml"
        try ShippedRoutes.transit.write(toFile: good, atomically: true, encoding: .utf8)
        let (okStatus, out, okErr) = try await run(["routes", "check", good, "--kind", "transit"])
        #expect(okStatus == 0, "\(okErr)")
        #expect(out.hasPrefix("\(good): ok, transit routes for trip.arriving, trip.cancelled"), "\(out)")

        let bad = dir.path + "/sports.yaml"
        try Self.broken.write(toFile: bad, atomically: true, encoding: .utf8)
        let (status, _, err) = try await run(["routes", "check", bad, "--kind", "sports"])
        #expect(status == 1)
        #expect(err == "Error: \(bad):4:3: match.started: a start needs an 'alert' (APNs requires one on a start)\n", "\(err)")

        let (wrongKind, _, wrongErr) = try await run(["routes", "check", good, "--kind", "sports"])
        #expect(wrongKind == 1)
        #expect(wrongErr == "Error: \(good):6:7: this file routes the transit feed, not sports\n", "\(wrongErr)")
    }

    @Test func theWorkerDoesNotStartWithABrokenRouteFile() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bad = dir.path + "/sports.yaml"
        try Self.broken.write(toFile: bad, atomically: true, encoding: .utf8)
        // No Redis is needed: the routes are checked before anything connects.
        let (status, _, err) = try await run(["worker"], settings: ["routes.sports": bad, "redis.url": "redis://127.0.0.1:1"])
        #expect(status == 1)
        #expect(err.hasSuffix("Error: \(bad):4:3: match.started: a start needs an 'alert' (APNs requires one on a start)\n"), "\(err)")
        #expect(jsonLogLines(err).contains { $0["level"] == "critical" && $0["msg"]?.contains("cannot start: \(bad):4:3:") == true },
                "\(err)")
    }
}
