import ActivityCastCore
import ActivityCastSend
import Foundation
import RedisClient
import Testing
import TestSupport

/// Slices: the pure maths, and the step script on a real Redis — the slices of a hash partition
/// it exactly, progress survives a worker that stops mid-batch, and a newer fan-out supersedes.
@Suite struct SliceTests {
    @Test func sliceCountsArePowersOfTwoAndRangesTileTheScanOrder() {
        #expect(SliceMath.count(tokens: 0, sliceSize: 4096) == 1)
        #expect(SliceMath.count(tokens: 4096, sliceSize: 4096) == 1)
        #expect(SliceMath.count(tokens: 4097, sliceSize: 4096) == 2)
        #expect(SliceMath.count(tokens: 1_000_000, sliceSize: 4096) == 256)
        #expect(SliceMath.count(tokens: Int.max / 2, sliceSize: 1) == SliceMath.maxSlices)
        for n in [1, 2, 8, 256] {
            var next: UInt64 = 0
            for j in 0..<n {
                let (lo, hi) = SliceMath.bounds(index: j, count: n)
                #expect(lo == next)
                next = hi
            }
            #expect(next == SliceMath.space)
        }
        // Reversed bits: cursor 1 is the middle of the order, 2 a quarter, 3 three quarters.
        #expect(SliceMath.place(cursor: 0) == 0)
        #expect(SliceMath.place(cursor: 1) == 1 << 31)
        #expect(SliceMath.place(cursor: 2) == 1 << 30)
        #expect(SliceMath.place(cursor: 3) == (1 << 31) + (1 << 30))
    }

    @Test func registrationMetaIsReadFromItsBytes() {
        func meta(_ s: String) -> RegistrationMeta? { RegistrationMeta(Array(s.utf8)) }
        #expect(meta("1700000000000 d-1 development standard 1") == RegistrationMeta(Array("1700000000000 d-1 development standard 1".utf8)))
        let m = meta("1700000000000 d-1 development standard 1")
        #expect(m?.millis == 1_700_000_000_000 && m?.device == "d-1" && m?.env == .development && m?.broadcast == true)
        let n = meta("5 d-2 - frequent -")
        #expect(n?.millis == 5 && n?.env == nil && n?.broadcast == nil)
        #expect(meta("5 d-3 production standard 0")?.env == .production)
        #expect(meta("5 d-3 production standard 0")?.broadcast == false)
        #expect(meta("5 d-3 staging standard 0")?.env == nil, "an unknown environment leaves it to the device")
        #expect(meta("x d-3 production standard 0")?.millis == nil)
        #expect(meta("99999999999999999999 d production standard 0")?.millis == nil, "too long to be a time")
        #expect(meta("5 d-3 production standard 0 abc123")?.token == "abc123")
        #expect(meta("5 d-3 production standard 0")?.token == nil, "written before meta kept the token")
        #expect(meta("1700000000000 -") == nil, "a tombstone")
        #expect(meta("") == nil)
    }

    /// The in-place reader agrees with reading the value as fields split at every space, on
    /// generated values (empty fields, extra fields, trailing spaces, odd times included).
    @Test func registrationMetaAgreesWithASplitAtEverySpace() {
        func reference(_ s: String) -> RegistrationMeta? {
            let f = s.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            guard f.count >= 5 else { return nil }
            var m = RegistrationMeta(Array("0 d - - -".utf8))!
            let digits = f[0].utf8.count
            m.millis = !f[0].isEmpty && digits <= 18 && f[0].utf8.allSatisfy { $0 >= 48 && $0 <= 57 } ? Int64(f[0]) : nil
            m.device = f[1]
            m.env = APNsEnvironment(rawValue: f[2])
            m.tier = f[3] == "frequent" ? .frequent : f[3] == "standard" ? .standard : nil
            m.broadcast = f[4] == "1" ? true : f[4] == "0" ? false : nil
            m.token = f.count > 5 && !f[5].isEmpty ? f[5] : nil
            return m
        }
        var rng = SplitMix64(seed: 21)
        let pieces = ["", "-", "0", "1", "17", "1700000000000", "99999999999999999999", "d-1", "development", "production", "staging",
                      "standard", "frequent", "abc123", "x"]
        for _ in 0..<5_000 {
            let n = Int.random(in: 0...8, using: &rng)
            let value = (0..<n).map { _ in pieces.randomElement(using: &rng)! }.joined(separator: " ")
            #expect(RegistrationMeta(Array(value.utf8)) == reference(value), "\(value)")
        }
    }

    @Test func sliceEntriesRoundTripAndBadOnesAreRefused() {
        for priority in [10, 5] {
            let ref = SliceRef(key: ActivityKey(parsing: "match:1")!, gen: "ac:feed:sports/1-0", index: 3, count: 8, priority: priority)
            #expect(SliceRef(fields: ref.fields.map { Array($0.utf8) }) == ref)
        }
        // An entry queued before slices had a priority is one of the priority-10 stream.
        #expect(SliceRef(fields: ["key", "match:1", "gen", "g", "slice", "0", "of", "1"].map { Array($0.utf8) })?.priority == 10)
        let keys = RedisKeys(prefix: "ac")
        #expect(keys.sliceStreams == ["ac:slices", "ac:slices:5"] && keys.slices(priority: 10) == keys.slices)
        #expect(SliceRef(fields: ["key", "match:1", "gen", "g", "slice", "8", "of", "8"].map { Array($0.utf8) }) == nil)
        #expect(SliceRef(fields: ["key", "match:1", "gen", "", "slice", "0", "of", "1"].map { Array($0.utf8) }) == nil)
        #expect(SliceRef(fields: ["key", "nonsense", "gen", "g", "slice", "0", "of", "1"].map { Array($0.utf8) }) == nil)
    }

    struct Fixture {
        let redis: RedisConnection
        let key = ActivityKey(parsing: "match:9")!
        var tokens: String { "ac:{match:9}:tokens" }
        var meta: String { "ac:{match:9}:meta" }
        var gen: String { "ac:{match:9}:gen" }
        func fan(_ g: String) -> String { "ac:{match:9}:fan:\(g)" }
        var inflight: String { "ac:{match:9}:inflight" }

        func fill(_ range: Range<Int>, prefix: String = "a") async throws {
            var start = range.lowerBound
            while start < range.upperBound {
                let end = min(range.upperBound, start + 1000)
                var args: [any RedisArgument] = [tokens]
                var metaArgs: [any RedisArgument] = [meta]
                for i in start..<end {
                    args += ["\(prefix)\(i)", "tok\(i)"]
                    metaArgs += ["\(prefix)\(i)", "1 d\(i) development standard 0 tok\(i)"]
                }
                _ = try await redis.pipeline([RedisCommand("HSET", args), RedisCommand("HSET", metaArgs)])
                start = end
            }
        }

        /// Creates a fan-out; returns its slice count.
        func create(_ g: String, millis: Int64, sliceSize: Int) async throws -> Int {
            let reply = try await redis.send(.script(FanoutScripts.create, keys: [gen, fan(g), meta], args: [
                g, millis, sliceSize, SliceMath.maxSlices, 3600, "{}", 10, "", "s", "1-0",
            ]))
            let parts = reply.array ?? []
            #expect(parts.first?.string == "new", "\(reply)")
            return Int(parts.count > 1 ? parts[1].int ?? 0 : 0)
        }

        struct Step {
            var status: String
            var left: Int
            var confirm: String
            var resent: Bool
            var width: Int64
            var activities: [String]
        }

        func step(_ g: String, _ j: Int, of n: Int, want: Int = 100, confirm: String = "", now: Int64 = 1_000_000, lease: Int = 1000,
                  width: Int64 = 0) async throws -> Step {
            let reply = try await redis.send(.script(FanoutScripts.step, keys: [gen, fan(g), inflight, meta], args: [
                g, j, n, want, now, lease, confirm, 3600, width,
            ]))
            let p = reply.array ?? []
            #expect(p.count >= 2, "\(reply)")
            var acts: [String] = []
            for chunk in (p.count > 5 ? p[5].array ?? [] : []) {
                let pairs = chunk.array ?? []
                var i = 0
                while i + 1 < pairs.count { acts.append(pairs[i].string ?? ""); i += 2 }
            }
            return Step(status: p.first?.string ?? "?", left: Int(p[1].int ?? 0), confirm: p.count > 2 ? p[2].string ?? "" : "",
                        resent: p.count > 3 && (p[3].int ?? 0) > 0, width: p.count > 4 ? p[4].int ?? 0 : 0, activities: acts)
        }

        /// Runs slice j to its end; returns every activity handed out.
        func drain(_ g: String, _ j: Int, of n: Int, want: Int = 100, between: (() async throws -> Void)? = nil) async throws -> [String] {
            var confirm = ""
            var width: Int64 = 0
            var out: [String] = []
            while true {
                let s = try await step(g, j, of: n, want: want, confirm: confirm, width: width)
                switch s.status {
                case "send":
                    out += s.activities
                    confirm = s.confirm
                    width = s.width
                    try await between?()
                case "finished", "done", "superseded", "gone": return out
                default:
                    Issue.record("unexpected step \(s.status)")
                    return out
                }
            }
        }
    }

    /// Hashes of many sizes cut into 1…64 slices: every token handed out exactly once, also
    /// small hashes (listpack-encoded, one slice) and a hash that grows while it is sent (every
    /// token present throughout is handed out; SCAN may repeat none here as the table only grows).
    @Test func slicesPartitionTheAudienceExactly() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        for (size, sliceSize) in [(10, 16), (100, 16), (5000, 16), (20_000, 1000), (20_000, 300), (60_000, 2000)] {
            _ = try await redis.send(RedisCommand("FLUSHALL"))
            try await f.fill(0..<size)
            let g = "g\(size)-\(sliceSize)"
            let n = try await f.create(g, millis: 1, sliceSize: sliceSize)
            if size <= 100 { #expect(n == 1, "a small (listpack) hash is one slice") } else { #expect(n == SliceMath.count(tokens: size, sliceSize: sliceSize)) }
            var seen: [String: Int] = [:]
            var perSlice: [Int] = []
            for j in 0..<n {
                let got = try await f.drain(g, j, of: n, want: 97)
                perSlice.append(got.count)
                for a in got { seen[a, default: 0] += 1 }
            }
            #expect(seen.count == size, "size \(size) slices \(n): \(size - seen.count) never handed out")
            #expect(seen.values.allSatisfy { $0 == 1 }, "size \(size) slices \(n): \(seen.values.filter { $0 > 1 }.count) handed out twice")
            if n > 1 {
                // Slices are about even: none more than twice the mean.
                #expect(perSlice.max()! <= 2 * size / n + 64, "\(perSlice)")
            }
            #expect(try await redis.send(RedisCommand("HGET", f.fan(g), "left")).string == "0")
        }

        // Sparse: 3,500 registrations left of 20,000 (Redis shrinks a hash table only below 10 %
        // full), so a call's COUNT can take it over 10·COUNT buckets (up to 20·COUNT+1): a bound
        // of 10·COUNT ran past slices' ends here and handed tokens out twice.
        _ = try await redis.send(RedisCommand("FLUSHALL"))
        try await f.fill(0..<20_000)
        for first in stride(from: 0, to: 16_500, by: 500) {
            let gone = (first..<first + 500).map { "a\($0)" }
            _ = try await redis.pipeline([RedisCommand("HDEL", [f.tokens] + gone), RedisCommand("HDEL", [f.meta] + gone)])
        }
        #expect(try await redis.send(RedisCommand("OBJECT", "ENCODING", f.meta)).string == "hashtable")
        for (sliceSize, want) in [(300, 97), (300, 31), (1000, 200)] {
            let g = "sparse-\(sliceSize)-\(want)"
            let n = try await f.create(g, millis: 1, sliceSize: sliceSize)
            var seen: [String: Int] = [:]
            for j in 0..<n { for a in try await f.drain(g, j, of: n, want: want) { seen[a, default: 0] += 1 } }
            #expect(seen.count == 3_500, "sparse, slices \(n), want \(want): \(3_500 - seen.count) never handed out")
            #expect(seen.values.allSatisfy { $0 == 1 }, "sparse, slices \(n), want \(want): \(seen.values.filter { $0 > 1 }.count) handed out twice")
        }

        // Growing while it is being sent: registrations arriving between batches.
        _ = try await redis.send(RedisCommand("FLUSHALL"))
        try await f.fill(0..<30_000)
        let n = try await f.create("grow", millis: 1, sliceSize: 1000)
        var seen = Set<String>()
        var added = 0
        for j in 0..<n {
            for a in try await f.drain("grow", j, of: n, want: 200, between: {
                try await f.fill(30_000 + added..<30_000 + added + 50, prefix: "b")
                added += 50
            }) { seen.insert(a) }
        }
        let missing = (0..<30_000).filter { !seen.contains("a\($0)") }.count
        #expect(missing == 0, "\(missing) tokens present throughout were never handed out")
    }

    /// A worker that stops with a batch in flight: while its lease lasts the slice is busy for
    /// others; then the batch is handed out again, marked as re-sent; a confirmed batch never is.
    @Test func aBatchInFlightIsTakenOverAfterItsLeaseAndNothingConfirmedIsRepeated() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        try await f.fill(0..<3000)
        let n = try await f.create("g", millis: 1, sliceSize: 1000)
        #expect(n == 4)
        let first = try await f.step("g", 1, of: n, now: 1_000_000)
        #expect(first.status == "send" && !first.resent)
        let second = try await f.step("g", 1, of: n, confirm: first.confirm, now: 1_000_010)
        #expect(second.status == "send")
        #expect(Set(first.activities).isDisjoint(with: second.activities))
        // The second batch's worker dies. Within the lease: busy.
        #expect(try await f.step("g", 1, of: n, now: 1_000_500).status == "busy")
        // After it: the same batch again, marked re-sent.
        let again = try await f.step("g", 1, of: n, now: 1_002_000)
        #expect(again.status == "send" && again.resent)
        #expect(again.activities == second.activities)
        // A stale confirm (the dead worker's) changes nothing; the new owner's goes on.
        var confirm = again.confirm
        var rest: [String] = []
        while true {
            let s = try await f.step("g", 1, of: n, confirm: confirm, now: 1_003_000)
            if s.status != "send" { #expect(s.status == "finished"); break }
            #expect(!s.resent)
            rest += s.activities
            confirm = s.confirm
        }
        #expect(Set(rest).isDisjoint(with: first.activities + second.activities))
    }

    /// A newer fan-out of the key: the older one's slices end as superseded at their next step,
    /// and the newer one's batches wait while an older batch is in flight.
    @Test func aNewerFanoutSupersedesAndWaitsForTheOlderBatchInFlight() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        try await f.fill(0..<3000)
        let n = try await f.create("old", millis: 1000, sliceSize: 1000)
        let inFlight = try await f.step("old", 0, of: n, now: 1_000_000)
        #expect(inFlight.status == "send")
        let m = try await f.create("new", millis: 2000, sliceSize: 1000)
        // An older event after it is refused.
        let older = try await redis.send(.script(FanoutScripts.create, keys: [f.gen, f.fan("older"), f.meta], args: [
            "older", 1500, 1000, SliceMath.maxSlices, 3600, "{}", 10, "", "s", "2-0",
        ]))
        #expect(older.array?.first?.string == "older")
        // The new fan-out waits while the old batch is in flight …
        #expect(try await f.step("new", 0, of: m, now: 1_000_100).status == "wait")
        // … the old slice's next step: superseded, and so are the others, without sending.
        let next = try await f.step("old", 0, of: n, confirm: inFlight.confirm, now: 1_000_200)
        #expect(next.status == "superseded")
        for j in 1..<n { #expect(try await f.step("old", j, of: n, now: 1_000_300).status == "superseded") }
        #expect(try await redis.send(RedisCommand("HGET", f.fan("old"), "left")).string == "0")
        // Now the new one goes.
        var total = 0
        for j in 0..<m { total += try await f.drain("new", j, of: m).count }
        #expect(total == 3000)
    }

    /// Redis restarted (from its AOF) in the middle of a fan-out: it seeds its hash function anew,
    /// so the scan order, and what each slice's recorded progress means, is another one. The first
    /// step after the restart starts every slice again (`relaid`, batches marked re-sent): every
    /// token is handed out after the restart, and the fan-out still ends (left 0).
    @Test func aRedisRestartStartsEverySliceAgain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await RedisServer(extraArguments: ["--appendonly", "yes", "--appendfsync", "always", "--dir", dir.path])
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        try await f.fill(0..<20_000)
        let n = try await f.create("g", millis: 1, sliceSize: 1000)
        #expect(n == 32)
        // Half the slices done, one with a batch in flight.
        for j in 0..<(n / 2) { _ = try await f.drain("g", j, of: n) }
        #expect(try await f.step("g", n / 2, of: n).status == "send")

        await server.crash()
        try await server.start()
        #expect(await eventually { (try? await redis.send(RedisCommand("PING"))) != nil })

        let first = try await f.step("g", 3, of: n)
        #expect(first.status == "relaid" && first.left == n)
        #expect(try await f.step("g", 3, of: n).status == "send")  // relaid once, not at every step
        var seen = Set<String>()
        for j in 0..<n {
            var confirm = ""
            while true {
                let s = try await f.step("g", j, of: n, confirm: confirm, now: 1_010_000)
                guard s.status == "send" else {
                    #expect(s.status == "finished")
                    break
                }
                #expect(s.resent)
                seen.formUnion(s.activities)
                confirm = s.confirm
            }
        }
        #expect(seen.count == 20_000, "\(20_000 - seen.count) tokens not handed out after the restart")
        #expect(try await redis.send(RedisCommand("HGET", f.fan("g"), "left")).string == "0")
        // Over: another step (a late delivery) starts nothing again.
        #expect(try await f.step("g", 0, of: n).status == "done")
    }

    /// The older fan-out's entry, claimed again after the newer one began, is stale; when it still
    /// brought a value it goes out again at the newest time — but its own fan-out record exists,
    /// so it starts nothing: the newer fan-out stays the key's, and the old record isn't reused.
    @Test func aSupersededFanoutIsNeverStartedAgain() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        try await f.fill(0..<3000)
        let n = try await f.create("old", millis: 1000, sliceSize: 1000)
        _ = try await f.drain("old", 0, of: n)
        _ = try await f.create("new", millis: 2000, sliceSize: 1000)
        let again = try await redis.send(.script(FanoutScripts.create, keys: [f.gen, f.fan("old"), f.meta], args: [
            "old", 2000, 1000, SliceMath.maxSlices, 3600, "{}", 10, "", "s", "1-0",
        ]))
        #expect(again.array?.first?.string == "older", "\(again)")
        #expect(try await redis.send(RedisCommand("HGET", f.gen, "name")).string == "new")
        var total = 0
        for j in 0..<n { total += try await f.drain("new", j, of: n).count }
        #expect(total == 3000)
    }
}

extension SliceTests {
    /// A superseded fan-out whose slice has another worker's batch in flight (its stream entry
    /// claimed again while that worker is still sending): the step must not drop that worker's
    /// lease, or the newer fan-out goes out while the older batch is still being sent, and a
    /// device gets the older state after the newer one.
    @Test func aSupersededSliceKeepsAnotherWorkersBatchInFlightUntilItsLeaseEnds() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        try await f.fill(0..<3000)
        let n = try await f.create("old", millis: 1000, sliceSize: 1000)
        // Worker A takes a batch of the old fan-out's slice 1 (lease until 1_010_000).
        let a = try await f.step("old", 1, of: n, now: 1_000_000, lease: 10_000)
        #expect(a.status == "send")
        let m = try await f.create("new", millis: 2000, sliceSize: 1000)
        // Worker B claims the same slice again while A is still sending.
        let b = try await f.step("old", 1, of: n, now: 1_001_000, lease: 10_000)
        #expect(b.status != "send")
        // A's batch is still in flight: the newer fan-out waits for it.
        let newer = try await f.step("new", 0, of: m, now: 1_002_000, lease: 10_000)
        #expect(newer.status == "wait", "the newer fan-out went out while an older batch was in flight: \(newer.status)")
        // A confirms: its slice ends as superseded, and the newer fan-out goes on.
        let done = try await f.step("old", 1, of: n, confirm: a.confirm, now: 1_003_000, lease: 10_000)
        #expect(done.status == "superseded" || done.status == "done")
        #expect(try await f.step("new", 0, of: m, now: 1_004_000, lease: 10_000).status == "send")
    }
}

extension SliceTests {
    /// A batch lost in flight is taken over exactly: the same range and the same tokens, whatever
    /// the batch size and scan width of the worker that takes it over. All of it may have reached
    /// APNs, so all of it goes as re-sent (without its alert) and nothing else does: a takeover
    /// that re-scanned with its own batch size sent the rest of the lost batch again in its next
    /// batch as new (its alert shown twice, the duplicates not counted), or new tokens as re-sent
    /// (their alert never shown).
    @Test func aTakeoverHandsOutExactlyTheLostBatchWhateverItsBatchSize() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let f = Fixture(redis: redis)
        try await f.fill(0..<3000)
        let n = try await f.create("g", millis: 1, sliceSize: 1000)
        // Worker A: a first batch, then a wide one (the width its first step saw), lost in flight.
        let first = try await f.step("g", 1, of: n, want: 50, now: 1_000_000)
        let lost = try await f.step("g", 1, of: n, want: 200, confirm: first.confirm, now: 1_000_010, width: first.width)
        #expect(lost.status == "send" && lost.activities.count >= 200)
        for (i, (want, width)) in [(5, Int64(0)), (200, Int64(0)), (1000, lost.width)].enumerated() {
            // Its lease ends; another worker takes it over with its own batch size and no width yet
            // (or the same), and is lost in turn.
            let again = try await f.step("g", 1, of: n, want: want, now: 1_002_000 + Int64(i) * 2000, width: width)
            #expect(again.status == "send" && again.resent)
            #expect(again.confirm == lost.confirm, "want \(want), width \(width): \(again.confirm) for the lost \(lost.confirm)")
            #expect(again.activities == lost.activities, "want \(want): \(again.activities.count) tokens for the lost \(lost.activities.count)")
        }
        // B confirms it: the next batch is new, with none of the lost one's tokens.
        let next = try await f.step("g", 1, of: n, want: 100, confirm: lost.confirm, now: 1_006_100)
        #expect(next.status == "send" && !next.resent)
        #expect(Set(next.activities).isDisjoint(with: lost.activities + first.activities))
    }
}
