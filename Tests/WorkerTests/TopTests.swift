import ActivityCastCore
import ActivityCastInspect
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// `activitycast top`: its frame from real Redis readings (and a real worker's /metrics), `--once`
/// for scripts, and the live view in a real terminal — tmux on a private socket — where it must
/// refresh, fit the window and always give the terminal back (q, Ctrl-C, SIGTERM).
@Suite(.serialized) struct TopTests {
    // MARK: The frame

    @Test func prometheusTextIsReadForTheActivitycastSamples() throws {
        let text = """
            # HELP activitycast_pushes_total APNs requests.
            # TYPE activitycast_pushes_total counter
            activitycast_pushes_total{kind="token",outcome="ok"} 12
            activitycast_pushes_total{kind="broadcast", outcome="BadDeviceToken"} 3 1700000000000
            activitycast_stream_lag{stream="a \\"quoted\\" \\\\ name\\n"} NaN
            activitycast_entries_in_flight 4.5
            activitycast_ready +Inf
            go_goroutines 7
            activitycast_broken{kind="unterminated} 1
            activitycast_no_value
            """
        let samples = PrometheusText.parse(text)
        try #require(samples.count == 5, "\(samples)")
        #expect(samples[0] == PrometheusSample(name: "activitycast_pushes_total", labels: ["kind": "token", "outcome": "ok"], value: 12))
        #expect(samples[1].labels == ["kind": "broadcast", "outcome": "BadDeviceToken"] && samples[1].value == 3)
        #expect(samples[2].labels["stream"] == "a \"quoted\" \\ name\n" && samples[2].value.isNaN)
        #expect(samples[3].value == 4.5 && samples[4].value == .infinity)

        #expect(MetricsEndpoint("http://127.0.0.1:9464/metrics")?.description == "http://127.0.0.1:9464/metrics")
        #expect(MetricsEndpoint("http://[::1]:9464")?.description == "http://[::1]:9464/metrics")
        #expect(MetricsEndpoint("http://localhost/x")?.port == 80)
        for bad in ["https://127.0.0.1:9464/metrics", "127.0.0.1:9464", "http://:9464/", "http://h:0/", "http://h:99999/", "http://h:x/"] {
            #expect(MetricsEndpoint(bad) == nil, "\(bad)")
        }
    }

    /// Rates are differences of two real readings over the time between them; the frame fits any
    /// width and height.
    @Test func framesShowRatesFromSuccessiveReadingsAndFitTheWindow() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let sports = try #require(settings.feeds.first { $0.kind == .sports }).stream
        let inspector = Inspector(settings: settings, redis: redis)
        for _ in 0..<5 { _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", "1"), ("match", "1")]) }
        try await redis.ensureGroup(stream: sports, group: settings.group)
        _ = try await redis.readGroup(group: settings.group, consumer: "c1", count: 2, block: nil, streams: [(sports, ">")])
        try await redis.command("HINCRBY", settings.keys.counters, "registrations_stale", 3)

        var state = TopState(redisURL: server.urlString, interval: .seconds(1))
        let t0 = ContinuousClock.now
        state.record(TopReading(at: t0, report: try await inspector.report(latest: 0), redisError: nil, workers: []))
        // Before a second reading there are no rates.
        var frame = state.lines(width: 200, height: 100, now: t0, interactive: false)
        #expect(pick(row(frame, sports), 0...6) + pick(row(frame, sports), 8...9) == [sports, settings.group, "3", "2", "-", "-", "5", "1", "sports"],
                "\(frame.joined(separator: "\n"))")

        // Two seconds later (as the readings say): 10 more entries, 4 more delivered, 6 more stale registrations.
        for _ in 0..<10 { _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", "1"), ("match", "1")]) }
        _ = try await redis.readGroup(group: settings.group, consumer: "c1", count: 4, block: nil, streams: [(sports, ">")])
        try await redis.command("HINCRBY", settings.keys.counters, "registrations_stale", 6)
        state.record(TopReading(at: t0 + .seconds(2), report: try await inspector.report(latest: 0), redisError: nil, workers: []))
        frame = state.lines(width: 200, height: 100, now: t0 + .seconds(2), interactive: false)
        // lag 15 - 6 delivered = 9, pending 6, in 10/2 s, out 4/2 s, length 15.
        #expect(pick(row(frame, sports), 0...6) == [sports, settings.group, "9", "6", "5.0", "2.0", "15"], "\(frame.joined(separator: "\n"))")
        #expect(frame.contains("  registrations_stale  9      3.0"), "\(frame.joined(separator: "\n"))")
        #expect(frame.contains { $0.hasPrefix("PUSHES  (pass --metrics") })

        // A failed reading says so and keeps the last rates' readings for the next one.
        state.record(TopReading(at: t0 + .seconds(3), report: nil, redisError: "Redis unreachable: connection refused", workers: []))
        frame = state.lines(width: 200, height: 100, now: t0 + .seconds(4), interactive: true)
        #expect(frame.dropFirst().first == "Redis unreachable: connection refused  (retrying every 1s; last read 2s ago)", "\(frame)")
        #expect(row(frame, sports) == nil)

        // Small windows: lines are cut, never longer than the width, and the frame ends with how
        // much did not fit.
        state.record(TopReading(at: t0 + .seconds(5), report: try await inspector.report(latest: 0), redisError: nil, workers: []))
        for (width, height) in [(40, 8), (20, 3), (1, 1), (120, 40)] {
            let small = state.lines(width: width, height: height, now: t0 + .seconds(5), interactive: true)
            #expect(small.count <= height && small.allSatisfy { $0.unicodeScalars.count <= width }, "\(width)x\(height): \(small)")
            #expect(small.first?.hasPrefix(String("activitycast top".prefix(width))) == true)
        }
        let cut = state.lines(width: 40, height: 8, now: t0 + .seconds(5), interactive: true)
        #expect(cut.count == 8 && cut[7].hasPrefix("… ") && cut[7].contains("more lines"), "\(cut)")
        #expect(cut.contains { $0.unicodeScalars.count == 40 })
    }

    /// `--once`: one frame on stdout, no escape codes; exit 1 (with the frame saying why) when
    /// Redis can't be read.
    @Test func oncePrintsOneFrameWithoutEscapeCodes() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let sports = try #require(settings.feeds.first { $0.kind == .sports }).stream
        for _ in 0..<7 { _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", "1"), ("match", "1")]) }
        try await redis.ensureGroup(stream: sports, group: settings.group)
        _ = try await redis.readGroup(group: settings.group, consumer: "c1", count: 3, block: nil, streams: [(sports, ">")])

        let (status, out, err) = try await runActivitycast(["top", "--once", "--interval", "0.2"], redis: server, settings: ["prefix": settings.prefix])
        #expect(status == 0, "\(err)")
        #expect(!out.unicodeScalars.contains { $0 == "\u{1b}" || ($0 != "\n" && VisibleText.needsEscape($0)) }, "\(out)")
        #expect(pick(row(out, sports), 0...6) == [sports, settings.group, "4", "3", "0.0", "0.0", "7"], "\(out)")
        #expect(out.contains("BUDGETS") && out.contains("CHANNELS") && !out.contains("q quits"))

        await server.stop()
        let (down, downOut, _) = try await runActivitycast(["top", "--once", "--interval", "0.2"], redis: server, settings: ["prefix": settings.prefix])
        #expect(down == 1)
        #expect(downOut.contains("Redis unreachable: "), "\(downOut)")

        let (bad, _, badErr) = try await runActivitycast(["top", "--once", "--metrics", "https://127.0.0.1:1/metrics"], redis: server)
        #expect(bad != 0 && badErr.contains("--metrics must be http://HOST:PORT/PATH"), "\(badErr)")
    }

    /// A sharded feed (`streams.shards: 2`): each shard has its row, and a row after them adds
    /// them up (lag, pending, length), as `inspect` does.
    @Test func aShardedFeedShowsEachShardAndTheirTotal() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server, ["streams.shards": "2", "streams.feeds": "sports=s\(UInt32.random(in: 0...UInt32.max)):sports"])
        let shards = settings.feeds.map(\.stream)
        #expect(shards.count == 2)
        for (i, stream) in shards.enumerated() {
            for _ in 0..<(3 + i) { _ = try await xadd(redis, stream, [("type", "match.started"), ("ts", "1"), ("match", "1")]) }
            try await redis.ensureGroup(stream: stream, group: settings.group)
        }
        _ = try await redis.readGroup(group: settings.group, consumer: "c1", count: 2, block: nil, streams: [(shards[0], ">")])
        let env = ["prefix": settings.prefix, "streams.shards": "2", "streams.feeds": "sports=\(settings.feeds[0].shard!.feed)"]
        let (status, out, err) = try await runActivitycast(["top", "--once", "--interval", "0.2"], redis: server, settings: env)
        #expect(status == 0, "\(err)")
        #expect(pick(row(out, shards[0]), 0...3) == [shards[0], settings.group, "1", "2"], "\(out)")
        #expect(pick(row(out, shards[1]), 0...3) == [shards[1], settings.group, "4", "0"], "\(out)")
        let total = "\(settings.feeds[0].shard!.feed) (2 shards)"
        let line = try #require(out.split(separator: "\n").first { $0.contains(total) }.map(String.init), "\(out)")
        let cells = line.replacingOccurrences(of: total, with: "").split(separator: " ").map(String.init)
        #expect(Array(cells.prefix(3)) == [settings.group, "5", "2"], "\(line)")
        #expect(cells.contains("7"), "\(line)")
    }

    /// A real sending worker (against the sandbox) and its /metrics: pushes by kind and outcome,
    /// the worker's state; an endpoint that doesn't answer is shown as down.
    @Test func metricsOfARealWorkerShowPushesByKindAndOutcome() async throws {
        let rig = try await SendingRig()
        let (server, prefix, redis, env) = (rig.server, rig.prefix, rig.redis, rig.env)
        // The rig holds the processes: alive to the end of the test, whatever is used last.
        defer { redis.close(); withExtendedLifetime(rig) {} }
        let (worker, port) = try await opsWorker(server, env)
        defer { worker.removeLogs() }
        let reg = "\(prefix):registrations", sports = "\(prefix):feed:sports"
        var ts = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        func next() -> String { ts += 1000; return String(ts) }
        _ = try await xadd(redis, reg, [("type", "activity.token"), ("ts", next()), ("device", "a"), ("key", "match:m1"), ("activity", "A"),
                                        ("token", String(repeating: "a1", count: 32)), ("env", "development")])
        #expect(await eventually { await drained(redis, reg) })
        _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", next()), ("match", "m1"), ("home", "ars"), ("away", "che")])
        _ = try await xadd(redis, sports, [("type", "match.score"), ("ts", next()), ("match", "m1"), ("home_score", "1"), ("away_score", "0")])

        let metrics = "http://127.0.0.1:\(port)/metrics", dead = "http://127.0.0.1:\(freeLoopbackPort())/metrics"
        var out = ""
        let shown = try await eventually(timeout: .seconds(60)) {
            let (status, text, _) = try await runActivitycast(["top", "--once", "--interval", "0.2", "--metrics", metrics, "--metrics", dead],
                                                          redis: server, settings: ["prefix": prefix])
            out = text
            let pushes = pick(row(text, "token"), 0...3)
            // The worker's state is its activitycast_ready gauge: ready once its monitor checked Redis.
            return status == 0 && pushes[1] == "ok" && (Int(pushes[2]) ?? 0) >= 1 && pick(row(text, metrics), 1...1) == ["ready"]
        }
        #expect(shown, "\(out)")
        let lines = out.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("PUSHES  APNs requests ") && $0.contains("(1 of 2 workers' /metrics)") }, "\(out)")
        #expect(pick(row(lines, metrics), 1...1) == ["ready"], "\(out)")
        #expect(pick(row(lines, dead), 1...1) == ["down"] && out.contains("\(dead) unreachable: "), "\(out)")
        _ = await worker.stop()
    }

    // MARK: The live view in a real terminal

    /// The frame shows the group's lag and pending, follows changes, fits a resized window, and
    /// `q` leaves it: the shell's screen is back (no alternate screen, cursor shown, the same
    /// terminal modes) with the marker echoed after top exited 0.
    @Test func liveViewRefreshesFitsTheWindowAndQRestoresTheTerminal() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let sports = try #require(settings.feeds.first { $0.kind == .sports }).stream
        for _ in 0..<5 { _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", "1"), ("match", "1")]) }
        try await redis.ensureGroup(stream: sports, group: settings.group)
        _ = try await redis.readGroup(group: settings.group, consumer: "c1", count: 2, block: nil, streams: [(sports, ">")])

        try await withTop(server, settings) { tmux, script in
            var screen = ""
            #expect(try await eventually(timeout: .seconds(20)) {
                screen = try await tmux.capture()
                return pick(row(screen, sports), 0...3) == [sports, settings.group, "3", "2"]
            }, "\(screen)")
            #expect(screen.hasPrefix("activitycast top  \(server.urlString)") && screen.contains("(q quits)"), "\(screen)")
            #expect(try await tmux.modes() == .init(alternateScreen: true, cursorVisible: false))

            // New entries: the next readings show them.
            for _ in 0..<4 { _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", "1"), ("match", "1")]) }
            #expect(try await eventually(timeout: .seconds(10)) {
                screen = try await tmux.capture()
                return pick(row(screen, sports), 0...3) + pick(row(screen, sports), 6...6) == [sports, settings.group, "7", "2", "9"]
            }, "\(screen)")

            // A smaller window: lines are cut at the new width, the frame still starts at the top.
            try await tmux.run(["resize-window", "-t", "top", "-x", "50", "-y", "12"])
            #expect(try await eventually(timeout: .seconds(10)) {
                screen = try await tmux.capture()
                let lines = screen.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                return lines.count >= 12 && lines[0].unicodeScalars.count == 50 && lines[0].hasPrefix("activitycast top")
                    && lines[2].hasPrefix("STREAM") && lines[11].hasPrefix("… ") && lines[11].contains("more lines")
            }, "\(screen)")

            try await tmux.run(["send-keys", "-t", "top", "q"])
            try await expectRestored(tmux, script, status: 0)
        }
    }

    /// Ctrl-C (SIGINT from the terminal) and SIGTERM (by PID) leave the view the same way, exiting
    /// 130 and 143 as a shell reports a signal.
    @Test func ctrlCAndSIGTERMRestoreTheTerminal() async throws {
        let server = try await RedisServer()
        let settings = try testSettings(server)
        try await withTop(server, settings) { tmux, script in
            try await waitForFrame(tmux)
            try await tmux.run(["send-keys", "-t", "top", "C-c"])
            try await expectRestored(tmux, script, status: 130)

            try await script.start(tmux)
            try await waitForFrame(tmux)
            let pid = try script.pid()
            #expect(kill(pid, SIGTERM) == 0)
            try await expectRestored(tmux, script, status: 143, after: 2)
        }
    }

    /// Redis going away is shown in the frame and top keeps running and trying; when Redis is
    /// back, so is the data.
    @Test(.enabled(if: RedisServer.clusterPrimaries == nil, "stops and restarts the one Redis: on one Redis only (ACTIVITYCAST_TEST_REDIS_CLUSTER)"))
    func redisDownIsShownAndTopKeepsTrying() async throws {
        let server = try await RedisServer()
        let settings = try testSettings(server)
        let sports = try #require(settings.feeds.first { $0.kind == .sports }).stream
        try await withTop(server, settings) { tmux, script in
            try await waitForFrame(tmux)
            await server.stop()
            var screen = ""
            #expect(try await eventually(timeout: .seconds(15)) {
                screen = try await tmux.capture()
                return screen.split(separator: "\n").dropFirst().first?.hasPrefix("Redis unreachable: ") == true
            }, "\(screen)")
            try await Task.sleep(for: .seconds(2))
            let pid = try script.pid()
            #expect(kill(pid, 0) == 0, "top exited while Redis was down")
            #expect(try await tmux.modes().alternateScreen)
            #expect(try await tmux.capture().contains("Redis unreachable: "))

            try await server.start()
            #expect(try await eventually(timeout: .seconds(15)) {
                screen = try await tmux.capture()
                return !screen.contains("Redis unreachable") && pick(row(screen, sports), 1...1) == ["missing"]
            }, "\(screen)")
            try await tmux.run(["send-keys", "-t", "top", "q"])
            try await expectRestored(tmux, script, status: 0)
        }
    }

    // MARK: Helpers

    /// The whitespace-separated cells of the first frame row whose first cell is `first`.
    func row(_ lines: [String], _ first: String) -> [String]? {
        for line in lines {
            let cells = line.split(separator: " ").map(String.init)
            if cells.first == first { return cells }
        }
        return nil
    }

    func row(_ screen: String, _ first: String) -> [String]? {
        row(screen.split(separator: "\n").map(String.init), first)
    }

    /// The cells at `indices` ("" where the row is shorter or missing).
    func pick(_ cells: [String]?, _ indices: ClosedRange<Int>) -> [String] {
        indices.map { i in cells.flatMap { i < $0.count ? $0[i] : nil } ?? "" }
    }

    /// A worker process serving its ops endpoints on a free loopback port.
    func opsWorker(_ server: RedisServer, _ settings: [String: String]) async throws -> (ChildProcess, Int) {
        for _ in 0..<5 {
            let port = freeLoopbackPort()
            var env = settings
            env["ops.listen"] = "127.0.0.1:\(port)"
            let child = try startActivitycast(["worker", "--consumer", "top-w"], redis: server, settings: env, logName: "top-w")
            let up = await eventually(timeout: .seconds(20)) { child.stderr.contains("ops endpoints listening") || !child.isRunning }
            if up, child.isRunning { return (child, port) }
            _ = await child.stop()
            child.removeLogs()
        }
        throw RedisServerError(description: "no worker could listen")
    }

    /// A script the tmux shell sources: it runs top in a subshell (its PID in a file), then
    /// echoes top's exit status and whether the terminal modes (`stty -g`) are what they were.
    struct TopScript {
        let directory: TemporaryDirectory
        var path: String { "\(directory.path)/top.sh" }
        var pidFile: String { "\(directory.path)/top.pid" }

        init(server: RedisServer, prefix: String) throws {
            directory = try TemporaryDirectory()
            let script = """
                s=$(stty -g)
                (echo $BASHPID > \(pidFile); export ACTIVITYCAST_PREFIX=\(prefix); exec \(try activitycastExecutable()) top --redis \(server.urlString) --interval 0.3)
                rc=$?
                [ "$s" = "$(stty -g)" ] && t=same || t=changed
                echo "TOP-EXITED rc=$rc tty=$t"

                """
            try script.write(toFile: path, atomically: true, encoding: .utf8)
        }

        func start(_ tmux: TmuxSession) async throws {
            try? FileManager.default.removeItem(atPath: pidFile)
            try await tmux.run(["send-keys", "-t", "top", "-l", ". \(path)"])
            try await tmux.run(["send-keys", "-t", "top", "Enter"])
        }

        func pid() throws -> pid_t {
            let text = try String(contentsOfFile: pidFile, encoding: .utf8)
            return try #require(pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
    }

    /// Runs top in a fresh private tmux server (120 × 40) for `body`; the server is killed by its
    /// socket afterwards, whatever happened.
    func withTop(_ server: RedisServer, _ settings: Settings, _ body: (TmuxSession, TopScript) async throws -> Void) async throws {
        let script = try TopScript(server: server, prefix: settings.prefix)
        defer { script.directory.remove() }
        let tmux = try await TmuxSession(width: 120, height: 40)
        do {
            try await script.start(tmux)
            try await body(tmux, script)
        } catch {
            await tmux.kill()
            throw error
        }
        await tmux.kill()
    }

    func waitForFrame(_ tmux: TmuxSession) async throws {
        var screen = ""
        let up = try await eventually(timeout: .seconds(20)) {
            screen = try await tmux.capture()
            return screen.hasPrefix("activitycast top") && screen.contains("STREAM")
        }
        #expect(up, "\(screen)")
        if !up { throw RedisServerError(description: "top did not draw a frame") }
    }

    /// After top exits: the shell's own screen again (the marker with top's status, the same
    /// terminal modes, no frame), no alternate screen, the cursor shown.
    func expectRestored(_ tmux: TmuxSession, _ script: TopScript, status: Int32, after seconds: Int = 10) async throws {
        var screen = ""
        let marker = "TOP-EXITED rc=\(status) tty=same"
        #expect(try await eventually(timeout: .seconds(Int64(max(seconds, 10)))) {
            screen = try await tmux.capture()
            return screen.contains(marker)
        }, "\(screen)")
        #expect(try await tmux.modes() == .init(alternateScreen: false, cursorVisible: true))
        #expect(!screen.contains("activitycast top  ") && !screen.contains("STREAM "), "\(screen)")
        // The command line that started top is there again (joined: a narrow window wraps it).
        let history = try await tmux.captureHistory()
        #expect(history.contains(". \(script.path)"), "\(history)")
    }
}

/// A tmux server of its own (`tmux -L <socket>`, no configuration file) with one session, `top`,
/// running an interactive bash at a fixed size. Stopped with `kill-server` on its socket only.
final class TmuxSession: Sendable {
    let socket = "actop-\(UUID().uuidString.prefix(8))"
    let executable: String

    struct Modes: Equatable {
        var alternateScreen: Bool
        var cursorVisible: Bool
    }

    init(width: Int, height: Int) async throws {
        guard let path = ["/usr/bin/tmux", "/usr/local/bin/tmux"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw RedisServerError(description: "tmux not found: install it (bash scripts/install-deps.sh installs it)")
        }
        executable = path
        try await run(["-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "\(width)", "-y", "\(height)",
                       "env PS1='$ ' HISTFILE=/dev/null bash --norc --noprofile -i"])
    }

    @discardableResult
    func run(_ arguments: [String]) async throws -> String {
        let child = try ChildProcess(executable: executable, arguments: ["-L", socket] + arguments, logName: "tmux")
        defer { child.removeLogs() }
        guard let status = await child.waitForExit(timeout: .seconds(10)) else {
            await child.stop()
            throw RedisServerError(description: "tmux \(arguments.joined(separator: " ")) did not finish")
        }
        guard status == 0 else {
            throw RedisServerError(description: "tmux \(arguments.joined(separator: " ")) exited \(status): \(child.stderr)")
        }
        return child.stdout
    }

    func capture() async throws -> String { try await run(["capture-pane", "-p", "-t", "top"]) }

    /// The normal screen with 50 lines of its history, wrapped lines joined: the shell's own lines
    /// whole, whatever the window's width and the prompt's length.
    func captureHistory() async throws -> String { try await run(["capture-pane", "-p", "-J", "-S", "-50", "-t", "top"]) }

    func modes() async throws -> Modes {
        let flags = try await run(["display-message", "-p", "-t", "top", "#{alternate_on} #{cursor_flag}"])
        let parts = flags.split(whereSeparator: \.isWhitespace)
        return Modes(alternateScreen: parts.first == "1", cursorVisible: parts.dropFirst().first == "1")
    }

    /// Kills this server (its socket only) and removes the socket file it leaves behind.
    func kill() async {
        let path = try? await run(["display-message", "-p", "#{socket_path}"]).trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try? await run(["kill-server"])
        if let path, path.hasSuffix("/\(socket)") { try? FileManager.default.removeItem(atPath: path) }
    }
}
