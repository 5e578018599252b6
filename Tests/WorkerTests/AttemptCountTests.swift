import ActivityCastCore
import ActivityCastSend
import RedisClient
import Testing
import TestSupport
@testable import ActivityCastWorker

/// A delivery's attempt, counted on a real Redis: once per delivery however often the count is
/// sent (its reply lost with the connection, then sent again), given back on an outage, and
/// cleared with the entry.
@Suite struct AttemptCountTests {
    @Test func aDeliveryCountsOnceHoweverOftenItsCountIsSent() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let keys = RedisKeys(prefix: "t")
        let errors = keys.errors("feed"), ids = ["1-0", "2-0"]
        func count(_ delivery: String, _ ids: [String] = ids) async throws -> [String: Int64] {
            try AttemptScripts.counts(try await redis.send(AttemptScripts.count(errors, delivery: delivery, ids: ids)), ids: ids)
        }
        #expect(try await count("d1") == ["1-0": 1, "2-0": 1])
        // The same delivery's count again (its reply was lost): nothing more.
        #expect(try await count("d1") == ["1-0": 1, "2-0": 1])
        // The next delivery counts; one of a single entry counts for it alone.
        #expect(try await count("d2") == ["1-0": 2, "2-0": 2])
        #expect(try await count("d3", ["2-0"]) == ["2-0": 3])
        #expect(try await count("d3", ["2-0"]) == ["2-0": 3])
        // Given back (an outage), then the entry's next delivery counts from there.
        _ = try await redis.send(AttemptScripts.refund(errors, "2-0"))
        #expect(try await count("d4", ["2-0"]) == ["2-0": 3])
        #expect(try await redis.send(RedisCommand("TTL", errors)).int ?? 0 > 86_400)

        // Acknowledged: every field of the entry goes.
        _ = try await redis.pipeline(Acknowledgement.failures(keys, stream: "feed", [("1-0", "boom")]))
        let ack = Acknowledgement(stream: "feed", group: "g", ids: ["1-0"], keys: keys)
        _ = try await redis.pipeline([RedisCommand("XGROUP", "CREATE", "feed", "g", "$", "MKSTREAM")] + ack.commands)
        let left = try await redis.send(RedisCommand("HKEYS", errors)).array?.compactMap(\.string).sorted()
        #expect(left == ["2-0#c", "2-0#n"], "\(left ?? [])")
    }
}
