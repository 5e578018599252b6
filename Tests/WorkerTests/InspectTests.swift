import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// `Inspector` against a real Redis holding what a long-running deployment accumulates: old
/// entries, keys of the wrong type, hostile text, counters.
@Suite struct InspectTests {
    @Test func oldestPendingAgeIsTheTimeSinceDeliveryNotTheIDsTime() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let stream = settings.feeds[0].stream
        // Ids from January 1970: the id's time says these entries are 55 years old.
        for ms in [1_000_000, 2_000_000, 3_000_000] {
            try await redis.command("XADD", stream, "\(ms)-0", "type", "match.started", "ts", "1", "match", "1")
        }
        try await redis.ensureGroup(stream: stream, group: settings.group)
        _ = try await redis.readGroup(group: settings.group, consumer: "first", count: 1, block: nil, streams: [(stream, ">")])
        try await Task.sleep(for: .milliseconds(400))
        _ = try await redis.readGroup(group: settings.group, consumer: "second", count: 10, block: nil, streams: [(stream, ">")])

        let report = try await Inspector(settings: settings, redis: redis).report()
        let group = try #require(report.streams.first { $0.name == stream }?.groups.first)
        #expect(group.pending == 3)
        #expect(group.oldestPendingID == "1000000-0")
        // The longest wait since delivery: the first entry's, delivered ~400 ms before the others.
        let age = try #require(group.oldestPendingAgeMillis)
        #expect(age >= 400 && age < 60_000, "oldest pending age \(age) ms")
    }
}
