import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import OpenSSLKit
import Testing

/// One way to make the sandbox answer with `reason`.
struct ReasonCase: Sendable, CustomTestStringConvertible {
    let reason: APNsReason
    let run: @Sendable (Fixture) throws -> SandboxResponse
    var testDescription: String { reason.rawValue }
}

private let now = Fixture.now
private let longToken = String(repeating: "0", count: 514)

/// Every reason the sandbox can produce, each through `handle()`.
let reasonCases: [ReasonCase] = [
    // 400, device endpoint
    ReasonCase(reason: .badCollapseId) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-collapse-id", String(repeating: "c", count: 65))), nowMillis: now)
    },
    ReasonCase(reason: .badDeviceToken) { f in f.sandbox().handle(try f.devicePush(token: "not-hex-at-all-not-hex-at-all-not-hex"), nowMillis: now) },
    ReasonCase(reason: .badExpirationDate) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-expiration", "-1")), nowMillis: now)
    },
    ReasonCase(reason: .badMessageId) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-id", "6F1C63B5-9F0C-4D2C-9A4E-3B1D3B9E2A10")), nowMillis: now)
    },
    ReasonCase(reason: .badPriority) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders(priority: "1")), nowMillis: now)
    },
    ReasonCase(reason: .badTopic) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-topic", "com.example..app push")), nowMillis: now)
    },
    ReasonCase(reason: .deviceTokenNotForTopic) { f in
        let s = f.sandbox { $0.bundleIDs = [Fixture.bundle, "com.example.other"] }
        let first = s.handle(try f.devicePush(), nowMillis: now)
        guard first.status == 200 else { return first }
        return s.handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-topic", "com.example.other.push-type.liveactivity"),
                                         body: update(timestamp: 101)), nowMillis: now)
    },
    ReasonCase(reason: .duplicateHeaders) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().adding("apns-topic", Fixture.topic)), nowMillis: now)
    },
    ReasonCase(reason: .invalidPushType) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-push-type", "alert")), nowMillis: now)
    },
    ReasonCase(reason: .missingDeviceToken) { f in f.sandbox().handle(try f.devicePush(token: ""), nowMillis: now) },
    ReasonCase(reason: .missingTopic) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().without("apns-topic")), nowMillis: now)
    },
    ReasonCase(reason: .payloadEmpty) { f in f.sandbox().handle(try f.devicePush(body: []), nowMillis: now) },
    ReasonCase(reason: .topicDisallowed) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("apns-topic", "com.example.app")), nowMillis: now)
    },
    // 400, broadcast and channel management
    ReasonCase(reason: .featureNotEnabled) { f in
        f.sandbox { $0.broadcastBundleIDs = [] }.handle(try f.channelRequest("POST", body: Fixture.createBody(policy: 0)), nowMillis: now)
    },
    ReasonCase(reason: .missingChannelId) { f in
        f.sandbox().handle(f.broadcast(headers: try f.broadcastHeaders(channel: nil)), nowMillis: now)
    },
    ReasonCase(reason: .badChannelId) { f in
        f.sandbox().handle(f.broadcast(headers: try f.broadcastHeaders(channel: "not base64!")), nowMillis: now)
    },
    ReasonCase(reason: .channelNotRegistered) { f in
        f.sandbox().handle(f.broadcast(headers: try f.broadcastHeaders(channel: "dGhpcyBpcyBub3QgYSBjaGFubmVs")), nowMillis: now)
    },
    ReasonCase(reason: .badRequestParams) { f in
        f.sandbox().handle(try f.channelRequest("POST", body: Fixture.createBody(policy: 2)), nowMillis: now)
    },
    ReasonCase(reason: .badRequestPayload) { f in f.sandbox().handle(try f.devicePush(body: bytes(#"{"aps":{}}"#)), nowMillis: now) },
    ReasonCase(reason: .missingPushType) { f in
        let s = f.sandbox()
        let channel = try f.createChannel(s, policy: 0)
        return s.handle(f.broadcast(headers: try f.broadcastHeaders(channel: channel).without("apns-push-type")), nowMillis: now)
    },
    ReasonCase(reason: .cannotCreateChannelConfig) { f in
        let s = f.sandbox { $0.maxChannels = 1 }
        _ = try f.createChannel(s, policy: 1)
        return s.handle(try f.channelRequest("POST", body: Fixture.createBody(policy: 1)), nowMillis: now)
    },
    // 403
    ReasonCase(reason: .expiredProviderToken) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("authorization", try f.bearer(ageSeconds: 3601))), nowMillis: now)
    },
    ReasonCase(reason: .forbidden) { f in
        let s = f.sandbox { $0.keyRestrictions = [Fixture.keyID: .init(bundleIDs: ["com.example.other"])] }
        return s.handle(try f.devicePush(), nowMillis: now)
    },
    ReasonCase(reason: .invalidProviderToken) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().with("authorization", "bearer not.a.jwt")), nowMillis: now)
    },
    ReasonCase(reason: .missingProviderToken) { f in
        f.sandbox().handle(try f.devicePush(headers: try f.deviceHeaders().without("authorization")), nowMillis: now)
    },
    ReasonCase(reason: .unrelatedKeyIdInToken) { f in
        let otherKey = try ES256PrivateKey.generate()
        let other = ProviderTokenSigner(key: otherKey, identity: try ProviderIdentity(keyID: "KEY7654321", teamID: Fixture.teamID))
        let s = f.sandbox { $0.keys["KEY7654321"] = otherKey.publicKey }
        let first = s.handle(try f.devicePush(), nowMillis: now)
        guard first.status == 200 else { return first }
        return s.handle(try f.devicePush(headers: try f.deviceHeaders().with("authorization", try f.bearer(signer: other)),
                                         body: update(timestamp: 101)), nowMillis: now)
    },
    ReasonCase(reason: .badEnvironmentKeyIdInToken) { f in
        f.sandbox { $0.keyRestrictions = [Fixture.keyID: .init(environment: .production)] }.handle(try f.devicePush(), nowMillis: now)
    },
    // 404, 405, 410, 413
    ReasonCase(reason: .badPath) { f in
        f.sandbox().handle(SandboxRequest(method: "POST", path: "/3/devices/\(Fixture.token)", headers: try f.deviceHeaders().fields), nowMillis: now)
    },
    ReasonCase(reason: .methodNotAllowed) { f in
        f.sandbox().handle(SandboxRequest(method: "GET", path: "/3/device/\(Fixture.token)", headers: try f.deviceHeaders().fields), nowMillis: now)
    },
    ReasonCase(reason: .expiredToken) { f in
        f.sandbox { $0.faults.expiredTokens = [Fixture.token] }.handle(try f.devicePush(), nowMillis: now)
    },
    ReasonCase(reason: .unregistered) { f in
        let s = f.sandbox()
        s.markUnregistered(token: Fixture.token.uppercased(), timestampMillis: now - 5000)
        return s.handle(try f.devicePush(), nowMillis: now)
    },
    ReasonCase(reason: .payloadTooLarge) { f in
        let padding = String(repeating: "x", count: 4096)
        return f.sandbox().handle(try f.devicePush(body: bytes(#"{"aps":{"event":"update","timestamp":1,"content-state":{}},"pad":"\#(padding)"}"#)),
                                  nowMillis: now)
    },
    // 429
    ReasonCase(reason: .tooManyProviderTokenUpdates) { f in
        let s = f.sandbox()
        // First token, a first change (allowed), then a second change a minute later.
        for (age, at) in [(Int64(600), now), (Int64(300), now), (Int64(1), now + 60_000)] {
            let r = s.handle(try f.devicePush(headers: try f.deviceHeaders().with("authorization", try f.bearer(ageSeconds: age)),
                                              body: update(timestamp: at / 1000)), nowMillis: at)
            if r.status != 200 { return r }
        }
        return SandboxResponse(status: 200)
    },
    ReasonCase(reason: .tooManyRequests) { f in
        f.sandbox { $0.faults.tooManyRequestsRate = 1 }.handle(try f.devicePush(), nowMillis: now)
    },
    // 500, 503
    ReasonCase(reason: .internalServerError) { f in
        f.sandbox { $0.faults.internalErrorRate = 1 }.handle(try f.devicePush(), nowMillis: now)
    },
    ReasonCase(reason: .serviceUnavailable) { f in
        f.sandbox { $0.faults.unavailableRate = 1 }.handle(try f.devicePush(), nowMillis: now)
    },
    ReasonCase(reason: .shutdown) { f in
        let s = f.sandbox { $0.faults.goAwayAfterStreams = 1 }
        let first = s.handle(try f.devicePush(), nowMillis: now)
        guard first.status == 200, first.connectionFault == .goAway(debugData: bytes(#"{"reason":"Shutdown"}"#)) else { return first }
        return s.handle(try f.devicePush(body: update(timestamp: 101)), nowMillis: now)
    },
]

/// Reasons `handle()` can't produce, and why:
/// - `BadCertificate`, `BadCertificateEnvironment`: certificate authentication. Live Activity
///   pushes require token authentication (shared/APNS.md), so the sandbox offers only that, and
///   a TLS client certificate never reaches `handle()`.
/// - `IdleTimeout`: sent by APNs in a GOAWAY on a connection idle for too long; it concerns the
///   connection, not a request, so it belongs to the server loop's idle timer.
let reasonsNotProducedByHandle: [APNsReason] = [.badCertificate, .badCertificateEnvironment, .idleTimeout]

@Suite struct ReasonTableTests {
    @Test(arguments: reasonCases)
    func everyProducibleReason(_ c: ReasonCase) throws {
        let f = try Fixture()
        let response = try c.run(f)
        #expect(response.status == c.reason.status, "\(c.reason): status")
        #expect(response.reason == c.reason.rawValue, "\(c.reason): body \(String(decoding: response.body, as: UTF8.self))")
        if c.reason == .unregistered {
            #expect(response.json?["timestamp"] as? Int64 == Fixture.now - 5000)
        } else {
            #expect(response.json?["timestamp"] == nil)
        }
    }

    @Test func theTableCoversEveryKnownReason() {
        let covered = reasonCases.map(\.reason) + reasonsNotProducedByHandle
        #expect(Set(covered.map(\.rawValue)) == Set(APNsReason.allKnown.map(\.rawValue)))
        #expect(covered.count == APNsReason.allKnown.count, "each reason once")
    }
}
