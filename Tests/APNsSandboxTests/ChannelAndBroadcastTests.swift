import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import Testing

@Suite struct ChannelTests {
    let f: Fixture
    init() throws { f = try Fixture() }
    let now = Fixture.now

    @Test func lifecycle() throws {
        let s = f.sandbox()
        let requestID = "0C5D5E3A-7F64-4D62-9C0B-5E8C3D6A1B2F"
        var create = try f.channelRequest("POST", body: Fixture.createBody(policy: 1))
        create.headers.append(name: "apns-request-id", value: requestID)
        let created = s.handle(create, nowMillis: now)
        #expect(created.status == 201 && created.body.isEmpty)
        #expect(created.header("apns-request-id") == requestID)
        let id = try #require(created.header("apns-channel-id"))
        #expect(Data(base64Encoded: id)?.count == 16)

        let read = s.handle(try f.channelRequest("GET", channel: id), nowMillis: now)
        #expect(read.status == 200)
        #expect(read.json?["message-storage-policy"] as? Int == 1 && read.json?["push-type"] as? String == "LiveActivity")
        #expect(read.header("apns-request-id") != nil)

        let second = try f.createChannel(s, policy: 0)
        let list = s.handle(try f.channelRequest("GET", all: true), nowMillis: now)
        #expect(list.status == 200 && list.json?["channels"] as? [String] == [id, second])

        let deleted = s.handle(try f.channelRequest("DELETE", channel: id), nowMillis: now)
        #expect(deleted.status == 204 && deleted.body.isEmpty)
        // Deletion is final.
        #expect(s.handle(try f.channelRequest("GET", channel: id), nowMillis: now).reason == "ChannelNotRegistered")
        #expect(s.handle(try f.channelRequest("DELETE", channel: id), nowMillis: now).reason == "ChannelNotRegistered")
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: id, expiration: "1732240000")), nowMillis: now)
            .reason == "ChannelNotRegistered")
        #expect(s.handle(try f.channelRequest("GET", all: true), nowMillis: now).json?["channels"] as? [String] == [second])
        #expect(s.channelView(id: id)?.deleted == true)
        #expect(s.stats.channelsCreated == 2 && s.stats.channelsDeleted == 1)
    }

    @Test func theChannelLimitCountsLiveChannelsPerApp() throws {
        let s = f.sandbox {
            $0.maxChannels = 3
            $0.bundleIDs = [Fixture.bundle, "com.example.other"]
        }
        let ids = try (0..<3).map { _ in try f.createChannel(s, policy: 0) }
        let refused = s.handle(try f.channelRequest("POST", body: Fixture.createBody(policy: 0)), nowMillis: now)
        #expect(refused.status == 400 && refused.reason == "CannotCreateChannelConfig")
        // Another app has its own limit.
        _ = try f.createChannel(s, policy: 0, bundle: "com.example.other")
        // Deleting one makes room.
        #expect(s.handle(try f.channelRequest("DELETE", channel: ids[0]), nowMillis: now).status == 204)
        _ = try f.createChannel(s, policy: 1)
        #expect(s.handle(try f.channelRequest("POST", body: Fixture.createBody(policy: 1)), nowMillis: now).reason == "CannotCreateChannelConfig")
    }

    @Test(arguments: [
        (#"{"push-type":"LiveActivity","message-storage-policy":0}"#, nil),
        ("{ \"message-storage-policy\" : 1 ,\n \"push-type\" : \"LiveActivity\" }", nil),
        (#"{"message-storage-policy":0}"#, "MissingPushType"),
        (#"{"message-storage-policy":0,"push-type":"liveactivity"}"#, "InvalidPushType"),
        (#"{"message-storage-policy":0,"push-type":"Alert"}"#, "InvalidPushType"),
        (#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, "BadRequestParams"),
        (#"{"message-storage-policy":"0","push-type":"LiveActivity"}"#, "BadRequestParams"),
        (#"{"message-storage-policy":0.5,"push-type":"LiveActivity"}"#, "BadRequestParams"),
        (#"{"push-type":"LiveActivity"}"#, "BadRequestParams"),
        (#"{"message-storage-policy":0,"push-type":"LiveActivity","x":1}"#, "BadRequestParams"),
        (#"[]"#, "BadRequestParams"),
        ("", "BadRequestParams"),
        (#"{"message-storage-policy":0,"push-type":"LiveActivity""#, "BadRequestParams"),
    ] as [(String, String?)])
    func createBodies(_ body: String, _ reason: String?) throws {
        let r = f.sandbox().handle(try f.channelRequest("POST", body: bytes(body)), nowMillis: now)
        if let reason {
            #expect(r.status == 400 && r.reason == reason)
        } else {
            #expect(r.status == 201)
        }
    }

    @Test func channelHeadersAndOwnership() throws {
        let s = f.sandbox { $0.bundleIDs = [Fixture.bundle, "com.example.other"] }
        let id = try f.createChannel(s, policy: 0)
        #expect(s.handle(try f.channelRequest("GET"), nowMillis: now).reason == "MissingChannelId")
        #expect(s.handle(try f.channelRequest("GET", channel: "abc"), nowMillis: now).reason == "BadChannelId")
        #expect(s.handle(try f.channelRequest("GET", channel: id, bundle: "com.example.other"), nowMillis: now).reason == "ChannelNotRegistered")
        #expect(s.handle(try f.channelRequest("GET", channel: id, bundle: "com.unknown.app"), nowMillis: now).reason == "TopicDisallowed")
        var badID = try f.channelRequest("GET", channel: id)
        badID.headers.append(name: "apns-request-id", value: "nope")
        #expect(s.handle(badID, nowMillis: now).reason == "BadRequestParams")
        #expect(s.handle(try f.channelRequest("PUT", channel: id), nowMillis: now).reason == "MethodNotAllowed")
        #expect(s.handle(try f.channelRequest("POST", all: true), nowMillis: now).status == 405)
        let noAuth = SandboxRequest(method: "GET", path: "/1/apps/\(Fixture.bundle)/all-channels")
        #expect(s.handle(noAuth, nowMillis: now).reason == "MissingProviderToken")
    }
}

@Suite struct BroadcastTests {
    let f: Fixture
    init() throws { f = try Fixture() }
    let now = Fixture.now

    @Test func expirationRulesFollowTheStoragePolicy() throws {
        let s = f.sandbox()
        let noStorage = try f.createChannel(s, policy: 0)
        let stored = try f.createChannel(s, policy: 1)
        let expires = "1732240000"
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: noStorage, expiration: "0")), nowMillis: now).status == 200)
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: noStorage, expiration: expires)), nowMillis: now)
            .reason == "BadExpirationDate")
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: noStorage, expiration: nil)), nowMillis: now)
            .reason == "BadExpirationDate")
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: stored, expiration: expires)), nowMillis: now).status == 200)
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: stored, expiration: "0")), nowMillis: now).status == 200)
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: stored, expiration: nil)), nowMillis: now)
            .reason == "BadExpirationDate")
        #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: stored, expiration: "soon")), nowMillis: now)
            .reason == "BadExpirationDate")
    }

    @Test func successAndTheChannelView() throws {
        let s = f.sandbox()
        let channel = try f.createChannel(s, policy: 0)
        let requestID = "9b2e8f3c-1d4a-4c6b-8e7f-0a1b2c3d4e5f"
        let r = s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel, priority: "5").with("apns-request-id", requestID),
                                     body: update(timestamp: 500, state: ["score": "1-1"])), nowMillis: now)
        #expect(r.status == 200 && r.body.isEmpty)
        #expect(r.header("apns-request-id") == requestID && r.header("apns-unique-id") != nil)
        _ = s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel, priority: "1"), body: update(timestamp: 400)), nowMillis: now)
        let view = try #require(s.channelView(id: channel))
        #expect(view.kind == .channel && view.messageStoragePolicy == 0)
        #expect(view.contentStateJSON == ["score": "1-1"] && view.timestampRegressionsIgnored == 1)
        #expect(view.priority5ThisHour == 1 && view.priority1ThisHour == 1)
        let log = s.recentDeliveries(limit: 2)
        #expect(log.map(\.kind) == [.broadcast, .broadcast] && log[0].apnsID == requestID && log[0].target == channel)
        #expect(s.stats.broadcasts == 2 && s.stats.delivered == 2)
    }

    /// A channel's priority-10 broadcasts count per hour against the standard device budget (its
    /// broadcasts reach devices of any tier) and the ones past it are flagged.
    @Test func priorityTenBroadcastsCountAgainstTheStandardBudget() throws {
        let s = f.sandbox { $0.deviceBudgetPerHour = [.standard: 2, .frequent: 6] }
        let channel = try f.createChannel(s, policy: 0)
        for i in 0..<4 {
            #expect(s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel), body: update(timestamp: Int64(600 + i))), nowMillis: now).status == 200)
        }
        _ = s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel, priority: "5"), body: update(timestamp: 700)), nowMillis: now)
        let view = try #require(s.channelView(id: channel))
        #expect(view.budgetPerHour == 2 && view.priority10ThisHour == 4 && view.priority5ThisHour == 1)
        #expect(view.overBudgetThisHour == 2 && view.overBudgetTotal == 2)
        #expect(s.recentDeliveries(limit: 5).map(\.overBudget) == [false, false, true, true, false])
    }

    @Test func broadcastHeaderAndBodyRules() throws {
        let s = f.sandbox()
        let channel = try f.createChannel(s, policy: 0)
        let h = try f.broadcastHeaders(channel: channel)
        func reason(_ headers: Headers, _ body: [UInt8] = update(timestamp: 1), bundle: String = Fixture.bundle) -> String? {
            s.handle(f.broadcast(headers: headers, body: body, bundle: bundle), nowMillis: now).reason
        }
        #expect(reason(h.without("apns-push-type")) == "MissingPushType")
        #expect(reason(h.with("apns-push-type", "background")) == "InvalidPushType")
        #expect(reason(h.without("apns-priority")) == "BadPriority")
        #expect(reason(h.with("apns-priority", "7")) == "BadPriority")
        #expect(reason(h.with("apns-collapse-id", String(repeating: "x", count: 65))) == "BadCollapseId")
        #expect(reason(h.adding("apns-channel-id", channel)) == "DuplicateHeaders")
        #expect(reason(h, bundle: "com.unknown.app") == "TopicDisallowed")
        #expect(reason(h, []) == "PayloadEmpty")
        #expect(reason(h, start(timestamp: 1)) == "BadRequestPayload")
        #expect(reason(h, bytes("not json")) == "BadRequestPayload")
        // 5120 bytes is the limit.
        let base = #"{"aps":{"event":"update","timestamp":1,"content-state":{}},"pad":""}"#
        let fits = bytes(base.replacingOccurrences(of: #""pad":"""#, with: #""pad":"\#(String(repeating: "x", count: 5120 - base.utf8.count))""#))
        #expect(fits.count == 5120 && reason(h, fits) == nil)
        #expect(reason(h, fits + [0x20]) == "PayloadTooLarge")
        // A device push of 4097 bytes is too large, 4096 is not.
        let deviceFits = bytes(base.replacingOccurrences(of: #""pad":"""#, with: #""pad":"\#(String(repeating: "y", count: 4096 - base.utf8.count))""#))
        #expect(deviceFits.count == 4096)
        #expect(s.handle(try f.devicePush(body: deviceFits), nowMillis: now).status == 200)
        #expect(s.handle(try f.devicePush(body: deviceFits + [0x0A]), nowMillis: now).reason == "PayloadTooLarge")
    }
}
