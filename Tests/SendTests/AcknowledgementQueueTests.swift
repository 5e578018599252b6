import ActivityCastCore
import ActivityCastSend
import Foundation
import RedisClient
import Testing
import TestSupport

/// Acknowledgements queued within the delay share one round trip on a real Redis, each batch
/// reads its own replies (an error reply stays its batch's), and a failed pipeline fails every
/// batch in it, so each is done again.
@Suite struct AcknowledgementQueueTests {
    /// 20 batches of a stream's entries, settled side by side: one round trip, every entry
    /// acknowledged, each batch told its own count.
    @Test func batchesSettledTogetherShareOneRoundTrip() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let keys = RedisKeys(prefix: "ac")
        _ = try await redis.send(RedisCommand("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"))
        let ids = try await redis.pipeline((0..<40).map { RedisCommand("XADD", "s", "*", "n", $0) }).map { $0.string ?? "" }
        _ = try await redis.send(RedisCommand("XREADGROUP", "GROUP", "g", "c", "COUNT", 100, "STREAMS", "s", ">"))
        let queue = AcknowledgementQueue(redis, delay: .milliseconds(100))
        let before = redis.stats.roundTrips
        let counts = await withTaskGroup(of: (Int, Int?).self) { group in
            for batch in 0..<20 {
                group.addTask {
                    let ack = Acknowledgement(stream: "s", group: "g", ids: Array(ids[batch * 2..<batch * 2 + 2]), keys: keys)
                    guard case .success(let n)? = try? await ack.run(redis, queue: queue) else { return (batch, nil) }
                    return (batch, n)
                }
            }
            return await group.reduce(into: [Int: Int?]()) { $0[$1.0] = $1.1 }
        }
        #expect(redis.stats.roundTrips - before == 1, "one round trip for the 20 batches")
        #expect((0..<20).map { counts[$0] ?? nil } == Array(repeating: 2, count: 20))
        #expect(try await redis.send(RedisCommand("XPENDING", "s", "g")).array?.first?.int == 0)
    }

    /// Each batch gets its own replies, an error reply included; with Redis away every batch of
    /// the pipeline fails (and is done again by its caller); with no delay nothing waits.
    @Test func eachBatchReadsItsOwnRepliesAndAFailedPipelineFailsThemAll() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        _ = try await redis.send(RedisCommand("SET", "text", "x"))
        let queue = AcknowledgementQueue(redis, delay: .milliseconds(100))
        let replies = await withTaskGroup(of: (Int, [RESPValue]?).self) { group in
            for batch in 0..<10 {
                group.addTask {
                    let commands = batch == 7 ? [RedisCommand("INCR", "text")] : (0...batch).map { _ in RedisCommand("INCR", "n\(batch)") }
                    return (batch, try? await queue.pipeline(commands))
                }
            }
            return await group.reduce(into: [Int: [RESPValue]?]()) { $0[$1.0] = $1.1 }
        }
        for batch in 0..<10 {
            guard let mine = replies[batch] ?? nil else { Issue.record("batch \(batch) failed"); continue }
            if batch == 7 {
                #expect(mine.count == 1 && mine[0].errorMessage != nil)
            } else {
                #expect(mine.map(\.int) == (1...batch + 1).map { Int64($0) }, "batch \(batch)")
            }
        }

        await server.stop()
        let failed = await withTaskGroup(of: Bool.self) { group in
            for batch in 0..<5 {
                group.addTask { (try? await queue.pipeline([RedisCommand("INCR", "n\(batch)")])) == nil }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(failed == 5)

        try await server.start()
        let direct = AcknowledgementQueue(redis, delay: .zero)
        #expect(await eventually(timeout: .seconds(10)) { (try? await direct.pipeline([RedisCommand("PING")]))?.first?.string == "PONG" })
    }
}
