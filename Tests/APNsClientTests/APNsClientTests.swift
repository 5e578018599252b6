import APNs
import APNsCore
import Foundation
import HTTP2Kit
import HTTP2Transport
import Logging
import OpenSSLKit
import RedisClient
import Synchronization
import Testing
import TestSupport

let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// A logger that keeps the messages of the errors it is given.
final class CapturedErrors: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [String] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .error
    subscript(metadataKey key: String) -> Logger.Metadata.Value? { get { metadata[key] } set { metadata[key] = newValue } }
    func log(event: LogEvent) {
        lock.lock(); defer { lock.unlock() }
        seen.append("\(event.message) \(event.metadata?["reason"].map { "\($0)" } ?? "")")
    }
    var messages: [String] { lock.lock(); defer { lock.unlock() }; return seen }
    var logger: Logger { Logger(label: "test") { _ in self } }
}

/// A scriptable HTTP/2 peer: answers with `answer`, records what it saw.
final class ScriptedPeer: H2RequestHandler, @unchecked Sendable {
    struct Seen { var path: String; var authorization: String?; var openStreams: Int; var at: ContinuousClock.Instant; var connection: UInt64 }
    private let lock = NSLock()
    private var seen: [Seen] = []
    private var connections: [UInt64: Int] = [:]
    let answer: @Sendable (HTTP2Request, Int) -> H2Response
    let fault: @Sendable (UInt64, Int) -> H2ConnectionFault?

    init(answer: @escaping @Sendable (HTTP2Request, Int) -> H2Response = { _, _ in H2Response(status: 200, headers: [HTTP2Header("apns-id", UUID().uuidString.lowercased())]) },
         fault: @escaping @Sendable (UInt64, Int) -> H2ConnectionFault? = { _, _ in nil }) {
        self.answer = answer
        self.fault = fault
    }

    func handle(_ request: HTTP2Request, connectionID: UInt64, openStreams: Int, requestNumber: Int) -> H2Response {
        lock.lock()
        seen.append(Seen(path: request.path ?? "", authorization: request.headers.value(for: "authorization"), openStreams: openStreams,
                         at: .now, connection: connectionID))
        let n = seen.count
        lock.unlock()
        var response = answer(request, n)
        response.connectionFault = fault(connectionID, requestNumber)
        return response
    }

    var requests: [Seen] { lock.lock(); defer { lock.unlock() }; return seen }
}

/// A TLS HTTP/2 server with a fresh loopback certificate, and a client configuration trusting it.
struct Peer {
    let server: H2Server
    let cert: TestCertificate
    func client(connections: Int = 1, tokens: (any ProviderTokenSource)? = nil, logger: Logger = quiet,
                _ tweak: (inout APNsClientConfiguration) -> Void = { _ in }) throws -> APNsClient {
        var c = APNsClientConfiguration(endpoint: APNsEndpoint(host: "127.0.0.1", port: server.port), connections: connections,
                                        caFile: cert.certificatePath, connectTimeout: .seconds(5), requestTimeout: .seconds(20))
        tweak(&c)
        return try APNsClient(configuration: c, tokens: tokens, logger: logger)
    }
    static func start(_ handler: any H2RequestHandler, maxConcurrentStreams: Int = 1000) throws -> Peer {
        let cert = try TestCertificate()
        let tls = try TLSContext.server(certificatePEMFile: cert.certificatePath, keyPEMFile: cert.keyPath, alpn: ["h2"])
        return Peer(server: try H2Server(port: 0, tls: tls, threads: 1, maxConcurrentStreams: maxConcurrentStreams, handler: handler), cert: cert)
    }
    func stop() { server.stop(); cert.directory.remove() }
}

func tokens(_ n: Int) -> [String] { (0..<n).map { String(format: "%064x", $0) } }

@Suite struct APNsClientTests {
    @Test func aBatchGetsOneResultPerTokenInOrder() async throws {
        let handler = ScriptedPeer(answer: { req, _ in
            let token = String((req.path ?? "").split(separator: "/").last ?? "")
            if token.hasSuffix("7") {
                return H2Response(status: 410, body: Array(#"{"reason":"Unregistered","timestamp":1732233600000}"#.utf8))
            }
            return H2Response(status: 200, headers: [HTTP2Header("apns-id", "id-\(token.suffix(4))")])
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client(connections: 2)
        defer { client.shutdown() }
        let list = tokens(1000)
        let results = await client.sendLiveActivity(payload: Array(#"{"aps":{}}"#.utf8), to: list, bundleID: "com.example.app")
        #expect(results.count == 1000)
        for (token, result) in zip(list, results) {
            if token.hasSuffix("7") {
                #expect(result.action == .forgetToken(invalidSince: 1732233600000))
                #expect(result.response?.reason == .unregistered)
            } else {
                #expect(result.response?.apnsID == "id-\(token.suffix(4))")
                #expect(result.action == .delivered)
            }
        }
        let seen = handler.requests
        #expect(seen.count == 1000)
        #expect(Set(seen.map(\.path)) == Set(list.map { "/3/device/\($0)" }))
    }

    /// A caller that reads ids only from failures (the fan-out) gets none from a success, and
    /// every failure's all the same.
    @Test func successIDsCanBeLeftOut() async throws {
        let handler = ScriptedPeer(answer: { req, _ in
            let token = String((req.path ?? "").split(separator: "/").last ?? "")
            let ids = [HTTP2Header("apns-id", "id-\(token.suffix(4))"), HTTP2Header("apns-unique-id", "u-\(token.suffix(4))")]
            if token.hasSuffix("7") {
                return H2Response(status: 410, headers: ids, body: Array(#"{"reason":"Unregistered","timestamp":1732233600000}"#.utf8))
            }
            return H2Response(status: 200, headers: ids)
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client(connections: 2)
        defer { client.shutdown() }
        let list = tokens(200)
        for keep in [false, true] {
            let results = await client.sendLiveActivity(payload: Array(#"{"aps":{}}"#.utf8), to: list, bundleID: "com.example.app", successIDs: keep)
            #expect(results.count == 200)
            for (token, result) in zip(list, results) {
                let failed = token.hasSuffix("7")
                #expect(result.action == (failed ? .forgetToken(invalidSince: 1732233600000) : .delivered))
                let kept = failed || keep
                #expect(result.response?.apnsID == (kept ? "id-\(token.suffix(4))" : nil))
                #expect(result.response?.uniqueID == (kept ? "u-\(token.suffix(4))" : nil))
            }
        }
    }

    @Test func oneStreamUntilASuccessThenTheServersLimit() async throws {
        let handler = ScriptedPeer(answer: { _, _ in H2Response(status: 200, delay: .milliseconds(20)) })
        let peer = try Peer.start(handler, maxConcurrentStreams: 5)
        defer { peer.stop() }
        let client = try peer.client(connections: 1)
        defer { client.shutdown() }
        let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(60), bundleID: "com.example.app")
        #expect(results.allSatisfy { $0.action == .delivered })
        let seen = handler.requests
        // The first request went alone; the second only after the first answer arrived.
        #expect(seen[0].openStreams == 1)
        #expect(seen[1].at - seen[0].at >= .milliseconds(15))
        #expect(seen.map(\.openStreams).max() == 5)  // the server's limit was used and never exceeded
    }

    @Test func theInFlightWindowBoundsWhatIsOnTheWire() async throws {
        let handler = ScriptedPeer(answer: { _, _ in H2Response(status: 200, delay: .milliseconds(5)) })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client(connections: 1) { $0.maxInFlight = 10 }
        defer { client.shutdown() }
        // Three callers at once, one with a batch larger than the window.
        async let a = client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(25), bundleID: "com.example.app")
        async let b = client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(7), bundleID: "com.example.app")
        async let c = client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(9), bundleID: "com.example.app")
        let all = await a + b + c
        #expect(all.count == 41 && all.allSatisfy { $0.action == .delivered })
        #expect(handler.requests.count == 41)
        #expect(handler.requests.map(\.openStreams).max()! <= 10)
        #expect(handler.requests.map(\.openStreams).max()! > 1)
    }

    @Test func goAwayMidFlightLosesNoRequest() async throws {
        // Every connection says GOAWAY after its 50th request; what comes after is refused.
        let handler = ScriptedPeer(fault: { _, n in n == 50 ? .goAway(debugData: Array(#"{"reason":"Shutdown"}"#.utf8)) : nil })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client(connections: 1)
        defer { client.shutdown() }
        let list = tokens(500)
        let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: list, bundleID: "com.example.app")
        #expect(results.allSatisfy { $0.action == .delivered })
        #expect(Set(handler.requests.map(\.path)).count == 500)
        #expect(Set(handler.requests.map(\.connection)).count >= 10)
        #expect(client.stats.snapshot.goAways >= 9)
        #expect(client.stats.openConnections <= 1)
    }

    /// Answers are timed from submission to their read, in their priority lane; connections
    /// open are counted while open; the loops keep turning.
    @Test func requestDurationsAreTimedByLaneAndConnectionsCounted() async throws {
        // Requests to tokens ending in "1" wait 40 ms at the peer (one thread: one after another).
        let handler = ScriptedPeer(answer: { req, _ in
            if (req.path ?? "").hasSuffix("1") { usleep(40_000) }
            return H2Response(status: 200)
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client(connections: 2) { $0.threads = 2 }
        defer { client.shutdown() }
        let slow = (0..<4).map { String(format: "%063x1", $0) }
        let fast = (0..<6).map { String(format: "%063x2", $0) }
        #expect(await client.sendLiveActivity(payload: Array("{}".utf8), to: slow, bundleID: "com.example.app", priority: 10)
            .allSatisfy { $0.action == .delivered })
        #expect(await client.sendLiveActivity(payload: Array("{}".utf8), to: fast, bundleID: "com.example.app", priority: 5)
            .allSatisfy { $0.action == .delivered })
        // The loops add their counts at most every 250 ms.
        var lanes: [Int: RequestDurations] = [:]
        for _ in 0..<40 {
            lanes = Dictionary(uniqueKeysWithValues: client.stats.requestDurations.map { ($0.priority, $0.histogram) })
            if lanes[10]?.count == 4 && lanes[5]?.count == 6 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let ten = try #require(lanes[10]), five = try #require(lanes[5])
        #expect(ten.count == 4 && five.count == 6)
        // Every slow answer took 40 ms or more: none in the buckets up to 25 ms.
        let upTo25ms = RequestDurations.bounds.firstIndex(of: 0.025)!
        #expect(ten.counts[...upTo25ms].reduce(0, +) == 0, "\(ten.counts)")
        #expect(ten.sumNanos >= 4 * 40_000_000)
        #expect(five.sumNanos < ten.sumNanos)
        #expect(client.stats.openConnections >= 1 && client.stats.openConnections <= 2)
        #expect(client.longestLoopStall < .seconds(2))
        client.shutdown()
        var open = -1
        for _ in 0..<40 {
            open = client.stats.openConnections
            if open == 0 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(open == 0)
    }

    /// A connection reset with requests in flight: those requests may have reached the peer and
    /// their answers were lost, so the client never sends them again itself (an alert would show twice):
    /// each fails as `connectionLost` for its caller to decide. Requests not yet sent go on over a
    /// new connection and are delivered.
    @Test func aResetConnectionIsReopenedAndUnansweredRequestsHandedBack() async throws {
        let handler = ScriptedPeer(fault: { conn, n in conn == 1 && n == 30 ? .reset : nil })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client(connections: 1)
        defer { client.shutdown() }
        let list = tokens(300)
        let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: list, bundleID: "com.example.app")
        var lost: [String] = []
        for (token, result) in zip(list, results) where result.action != .delivered {
            guard case .failed(let e) = result, e.kind == .connectionLost else { Issue.record("\(result)"); continue }
            lost.append("/3/device/\(token)")
        }
        #expect(!lost.isEmpty, "the reset left requests unanswered")
        let seen = handler.requests.map(\.path)
        #expect(seen.count == Set(seen).count, "no request was sent twice")
        let delivered = zip(list, results).filter { $0.1.action == .delivered }.map { "/3/device/\($0.0)" }
        #expect(delivered.count + lost.count == list.count && Set(delivered).isSubset(of: Set(seen)))
        #expect(client.stats.snapshot.unknownFate == lost.count)
        // The connection is reopened for what comes next.
        let more = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(20), bundleID: "com.example.app")
        #expect(more.allSatisfy { $0.action == .delivered })
        #expect(client.stats.snapshot.connectionsLost >= 1 && client.stats.snapshot.connects >= 2)
    }

    @Test func anExpiredProviderTokenIsRefreshedOnceAndTheRequestsResent() async throws {
        let firstToken = Mutex<String?>(nil)
        let handler = ScriptedPeer(answer: { req, _ in
            let auth = req.headers.value(for: "authorization") ?? ""
            let expired = firstToken.withLock { t in
                if t == nil { t = auth }
                return t == auth
            }
            return expired ? H2Response(status: 403, body: Array(#"{"reason":"ExpiredProviderToken"}"#.utf8)) : H2Response(status: 200)
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let key = try ES256PrivateKey.generate()
        let signer = ProviderTokenSigner(key: key, identity: try ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456"))
        // The token in use is 25 minutes old: old enough to be replaced (20).
        let now = Mutex<Int64>(1_800_000_000)
        let source = LocalProviderTokens(signer: signer, clock: { now.withLock { $0 } })
        _ = try await source.currentToken()
        now.withLock { $0 += 25 * 60 }
        let client = try peer.client(tokens: source)
        defer { client.shutdown() }
        let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(20), bundleID: "com.example.app")
        #expect(results.allSatisfy { $0.action == .delivered })
        #expect(client.stats.snapshot.tokenRefreshes == 1)
        #expect(Set(handler.requests.compactMap(\.authorization)).count == 2)
        #expect(handler.requests.allSatisfy { $0.authorization?.hasPrefix("bearer ") == true })
    }

    /// A token refused minutes after it was made is not replaced (Apple allows a refresh every
    /// 20 minutes, and the same key can't mend a wrong key or team): the requests fail as
    /// refused, sent once, and no new token is made however often it is refused.
    @Test func aYoungProviderTokenRefusedIsNotReplaced() async throws {
        let handler = ScriptedPeer(answer: { _, _ in H2Response(status: 403, body: Array(#"{"reason":"InvalidProviderToken"}"#.utf8)) })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let signer = ProviderTokenSigner(key: try ES256PrivateKey.generate(), identity: try ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456"))
        let now = Mutex<Int64>(1_800_000_000)
        let errors = CapturedErrors()
        let client = try peer.client(tokens: LocalProviderTokens(signer: signer, clock: { now.withLock { $0 } }), logger: errors.logger)
        defer { client.shutdown() }
        for _ in 0..<3 {
            let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(5), bundleID: "com.example.app")
            #expect(results.allSatisfy { $0.response?.reason == .invalidProviderToken })
            now.withLock { $0 += 5 * 60 }
        }
        // Said once, with Apple's reason, not once per refused batch.
        #expect(errors.messages == ["APNs refuses our credentials: check apns.team_id, apns.key_id and the key file; the work waits InvalidProviderToken"])
        #expect(handler.requests.count == 15)
        #expect(client.stats.snapshot.tokenRefreshes == 0)
        #expect(Set(handler.requests.compactMap(\.authorization)).count == 1)
        // 20 minutes on, a refusal mints one new token and the requests go again with it.
        now.withLock { $0 += 5 * 60 }
        _ = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(5), bundleID: "com.example.app")
        #expect(handler.requests.count == 25)
        #expect(client.stats.snapshot.tokenRefreshes == 1)
        #expect(Set(handler.requests.compactMap(\.authorization)).count == 2)
    }

    /// What shows APNs at work, for telling an outage from a request's own failure: an answer
    /// about the request (200, 400, 403 Forbidden, a key limited to the other environment) does;
    /// 429, 5xx and a 403 refusing our credentials don't. Device pushes show only the device
    /// push service at work, not broadcasts.
    @Test func onlyAnswersAboutTheRequestShowAPNsAtWork() async throws {
        let answers: [(Int, String?, Bool)] = [
            (200, nil, true), (400, "BadDeviceToken", true), (403, "Forbidden", true), (403, "BadEnvironmentKeyIdInToken", true),
            (403, "InvalidProviderToken", false), (403, "UnrelatedKeyIdInToken", false), (403, "BadCertificate", false),
            (429, "TooManyRequests", false), (503, "ServiceUnavailable", false),
        ]
        for (status, reason, normal) in answers {
            let handler = ScriptedPeer(answer: { _, _ in
                H2Response(status: status, body: reason.map { Array(#"{"reason":"\#($0)"}"#.utf8) } ?? [])
            })
            let peer = try Peer.start(handler)
            defer { peer.stop() }
            let client = try peer.client()
            defer { client.shutdown() }
            let since = APNsClientStats.moment(ago: .zero)
            _ = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(1), bundleID: "com.example.app")
            #expect(client.stats.answeredNormally(.devicePush, since: since) == normal, "\(status) \(reason ?? "")")
            #expect(!client.stats.answeredNormally(.broadcast, since: since), "a device push showed broadcasts at work")
            #expect(!client.stats.answeredNormally(.channelManagement, since: since), "a device push showed channel management at work")
        }
    }

    /// In an outage every failing send probes its service: those at the same time share one
    /// request, one just answered answers the next ones too, and each service is asked apart,
    /// with the app's real topic and nothing a device could show.
    @Test func probesAtOnceShareOneRequest() async throws {
        // The first answer comes late enough for every probe at once to find it out, however
        // slow the machine; the others soon.
        let handler = ScriptedPeer(answer: { _, n in
            H2Response(status: 503, body: Array(#"{"reason":"ServiceUnavailable"}"#.utf8), delay: n == 1 ? .seconds(3) : .milliseconds(200))
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        // No reuse: only the sharing of the request in flight can keep it to one.
        let sharing = try peer.client { $0.probeReuse = .zero; $0.probeTimeout = .seconds(60) }
        defer { sharing.shutdown() }
        let answers = await withTaskGroup(of: APNsResult.self) { group in
            for _ in 0..<20 { group.addTask { await sharing.probe(.devicePush, bundleID: "com.example.app") } }
            return await group.reduce(into: [APNsResult]()) { $0.append($1) }
        }
        #expect(answers.count == 20 && answers.allSatisfy { $0.response?.reason == .serviceUnavailable })
        #expect(handler.requests.count == 1, "probes at once sent \(handler.requests.count) requests")
        #expect(handler.requests.first?.path == "/3/device/00")
        // An answer that answers every later probe of its service here, however slow the machine.
        let reusing = try peer.client { $0.probeReuse = .seconds(3600) }
        defer { reusing.shutdown() }
        _ = await reusing.probe(.devicePush, bundleID: "com.example.app")
        _ = await reusing.probe(.devicePush, bundleID: "com.example.app")
        #expect(handler.requests.count == 2, "a probe within the reuse window sent a request of its own")
        // Each service is asked for itself.
        _ = await reusing.probe(.broadcast, bundleID: "com.example.app")
        _ = await reusing.probe(.channelManagement, bundleID: "com.example.app")
        #expect(handler.requests.map(\.path) == ["/3/device/00", "/3/device/00", "/4/broadcasts/apps/com.example.app",
                                                 "/1/apps/com.example.app/channels"])
        // Past the window, a probe asks again.
        let brief = try peer.client { $0.probeReuse = .milliseconds(50) }
        defer { brief.shutdown() }
        _ = await brief.probe(.devicePush, bundleID: "com.example.app")
        try await Task.sleep(for: .milliseconds(100))
        _ = await brief.probe(.devicePush, bundleID: "com.example.app")
        #expect(handler.requests.count == 6)
    }

    /// The in-flight window full of requests APNs doesn't answer: the probe still leaves (it is
    /// not held in the window), and its answer shows the service at work.
    @Test func aProbeLeavesWhenTheWindowIsFull() async throws {
        let handler = ScriptedPeer(answer: { request, _ in
            request.path == "/3/device/00" ? H2Response(status: 400, body: Array(#"{"reason":"BadDeviceToken"}"#.utf8))
                : H2Response(status: 200, delay: .seconds(8))
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client { $0.maxInFlight = 2; $0.probeTimeout = .seconds(4) }
        defer { client.shutdown() }
        let stuck = Task { await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(2), bundleID: "com.example.app") }
        while handler.requests.count < 2 { try await Task.sleep(for: .milliseconds(10)) }
        let since = APNsClientStats.moment(ago: .zero)
        let answer = await client.probe(.devicePush, bundleID: "com.example.app")
        #expect(answer.response?.reason == .badDeviceToken, "\(answer)")
        #expect(client.stats.answeredNormally(.devicePush, since: since))
        _ = await stuck.value
    }

    /// A probe APNs takes in and never answers holds the failing send at most `probeTimeout`,
    /// and counts as no sign of a working service. Which outcome came first says so: the probe's
    /// own timeout, not the answer (60 s) or the request's timeout (20 s, another message). No
    /// wall-clock bound: fresh-clone CI runs on these 2-core machines stalled the whole process
    /// at the start for 15 and then 20 s (every early test finished then), timers included.
    @Test func aProbeWaitsAtMostItsTimeout() async throws {
        let handler = ScriptedPeer(answer: { _, _ in H2Response(status: 400, body: Array(#"{"reason":"BadDeviceToken"}"#.utf8), delay: .seconds(60)) })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        let client = try peer.client { $0.probeTimeout = .milliseconds(300) }
        defer { client.shutdown() }
        let since = APNsClientStats.moment(ago: .zero)
        let result = await client.probe(.devicePush, bundleID: "com.example.app")
        guard case .failed(let error) = result else { Issue.record("expected no answer, got \(result)"); return }
        #expect(error.kind == .timeout && error.message == "no answer to the outage probe within \(Duration.milliseconds(300))", "\(error)")
        #expect(!client.stats.answeredNormally(.devicePush, since: since))
    }

    @Test func shutdownMidBatchAnswersEveryTokenOnce() async throws {
        // Slow answers keep most of the batch queued or on the wire when the client shuts down:
        // every token still gets exactly one result (delivered, or failed as shut down), in order,
        // and the caller is resumed. Several rounds, to shake out races between the loops.
        let handler = ScriptedPeer(answer: { _, _ in
            H2Response(status: 200, headers: [HTTP2Header("apns-id", UUID().uuidString.lowercased())], delay: .milliseconds(30))
        })
        let peer = try Peer.start(handler)
        defer { peer.stop() }
        for round in 0..<5 {
            let client = try peer.client(connections: 3) { $0.threads = 2; $0.maxInFlight = 200 }
            let batch = tokens(2_000)
            async let results = client.sendLiveActivity(payload: Array("{}".utf8), to: batch, bundleID: "com.example.app")
            try await Task.sleep(for: .milliseconds(40 + 10 * round))
            client.shutdown()
            let all = await results
            #expect(all.count == batch.count)
            let delivered = all.filter { $0.action == .delivered }.count
            let shutDown = all.filter { if case .failed(let e) = $0 { e.kind == .shutdown } else { false } }.count
            #expect(delivered + shutDown == batch.count, "round \(round): \(delivered) delivered, \(shutDown) shut down")
            #expect(shutDown > 0, "round \(round): the batch finished before the shutdown; nothing was tested")
        }
    }

    @Test func aServerThatIsDownFailsRequestsAsRetryable() async throws {
        let port = freeLoopbackPort()
        let client = try APNsClient(configuration: APNsClientConfiguration(endpoint: APNsEndpoint(host: "127.0.0.1", port: port), connections: 1,
                                                                            connectTimeout: .seconds(1), maxConnectFailuresBeforeFailing: 2,
                                                                            backoffInitial: .milliseconds(10)), tokens: nil, logger: quiet)
        defer { client.shutdown() }
        let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(3), bundleID: "com.example.app")
        #expect(results.allSatisfy { $0.action == .retryWithBackoff })
        #expect(results.allSatisfy { if case .failed(let e) = $0 { e.kind == .connectionFailed } else { false } })
    }

    @Test func anUntrustedServerIsRefused() async throws {
        let peer = try Peer.start(ScriptedPeer())
        defer { peer.stop() }
        let client = try peer.client { $0.caFile = nil; $0.maxConnectFailuresBeforeFailing = 1 }
        defer { client.shutdown() }
        let results = await client.sendLiveActivity(payload: Array("{}".utf8), to: tokens(1), bundleID: "com.example.app")
        guard case .failed(let e) = results[0] else { Issue.record("expected a failure, got \(results[0])"); return }
        #expect(e.kind == .connectionFailed && e.message.lowercased().contains("verif"))
    }
}

@Suite struct SharedProviderTokenTests {
    @Test func twoWorkersShareOneTokenAndRefreshAsOne() async throws {
        let server = try await RedisServer()
        let key = try ES256PrivateKey.generate()
        let signer = ProviderTokenSigner(key: key, identity: try ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456"))
        let now = Mutex<Int64>(1_800_000_000)
        let clock: @Sendable () -> Int64 = { now.withLock { $0 } }
        let a = RedisSharedProviderTokens(signer: signer, redis: server.connection(), prefix: "t", clock: clock)
        let b = RedisSharedProviderTokens(signer: signer, redis: server.connection(), prefix: "t", clock: clock)
        async let ta = a.currentToken()
        async let tb = b.currentToken()
        let (x, y) = try await (ta, tb)
        #expect(x == y)
        #expect(a.mintedHere + b.mintedHere == 1)

        // 30 minutes on: still the same token (Apple: no refresh within 20 minutes; ours at 40).
        now.withLock { $0 += 30 * 60 }
        let later = (try await a.currentToken(), try await b.currentToken())
        #expect(later.0 == x && later.1 == x)
        // 41 minutes after issue: one new token for both.
        now.withLock { $0 += 11 * 60 }
        async let na = a.currentToken()
        async let nb = b.currentToken()
        let (p, q) = try await (na, nb)
        #expect(p == q && p != x && p.issuedAt == 1_800_000_000 + 41 * 60)
        #expect(a.mintedHere + b.mintedHere == 2)

        // APNs rejects it at once: too young to replace (Apple: one refresh per 20 minutes).
        let (ra, rb) = (try await a.refresh(rejected: p), try await b.refresh(rejected: p))
        #expect(ra == p && rb == p)
        #expect(a.mintedHere + b.mintedHere == 2)
        // Rejected again 21 minutes on: fifty concurrent refreshes across both mint one replacement.
        now.withLock { $0 += 21 * 60 }
        let replacements = try await withThrowingTaskGroup(of: ProviderToken.self) { group in
            for i in 0..<50 { group.addTask { try await (i % 2 == 0 ? a : b).refresh(rejected: p) } }
            return try await group.reduce(into: Set<ProviderToken>()) { $0.insert($1) }
        }
        #expect(replacements.count == 1 && !replacements.contains(p))
        #expect(a.mintedHere + b.mintedHere == 3)
    }

    /// Shared tokens on a Redis a test can stop, with a clock it sets (`advance`).
    final class AwayRig: Sendable {
        final class Clock: Sendable {
            let now = Mutex<Int64>(1_800_000_000)
        }
        let server: RedisServer
        let signer: ProviderTokenSigner
        let clock = Clock()
        let redis: RedisConnection
        let tokens: RedisSharedProviderTokens

        init() async throws {
            server = try await RedisServer()
            signer = ProviderTokenSigner(key: try ES256PrivateKey.generate(), identity: try ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456"))
            redis = RedisConnection(configuration: RedisConfiguration(url: server.url, connectTimeout: .milliseconds(200),
                                                                      commandTimeout: .milliseconds(500)))
            let clock = self.clock
            tokens = RedisSharedProviderTokens(signer: signer, redis: redis, prefix: "t", clock: { clock.now.withLock { $0 } })
        }

        func advance(_ seconds: Int64) { clock.now.withLock { $0 += seconds } }
    }

    /// Redis away when the token is due: the local copy goes on while APNs still accepts it
    /// (55 minutes), then the failure is a provider-token failure — retried, as a request that
    /// got no answer is, never held against the device token.
    @Test func redisAwayWhenTheTokenIsDueKeepsTheLocalCopyWhileItIsGood() async throws {
        let r = try await AwayRig()
        defer { r.redis.close() }
        let first = try await r.tokens.currentToken()
        await r.server.stop()
        r.advance(41 * 60)
        #expect(try await r.tokens.currentToken() == first)
        r.advance(15 * 60)
        await #expect(throws: (any Error).self) { try await r.tokens.currentToken() }
        #expect(APNsResult.failed(APNsTransportError(.providerToken, "no provider token")).action == .retryWithBackoff)
        #expect(APNsResult.failed(APNsTransportError(.configuration, "no client")).action == .fail)
    }

    /// A young token refused while Redis is away: the newer token this worker holds answers,
    /// and with none, the refused one stays (the requests fail as refused, nothing throws).
    @Test func aYoungTokenRefusedWhileRedisIsAwayTakesTheNewerLocalOne() async throws {
        let r = try await AwayRig()
        defer { r.redis.close() }
        let older = try r.signer.token(issuedAt: 1_800_000_000 - 60)
        let current = try await r.tokens.currentToken()
        await r.server.stop()
        r.advance(60)
        #expect(try await r.tokens.refresh(rejected: older) == current)
        #expect(try await r.tokens.refresh(rejected: current) == current)
    }
}
