import ActivityCastCore
import ActivityCastSettings
@testable import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// Stream trimming: the trim script against a pure model of what it may remove, on a real Redis,
/// over generated sequences of adds, group reads, acknowledgements and trims.
@Suite struct StreamTrimTests {
    /// What the script must leave: with one entry per stream node (`stream-node-max-entries 1`),
    /// `XTRIM MINID ~` removes exactly the entries below the cut, so the model is exact.
    struct Model {
        struct Group { var lastDelivered = 0; var pending: Set<Int> = [] }
        /// Entry ids' milliseconds (sequence 0), oldest first.
        var ids: [Int] = []
        var groups: [String: Group] = [:]

        /// The ids left after a trim at `now`, and how many went.
        mutating func trim(now: Int, retention: StreamRetention) -> Int {
            guard ids.count > retention.entries, !groups.isEmpty else { return 0 }
            var cut = groups.values.map { min($0.lastDelivered, $0.pending.min() ?? Int.max) }.min()!
            cut = min(cut, max(0, now - Int(retention.millis)))
            let below = ids.prefix { $0 < cut }.count
            let n = min(below, ids.count - retention.entries)
            ids.removeFirst(n)
            return n
        }
    }

    @Test func theScriptRemovesExactlyWhatEveryGroupAcknowledgedOutsideTheRetention() async throws {
        let server = try await RedisServer(extraArguments: ["--stream-node-max-entries", "1"])
        let redis = server.connection()
        defer { redis.close() }
        var rng = SplitMix64(seed: UInt64.random(in: 1...UInt64.max))
        let seed = rng.state
        for round in 0..<6 {
            let stream = "s\(round)"
            var model = Model()
            var clock = 1000
            var trims = 0, removedTotal = 0, keptByPending = 0
            let groupNames = round % 3 == 0 ? ["g"] : ["g", "h"]
            for g in groupNames {
                _ = try await redis.send(RedisCommand("XGROUP", "CREATE", stream, g, "0", "MKSTREAM"))
                model.groups[g] = Model.Group()
            }
            for _ in 0..<400 {
                switch rng.next() % 10 {
                case 0...3:
                    for _ in 0..<Int(rng.next() % 5 + 1) {
                        clock += Int(rng.next() % 50 + 1)
                        _ = try await redis.send(RedisCommand("XADD", stream, "\(clock)-0", "f", "v"))
                        model.ids.append(clock)
                    }
                case 4, 5:
                    let g = groupNames[Int(rng.next() % UInt64(groupNames.count))]
                    let reply = try await redis.send(.xreadgroup(group: g, consumer: "c", count: Int(rng.next() % 8 + 1), block: nil,
                                                                 streams: [(stream, ">")]))
                    for read in try StreamReplies.read(reply) {
                        for e in read.entries {
                            let ms = Int(e.id.split(separator: "-")[0])!
                            model.groups[g]!.pending.insert(ms)
                            model.groups[g]!.lastDelivered = ms
                        }
                    }
                case 6, 7:
                    // Acknowledge most of what a group has pending, leaving some behind for a while.
                    let g = groupNames[Int(rng.next() % UInt64(groupNames.count))]
                    let done = model.groups[g]!.pending.filter { _ in rng.next() % 4 != 0 }
                    if !done.isEmpty {
                        _ = try await redis.send(.xack(stream: stream, group: g, ids: done.map { "\($0)-0" }))
                        model.groups[g]!.pending.subtract(done)
                    }
                default:
                    let retention = StreamRetention(millis: Int64(rng.next() % 3 == 0 ? 0 : rng.next() % 400),
                                                    entries: rng.next() % 3 == 0 ? 0 : Int(rng.next() % 30))
                    let now = clock + Int(rng.next() % 100)
                    let oldestPending = model.groups.values.compactMap { $0.pending.min() }.min()
                    let expected = model.trim(now: now, retention: retention)
                    let reply = try await redis.send(TrimScripts.command(stream: stream, retention: retention, nowMillis: Int64(now)))
                    let parts = try #require(reply.array, "\(reply)")
                    #expect(Int(parts[0].int ?? -1) == expected, "seed \(seed) round \(round)")
                    let left = try await redis.send(RedisCommand("XRANGE", stream, "-", "+")).array ?? []
                    let ids = left.compactMap { $0.array?.first?.string.flatMap { Int($0.split(separator: "-")[0]) } }
                    #expect(ids == model.ids, "seed \(seed) round \(round): Redis kept \(ids.count), the model \(model.ids.count)")
                    if ids != model.ids { return }
                    if let p = oldestPending, model.ids.first == p { keptByPending += 1 }
                    trims += 1
                    removedTotal += expected
                }
            }
            // The sequences reached the interesting cases: trims that removed, and a pending entry
            // holding the cut.
            #expect(trims > 10 && removedTotal > 50, "seed \(seed): \(trims) trims removed \(removedTotal)")
            #expect(keptByPending > 0 || round % 3 != 0, "seed \(seed): no trim stopped at a pending entry")
        }
    }

    /// With Redis's usual stream nodes (100 entries), trimming only ever removes whole nodes: less
    /// than the model may, never an entry the model keeps.
    @Test func withWholeNodesItNeverRemovesMoreThanAllowed() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        _ = try await redis.send(RedisCommand("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"))
        var model = Model()
        model.groups["g"] = Model.Group()
        for i in 1...1000 {
            _ = try await redis.send(RedisCommand("XADD", "s", "\(i)-0", "f", "v"))
            model.ids.append(i)
        }
        _ = try await redis.send(.xreadgroup(group: "g", consumer: "c", count: 700, block: nil, streams: [("s", ">")]))
        // 1…700 delivered; all acknowledged but 450.
        _ = try await redis.send(.xack(stream: "s", group: "g", ids: (1...700).filter { $0 != 450 }.map { "\($0)-0" }))
        model.groups["g"] = Model.Group(lastDelivered: 700, pending: [450])
        let retention = StreamRetention(millis: 0, entries: 0)
        let allowed = model.trim(now: 2000, retention: retention)
        #expect(allowed == 449)
        let reply = try await redis.send(TrimScripts.command(stream: "s", retention: retention, nowMillis: 2000))
        let removed = Int(reply.array?.first?.int ?? -1)
        #expect(removed > 0 && removed <= allowed, "removed \(removed), allowed \(allowed)")
        let first = try await redis.send(RedisCommand("XRANGE", "s", "-", "+", "COUNT", 1)).array?.first?.array?.first?.string
        #expect(first.flatMap { Int($0.split(separator: "-")[0]) }.map { $0 <= 450 } == true, "the pending entry 450 must stay: first is \(first ?? "-")")
        // A stream no group reads is left alone.
        _ = try await redis.send(RedisCommand("XADD", "lonely", "1-0", "f", "v"))
        let lonely = try await redis.send(TrimScripts.command(stream: "lonely", retention: retention, nowMillis: 2000))
        #expect(lonely.array?.first?.int == 0)
    }
}
