import ActivityCastCore
import Testing

@Suite("Decoding registrations")
struct RegistrationDecodingTests {
    @Test func activityToken() {
        let entry = decoded(.registrations, ["type": "activity.token", "ts": "1732233600500", "device": "d-1",
                                             "key": "match:4711", "activity": "A1B2", "token": token64,
                                             "env": "development", "tier": "frequent", "broadcast": "true"])
        #expect(entry == DecodedEntry(
            type: "activity.token", timestampMillis: 1_732_233_600_500,
            body: .registration(.activityToken(device: "d-1", key: ActivityKey(kind: .match, id: "4711"),
                                               activity: "A1B2", token: token64,
                                               settings: DeviceSettings(env: .development, tier: .frequent,
                                                                        broadcast: true)))))
    }

    @Test func tokensAreStoredLowercase() {
        let upper = "80A1" + String(repeating: "FF", count: 14)
        let entry = decoded(.registrations, ["type": "activity.token", "ts": "1", "device": "d-1",
                                             "key": "trip:t-981", "activity": "A1B2", "token": upper])
        #expect(entry?.body == .registration(.activityToken(
            device: "d-1", key: ActivityKey(kind: .trip, id: "t-981"), activity: "A1B2",
            token: "80a1" + String(repeating: "ff", count: 14), settings: DeviceSettings())))
    }

    @Test func tokenLengthBoundaries() {
        for digits in [32, 512] {
            let token = String(repeating: "a", count: digits)
            let entry = decoded(.registrations, ["type": "start.token", "ts": "1", "device": "d",
                                                 "activity_type": "A", "token": token])
            #expect(entry?.body == .registration(.startToken(device: "d", activityType: "A", token: token,
                                                             settings: DeviceSettings())))
        }
    }

    @Test func startToken() {
        let entry = decoded(.registrations, ["type": "start.token", "ts": "1732233500000", "device": "d-1",
                                             "activity_type": "MatchActivityAttributes", "token": token64,
                                             "broadcast": "0"])
        #expect(entry?.body == .registration(.startToken(device: "d-1", activityType: "MatchActivityAttributes",
                                                         token: token64,
                                                         settings: DeviceSettings(broadcast: false))))
    }

    @Test func qualifiedActivityType() {
        let entry = decoded(.registrations, ["type": "start.token", "ts": "1", "device": "d",
                                             "activity_type": "Widgets.Trip_Attributes2", "token": token64])
        #expect(entry?.body == .registration(.startToken(device: "d", activityType: "Widgets.Trip_Attributes2",
                                                         token: token64, settings: DeviceSettings())))
    }

    @Test func follow() {
        let entry = decoded(.registrations, ["type": "follow", "ts": "1732233500000", "device": "d-1",
                                             "target": "team:ars"])
        #expect(entry?.body == .registration(.follow(device: "d-1", target: FollowTarget(kind: .team, id: "ars"))))
    }

    @Test func unfollow() {
        let entry = decoded(.registrations, ["type": "unfollow", "ts": "1732233500000", "device": "d-1",
                                             "target": "route:42"])
        #expect(entry?.body == .registration(.unfollow(device: "d-1", target: FollowTarget(kind: .route, id: "42"))))
    }

    @Test func device() {
        let entry = decoded(.registrations, ["type": "device", "ts": "1732233500000", "device": "d-1",
                                             "env": "development", "tier": "frequent", "broadcast": "true"])
        #expect(entry?.body == .registration(.device(device: "d-1", settings: DeviceSettings(
            env: .development, tier: .frequent, broadcast: true))))
    }

    @Test func deviceWithoutSettings() {
        let entry = decoded(.registrations, ["type": "device", "ts": "1", "device": "d-1"])
        #expect(entry?.body == .registration(.device(device: "d-1", settings: DeviceSettings())))
    }

    @Test func settingsValues() {
        let entry = decoded(.registrations, ["type": "device", "ts": "1", "device": "d-1", "env": "production",
                                             "tier": "standard", "broadcast": "1"])
        #expect(entry?.body == .registration(.device(device: "d-1", settings: DeviceSettings(
            env: .production, tier: .standard, broadcast: true))))
        let off = decoded(.registrations, ["type": "device", "ts": "1", "device": "d-1", "broadcast": "false"])
        #expect(off?.body == .registration(.device(device: "d-1", settings: DeviceSettings(broadcast: false))))
    }

    @Test func unregisterActivity() {
        let entry = decoded(.registrations, ["type": "unregister", "ts": "1732240100000", "device": "d-1",
                                             "key": "match:4711", "activity": "A1B2"])
        #expect(entry?.body == .registration(.unregisterActivity(device: "d-1",
                                                                 key: ActivityKey(kind: .match, id: "4711"),
                                                                 activity: "A1B2")))
    }

    @Test func unregisterDevice() {
        let entry = decoded(.registrations, ["type": "unregister", "ts": "1732240100000", "device": "d-1"])
        #expect(entry?.body == .registration(.unregisterDevice(device: "d-1")))
    }

    @Test func routeKeys() {
        let entry = decoded(.registrations, ["type": "unregister", "ts": "1", "device": "d", "key": "route:N.1_x-2",
                                             "activity": "a"])
        #expect(entry?.body == .registration(.unregisterActivity(device: "d",
                                                                 key: ActivityKey(kind: .route, id: "N.1_x-2"),
                                                                 activity: "a")))
    }
}
