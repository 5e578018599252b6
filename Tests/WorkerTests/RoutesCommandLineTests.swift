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

    /// Files that could never send anything: `routes check` and the worker refuse each, with its
    /// place (RouteFileErrorTests has the cases in detail).
    static let neverSent: [(name: String, yaml: String, error: String)] = {
        let header = "feed: sports\nstorage-policy: no-storage\ntypes:\n"
        let score = "  match.score:\n    key: \"match:{match}\"\n    event: update\n    priority: critical\n"
        var bomb = header + score + "    content-state:\n      a0: &a0 {c: string clock}\n"
        for d in 1...6 {
            bomb += "      a\(d): &a\(d) {" + (0..<10).map { "k\($0): *a\(d - 1)" }.joined(separator: ", ") + "}\n"
        }
        var keyBomb = "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n"
        for d in 1...9 { keyBomb += "x\(d): &x\(d) [" + (0..<10).map { _ in "*x\(d - 1)" }.joined(separator: ", ") + "]\n" }
        keyBomb += "*x9 : 1\n"
        return [
            ("empty", header + score, ":4:3: match.score: an update needs a content-state with at least one key (or an alert): "
                + "without either it has nothing to send"),
            ("large", header + score + "    content-state: {status: string \"\(String(repeating: "x", count: 5000))\"}\n",
             ":4:3: match.score: its constants alone (content-state and attributes constants, alert texts, attributes-type, "
                + "dates) make every update at least 5070 bytes, and APNs takes at most 4096 in an update to an activity "
                + "token (the same payload goes to the channel): it could never be sent"),
            ("bomb", bomb, ":12:11: aliases repeat this node until the file has more than 10000 nodes once they are expanded; "
                + "a route file needs far less (an alias bomb?)"),
            ("keybomb", keyBomb, ":11:1: an alias can't be a key ('*x9'): keys in a route file are text, and an alias "
                + "in a key would be expanded in full while the file is read"),
        ]
    }()

    @Test func checkAndTheWorkerRefuseWhatCouldNeverBeSent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for (name, yaml, error) in Self.neverSent {
            let path = dir.path + "/\(name).yaml"
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            let (status, _, err) = try await run(["routes", "check", path, "--kind", "sports"])
            #expect(status == 1 && err == "Error: \(path)\(error)\n", "\(name): \(err)")
            let (workerStatus, _, workerErr) = try await run(["worker"], settings: ["routes.sports": path, "redis.url": "redis://127.0.0.1:1"])
            #expect(workerStatus == 1 && workerErr.hasSuffix("Error: \(path)\(error)\n"), "\(name): \(workerErr)")
        }
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
