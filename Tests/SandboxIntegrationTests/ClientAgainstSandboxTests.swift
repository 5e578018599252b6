import ActivityCastCore
import APNs
import APNsCore
import APNsSandbox
import Foundation
import HTTP2Kit
import Logging
import OpenSSLKit
import Synchronization
import Testing
import TestSupport

let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
let bundle = "com.example.app"
let goodToken = String(repeating: "ab", count: 32)

/// A real sandbox server (TLS, HTTP/2) in this process, and clients that trust it.
final class Sandbox: @unchecked Sendable {
    let key: ES256PrivateKey
    let identity: ProviderIdentity
    /// Restricted keys: one for production only, one for another app only.
    let productionKey: ES256PrivateKey
    let otherAppKey: ES256PrivateKey
    /// A second unrestricted key.
    let spareKey: ES256PrivateKey
    let state: SandboxState
    let server: SandboxServer
    let cert: TestCertificate

    init(maxChannels: Int = 10_000, broadcastBundles: [String]? = nil, faults: SandboxFaults = SandboxFaults()) throws {
        key = try ES256PrivateKey.generate()
        productionKey = try ES256PrivateKey.generate()
        otherAppKey = try ES256PrivateKey.generate()
        spareKey = try ES256PrivateKey.generate()
        identity = try ProviderIdentity(keyID: "KEY0000001", teamID: "TEAM000001")
        cert = try TestCertificate()
        state = SandboxState(configuration: SandboxConfiguration(
            bundleIDs: [bundle, "com.example.nobroadcast"], teamID: identity.teamID,
            keys: [identity.keyID: key.publicKey, "KEY0000002": productionKey.publicKey, "KEY0000003": otherAppKey.publicKey,
                   "KEY0000004": spareKey.publicKey],
            broadcastBundleIDs: broadcastBundles,
            keyRestrictions: ["KEY0000002": .init(environment: .production), "KEY0000003": .init(bundleIDs: ["com.example.nobroadcast"])],
            maxChannels: maxChannels, faults: faults))
        let tls = try TLSContext.server(certificatePEMFile: cert.certificatePath, keyPEMFile: cert.keyPath, alpn: ["h2"])
        server = try SandboxServer(state: state, host: "127.0.0.1", port: 0, tls: tls, threads: 1)
    }

    deinit {
        server.stop()
        cert.directory.remove()
    }

    var signer: ProviderTokenSigner { ProviderTokenSigner(key: key, identity: identity) }

    func client(tokens: (any ProviderTokenSource)? = nil, connections: Int = 1) throws -> APNsClient {
        try APNsClient(configuration: APNsClientConfiguration(endpoint: APNsEndpoint(host: "127.0.0.1", port: server.port),
                                                              connections: connections, caFile: cert.certificatePath),
                       tokens: tokens ?? LocalProviderTokens(signer: signer), logger: quiet)
    }
}

/// A token source whose clock says "one hour and a bit ago".
struct StaleTokens: ProviderTokenSource {
    let signer: ProviderTokenSigner
    func currentToken() async throws -> ProviderToken { try signer.token(issuedAt: nowSeconds() - 3700) }
    func refresh(rejected: ProviderToken) async throws -> ProviderToken { try signer.token(issuedAt: nowSeconds() - 3700) }
}

/// Mints a new token for every batch: a connection that changes tokens this often is refused.
final class RestlessTokens: ProviderTokenSource {
    init(signer: ProviderTokenSigner) { self.signer = signer }
    let signer: ProviderTokenSigner
    let counter = Mutex<Int64>(0)
    func currentToken() async throws -> ProviderToken {
        try signer.token(issuedAt: nowSeconds() - counter.withLock { $0 += 1; return $0 })
    }
    func refresh(rejected: ProviderToken) async throws -> ProviderToken { try await currentToken() }
}

/// First one key, then another: a connection must not switch keys.
final class KeySwitchingTokens: ProviderTokenSource {
    let first: ProviderTokenSigner
    let then: ProviderTokenSigner
    let calls = Mutex<Int>(0)
    init(first: ProviderTokenSigner, then: ProviderTokenSigner) { self.first = first; self.then = then }
    func currentToken() async throws -> ProviderToken {
        let n = calls.withLock { $0 += 1; return $0 }
        return try (n == 1 ? first : then).token(issuedAt: nowSeconds())
    }
    func refresh(rejected: ProviderToken) async throws -> ProviderToken { try await currentToken() }
}

let update = LiveActivityPayload(event: .update, timestamp: 1_800_000_000, contentState: ["homeScore": 1, "awayScore": 0]).encoded()

@Suite(.serialized) struct ClientAgainstSandboxTests {
    func device(_ client: APNsClient, token: String = goodToken, payload: [UInt8] = update, priority: Int = 10, topicBundle: String = bundle) async -> APNsResult {
        await client.sendLiveActivity(payload: payload, to: [token], bundleID: topicBundle, priority: priority)[0]
    }

    func raw(_ client: APNsClient, _ headers: [HTTP2Header]) async -> APNsResult {
        await client.request(method: "POST", path: "/3/device/\(goodToken)", headers: headers, body: update)
    }

    func raw(_ client: APNsClient, _ method: String, _ path: String, _ headers: [HTTP2Header], _ body: [UInt8]? = update) async -> APNsResult {
        await client.request(method: method, path: path, headers: headers, body: body)
    }

    let liveHeaders = [HTTP2Header("apns-push-type", "liveactivity"), HTTP2Header("apns-topic", "\(bundle).push-type.liveactivity")]

    /// Every reason a token-authenticated sandbox can produce, provoked through the real client
    /// over TLS, arrives as that reason with the action Apple's rules imply.
    @Test func everyReasonArrivesWithItsAction() async throws {
        let sandbox = try Sandbox(maxChannels: 1, broadcastBundles: [bundle])
        let client = try sandbox.client()
        defer { client.shutdown() }
        var seen: [APNsReason: APNsAction] = [:]
        func check(_ result: APNsResult, _ reason: APNsReason, _ action: APNsAction, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(result.response?.reason == reason, "expected \(reason), got \(result)", sourceLocation: sourceLocation)
            #expect(result.action == action, "\(reason): expected \(action), got \(result.action)", sourceLocation: sourceLocation)
            seen[reason] = result.action
        }
        // A good push first (the connection is authenticated from here on).
        #expect(await device(client).action == .delivered)

        check(await device(client, token: "zz"), .badDeviceToken, .forgetToken(invalidSince: nil))
        // The outage probes, one per service, each refused by a working APNs with a 4xx about
        // the request, and each showing its own service at work.
        for (service, reason) in [(APNsService.devicePush, APNsReason.badDeviceToken), (.broadcast, .missingChannelId),
                                  (.channelManagement, .missingChannelId)] {
            let beforeProbe = APNsClientStats.moment(ago: .zero)
            let answer = await client.probe(service, bundleID: bundle)
            #expect(answer.response?.reason == reason, "\(service): \(answer)")
            #expect(client.stats.answeredNormally(service, since: beforeProbe), "\(service)")
        }
        check(await device(client, topicBundle: "com.other.app"), .topicDisallowed, .fail)
        check(await device(client, priority: 7), .badPriority, .fail)
        check(await device(client, payload: Array(repeating: 0x20, count: 5000)), .payloadTooLarge, .fail)
        check(await device(client, payload: []), .payloadEmpty, .fail)
        check(await device(client, payload: Array("not json".utf8)), .badRequestPayload, .fail)
        check(await raw(client, [HTTP2Header("apns-push-type", "liveactivity")]), .missingTopic, .fail)
        check(await raw(client, liveHeaders + [HTTP2Header("apns-expiration", "soon")]), .badExpirationDate, .fail)
        check(await raw(client, liveHeaders + [HTTP2Header("apns-id", "NOT-A-UUID")]), .badMessageId, .fail)
        check(await raw(client, liveHeaders + [HTTP2Header("apns-collapse-id", String(repeating: "c", count: 65))]), .badCollapseId, .fail)
        check(await raw(client, liveHeaders + [HTTP2Header("apns-priority", "10"), HTTP2Header("apns-priority", "5")]), .duplicateHeaders, .fail)
        check(await raw(client, [HTTP2Header("apns-push-type", "alert"), HTTP2Header("apns-topic", "\(bundle).push-type.liveactivity")]), .invalidPushType, .fail)
        check(await raw(client, "POST", "/3/device/", liveHeaders), .missingDeviceToken, .fail)
        check(await raw(client, "POST", "/3/nothing", liveHeaders), .badPath, .fail)
        check(await raw(client, "GET", "/3/device/\(goodToken)", liveHeaders, nil), .methodNotAllowed, .fail)
        check(await raw(client, [HTTP2Header("apns-push-type", "liveactivity"), HTTP2Header("apns-topic", "not a topic!")]), .badTopic, .fail)
        _ = sandbox.state.markUnregistered(token: String(repeating: "cd", count: 32), timestampMillis: 1_732_233_600_000)
        check(await device(client, token: String(repeating: "cd", count: 32)), .unregistered, .forgetToken(invalidSince: 1_732_233_600_000))

        // Channels and broadcasts.
        let created = await raw(client, "POST", "/1/apps/\(bundle)/channels", [], Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8))
        let channel = try #require(created.response?.channelID)
        #expect(created.response?.status == 201)
        check(await raw(client, "POST", "/1/apps/\(bundle)/channels", [], Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8)),
              .cannotCreateChannelConfig, .fail)
        check(await raw(client, "POST", "/1/apps/\(bundle)/channels", [], Array(#"{"message-storage-policy":7,"push-type":"LiveActivity"}"#.utf8)),
              .badRequestParams, .fail)
        check(await raw(client, "POST", "/1/apps/com.example.nobroadcast/channels", [], Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8)),
              .featureNotEnabled, .fail)
        check(await raw(client, "GET", "/1/apps/\(bundle)/channels", [], nil), .missingChannelId, .fail)
        check(await raw(client, "GET", "/1/apps/\(bundle)/channels", [HTTP2Header("apns-channel-id", "%%%")], nil), .badChannelId, .fail)
        check(await raw(client, "GET", "/1/apps/\(bundle)/channels", [HTTP2Header("apns-channel-id", "AAAAAAAAAAAAAAAAAAAAAA==")], nil), .channelNotRegistered, .fail)
        #expect(await client.broadcast(payload: update, channelID: channel, bundleID: bundle).action == .delivered)
        check(await client.broadcast(payload: update, channelID: channel, bundleID: bundle, storagePolicy: 1), .badExpirationDate, .fail)
        let start = LiveActivityPayload(event: .start, timestamp: 1, contentState: [:], alert: .init(title: "t", body: "b"),
                                        attributesType: "T", attributes: [:]).encoded()
        check(await client.broadcast(payload: start, channelID: channel, bundleID: bundle), .badRequestPayload, .fail)
        check(await raw(client, "POST", "/4/broadcasts/apps/\(bundle)", [HTTP2Header("apns-channel-id", channel), HTTP2Header("apns-expiration", "0")]),
              .missingPushType, .fail)
        #expect(await raw(client, "DELETE", "/1/apps/\(bundle)/channels", [HTTP2Header("apns-channel-id", channel)], nil).response?.status == 204)

        // Faults: retry later, or with back-off.
        sandbox.state.updateFaults(SandboxFaults(tooManyRequestsRate: 1))
        check(await device(client), .tooManyRequests, .retryAfter(.seconds(1)))
        sandbox.state.updateFaults(SandboxFaults(internalErrorRate: 1))
        check(await device(client), .internalServerError, .retryWithBackoff)
        sandbox.state.updateFaults(SandboxFaults(unavailableRate: 1))
        check(await device(client), .serviceUnavailable, .retryWithBackoff)
        sandbox.state.updateFaults(SandboxFaults())

        // Provider tokens: missing, invalid (another key), expired, and changed too often.
        let anonymous = try APNsClient(configuration: client.configuration, tokens: nil, logger: quiet)
        defer { anonymous.shutdown() }
        check(await device(anonymous), .missingProviderToken, .refreshProviderToken)
        let stranger = ProviderTokenSigner(key: try ES256PrivateKey.generate(), identity: sandbox.identity)
        let forged = try sandbox.client(tokens: LocalProviderTokens(signer: stranger))
        defer { forged.shutdown() }
        check(await device(forged), .invalidProviderToken, .refreshProviderToken)
        // Just made: not replaced (the same key can't mend it, and Apple allows one refresh per 20 minutes).
        #expect(forged.stats.snapshot.tokenRefreshes == 0)
        let stale = try sandbox.client(tokens: StaleTokens(signer: sandbox.signer))
        defer { stale.shutdown() }
        check(await device(stale), .expiredProviderToken, .refreshProviderToken)
        let restless = try sandbox.client(tokens: RestlessTokens(signer: sandbox.signer))
        defer { restless.shutdown() }
        // The first token is adopted and one change is allowed; a second change within 20 min is not.
        #expect(await device(restless).action == .delivered)
        #expect(await device(restless).action == .delivered)
        check(await device(restless), .tooManyProviderTokenUpdates, .retryAfter(.seconds(60)))

        // A connection may not switch to a token of another key.
        let switching = try sandbox.client(tokens: KeySwitchingTokens(first: sandbox.signer, then: ProviderTokenSigner(
            key: sandbox.spareKey, identity: try ProviderIdentity(keyID: "KEY0000004", teamID: sandbox.identity.teamID))))
        defer { switching.shutdown() }
        #expect(await device(switching).action == .delivered)
        // Our credentials refused, not the request: it waits for them (as in an outage).
        check(await device(switching), .unrelatedKeyIdInToken, .retryWithBackoff)
        // That holds for the connection only: the client reopens it, and the token goes through.
        #expect(await device(switching).action == .delivered)
        // Keys limited by environment or app.
        let production = try sandbox.client(tokens: LocalProviderTokens(signer: ProviderTokenSigner(
            key: sandbox.productionKey, identity: try ProviderIdentity(keyID: "KEY0000002", teamID: sandbox.identity.teamID))))
        defer { production.shutdown() }
        // A key limited to the other environment: that environment's work fails (a setting, not a fault).
        check(await device(production), .badEnvironmentKeyIdInToken, .fail)
        let otherApp = try sandbox.client(tokens: LocalProviderTokens(signer: ProviderTokenSigner(
            key: sandbox.otherAppKey, identity: try ProviderIdentity(keyID: "KEY0000003", teamID: sandbox.identity.teamID))))
        defer { otherApp.shutdown() }
        check(await device(otherApp), .forbidden, .fail)

        // Every reason above, each seen once. Not producible here: the certificate reasons (token
        // auth only), IdleTimeout, DeviceTokenNotForTopic (needs Apple's token registry), and
        // Shutdown (it arrives in GOAWAY debug data: see goAwayMidFlightLosesNoRequest).
        #expect(seen.count == 34)
    }

    @Test func goAwayMidFlightLosesNoRequest() async throws {
        let sandbox = try Sandbox(faults: SandboxFaults(goAwayAfterStreams: 100))
        let client = try sandbox.client()
        defer { client.shutdown() }
        let tokens = (0..<1000).map { String(format: "%064x", $0) }
        let results = await client.sendLiveActivity(payload: update, to: tokens, bundleID: bundle)
        #expect(results.allSatisfy { $0.action == .delivered })
        #expect(client.stats.snapshot.goAways >= 9)
        for t in tokens.prefix(20) { #expect(sandbox.state.deviceView(token: t)?.pushesReceived == 1) }
    }

    @Test func theDeviceViewShowsWhatTheDeviceWouldDisplay() async throws {
        let sandbox = try Sandbox()
        let client = try sandbox.client()
        defer { client.shutdown() }
        let newer = LiveActivityPayload(event: .update, timestamp: 2000, contentState: ["homeScore": 2]).encoded()
        let older = LiveActivityPayload(event: .update, timestamp: 1000, contentState: ["homeScore": 1]).encoded()
        #expect(await device(client, payload: newer).action == .delivered)
        #expect(await device(client, payload: older, priority: 5).action == .delivered)  // APNs accepts it; the device ignores it
        let view = try #require(sandbox.state.deviceView(token: goodToken))
        #expect(view.timestamp == 2000 && view.timestampRegressionsIgnored == 1)
        #expect(view.contentState.map { String(decoding: $0, as: UTF8.self) } == #"{"homeScore":2}"#)
        #expect(view.priority10ThisHour == 1 && view.priority5ThisHour == 1)
    }
}
