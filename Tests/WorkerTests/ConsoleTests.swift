import Foundation
import RedisClient
import Testing
import TestSupport

/// `activitycast console` as a process, read with curl over HTTP/1.1 on loopback, against a real
/// Redis with real workers and the sandbox after a match.
struct ConsoleClient {
    let port: Int
    let jar: String

    struct Answer {
        var status: Int
        var body: String
        var headers: String
    }

    /// A request with curl: its status, body and headers. `form`: urlencoded fields (a POST).
    func request(_ path: String, form: [(String, String)]? = nil, headers: [String] = [], cookies: Bool = true, raw: String? = nil) async throws -> Answer {
        let headerFile = jar + ".headers"
        var args = ["-s", "--http1.1", "-m", "10", "-D", headerFile, "-o", "-", "-w", "\n%{http_code}"]
        if cookies { args += ["-b", jar, "-c", jar] }
        for h in headers { args += ["-H", h] }
        if let form {
            for (name, value) in form { args += ["--data-urlencode", "\(name)=\(value)"] }
        }
        if let raw { args += ["--data-binary", raw, "-H", "Content-Type: application/x-www-form-urlencoded"] }
        args.append("http://127.0.0.1:\(port)\(path)")
        let curl = try ChildProcess(executable: "/usr/bin/curl", arguments: args, logName: "curl")
        defer { curl.removeLogs() }
        _ = await curl.waitForExit(timeout: .seconds(20))
        var lines = curl.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        return Answer(status: status, body: lines.joined(separator: "\n"), headers: (try? String(contentsOfFile: headerFile, encoding: .utf8)) ?? "")
    }

    /// The CSRF token in a page's forms.
    static func csrf(_ html: String) -> String? {
        guard let r = html.range(of: "name=\"csrf\" value=\"") else { return nil }
        return String(html[r.upperBound...].prefix { $0 != "\"" })
    }
}

/// Starts `activitycast console` on a free port and returns it with its client.
func startConsole(_ redis: RedisServer, _ args: [String] = [], settings: [String: String], token: String? = nil) async throws -> (ChildProcess, ConsoleClient) {
    let child = try startConsoleProcess(redis, args, settings: settings, token: token)
    var port = 0
    _ = await eventually(timeout: .seconds(20)) {
        if let r = child.stdout.range(of: "console listening on http://127.0.0.1:") {
            port = Int(child.stdout[r.upperBound...].prefix { $0.isNumber }) ?? 0
        }
        return port > 0 || !child.isRunning
    }
    let jar = FileManager.default.temporaryDirectory.appendingPathComponent("console-\(UUID().uuidString).jar").path
    return (child, ConsoleClient(port: port, jar: jar))
}

func startConsoleProcess(_ redis: RedisServer, _ args: [String], settings: [String: String], token: String?, listen: String = "127.0.0.1:0") throws -> ChildProcess {
    var env = ["ACTIVITYCAST_REDIS_URL": redis.urlString, "ACTIVITYCAST_OPS_LISTEN": "off"]
    for (k, v) in settings { env["ACTIVITYCAST_" + k.uppercased().replacingOccurrences(of: ".", with: "_")] = v }
    if let token { env["ACTIVITYCAST_CONSOLE_TOKEN"] = token }
    return try ChildProcess(executable: try activitycastExecutable(), arguments: ["console", "--listen", listen] + args,
                            environment: env, logName: "console")
}

extension SendTests {
    @Test func consoleShowsTheQueuesAKeysTrailAndItsDevicesEscaped() async throws {
        let r = try await rig(["--delivery-log", "1000"])
        defer { r.redis.close() }
        let w = try r.worker("w", [:])
        defer { w.removeLogs() }
        let sports = r.settings.feeds[0].stream
        var t = now() - 60_000
        try await register(r, device: "dev-c", key: "match:cs1", activity: "C", token: token("c5"), ts: t, broadcast: true)
        try await register(r, device: "dev-p", key: "match:cs1", activity: "P", token: token("c6"), ts: t)
        #expect(await eventually { await r.drainedAll() })
        var ids: [String] = []
        func add(_ fields: [(String, String)]) async throws {
            ids.append(try #require(try await r.redis.send(RedisCommand("XADD", [sports, "*"] + fields.flatMap { [$0.0, $0.1] })).string))
            #expect(await eventually { await r.drainedAll() })
        }
        t += 1000
        // Team names and players come from the feed: attacker-controlled text.
        try await add([("type", "match.started"), ("ts", String(t)), ("match", "cs1"), ("home", "<script>alert(1)</script>"), ("away", "che")])
        t += 1000
        try await add([("type", "match.moment"), ("ts", String(t)), ("match", "cs1"), ("moment", "goal"), ("team", "home"),
                       ("player", "<img src=x onerror=alert(2)>"), ("home_score", "1"), ("away_score", "0"), ("clock", "10'")])

        let (console, client) = try await startConsole(r.server, settings: ["prefix": r.settings.prefix])
        defer { console.removeLogs() }
        #expect(client.port > 0, "\(console.stdout) \(console.stderr)")

        let overview = try await client.request("/")
        #expect(overview.status == 200 && overview.body.contains(sports) && overview.body.contains(">lag<") && overview.body.contains(">pending<"),
                "\(overview.status) \(overview.body.prefix(2000))")
        #expect(overview.headers.lowercased().contains("content-security-policy: default-src 'none'"), "\(overview.headers)")
        let live = try await client.request("/overview/live")
        #expect(live.status == 200 && live.body.contains(sports) && !live.body.contains("<html"), "\(live.body.prefix(500))")

        let keys = try await client.request("/keys")
        #expect(keys.status == 200 && keys.body.contains("href=\"/keys/match:cs1\""), "\(keys.body)")
        let found = try await client.request("/keys?q=cs")
        #expect(found.body.contains("href=\"/keys/match:cs1\"") && found.body.contains("the whole index read"), "\(found.body)")

        let key = try await client.request("/keys/match:cs1")
        #expect(key.status == 200, "\(key.body)")
        for id in ids { #expect(key.body.contains(id), "entry \(id) not on the key's page") }
        #expect(key.body.contains("href=\"/keys/match:cs1/devices/dev-p\"") && key.body.contains("href=\"/keys/match:cs1/devices/dev-c\""), "\(key.body)")
        // The feed's text is shown as text, never as markup.
        #expect(key.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !key.body.contains("<script>alert"), "\(key.body)")
        #expect(!key.body.contains("<img src=x"))

        let device = try await client.request("/keys/match:cs1/devices/dev-p")
        let accepted = try await r.sandbox.deviceDeliveries().filter { $0.target == token("c6") }
        #expect(device.status == 200 && device.body.contains("Pushes: \(accepted.count)") && !accepted.isEmpty, "\(accepted) \(device.body)")
        let devicePage = try await client.request("/devices/dev-p")
        #expect(devicePage.status == 200 && devicePage.body.contains("match:cs1"), "\(devicePage.body)")
        #expect(try await client.request("/devices/nobody").status == 404)
        #expect(try await client.request("/keys/not-a-key").status == 404)
        for page in ["/budgets", "/channels", "/deadletters", "/budgets?sort=tokens&desc=1"] {
            #expect(try await client.request(page).status == 200, "\(page)")
        }
        // Read-only: no action is taken.
        #expect(try await client.request("/deadletters/action", form: [("do", "discard"), ("id", "1-1")]).status == 403)
        #expect(await console.stop() == 0, "\(console.stderr)")
        #expect(await w.stop() == 0)
    }

    @Test func consoleActionsNeedTheTokenAndTheFormsCSRFAndReplayReachesTheStream() async throws {
        let r = try await rig([])
        defer { r.redis.close() }
        let w = try r.worker("w", [:])
        defer { w.removeLogs() }
        let sports = r.settings.feeds[0].stream
        // Two malformed entries: two dead letters.
        for score in ["two", "three"] {
            _ = try await r.redis.send(RedisCommand("XADD", sports, "*", "type", "match.score", "ts", String(now()), "match", "dl1",
                                                    "home_score", score, "away_score", "0"))
        }
        let dlq = r.settings.deadLetterStream
        #expect(await eventually { (try? await r.redis.send(RedisCommand("XLEN", dlq)).int) == 2 })
        let letters = try #require(try await r.redis.send(RedisCommand("XRANGE", dlq, "-", "+")).array).compactMap { $0.array?.first?.string }
        #expect(await w.stop() == 0)

        let token = "operator-token-0123456789"
        let (console, client) = try await startConsole(r.server, ["--allow-actions"], settings: ["prefix": r.settings.prefix], token: token)
        defer { console.removeLogs() }
        #expect(client.port > 0, "\(console.stderr)")
        let list = try await client.request("/deadletters?reason=home_score")
        #expect(list.status == 200 && letters.allSatisfy { list.body.contains($0) } && !list.body.contains("name=\"do\""), "\(list.body)")
        // No token: refused, nothing done.
        #expect(try await client.request("/deadletters/action", form: [("do", "discard"), ("id", letters[0])]).status == 401)
        #expect(try await client.request("/login", form: [("token", "wrong-token-0123456789")]).status == 401)
        let signedIn = try await client.request("/login", form: [("token", token)])
        #expect(signedIn.status == 303 && signedIn.headers.contains("activitycast_session="), "\(signedIn.headers)")
        #expect(signedIn.headers.lowercased().contains("httponly") && signedIn.headers.lowercased().contains("samesite=strict"), "\(signedIn.headers)")
        // Signed in, but without the form's CSRF token: refused.
        #expect(try await client.request("/deadletters/action", form: [("do", "replay"), ("id", letters[0])]).status == 403)
        let page = try await client.request("/deadletters/\(letters[0])")
        let csrf = try #require(ConsoleClient.csrf(page.body), "\(page.body)")
        let replayed = try await client.request("/deadletters/action", form: [("csrf", csrf), ("do", "replay"), ("id", letters[0])])
        #expect(replayed.status == 200 && replayed.body.contains("Replayed 1 of 1."), "\(replayed.body)")
        let stream = try #require(try await r.redis.send(RedisCommand("XRANGE", sports, "-", "+")).array)
        let copies = stream.filter { e in (e.array?.last?.array ?? []).compactMap(\.string).contains(letters[0]) }
        #expect(copies.count == 1, "the replay reached the stream with x-replayed-from: \(stream)")
        // Again: refused, the letter was replayed.
        let again = try await client.request("/deadletters/action", form: [("csrf", csrf), ("do", "replay"), ("id", letters[0])])
        #expect(again.body.contains("Replayed 0 of 1."), "\(again.body)")
        // The bearer header needs no CSRF token (a browser never sends it by itself).
        let discarded = try await client.request("/deadletters/action", form: [("do", "discard"), ("id", letters[1])],
                                                 headers: ["Authorization: Bearer \(token)"], cookies: false)
        #expect(discarded.status == 200 && discarded.body.contains("Discarded 1 of 1."), "\(discarded.body)")
        #expect(try await r.redis.send(RedisCommand("XLEN", dlq)).int == 1)
        // "All matching" with no filter is every letter: only when the form says so.
        let unconfirmed = try await client.request("/deadletters/action", form: [("do", "discard-all")],
                                                   headers: ["Authorization: Bearer \(token)"], cookies: false)
        #expect(unconfirmed.status == 400 && unconfirmed.body.contains("every dead letter read"), "\(unconfirmed.body)")
        #expect(try await r.redis.send(RedisCommand("XLEN", dlq)).int == 1)
        // An oversized form is refused without disturbing the console.
        let big = try await client.request("/deadletters/action", headers: ["Authorization: Bearer \(token)"], cookies: false,
                                           raw: "do=discard&id=" + String(repeating: "x", count: 100_000))
        #expect(big.status == 413, "\(big.status)")
        #expect(try await client.request("/").status == 200)
        #expect(console.stderr.contains("console discarded dead letters") && console.stderr.contains("console replayed dead letters"), "\(console.stderr)")
        #expect(await console.stop() == 0, "\(console.stderr)")
    }

    @Test func consoleRefusesToStartBeyondLoopbackWithoutAToken() async throws {
        let server = try await RedisServer()
        let open = try startConsoleProcess(server, [], settings: [:], token: nil, listen: "0.0.0.0:0")
        defer { open.removeLogs() }
        #expect(await open.waitForExit(timeout: .seconds(20)) != 0)
        #expect(open.stderr.contains("beyond loopback"), "\(open.stderr)")
        let actions = try startConsoleProcess(server, ["--allow-actions"], settings: [:], token: nil)
        defer { actions.removeLogs() }
        #expect(await actions.waitForExit(timeout: .seconds(20)) != 0)
        #expect(actions.stderr.contains("needs the operator token"), "\(actions.stderr)")
        await server.stop()
    }
}
