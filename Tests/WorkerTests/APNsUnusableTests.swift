import ActivityCastCore
import ActivityCastInspect
import Foundation
import RedisClient
import Testing
import TestSupport

/// An APNs outage shows (issue 40, item 6): while a worker can't reach APNs, `inspect` (and `top`,
/// which shows the same lines) says so plainly — which worker and endpoint, since when, why — and
/// stops saying so once APNs is back.
extension SendTests {
    @Test func anAPNsOutageShowsInInspectWithWhyAndSinceWhen() async throws {
        let (r, refusing, w) = try await outage()
        defer { r.redis.close(); refusing.close(); w.removeLogs() }
        let t = now() - 10_000
        try await register(r, device: "a", key: "match:un1", activity: "A", token: token("5a"), ts: t)
        try await score(r, "un1", 1, 0, ts: t + 1000)
        func report() async throws -> InspectReport {
            let (status, out, err) = try await runActivitycast(["inspect", "--json"], redis: r.server, settings: ["prefix": r.settings.prefix])
            #expect(status == 0, "\(err)")
            return try JSONDecoder().decode(InspectReport.self, from: Data(out.utf8))
        }
        var shown: [InspectReport.APNsUnusable] = []
        #expect(try await eventually(timeout: .seconds(30)) {
            shown = try await report().apnsUnusable
            return shown.contains { $0.why == "connection refused" }
        }, "\(shown)")
        let u = try #require(shown.first { $0.why == "connection refused" })
        #expect(u.consumer == "w" && u.endpoint.contains("\(refusing.port)") && u.error.contains("Connection refused"), "\(u)")
        #expect(u.sinceMillis <= now() && u.sinceMillis > t, "since \(u.sinceMillis)")
        let (_, text, _) = try await runActivitycast(["inspect"], redis: r.server, settings: ["prefix": r.settings.prefix])
        let top = text.split(separator: "\n").prefix(6).joined(separator: "\n")
        #expect(top.contains("APNS UNUSABLE: 1 worker endpoint") && top.contains("connection refused"), "\(top)")
        // The first log line says why in words.
        let first = jsonLogLines(w.stderr).first { $0["msg"] == "cannot connect to APNs; retrying" }
        #expect(first?["error"]?.contains("Connection refused") == true, "\(String(describing: first))")
        // APNs back: the line goes.
        let back = try await endOutage(r, refusing) { true }
        // APNs works again: the key's next events reach the device.
        var home = 1
        #expect(await eventually(timeout: .seconds(60)) {
            home += 1
            try? await score(back, "un1", home, 0, ts: now())
            try? await Task.sleep(for: .milliseconds(200))
            return (state(try? await back.device(token("5a")))["homeScore"] as? Int ?? 0) >= 1
        })
        #expect(try await eventually(timeout: .seconds(20)) { try await report().apnsUnusable.isEmpty })
        #expect(await w.stop() == 0)
    }
}
