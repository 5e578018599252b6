import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import OpenSSLKit
import Testing
import TestSupport

/// What a device shows after a series of pushes, and what the log records.
@Suite struct DeviceViewTests {
    let f: Fixture
    /// A provider token for an hour later, when the default one has expired (minted once: each
    /// mint is a different string, and a connection may not change tokens often).
    let laterBearer: String
    init() throws {
        f = try Fixture()
        laterBearer = try f.bearer(ageSeconds: -3600 + 60)
    }

    @discardableResult
    private func send(_ s: SandboxState, _ body: [UInt8], priority: String = "10", at: Int64 = Fixture.now,
                      token: String = Fixture.token) throws -> SandboxResponse {
        var headers = try f.deviceHeaders(priority: priority)
        // Past the hour, the default provider token has expired: a fresh one, as a server would.
        if at >= Fixture.now + 3_600_000 { headers.set("authorization", laterBearer) }
        let r = s.handle(try f.devicePush(token: token, headers: headers, body: body), nowMillis: at)
        #expect(r.status == 200, "\(String(decoding: r.body, as: UTF8.self))")
        return r
    }

    /// Past `maxTrackedDevices` the view made first is forgotten for each new token (a push to a
    /// token it already has keeps its place), and the pushes themselves are still accepted.
    @Test func theOldestViewIsForgottenPastTheTrackedLimit() throws {
        let s = f.sandbox { $0.maxTrackedDevices = 3 }
        let tokens = ["a1", "b2", "c3", "d4", "e5"].map { String(repeating: $0, count: 32) }
        for t in tokens.prefix(4) { #expect(try send(s, update(timestamp: 100), token: t).status == 200) }
        #expect(s.deviceView(token: tokens[0]) == nil)
        #expect(tokens[1...3].allSatisfy { s.deviceView(token: $0) != nil })
        #expect(try send(s, update(timestamp: 101), token: tokens[1]).status == 200)
        #expect(try send(s, update(timestamp: 100), token: tokens[4]).status == 200)
        #expect(s.deviceView(token: tokens[1]) == nil)
        #expect([2, 3, 4].allSatisfy { s.deviceView(token: tokens[$0]) != nil })
        #expect(s.stats.devicePushes == 6)
    }

    @Test func successCarriesApnsIDAndUniqueIDInDevelopment() throws {
        let s = f.sandbox()
        let given = "6f1c63b5-9f0c-4d2c-9a4e-3b1d3b9e2a10"
        let r = s.handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-id", given)), nowMillis: Fixture.now)
        #expect(r.status == 200 && r.body.isEmpty)
        #expect(r.header("apns-id") == given)
        let unique = try #require(r.header("apns-unique-id"))
        #expect(unique.count == 36 && unique == unique.lowercased())
        // Without apns-id, a fresh lowercase UUID each time.
        let a = try send(s, update(timestamp: 101)).header("apns-id"), b = try send(s, update(timestamp: 102)).header("apns-id")
        #expect(a != nil && a != b && a == a?.lowercased() && a?.count == 36)
        // Errors carry apns-id too; production answers without apns-unique-id.
        let e = s.handle(try f.devicePush(body: []), nowMillis: Fixture.now)
        #expect(e.status == 400 && e.header("apns-id") != nil && e.header("apns-unique-id") == nil)
        let prod = f.sandbox { $0.environment = .production }
        let p = prod.handle(try f.devicePush(), nowMillis: Fixture.now)
        #expect(p.status == 200 && p.header("apns-id") != nil && p.header("apns-unique-id") == nil)
    }

    @Test func olderTimestampsAreReceivedButNotShown() throws {
        let s = f.sandbox()
        try send(s, update(timestamp: 100, state: ["score": "1-0"]))
        try send(s, update(timestamp: 90, state: ["score": "0-0"]))
        var view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.contentStateJSON == ["score": "1-0"])
        #expect(view.timestamp == 100 && view.timestampRegressionsIgnored == 1)
        #expect(view.pushesReceived == 2 && view.pushesDisplayed == 1)
        // An equal timestamp is shown.
        try send(s, update(timestamp: 100, state: ["score": "2-0"]))
        view = try #require(s.deviceView(token: Fixture.token.uppercased()))
        #expect(view.contentStateJSON == ["score": "2-0"])
        let log = s.recentDeliveries(limit: 10)
        #expect(log.map(\.displayed) == [true, false, true])
        #expect(log.map(\.timestamp) == [100, 90, 100])
        #expect(s.stats.notDisplayed == 1)
    }

    @Test func endDismissesAndLaterUpdatesAreIgnored() throws {
        let s = f.sandbox()
        try send(s, update(timestamp: 100))
        try send(s, end(timestamp: 200, state: ["score": "2-1"], dismissal: 5000))
        var view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.state == .ended && view.dismissalDate == 5000 && view.endedAtMillis == Fixture.now)
        #expect(view.contentStateJSON == ["score": "2-1"] && view.lastEvent == .end)
        try send(s, update(timestamp: 300, state: ["score": "3-1"]))
        view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.contentStateJSON == ["score": "2-1"] && view.ignoredAfterEnd == 1)
        // dismissal-date is only allowed with end.
        let bad = bytes(#"{"aps":{"event":"update","timestamp":400,"content-state":{},"dismissal-date":1}}"#)
        #expect(s.handle(try f.devicePush(body: bad), nowMillis: Fixture.now).reason == "BadRequestPayload")
    }

    @Test func pushToStartIsCountedAndStartsANewActivity() throws {
        let s = f.sandbox()
        try send(s, end(timestamp: 50))
        try send(s, start(timestamp: 60))
        let view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.state == .active && view.startsReceived == 1 && view.startsThisHour == 1)
        #expect(view.attributesType == "MatchAttributes" && view.inputPushToken)
        #expect(view.lastAlertJSON == ["title": "Kick-off", "body": "ARS v CHE"])
        #expect(view.contentStateJSON == ["score": "0-0"] && view.timestamp == 60)
        // A start without an alert is refused.
        let noAlert = bytes(#"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"A","attributes":{}}}"#)
        #expect(s.handle(try f.devicePush(body: noAlert), nowMillis: Fixture.now).reason == "BadRequestPayload")
    }

    @Test func priorityTenSpendsTheHourlyBudget() throws {
        let s = f.sandbox { $0.deviceBudgetPerHour = [.standard: 3, .frequent: 6] }
        for i in 0..<5 { try send(s, update(timestamp: Int64(100 + i))) }
        for i in 0..<4 { try send(s, update(timestamp: Int64(200 + i)), priority: "5") }
        var view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.tier == .standard && view.budgetPerHour == 3)
        #expect(view.priority10ThisHour == 5 && view.priority5ThisHour == 4)
        #expect(view.overBudgetThisHour == 2 && view.overBudgetTotal == 2)
        // Still shown: APNs answered 200 and the device throttles rather than drops.
        #expect(view.pushesDisplayed == 9)
        #expect(s.recentDeliveries(limit: 9).map(\.overBudget) == [false, false, false, true, true, false, false, false, false])
        #expect(s.stats.overBudget == 2)

        // An hour later the budget is fresh.
        try send(s, update(timestamp: 300), at: Fixture.now + 3_600_000)
        view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.priority10ThisHour == 1 && view.overBudgetThisHour == 0 && view.overBudgetTotal == 2)

        // A frequent-tier token gets the larger budget (admin override).
        let other = String(repeating: "cd", count: 32)
        s.setTier(.frequent, token: other)
        for i in 0..<7 { try send(s, update(timestamp: Int64(400 + i)), at: Fixture.now + 3_600_000, token: other) }
        let frequent = try #require(s.deviceView(token: other))
        #expect(frequent.tier == .frequent && frequent.budgetPerHour == 6 && frequent.overBudgetThisHour == 1)
    }

    @Test func tierOverridesFromConfiguration() throws {
        let s = f.sandbox { $0.tierOverrides = [Fixture.token.uppercased(): .frequent] }
        try send(s, update(timestamp: 1))
        #expect(s.deviceView(token: Fixture.token)?.budgetPerHour == 120)
        #expect(s.deviceView(token: String(repeating: "ef", count: 32)) == nil)
    }

    @Test func theDeliveryLogIsABoundedRing() throws {
        let s = f.sandbox { $0.deliveryLogCapacity = 5 }
        for i in 0..<12 {
            let id = "00000000-0000-4000-8000-0000000000" + (i < 10 ? "0\(i)" : "\(i)")
            let r = s.handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-id", id).with("apns-expiration", "0")
                                                .with("apns-collapse-id", "c"), body: update(timestamp: Int64(i))), nowMillis: Fixture.now + Int64(i))
            #expect(r.status == 200)
        }
        let log = s.recentDeliveries(limit: 100)
        #expect(log.count == 5)
        #expect(log.map(\.timeMillis) == (7..<12).map { Fixture.now + Int64($0) })
        #expect(log.last?.apnsID == "00000000-0000-4000-8000-000000000011")
        #expect(log.last?.kind == .device && log.last?.target == Fixture.token && log.last?.priority == 10)
        #expect(log.last?.event == .update && log.last?.expiration == 0 && log.last?.collapseID == "c")
        #expect(s.recentDeliveries(limit: 2).map(\.timestamp) == [10, 11])
    }

    @Test func headerValuesAreReadExactlyFromTheirBytes() throws {
        let s = f.sandbox()
        let id = "6f1c63b5-9f0c-4d2c-9a4e-3b1d3b9e2a10"
        let ok = s.handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-id", id).with("apns-expiration", "9223372036854775807"),
                                           body: update(timestamp: 1)), nowMillis: Fixture.now)
        #expect(ok.status == 200 && ok.header("apns-id") == id)
        #expect(s.recentDeliveries(limit: 1).first?.apnsID == id && s.recentDeliveries(limit: 1).first?.expiration == Int64.max)
        for bad in ["9223372036854775808", "99999999999999999999", "", "1e3", "+5"] {
            let r = s.handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-expiration", bad), body: update(timestamp: 2)),
                             nowMillis: Fixture.now)
            #expect(r.status == 400 && r.body == Array(#"{"reason":"BadExpirationDate"}"#.utf8), "apns-expiration \(bad)")
        }
        let generated = try #require(s.handle(try f.devicePush(body: update(timestamp: 3)), nowMillis: Fixture.now).header("apns-id"))
        #expect(generated.count == 36 && generated == generated.lowercased() && generated != id)
    }

    @Test func aTokenBelongsToOneApp() throws {
        let s = f.sandbox { $0.bundleIDs = [Fixture.bundle, "com.example.other"] }
        try send(s, update(timestamp: 1))
        let h = try f.deviceHeaders().with("apns-topic", "com.example.other.push-type.liveactivity")
        #expect(s.handle(try f.devicePush(headers: h), nowMillis: Fixture.now).reason == "DeviceTokenNotForTopic")
        #expect(s.deviceView(token: Fixture.token)?.bundleID == Fixture.bundle)
    }

    /// An update or start that changes nothing the activity shows is a repeated state: the
    /// content-state compared as a JSON value (key order, spacing and number spelling aside),
    /// with the stale date and relevance score. Whatever changes one of them, or ends the
    /// activity, is not.
    @Test func repeatedStatesAreWhatTheDeviceAlreadyShows() throws {
        let s = f.sandbox()
        func push(_ json: String) throws { try send(s, bytes(json)) }
        func repeated() -> Int { s.deviceView(token: Fixture.token)?.repeatedStates ?? -1 }
        try push(#"{"aps":{"event":"update","timestamp":100,"content-state":{"home":1,"away":0,"last":{"kind":"goal","by":"Saka"}}}}"#)
        #expect(repeated() == 0)
        // The same state spelled differently, a millisecond later (a moment, then its score).
        try push(#"{"aps":{"timestamp":100.001,"content-state":{ "last":{"by":"Sa\u006ba","kind":"goal"},"away":0.0,"home":1e0},"event":"update"}}"#)
        #expect(repeated() == 1)
        // Any value that differs is a change.
        try push(#"{"aps":{"event":"update","timestamp":101,"content-state":{"home":1,"away":0,"last":{"kind":"goal","by":"Rice"}}}}"#)
        try push(#"{"aps":{"event":"update","timestamp":102,"content-state":{"home":1,"away":0,"last":{"kind":"goal","by":"Rice"},"clock":"12'"}}}"#)
        try push(#"{"aps":{"event":"update","timestamp":103,"content-state":{"home":1,"away":0,"last":{"kind":"goal","by":"Rice"},"clock":"12'"},"stale-date":5000}}"#)
        try push(#"{"aps":{"event":"update","timestamp":104,"content-state":{"home":1,"away":0,"last":{"kind":"goal","by":"Rice"},"clock":"12'"},"stale-date":5000,"relevance-score":50}}"#)
        #expect(repeated() == 1)
        // Without a stale date or relevance score, an update keeps the shown ones: nothing changes.
        try push(#"{"aps":{"event":"update","timestamp":105,"content-state":{"clock":"12'","home":1,"away":0,"last":{"kind":"goal","by":"Rice"}}}}"#)
        // An older push with the shown state was sent for nothing too.
        try push(#"{"aps":{"event":"update","timestamp":90,"content-state":{"clock":"12'","home":1,"away":0,"last":{"kind":"goal","by":"Rice"}}}}"#)
        #expect(repeated() == 3)
        // An end with the shown state ends the activity: never a repeat; nor is anything after it.
        try push(#"{"aps":{"event":"end","timestamp":106,"content-state":{"clock":"12'","home":1,"away":0,"last":{"kind":"goal","by":"Rice"}}}}"#)
        try push(#"{"aps":{"event":"update","timestamp":107,"content-state":{"clock":"12'","home":1,"away":0,"last":{"kind":"goal","by":"Rice"}}}}"#)
        #expect(repeated() == 3)
        // A start begins a new activity on an ended one; the same start again repeats it.
        try send(s, start(timestamp: 200))
        try send(s, start(timestamp: 201))
        let view = try #require(s.deviceView(token: Fixture.token))
        #expect(view.repeatedStates == 4 && view.pushesReceived == 12 && view.repeatedAlerts == 0)
        #expect(s.stats.repeatedStates == 4)
        let json = admin(s, "/sandbox/devices/\(Fixture.token)")
        #expect(json["repeatedStates"] as? Int == 4 && json["repeatedAlerts"] as? Int == 0)
        #expect(admin(s, "/sandbox/stats")["repeatedStates"] as? Int == 4)
    }

    /// Content-states equal as JSON values, however spelled, and ones that differ.
    static let sameStates: [(String, String)] = [
        (#"{"a":1,"b":2}"#, #"{"b":2,"a":1}"#),
        (#"{"a":1}"#, #"{ "a" : 1.0 }"#), (#"{"a":1}"#, #"{"a":1e0}"#), (#"{"a":1}"#, #"{"a":10E-1}"#), (#"{"a":-0}"#, #"{"a":0}"#),
        (#"{"a":"é/"}"#, #"{"a":"\u00e9\/"}"#),
        (#"{"a":[1,{"x":null,"y":true}]}"#, #"{"a":[1.0,{"y":true,"x":null}]}"#),
        (#"{"a":1,"a":2}"#, #"{"a":2}"#),
        (#"{"a":12345678901234567890}"#, #"{"a":1.2345678901234567890e19}"#),
    ]
    static let differentStates: [(String, String)] = [
        (#"{"a":1}"#, #"{"a":"1"}"#), (#"{"a":[1,2]}"#, #"{"a":[2,1]}"#), (#"{"a":1}"#, #"{"a":1,"b":null}"#),
        (#"{"a":true}"#, #"{"a":false}"#), (#"{"a":{}}"#, #"{"a":[]}"#), (#"{"a":[[]]}"#, #"{"a":[]}"#),
        (#"{"a":"x","b":"y"}"#, #"{"a":"y","b":"x"}"#), (#"{"a":{"b":1}}"#, #"{"b":{"a":1}}"#),
        (#"{"a":9007199254740993}"#, #"{"a":9007199254740992}"#), (#"{"a":1.5}"#, #"{"a":1}"#),
        // Code points, not Unicode equivalence: a decoder keeps them apart.
        (#"{"a":"e\u0301"}"#, #"{"a":"é"}"#),
    ]

    @Test(arguments: sameStates.map { ($0, true) } + differentStates.map { ($0, false) })
    func contentStatesCompareAsJSONValues(_ pair: (String, String), same: Bool) throws {
        let s = f.sandbox()
        try send(s, bytes(#"{"aps":{"event":"update","timestamp":1,"content-state":\#(pair.0)}}"#))
        try send(s, bytes(#"{"aps":{"event":"update","timestamp":2,"content-state":\#(pair.1)}}"#))
        #expect(s.deviceView(token: Fixture.token)?.repeatedStates == (same ? 1 : 0), "\(pair.0) vs \(pair.1)")
    }

    /// An alert received again for the same event (its `aps.timestamp`), the alert being the
    /// same JSON value, is a repeated alert: a retry or a takeover that sent it twice.
    @Test func repeatedAlertsAreTheSameEventsAlertReceivedAgain() throws {
        let s = f.sandbox()
        func push(_ ts: String, _ alert: String, state: String = #"{"stop":"Market Sq"}"#) throws {
            try send(s, bytes(#"{"aps":{"event":"update","timestamp":\#(ts),"content-state":\#(state),"alert":\#(alert)}}"#))
        }
        func repeated() -> Int { s.deviceView(token: Fixture.token)?.repeatedAlerts ?? -1 }
        try push("100", #"{"title":"Next stop","body":"Market Sq"}"#)
        try send(s, update(timestamp: 110, state: ["stop": "Market Sq", "eta": 3]))
        #expect(repeated() == 0)
        // The same event's alert again, keys in another order, after a later update: a repeat
        // (though older than what the device shows, it reached the device).
        try push("100", #"{ "body":"Market Sq", "title":"Next stop" }"#)
        #expect(repeated() == 1)
        // The same alert for another event, or another alert for the same event, is not.
        try push("120", #"{"title":"Next stop","body":"Market Sq"}"#)
        try push("100", #"{"title":"Next stop","body":"Market Square"}"#)
        try push("100", #""Next stop: Market Sq""#)
        #expect(repeated() == 1)
        try push("100", #""Next stop: Market Sq""#)
        #expect(repeated() == 2)
        // A view keeps the last `recentAlertsKept` alerts it received.
        for i in 0..<DeviceView.recentAlertsKept { try push("\(200 + i)", #"{"title":"Stop \#(i)","body":"x"}"#) }
        try push("120", #"{"title":"Next stop","body":"Market Sq"}"#)
        try push("\(200 + DeviceView.recentAlertsKept - 1)", #"{"title":"Stop \#(DeviceView.recentAlertsKept - 1)","body":"x"}"#)
        #expect(repeated() == 3)
        #expect(s.stats.repeatedAlerts == 3)
        #expect(admin(s, "/sandbox/devices/\(Fixture.token)")["repeatedAlerts"] as? Int == 3)
        #expect(admin(s, "/sandbox/stats")["repeatedAlerts"] as? Int == 3)
    }

    /// A channel's view counts both too: a broadcast of the state it shows, and an alert it
    /// already broadcast for the event.
    @Test func channelsCountRepeatsToo() throws {
        let s = f.sandbox()
        let channel = try f.createChannel(s, policy: 0)
        let goal = LiveActivityPayload(event: .update, timestamp: 500, contentState: ["home": 1, "away": 0],
                                       alert: .init(title: "Goal", body: "ARS 1-0")).encoded()
        let score = LiveActivityPayload(event: .update, timestamp: 501, contentState: ["away": 0, "home": 1]).encoded()
        for body in [goal, score, goal] {
            #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel), body: body), nowMillis: Fixture.now).status == 200)
        }
        let view = try #require(s.channelView(id: channel))
        #expect(view.repeatedStates == 2 && view.repeatedAlerts == 1)
        #expect(s.stats.repeatedStates == 2 && s.stats.repeatedAlerts == 1)
        let path = "/sandbox/channels/\(channel.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? channel)"
        #expect(admin(s, path)["repeatedStates"] as? Int == 2 && admin(s, path)["repeatedAlerts"] as? Int == 1)
    }

    /// The same through a real `activitycast sandbox` process, over TLS and HTTP/2: pushes with
    /// curl signed by the sandbox's development key, the counts read from its admin API.
    @Test func repeatsThroughARealSandboxProcess() async throws {
        let sandbox = try await SandboxProcess(arguments: ["--threads", "1"])
        let key = try ES256PrivateKey(pemFile: "\(sandbox.directory.path)/AuthKey_SANDBOXK01.p8")
        let signer = ProviderTokenSigner(key: key, identity: try ProviderIdentity(keyID: "SANDBOXK01", teamID: "SANDBOXTM1"))
        let jwt = try signer.token(issuedAt: Int64(Date().timeIntervalSince1970)).value
        let token = String(repeating: "7e", count: 32)
        let goal = #"{"aps":{"event":"update","timestamp":1000,"content-state":{"home":1,"away":0},"alert":{"title":"Goal","body":"1-0"}}}"#
        let score = #"{"aps":{"event":"update","timestamp":1000.001,"content-state":{"away":0,"home":1}}}"#
        // Three requests on one connection (curl's --next keeps it): the goal, its score, the goal re-sent.
        var arguments: [String] = []
        for (i, body) in [goal, score, goal].enumerated() {
            if i > 0 { arguments.append("--next") }
            arguments += ["-s", "-o", "/dev/null", "-w", "%{http_code}\n", "--http2", "--cacert", "\(sandbox.directory.path)/cert.pem",
                          "-H", "authorization: bearer \(jwt)", "-H", "apns-push-type: liveactivity",
                          "-H", "apns-topic: com.example.activitycast.push-type.liveactivity", "-H", "apns-priority: 10",
                          "--data-binary", body, "https://127.0.0.1:\(sandbox.port)/3/device/\(token)"]
        }
        let curl = try ChildProcess(executable: "/usr/bin/curl", arguments: arguments, logName: "curl-push")
        defer { curl.removeLogs() }
        #expect(await curl.waitForExit(timeout: .seconds(20)) == 0, "\(curl.stderr)")
        #expect(curl.stdout == "200\n200\n200\n", "\(curl.stdout)")
        let view = try #require(try await sandbox.get("/sandbox/devices/\(token)"))
        #expect(view["pushesReceived"] as? Int == 3)
        #expect(view["repeatedStates"] as? Int == 2 && view["repeatedAlerts"] as? Int == 1, "\(view)")
        let stats = try #require(try await sandbox.get("/sandbox/stats"))
        #expect(stats["repeatedStates"] as? Int == 2 && stats["repeatedAlerts"] as? Int == 1, "\(stats)")
        #expect(await sandbox.child.stop() == 0)
    }

    private func admin(_ s: SandboxState, _ path: String) -> [String: Any] {
        s.handle(SandboxRequest(method: "GET", path: path, body: []), nowMillis: Fixture.now).json ?? [:]
    }
}
