import ActivityCastInspect
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// `activitycast publish`, `worker` and `inspect` as an operator runs them.
@Suite struct CommandLineTests {
    @Test func publishThenInspectShowsStreamsGroupsDeadLettersAndRegistrations() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let env = ["prefix": "cli\(UInt32.random(in: 0...UInt32.max))", "worker.block_ms": "100", "worker.send": "false"]
        func cli(_ args: [String]) async throws -> String {
            let (status, out, err) = try await runActivitycast(args, redis: server, settings: env)
            #expect(status == 0, "activitycast \(args.joined(separator: " ")) failed: \(err)")
            return out
        }
        for type in ["device", "follow", "start.token", "activity.token", "match.started", "match.score", "trip.eta"] {
            let out = try await cli(["publish", type])
            #expect(out.contains(" ") && out.contains("-"))  // "<stream> <id>"
        }
        _ = try await cli(["publish", "match.score", "match=4711", "home_score=x", "away_score=0"])
        let many = try await cli(["publish", "trip.eta", "--count", "250"])
        #expect(many.contains("250 entries"))
        // Nothing consumed yet: the group doesn't exist, the streams do.
        let before = try await inspect(cli)
        #expect(before.streams.first { $0.kind == "transit" }?.length == 251)
        #expect(before.streams.allSatisfy { $0.groups.isEmpty })

        let worker = try startActivitycast(["worker", "--consumer", "cli-w"], redis: server, settings: env, logName: "cli-w")
        defer { worker.removeLogs() }
        let settings = try SettingsLoader.load(file: nil, environment: [:], overrides: ["prefix": env["prefix"]!, "redis.url": server.urlString])
        #expect(await eventually {
            var all = true
            for s in settings.inputStreams.map(\.stream) where !(await drained(redis, s)) { all = false }
            return all
        })
        #expect(await worker.stop() == 0)

        let after = try await inspect(cli)
        let sports = try #require(after.streams.first { $0.kind == "sports" })
        #expect(sports.exists && sports.length == 3 && sports.firstID != nil && sports.lastID != nil)
        let group = try #require(sports.groups.first)
        #expect(group.name == "activitycast" && group.pending == 0 && group.lag == 0)
        #expect(group.consumers.map(\.name) == ["cli-w"])
        #expect(after.deadLetterCount == 1)
        #expect(after.latestDeadLetters.first?.reason == "field 'home_score' must be an integer 0-999, got 'x'")
        #expect(after.registrations.activityKeys >= 1 && after.registrations.activityTokens == 1)
        #expect(after.registrations.pushToStartTokens == 1 && after.registrations.follows == 1)

        // The table names the same things.
        let table = try await cli(["inspect"])
        #expect(table.contains("DEAD LETTERS") && table.contains("cli-w") && table.contains("home_score"))
    }

    /// The benchmark tooling through its real interface: a sandbox process, then `bench apns`
    /// with both senders and with h2load only. Sizes are tiny; nothing here judges speed.
    @Test func benchAPNsMeasuresBothSendersAndTheServer() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/bin/h2load"), "h2load missing: scripts/install-deps.sh installs nghttp2-client")
        let server = try await RedisServer()
        let sandboxProcess = try await SandboxProcess(arguments: ["--threads", "1", "--streams-before-auth", "1000"])
        let sandbox = sandboxProcess.child
        var env = sandboxProcess.settings
        env["log.level"] = "warning"

        let (status, out, err) = try await runActivitycast(["bench", "apns", "--requests", "2000", "--connections", "2", "--streams", "10",
                                                            "--runs", "1", "--server-pid", "\(sandbox.pid)"], redis: server, settings: env)
        #expect(status == 0, "bench apns failed: \(err)\n\(out)")
        #expect(out.contains("run 1: client") && out.contains("ratio") && out.contains("(goal ≥ 0.80)"), "\(out)")
        #expect(out.contains("server during client run:") && out.contains("server during h2load run:") && out.contains("busiest thread"), "\(out)")
        #expect(out.contains("host steal:") && out.contains("saturated in"), "\(out)")

        let (status2, only, err2) = try await runActivitycast(["bench", "apns", "--h2load-only", "--requests", "2000", "--connections", "2",
                                                              "--streams", "10", "--runs", "1", "--server-pid", "\(sandbox.pid)"],
                                                             redis: server, settings: env)
        #expect(status2 == 0, "bench apns --h2load-only failed: \(err2)\n\(only)")
        #expect(only.contains("run 1: h2load") && !only.contains("client") && only.contains("server during h2load run:"), "\(only)")
        #expect(await sandbox.stop() == 0)
    }

    /// `bench broadcast` against real processes: Redis, the sandbox and a worker; a few hundred
    /// events, each matched to its broadcasts. Nothing here judges speed; every event must arrive.
    @Test func benchBroadcastMatchesEveryEventToItsBroadcasts() async throws {
        let server = try await RedisServer()
        let sandbox = try await SandboxProcess(arguments: ["--threads", "1"])
        var env = sandbox.settings
        env.merge(["prefix": "bb\(UInt32.random(in: 0...UInt32.max))", "log.level": "warning"]) { _, new in new }
        let worker = try startActivitycast(["worker", "--consumer", "bench-w1"], redis: server, settings: env, logName: "bench-w1")
        defer { worker.removeLogs() }

        let (status, out, err) = try await runActivitycast(["bench", "broadcast", "--events-per-second", "200", "--keys", "20", "--seconds", "1",
                                                            "--runs", "2", "--worker-pid", "\(worker.pid)", "--sandbox-pid", "\(sandbox.child.pid)",
                                                            "--redis-pid", "\(server.pid ?? 0)"],
                                                           redis: server, settings: env, timeout: .seconds(120))
        #expect(status == 0, "bench broadcast failed: \(err)\n\(out)")
        #expect(out.contains("200 events/s over 20 keys, 200 events per run"), "\(out)")
        // Each event is one broadcast per APNs environment (the sandbox serves both).
        #expect(out.contains("warm-up: 20 events (one per key, creating its channels)") && out.contains("each event is 2 broadcasts"), "\(out)")
        for run in 1...2 {
            let line = out.split(separator: "\n").first { $0.hasPrefix("run \(run): 200 events at ") }
            #expect(line?.contains("first broadcast p50 ") == true && line?.contains(" p99 ") == true && line?.contains("max ") == true, "\(out)")
            #expect(line?.hasSuffix("; lost 0") == true, "\(out)")
        }
        #expect(out.contains("CPU (share of one core") && out.contains("workers ") && out.contains("sandbox ") && out.contains("redis-server "), "\(out)")
        #expect(out.contains("duplicates received 0"), "\(out)")
        let median = out.split(separator: "\n").first { $0.hasPrefix("median of 2 runs: first broadcast p50 ") }
        #expect(median?.contains("(goal ≤ 2 ms)") == true && median?.contains("achieved ") == true && median?.hasSuffix("; lost 0") == true, "\(out)")
        // What Redis did per event in each run: at least the event's merge script and its XADD.
        let redisLines = out.split(separator: "\n").filter { $0.hasPrefix("       redis: ") && $0.contains(" round trips (reads)/event, ") }
        #expect(redisLines.count == 2, "\(out)")
        for line in redisLines {
            let scripts = line.split(separator: ",").first { $0.hasSuffix(" EVALSHA/event") }.flatMap { Double($0.split(separator: " ")[0]) }
            #expect((scripts ?? 0) >= 1, "\(line)")
        }
        // The publisher's XADD measured by itself, on a stream removed afterwards.
        let share = out.split(separator: "\n").first { $0.hasPrefix("redis: ") && $0.contains(" µs of CPU per event (median of the runs; goal ≤ 100 µs); the publisher's XADD by itself ") }
        #expect(share?.contains("(200 events at the same rate to a stream no worker reads); the workers' share ") == true, "\(out)")
        let redis = server.connection()
        defer { redis.close() }
        #expect(try await keysEverywhere(redis, "*xadd-only*").isEmpty)
        #expect(await worker.stop() == 0)
    }

    /// `bench scripts` on a real Redis: each case's figures, every script call answered (an error
    /// reply stops it), and nothing of its own left behind. Nothing here judges speed.
    @Test func benchScriptsReportsEachCaseAndLeavesNothing() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let (status, out, err) = try await runActivitycast(["bench", "scripts", "--events", "300"], redis: server, settings: ["prefix": "sb"])
        #expect(status == 0, "bench scripts failed: \(err)\n\(out)")
        // Every script call counted: 300 merges, then 300 merges and 300 decisions.
        for (label, calls) in [("merge", 300), ("merge + decide", 600)] {
            let line = out.split(separator: "\n").first { $0.hasPrefix("\(label): ") }
            #expect(line?.contains(" µs per script call (commandstats, \(calls) calls), ") == true
                    && line?.hasSuffix(" µs of Redis process CPU per event") == true, "\(out)")
        }
        #expect(out.contains("decide (channel), the difference: "), "\(out)")
        #expect(try await keysEverywhere(redis, "*").isEmpty)
    }

    @Test func badSettingsStopTheWorkerWithAClearError() async throws {
        let server = try await RedisServer()
        let (status, _, err) = try await runActivitycast(["worker"], redis: server, settings: ["worker.batch_size": "lots"])
        #expect(status != 0)
        #expect(err.contains("setting worker.batch_size (from ACTIVITYCAST_WORKER_BATCH_SIZE): must be a whole number, got 'lots'"))
        // A budget the policy can't use (no token left above the end's reserve) is one too, ending
        // the worker the same way (a usage error).
        let (status2, _, err2) = try await runActivitycast(["worker"], redis: server, settings: ["budgets.standard.end_reserve": "4"])
        #expect(status2 != 0 && status2 == status)
        #expect(err2.contains("setting budgets.standard.end_reserve (from ACTIVITYCAST_BUDGETS_STANDARD_END_RESERVE): must be 0 or more "
            + "and below the capacity (4), got 4"), "\(err2)")
    }

    @Test func publishRefusesAnEmptyOrControlCharacterStreamName() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let (status, _, err) = try await runActivitycast(["publish", "match.score", "--stream", ""], redis: server)
        #expect(status != 0)
        #expect(err.contains("--stream: the stream name must not be empty"), "\(err)")
        let (status2, _, err2) = try await runActivitycast(["publish", "match.score", "--stream", "ac:\u{1b}[2J"], redis: server)
        #expect(status2 != 0)
        #expect(err2.contains("--stream: the stream name must not contain control characters, got 'ac:\\x1b[2J'"), "\(err2)")
        #expect(try await redis.command("DBSIZE").int == 0)
        // A proper name still works.
        let (status3, out, err3) = try await runActivitycast(["publish", "match.score", "--stream", "scratch"], redis: server)
        #expect(status3 == 0 && out.hasPrefix("scratch "), "\(err3)")
    }

    @Test func aConsumerNameRedisWouldRefuseStopsTheWorkerAtStart() async throws {
        let server = try await RedisServer()
        let (status, _, err) = try await runActivitycast(["worker", "--consumer", "wörker"], redis: server)
        #expect(status != 0)
        #expect(err.contains("setting worker.consumer (from the command line): must be printable ASCII without spaces ('!' to '~'"), "\(err)")
    }

    @Test func aMisspeltVariableIsLoggedAsAWarningAtStart() async throws {
        let server = try await RedisServer()
        let (status, _, err) = try await runActivitycast(["inspect"], redis: server,
                                                         settings: ["prefix": "warn\(UInt32.random(in: 0...UInt32.max))", "worker.batchsize": "10"])
        #expect(status == 0, "\(err)")
        let warnings = jsonLogLines(err).filter { $0["level"] == "warning" }
        // Names built, not written out: a misspelt name in the sources would fail the test that
        // every name the repository uses is known.
        let wrong = SettingsLoader.environmentName("worker.batchsize"), right = SettingsLoader.environmentName("worker.batch_size")
        #expect(warnings.map { $0["msg"] } == ["environment variable \(wrong) is not a setting and is ignored (did you mean \(right)?)"],
                "\(err)")
    }

    @Test func inspectWithoutRedisFailsClearly() async throws {
        let refusing = RefusingLoopbackPort()  // nothing listens here, and nothing can start to
        defer { refusing.close() }
        let port = refusing.port
        let child = try ChildProcess(executable: try activitycastExecutable(), arguments: ["inspect", "--redis", "redis://127.0.0.1:\(port)"],
                                     logName: "inspect-down")
        defer { child.removeLogs() }
        let status = await child.waitForExit(timeout: .seconds(30))
        #expect(status == 1)
        #expect(child.stderr.contains("inspect failed: cannot connect to Redis redis://127.0.0.1:\(port)"))
    }

    func inspect(_ cli: ([String]) async throws -> String) async throws -> InspectReport {
        let json = try await cli(["inspect", "--json"])
        return try JSONDecoder().decode(InspectReport.self, from: Data(json.utf8))
    }
}
