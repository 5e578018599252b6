import ActivityCastSend
import Foundation
import RedisClient
import Testing
import TestSupport

/// Records of acknowledged entries go together, by the next sweep, on a real Redis: every one
/// whatever its slot, none lost while Redis is away, and no more kept than the limit.
@Suite struct RecordSweepTests {
    @Test func aSweepDeletesEveryRecordAndKeepsThemWhileRedisIsAway() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let names = (0..<40).map { "ac:{match:\($0)}:fan:s/\($0)-0" }
        _ = try await redis.pipeline(names.map { RedisCommand("HSET", $0, "left", 0, "b", 1) })
        let sweep = RecordSweep()
        sweep.add(Array(names.prefix(30)))
        #expect(sweep.count == 30)
        #expect(await sweep.sweep(redis) == 30)
        #expect(sweep.count == 0)
        let left = try await redis.pipeline(names.map { RedisCommand("EXISTS", $0) }).map { $0.int ?? -1 }
        #expect(left == Array(repeating: 0, count: 30) + Array(repeating: 1, count: 10))
        // Nothing pending: no round trip.
        #expect(await sweep.sweep(redis) == 0)

        // Redis away: the records wait for the next sweep, which finds Redis back.
        sweep.add(Array(names.suffix(10)))
        await server.stop()
        #expect(await sweep.sweep(redis) == 0)
        #expect(sweep.count == 10)
        try await server.start()
        var swept = 0
        #expect(await eventually(timeout: .seconds(10)) {
            swept += await sweep.sweep(redis)
            return sweep.count == 0
        })
        #expect(swept == 10)
    }

    /// An `UNLINK` answered with an error (here NOPERM: a user without it) deletes nothing: its
    /// record waits for the next sweep, which a connection allowed to delete finishes.
    @Test func recordsAnsweredWithAnErrorWaitForTheNextSweep() async throws {
        let server = try await RedisServer()
        let admin = server.connection()
        defer { admin.close() }
        _ = try await admin.send(RedisCommand("ACL", "SETUSER", "nounlink", "on", ">pw", "~*", "+@all", "-unlink"))
        let names = ["ac:{match:1}:fan:s/1-0", "ac:{match:2}:fan:s/2-0"]
        _ = try await admin.pipeline(names.map { RedisCommand("HSET", $0, "left", 0) })
        let refused = RedisConnection(configuration: RedisConfiguration(url: try RedisURL(server.urlString.replacingOccurrences(of: "redis://", with: "redis://nounlink:pw@")),
                                                                        connectTimeout: .seconds(2), commandTimeout: .seconds(5)))
        defer { refused.close() }
        let sweep = RecordSweep()
        sweep.add(names)
        #expect(await sweep.sweep(refused) == 0)
        #expect(sweep.count == 2)
        #expect(try await admin.pipeline(names.map { RedisCommand("EXISTS", $0) }).map(\.int) == [1, 1])
        #expect(await sweep.sweep(admin) == 2)
        #expect(sweep.count == 0)
        #expect(try await admin.pipeline(names.map { RedisCommand("EXISTS", $0) }).map(\.int) == [0, 0])
    }

    @Test func noMoreThanTheLimitWaitsAndTheRestIsCounted() {
        let sweep = RecordSweep(limit: 5)
        sweep.add(["a", "b", "c"])
        sweep.add(["d", "e", "f", "g"])
        #expect(sweep.count == 5)
        #expect(sweep.dropped == 2)
    }
}
