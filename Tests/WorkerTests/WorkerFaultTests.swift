import ActivityCastCore
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// The fault suite: real `activitycast worker` processes against a real `redis-server` that
/// misbehaves — out of memory, frozen, a destroyed group, a key of the wrong type, missing
/// permissions — plus hostile entries and a dead log reader. Each test checks that nothing is
/// lost, nothing is dead-lettered that should not be, the worker stays up (or stops with a clear
/// error when it can't work at all), and ops get the log line that says what happened.
@Suite(.serialized) struct WorkerFaultTests {
    func env(_ settings: Settings, _ extra: [String: String] = [:]) -> [String: String] {
        // Intake only (plans logged): no APNs sandbox runs in these tests.
        var env = ["prefix": settings.prefix, "worker.block_ms": "100", "worker.claim_interval_ms": "200", "worker.send": "false",
                   "worker.visibility_timeout_ms": "1000", "worker.batch_size": "100", "worker.max_in_flight": "1000"]
        env.merge(extra) { _, new in new }
        return env
    }

    func publishValid(_ redis: RedisConnection, _ settings: Settings, count: Int, from start: Int = 0) async throws -> [String] {
        try await publishMixed(redis, settings, count: count, from: start)
    }

    func allDrained(_ redis: RedisConnection, _ settings: Settings) async -> Bool {
        for s in settings.inputStreams.map(\.stream) where !(await drained(redis, s)) { return false }
        return true
    }

    func logLines(_ child: ChildProcess, _ message: String) -> [[String: String]] {
        jsonLogLines(child.stderr).filter { ($0["msg"] ?? "").contains(message) }
    }

    func planned(_ child: ChildProcess) -> [String] {
        jsonLogLines(child.stderr).filter { $0["msg"] == "plan" }.compactMap { $0["entry"] }
    }

    func deadLetters(_ redis: RedisConnection, _ settings: Settings) async throws -> [StreamEntry] {
        let reply = try await redis.send(RedisCommand("XRANGE", settings.deadLetterStream, "-", "+"))
        return try (reply.array ?? []).map(StreamReplies.entry)
    }

    func field(_ entry: StreamEntry, _ name: String) -> String? {
        guard let fields = entry.fields else { return nil }
        var i = 0
        while i + 1 < fields.count {
            if fields[i] == Array(name.utf8) { return String(decoding: fields[i + 1], as: UTF8.self) }
            i += 2
        }
        return nil
    }

    /// The most memory the process has held (VmHWM), in bytes.
    func peakRSS(_ pid: pid_t) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") else { return nil }
        return kb * 1024
    }

    // MARK: Hostile entries

    /// Entries of 200,000 fields each, between ordinary ones: each is read as its size only,
    /// dead-lettered with the decoder's reason, and the worker's memory stays small.
    @Test func hugeEntriesCostBoundedMemoryAndAreDeadLettered() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        var feedIDs: [String] = []
        var hugeIDs: [String] = []
        for round in 0..<6 {
            feedIDs += try await publishValid(redis, settings, count: 50, from: round * 50)
            var args: [any RedisArgument] = [settings.feeds[0].stream, "*", "type", "match.score"]
            for i in 0..<200_000 { args.append("x-\(i)"); args.append("v") }
            hugeIDs.append(try await redis.send(RedisCommand("XADD", args)).string ?? "")
        }
        feedIDs += try await publishValid(redis, settings, count: 50, from: 300)
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings), logName: "huge")
        defer { worker.removeLogs() }
        #expect(await eventually(timeout: .seconds(60)) { await allDrained(redis, settings) })
        #expect(worker.isRunning)
        let peak = peakRSS(worker.pid) ?? .max
        #expect(await worker.stop() == 0)

        let dead = try await deadLetters(redis, settings)
        #expect(dead.count == hugeIDs.count)
        #expect(Set(dead.compactMap { field($0, "id") }) == Set(hugeIDs))
        for d in dead {
            #expect(field(d, "reason") == "too many fields: 200001 > 64 (too large to read: not copied)")
            #expect(field(d, "truncated")?.contains("no fields copied") == true)
        }
        #expect(planned(worker).sorted() == feedIDs.sorted())
        // Reading a 200,000-field entry whole costs hundreds of MB (six in one batch did 3.7 GB).
        #expect(peak < 120 << 20, "peak RSS \(peak / (1 << 20)) MiB")
    }

    /// An entry that kills every worker that takes it (a real crash, through a test-only
    /// failpoint) ends in the dead-letter stream after `max_deliveries`, and the entries that
    /// shared its batches are all processed.
    @Test func anEntryThatKeepsKillingWorkersIsDeadLettered() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        var good = try await publishValid(redis, settings, count: 10)
        let poison = try await xadd(redis, settings.feeds[0].stream, [("type", "match.score"), ("ts", "1000"), ("match", "crash-me"),
                                                                       ("home_score", "1"), ("away_score", "0")])
        good += try await publishValid(redis, settings, count: 10, from: 10)
        var environment = env(settings, ["worker.max_deliveries": "3", "worker.visibility_timeout_ms": "300", "worker.claim_interval_ms": "100"])
        environment["failpoint.crash_on"] = "crash-me"
        var crashes = 0
        var plans: [String] = []
        for round in 0..<10 {
            let worker = try startActivitycast(["worker", "--consumer", "w\(round)"], redis: server, settings: environment, logName: "crash\(round)")
            defer { worker.removeLogs() }
            let done = await eventually(timeout: .seconds(20)) {
                if !worker.isRunning { return true }
                return await allDrained(redis, settings)
            }
            #expect(done)
            plans += planned(worker)
            if worker.isRunning {
                #expect(await worker.stop() == 0)
                break
            }
            crashes += 1
            #expect(worker.stderr.contains("failpoint"))
        }
        #expect(await allDrained(redis, settings))
        #expect(crashes >= 3 && crashes <= 5, "\(crashes) crashes")
        let dead = try await deadLetters(redis, settings)
        #expect(dead.count == 1)
        #expect(dead.first.flatMap { field($0, "id") } == poison)
        #expect(dead.first.flatMap { field($0, "reason") }?.contains("no error was recorded") == true)
        #expect(Set(plans).isSuperset(of: good))
    }

    /// The dead-letter stream is capped in length (`streams.dead_letter_max_len`, trimmed
    /// approximately) and each dead letter copies at most the schema's limits of its entry.
    @Test func deadLettersAreCappedInNumberAndSize() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        _ = try await redis.pipeline((0..<600).map { RedisCommand("XADD", settings.feeds[0].stream, "*", "type", "match.nonsense", "n", $0) })
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings, ["streams.dead_letter_max_len": "100", "worker.batch_size": "256"]), logName: "dlcap")
        defer { worker.removeLogs() }
        #expect(await eventually { await allDrained(redis, settings) })
        // Then two more (batches run concurrently: these must be the newest dead letters, not trimmed).
        var wide: [any RedisArgument] = [settings.feeds[0].stream, "*", "type", "match.score"]
        for i in 0..<99 { wide += ["x-\(i)", String(repeating: "v", count: 10)] }
        _ = try await redis.pipeline([
            RedisCommand("XADD", wide),
            RedisCommand("XADD", settings.feeds[0].stream, "*", "type", "match.score", "note", String(repeating: "n", count: 5000)),
        ])
        #expect(await eventually { await allDrained(redis, settings) })
        #expect(await worker.stop() == 0)
        #expect(logLines(worker, "dead letter").count == 602)
        let dead = try await deadLetters(redis, settings)
        // XADD MAXLEN ~ trims whole radix-tree nodes (100 entries each by default).
        #expect(dead.count >= 100 && dead.count <= 200, "\(dead.count) dead letters kept")
        let wideDead = try #require(dead.first { field($0, "reason")?.hasPrefix("too many fields") == true })
        #expect(field(wideDead, "reason") == "too many fields: 100 > 64")
        #expect(field(wideDead, "truncated") == "copied 64 of 100 fields; 0 cut to 1024 bytes")
        #expect((wideDead.fields?.count ?? 0) / 2 == 6 + 64 + 1)  // reason, stream, id, deliveries, consumer, at; 64 f:<name>; truncated
        let longDead = try #require(dead.first { field($0, "reason")?.hasPrefix("field 'note'") == true })
        // Within the entry's budget, so read whole and rejected by the decoder; its copy is cut.
        #expect(field(longDead, "reason") == "field 'note' too long: 5000 bytes > 1024")
        #expect(field(longDead, "truncated") == "copied 2 of 2 fields; 1 cut to 1024 bytes")
        #expect((longDead.fields ?? []).allSatisfy { $0.count <= 1024 })
    }

    // MARK: Redis refusing work

    /// Redis at `maxmemory` (noeviction) refuses every write for a while: entries stay pending,
    /// none is dead-lettered, the refusal is logged once (not per batch), and everything is
    /// processed once Redis has room again.
    @Test(.enabled(if: RedisServer.clusterPrimaries == nil, "fills the one Redis (maxmemory): on one Redis only (ACTIVITYCAST_TEST_REDIS_CLUSTER)"))
    func outOfMemoryLeavesEntriesPendingAndDeadLettersNothing() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        for s in settings.inputStreams.map(\.stream) { try await redis.ensureGroup(stream: s, group: settings.group) }
        let feedIDs = try await publishValid(redis, settings, count: 400)
        _ = try await redis.send(RedisCommand("CONFIG", "SET", "maxmemory", "1"))
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings, [
            "worker.max_deliveries": "2", "worker.visibility_timeout_ms": "300", "worker.claim_interval_ms": "100",
        ]), logName: "oom")
        defer { worker.removeLogs() }
        // Several claim cycles while Redis refuses: deliveries climb past max_deliveries.
        #expect(await eventually(timeout: .seconds(20)) {
            let pending = (try? StreamReplies.pending(try await redis.send(.xpending(stream: settings.feeds[0].stream, group: settings.group, count: 10)))) ?? []
            return (pending.map(\.deliveries).max() ?? 0) >= 4
        })
        #expect(try await redis.send(RedisCommand("XLEN", settings.deadLetterStream)).int == 0)
        let refusals = logLines(worker, "Redis refuses the worker's writes")
        #expect(refusals.count >= 1 && refusals.count <= 3, "logged \(refusals.count) times")
        #expect(refusals.first?["reason"] == "out_of_memory")
        #expect(worker.isRunning)

        _ = try await redis.send(RedisCommand("CONFIG", "SET", "maxmemory", "0"))
        #expect(await eventually(timeout: .seconds(30)) { await allDrained(redis, settings) })
        #expect(await worker.stop() == 0)
        #expect(try await redis.send(RedisCommand("XLEN", settings.deadLetterStream)).int == 0)
        #expect(Set(planned(worker)).isSuperset(of: feedIDs))
        #expect(!logLines(worker, "Redis accepts the worker's writes again").isEmpty)
        #expect(logLines(worker, "dead letter").isEmpty)
    }

    /// Redis frozen (SIGSTOP) past the command timeout, then resumed: the worker rides it out,
    /// says so, and loses nothing. Frozen again, SIGTERM: it exits 0 within its shutdown deadline.
    @Test(.enabled(if: RedisServer.clusterPrimaries == nil, "freezes the one Redis process (on a cluster, one node of three, which a worker may not touch while it is frozen): on one Redis only (ACTIVITYCAST_TEST_REDIS_CLUSTER)"))
    func frozenRedisLosesNothingAndSigtermHoldsTheDeadline() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        var feedIDs = try await publishValid(redis, settings, count: 300)
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings, [
            "worker.shutdown_deadline_ms": "2000", "redis.command_timeout_ms": "500",
        ]), logName: "frozen")
        defer { worker.removeLogs() }
        #expect(await eventually { await allDrained(redis, settings) })
        let redisPID = try #require(server.pid)
        defer { kill(redisPID, SIGCONT) }

        // Entries added just before the freeze are processed after it.
        feedIDs += try await publishValid(redis, settings, count: 300, from: 300)
        kill(redisPID, SIGSTOP)
        try await Task.sleep(for: .seconds(2))
        kill(redisPID, SIGCONT)
        #expect(await eventually { await allDrained(redis, settings) })
        #expect(worker.isRunning)
        #expect(Set(planned(worker)).isSuperset(of: feedIDs))
        #expect(try await redis.send(RedisCommand("XLEN", settings.deadLetterStream)).int == 0)
        // Whatever the worker was waiting on when Redis froze (a read or a claim) says it timed out.
        let told = jsonLogLines(worker.stderr).filter { ($0["error"] ?? "").contains("timed out") }
        #expect(!told.isEmpty)
        if !logLines(worker, "reading streams failed").isEmpty {
            // Logged by the first read that succeeds, which may come after the entries are done.
            #expect(await eventually(timeout: .seconds(10)) { !logLines(worker, "reading streams again").isEmpty })
        }

        kill(redisPID, SIGSTOP)
        try await Task.sleep(for: .milliseconds(300))  // a read is now stuck on the frozen server
        let started = ContinuousClock.now
        worker.kill(signal: SIGTERM)
        let status = await worker.waitForExit(timeout: .seconds(10))
        let took = ContinuousClock.now - started
        #expect(status == 0)
        #expect(took < .milliseconds(3000), "exited after \(took)")
    }

    // MARK: Groups and keys

    /// `XGROUP DESTROY` under a running worker: the group comes back where reading had reached;
    /// no entry is processed twice, none is lost, and the log says what happened (a destroyed
    /// group, not a Redis that lost its data).
    @Test func aDestroyedGroupIsRecreatedWhereReadingHadReached() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings), logName: "destroyed")
        defer { worker.removeLogs() }
        var feedIDs = try await publishValid(redis, settings, count: 1000)
        // Bad entries too: if the stream were replayed they would be dead-lettered twice.
        _ = try await xadd(redis, settings.feeds[0].stream, [("type", "match.nonsense"), ("ts", "5")])
        #expect(await eventually { await allDrained(redis, settings) })
        _ = try await redis.send(RedisCommand("XGROUP", "DESTROY", settings.feeds[0].stream, settings.group))
        feedIDs += try await publishValid(redis, settings, count: 200, from: 1000)
        #expect(await eventually { await allDrained(redis, settings) })
        #expect(await worker.stop() == 0)
        let plans = planned(worker)
        #expect(plans.count == feedIDs.count, "\(plans.count) plans for \(feedIDs.count) entries")
        #expect(Set(plans) == Set(feedIDs))
        #expect(try await redis.send(RedisCommand("XLEN", settings.deadLetterStream)).int == 1)
        let logged = logLines(worker, "CONSUMER GROUP WAS DESTROYED")
        #expect(logged.count == 1)
        #expect(logged.first?["stream"] == settings.feeds[0].stream)
        // Redis ran on (its server started moments before): not mistaken for a restart without its data.
        #expect(logLines(worker, "REDIS RESTARTED WITHOUT ITS DATA").isEmpty)
    }

    /// A stream key of the wrong type stops only that stream: the worker starts, serves the
    /// others, names the broken key, and reads it again once it is a stream.
    @Test func aWrongTypeStreamKeyIsNamedAndTheOthersGoOn() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let transit = settings.feeds[1].stream
        _ = try await redis.send(RedisCommand("SET", transit, "x"))
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings), logName: "wrongtype")
        defer { worker.removeLogs() }
        _ = try await xadd(redis, settings.registrationsStream, [("type", "follow"), ("ts", "1000"), ("device", "d1"), ("target", "team:a")])
        let score = try await xadd(redis, settings.feeds[0].stream, [("type", "match.score"), ("ts", "1000"), ("match", "m1"), ("home_score", "1"), ("away_score", "0")])
        #expect(await eventually {
            let registrations = await drained(redis, settings.registrationsStream)
            let sports = await drained(redis, settings.feeds[0].stream)
            return registrations && sports
        })
        #expect(try await redis.send(RedisCommand("SISMEMBER", settings.keys.followers(FollowTarget(parsing: "team:a")!), "d1")).int == 1)
        let broken = logLines(worker, "STREAM CANNOT BE READ")
        #expect(broken.first?["stream"] == transit)
        #expect(broken.first?["msg"]?.contains("is a string, not a stream") == true)

        // Fixed: the stream is read again.
        _ = try await redis.send(RedisCommand("DEL", transit))
        let trip = try await xadd(redis, transit, [("type", "trip.eta"), ("ts", "1000"), ("trip", "t1"), ("stop", "s1"), ("eta", "2000000")])
        #expect(await eventually(timeout: .seconds(20)) { await drained(redis, transit) })
        #expect(!logLines(worker, "stream readable again").isEmpty)

        // Broken again at run time: registrations still apply.
        _ = try await redis.send(RedisCommand("DEL", transit))
        _ = try await redis.send(RedisCommand("SET", transit, "y"))
        _ = try await xadd(redis, settings.registrationsStream, [("type", "follow"), ("ts", "2000"), ("device", "d2"), ("target", "team:a")])
        #expect(await eventually { (try? await redis.send(RedisCommand("SISMEMBER", settings.keys.followers(FollowTarget(parsing: "team:a")!), "d2")).int) == 1 })
        #expect(worker.isRunning)
        #expect(await worker.stop() == 0)
        #expect(Set(planned(worker)).isSuperset(of: ["\(settings.feeds[0].stream)/\(score)", "\(transit)/\(trip)"]))
    }

    // MARK: Credentials and permissions

    @Test func wrongCredentialsOrMissingPermissionsStopTheWorkerWithAClearError() async throws {
        let server = try await RedisServer(extraArguments: ["--requirepass", "secret"])
        let settings = try testSettings(server)
        let redis = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("redis://:secret@127.0.0.1:\(server.port)"),
                                                                      connectTimeout: .seconds(2), commandTimeout: .seconds(5)))
        defer { redis.close() }
        _ = try await redis.send(RedisCommand("ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval"))
        _ = try await redis.send(RedisCommand("ACL", "SETUSER", "noname", "on", ">pw", "~*", "&*", "+@all", "-client|setname"))

        for (url, expected) in [
            ("redis://:wrong@127.0.0.1:\(server.port)", "rejected the worker's credentials"),
            ("redis://noeval:pw@127.0.0.1:\(server.port)", "denies EVALSHA"),
        ] {
            let child = try startActivitycast(["worker"], redis: server, settings: env(settings, ["redis.url": url]), logName: "perm")
            defer { child.removeLogs() }
            let status = await child.waitForExit(timeout: .seconds(15))
            #expect(status == 1)
            #expect(child.stderr.contains(expected), "\(child.stderr.suffix(600))")
            #expect(!child.stderr.contains("pw@") && !child.stderr.contains(":wrong@"), "a password reached the log")
        }

        // Without client|setname the worker works, and says why its connections have no name.
        let child = try startActivitycast(["worker"], redis: server, settings: env(settings, ["redis.url": "redis://noname:pw@127.0.0.1:\(server.port)"]), logName: "noname")
        defer { child.removeLogs() }
        let id = try await xadd(redis, settings.feeds[0].stream, [("type", "match.score"), ("ts", "1000"), ("match", "m1"), ("home_score", "1"), ("away_score", "0")])
        #expect(await eventually { planned(child).contains("\(settings.feeds[0].stream)/\(id)") })
        #expect(!logLines(child, "Redis refused CLIENT SETNAME").isEmpty)
        #expect(await child.stop() == 0)
    }

    // MARK: Output

    /// The log reader went away (stdout and stderr are a pipe nobody reads): the worker ignores
    /// SIGPIPE, keeps processing, and still drains and exits 0 on SIGTERM.
    @Test func aClosedOutputPipeDoesNotKillTheWorker() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let worker = try startActivitycast(["worker"], redis: server, settings: env(settings), logName: "pipe", output: .closedPipe)
        defer { worker.removeLogs() }
        _ = try await publishValid(redis, settings, count: 500)
        #expect(await eventually { await allDrained(redis, settings) })
        #expect(worker.isRunning)
        #expect(await worker.stop() == 0)
    }
}
