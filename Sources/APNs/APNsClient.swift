import APNsCore
import Foundation
import HTTP2Kit
import Logging
import NetIO
import OpenSSLKit
import Synchronization

public struct APNsClientConfiguration: Sendable {
    public var endpoint: APNsEndpoint
    /// Connections to keep open to the endpoint.
    public var connections: Int
    /// Event-loop threads serving them (each polls several connections, as h2load does).
    public var threads: Int
    /// Trust this CA file instead of the system's (the sandbox's certificate).
    public var caFile: String?
    /// Verify the server certificate (default). Turning it off is logged loudly.
    public var verifyPeer: Bool
    /// Plain-text HTTP/2 (h2c): only for tests of the HTTP/2 layer, never towards APNs.
    public var plaintext: Bool
    public var connectTimeout: Duration
    public var requestTimeout: Duration
    /// An idle connection is PINGed after this long (Apple: about an hour).
    public var idlePingInterval: Duration
    public var pingTimeout: Duration
    /// Our own cap on concurrent streams per connection (the server's SETTINGS may be lower).
    public var maxConcurrentStreams: Int
    /// Requests handed to the connections and not yet answered, across all callers: the
    /// in-flight window. A caller beyond it waits (back-pressure); a batch larger than it is sent
    /// in slices of this size.
    public var maxInFlight: Int
    /// After this many failed connection attempts in a row, waiting requests fail (retryable).
    public var maxConnectFailuresBeforeFailing: Int
    public var backoffInitial: Duration
    public var backoffMaximum: Duration
    /// Priority-5 requests in flight at most (nil: a quarter of `connections ×
    /// maxConcurrentStreams`), so priority-10 requests find free streams and short queues.
    public var lowPriorityInFlight: Int?
    /// How long the answer to an outage probe (`APNsClient.probe`) answers the probes after it.
    public var probeReuse: Duration = .seconds(1)
    /// How long a caller waits for a probe's answer before taking its absence as an outage
    /// (the probe itself may go on to the request timeout, and its answer is still recorded).
    public var probeTimeout: Duration = .seconds(5)

    public init(endpoint: APNsEndpoint, connections: Int = 2, threads: Int = 1, caFile: String? = nil, verifyPeer: Bool = true, plaintext: Bool = false,
                connectTimeout: Duration = .seconds(5), requestTimeout: Duration = .seconds(30),
                idlePingInterval: Duration = .seconds(3600), pingTimeout: Duration = .seconds(20), maxConcurrentStreams: Int = 1000,
                maxInFlight: Int = 20_000, maxConnectFailuresBeforeFailing: Int = 3,
                backoffInitial: Duration = .milliseconds(100), backoffMaximum: Duration = .seconds(10)) {
        self.endpoint = endpoint; self.connections = max(1, connections); self.threads = max(1, min(threads, connections)); self.caFile = caFile; self.verifyPeer = verifyPeer
        self.plaintext = plaintext; self.connectTimeout = connectTimeout; self.requestTimeout = requestTimeout
        self.idlePingInterval = idlePingInterval; self.pingTimeout = pingTimeout; self.maxConcurrentStreams = maxConcurrentStreams
        self.maxInFlight = max(1, maxInFlight); self.maxConnectFailuresBeforeFailing = max(1, maxConnectFailuresBeforeFailing)
        self.backoffInitial = backoffInitial; self.backoffMaximum = backoffMaximum
    }

    /// Capped exponential back-off with jitter (half to all of the step).
    func backoff(_ failures: Int) -> Duration {
        let step = Double(backoffInitial.nanoseconds) * Double(1 << min(max(failures - 1, 0), 20))
        let capped = min(step, Double(backoffMaximum.nanoseconds))
        return .nanoseconds(Int64(capped * Double.random(in: 0.5...1.0)))
    }
}

/// A point in time for `APNsClientStats.answeredNormally(_:since:)`.
public struct APNsMoment: Sendable {
    let nanoseconds: UInt64
}

/// Which of APNs's services a request asks: one can fail while the others work (a broadcast
/// outage while device pushes go through), so each one's answers are watched apart.
public enum APNsService: String, Sendable, CaseIterable {
    /// Pushes to device tokens (`/3/device/<token>`).
    case devicePush
    /// Broadcasts to channels (`/4/broadcasts/apps/<bundle>`).
    case broadcast
    /// Channel management (`/1/apps/<bundle>/channels`).
    case channelManagement
}

/// Why a client can't use APNs now: no connection to be had (refused, DNS, TLS, a timeout), or
/// our credentials refused. Shown by `/metrics`, `top` and `inspect` while it lasts.
public struct APNsTrouble: Sendable, Equatable {
    public enum Kind: String, Sendable { case unreachable, credentials }
    public var kind: Kind
    /// When it began (wall clock, ms since 1970).
    public var sinceMillis: Int64
    /// The latest error, in words ("connect 127.0.0.1:2197: Connection refused").
    public var error: String
    public init(kind: Kind, sinceMillis: Int64, error: String) { self.kind = kind; self.sinceMillis = sinceMillis; self.error = error }

    /// Every value `why` takes.
    public static let whys = ["connection refused", "dns", "tls", "timeout", "other", "credentials refused"]

    /// The kind of failure in a word or two, for a bounded metric label.
    public var why: String {
        if kind == .credentials { return "credentials refused" }
        let e = error.lowercased()
        if e.contains("connection refused") { return "connection refused" }
        if e.contains("(dns)") { return "dns" }
        if e.contains("tls") || e.contains("ssl") || e.contains("certificate") || e.contains("alpn") { return "tls" }
        if e.contains("timed out") || e.contains("timeout") { return "timeout" }
        return "other"
    }
}

/// Counters for metrics and benchmarks.
public final class APNsClientStats: Sendable {
    /// Why APNs can't be used now (nil: it can).
    /// One of each kind: a connection that can't be had, and credentials refused.
    private let troubleState = Mutex<[APNsTrouble.Kind: APNsTrouble]>([:])
    /// No connection first (nothing can be sent at all), else credentials refused.
    public var trouble: APNsTrouble? { troubleState.withLock { $0[.unreachable] ?? $0[.credentials] } }

    func noteTrouble(_ kind: APNsTrouble.Kind, _ error: String) {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        troubleState.withLock { t in
            if t[kind] != nil { t[kind]!.error = error } else { t[kind] = APNsTrouble(kind: kind, sinceMillis: now, error: error) }
        }
    }

    func clearTrouble(_ kind: APNsTrouble.Kind) {
        troubleState.withLock { t in t[kind] = nil }
    }

    let delivered = Atomic<Int>(0)
    let rejected = Atomic<Int>(0)
    let retried = Atomic<Int>(0)
    /// Requests that got no answer and may have reached APNs (a connection lost, a stream reset):
    /// handed back to their caller as failed, never sent again by the client.
    let unknownFate = Atomic<Int>(0)
    let timeouts = Atomic<Int>(0)
    let connects = Atomic<Int>(0)
    let connectionsLost = Atomic<Int>(0)
    let goAways = Atomic<Int>(0)
    let tokenRefreshes = Atomic<Int>(0)
    /// When the latest answer that shows the service at work (2xx, 4xx but 429 and a refusal
    /// of our credentials) came, per `APNsService`: `Deadline` nanoseconds, 0 before any.
    private let lastNormalPush = Atomic<UInt64>(0)
    private let lastNormalBroadcast = Atomic<UInt64>(0)
    private let lastNormalManagement = Atomic<UInt64>(0)
    /// Connections open now (HTTP/2 set up, not yet closed).
    let open = Atomic<Int>(0)
    /// Request durations by lane (priority 10, priority 5), from the event loops' own tallies:
    /// each loop counts on its thread and adds its counts here at most every 250 ms.
    private let durations = Mutex([RequestDurations(), RequestDurations()])

    public var openConnections: Int { open.load(ordering: .relaxed) }

    /// A moment `ago` before now, to ask `answeredNormally(_:since:)` about later.
    public static func moment(ago: Duration) -> APNsMoment {
        let now = Deadline.now().nanoseconds, back = UInt64(max(0, ago.nanoseconds))
        return APNsMoment(nanoseconds: now > back ? now - back : 0)
    }

    /// Whether APNs answered a request of this client to `service` as it does when it works
    /// (2xx, or 4xx other than 429 and a refusal of our credentials) at `moment` or after: a
    /// send whose requests all failed while it didn't saw no sign of a working service (see
    /// `APNsResult.apnsUnusable` for the other signs of an outage).
    public func answeredNormally(_ service: APNsService, since moment: APNsMoment) -> Bool {
        let last = switch service {
        case .devicePush: lastNormalPush.load(ordering: .relaxed)
        case .broadcast: lastNormalBroadcast.load(ordering: .relaxed)
        case .channelManagement: lastNormalManagement.load(ordering: .relaxed)
        }
        return last >= moment.nanoseconds
    }

    func answeredNormally(_ service: APNsService, at nanoseconds: UInt64) {
        switch service {
        case .devicePush: lastNormalPush.store(nanoseconds, ordering: .relaxed)
        case .broadcast: lastNormalBroadcast.store(nanoseconds, ordering: .relaxed)
        case .channelManagement: lastNormalManagement.store(nanoseconds, ordering: .relaxed)
        }
    }

    /// Time from a request's submission on a connection to its complete answer, by priority lane:
    /// `(10, histogram)`, `(5, histogram)`.
    public var requestDurations: [(priority: Int, histogram: RequestDurations)] {
        durations.withLock { [(10, $0[0]), (5, $0[1])] }
    }

    func add(_ tallies: inout [RequestDurations]) {
        durations.withLock { all in
            for lane in all.indices where tallies[lane].count > 0 {
                all[lane].add(tallies[lane])
                tallies[lane] = RequestDurations()
            }
        }
    }

    public struct Snapshot: Sendable, Equatable, Codable {
        public var delivered, rejected, retried, timeouts, connects, connectionsLost, goAways, tokenRefreshes: Int
        public var unknownFate = 0
    }

    public var snapshot: Snapshot {
        Snapshot(delivered: delivered.load(ordering: .relaxed), rejected: rejected.load(ordering: .relaxed),
                 retried: retried.load(ordering: .relaxed), timeouts: timeouts.load(ordering: .relaxed),
                 connects: connects.load(ordering: .relaxed), connectionsLost: connectionsLost.load(ordering: .relaxed),
                 goAways: goAways.load(ordering: .relaxed), tokenRefreshes: tokenRefreshes.load(ordering: .relaxed),
                 unknownFate: unknownFate.load(ordering: .relaxed))
    }
}

/// Counts of durations in fixed buckets (Prometheus's cumulative `le` form is made when written).
public struct RequestDurations: Sendable, Equatable {
    /// Upper bounds in seconds, as `_bucket{le=…}` shows them.
    public static let bounds: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    private static let boundsNanos: [UInt64] = bounds.map { UInt64($0 * 1e9) }
    /// Per bucket (not cumulative); the last one is above every bound.
    public private(set) var counts = [Int](repeating: 0, count: bounds.count + 1)
    public private(set) var sumNanos: UInt64 = 0
    public var count: Int { counts.reduce(0, +) }

    public init() {}

    @inline(__always)
    public mutating func record(nanoseconds: UInt64) {
        var i = 0
        while i < Self.boundsNanos.count && nanoseconds > Self.boundsNanos[i] { i += 1 }
        counts[i] += 1
        sumNanos &+= nanoseconds
    }

    public mutating func add(_ other: RequestDurations) {
        for i in counts.indices { counts[i] += other.counts[i] }
        sumNanos &+= other.sumNanos
    }
}

/// Sends requests to one APNs endpoint over a small pool of HTTP/2 connections.
///
/// The batch calls take one payload for many targets: headers are encoded once per batch (a
/// request template), the body is shared, each connection gets one slice with one lock and one
/// wake-up, and the caller is resumed once when every result is in. Results come back in the
/// order of the targets, each with the action it implies. A provider token that APNs refuses as
/// expired or invalid is refreshed (through `tokens`) and the affected requests are sent once
/// more before results are returned.
public final class APNsClient: Sendable {
    public let configuration: APNsClientConfiguration
    public let stats = APNsClientStats()
    private let loops: [APNsEventLoop]
    private let tokens: (any ProviderTokenSource)?
    private let logger: Logger
    private let next = Atomic<Int>(0)
    private let window: RequestWindow
    private let probes = Mutex([APNsService: Probes]())
    /// APNs refusing our credentials, logged while it lasts and when it ends.
    private let conditions: ConditionLog

    /// The outage probe's request in flight, and the latest answer (`probe`).
    private struct Probes {
        var inFlight: Task<APNsResult, Never>?
        var last: (at: ContinuousClock.Instant, result: APNsResult)?
    }

    public init(configuration: APNsClientConfiguration, tokens: (any ProviderTokenSource)?, logger: Logger) throws {
        self.configuration = configuration
        self.tokens = tokens
        self.logger = logger
        self.conditions = ConditionLog(logger: logger)
        self.window = RequestWindow(size: configuration.maxInFlight,
                                    lowLimit: configuration.lowPriorityInFlight ?? max(1, configuration.connections * configuration.maxConcurrentStreams / 4))
        var tls: TLSContext?
        if !configuration.plaintext {
            do {
                tls = try TLSContext.client(verifyPeer: configuration.verifyPeer, caFile: configuration.caFile, alpn: ["h2"])
            } catch {
                throw APNsTransportError(.configuration, "TLS setup for \(configuration.endpoint) failed: \(error)")
            }
            if !configuration.verifyPeer {
                logger.warning("TLS CERTIFICATE VERIFICATION IS OFF for APNs endpoint \(configuration.endpoint): anyone on the path can impersonate APNs")
            }
        }
        let stats = self.stats
        let threads = configuration.threads
        loops = (0..<threads).map { t in
            // Connections spread over the threads as evenly as they go.
            let count = configuration.connections / threads + (t < configuration.connections % threads ? 1 : 0)
            return APNsEventLoop(id: t, connections: count, configuration: configuration, tlsContext: tls, logger: logger, stats: stats)
        }
    }

    deinit { shutdown() }

    /// How long the least recently active event loop has gone without a turn. A loop turns at
    /// least every second when idle (its poll's timeout), so a large value means a stuck thread.
    public var longestLoopStall: Duration {
        let now = Deadline.now().nanoseconds
        let oldest = loops.map { $0.lastTurn.load(ordering: .relaxed) }.min() ?? now
        return .nanoseconds(Int64(bitPattern: now &- min(oldest, now)))
    }

    /// Closes every connection; requests still waiting fail with `.shutdown`.
    public func shutdown() { loops.forEach { $0.stop() } }

    /// Live Activity pushes of one payload to many device tokens (`/3/device/<token>`).
    /// `successIDs` false: a 2xx answer comes without its `apns-id`/`apns-unique-id` (a fan-out
    /// reads them only from failures; a String each, per push, cost 4–7% of the worker's CPU
    /// per token in a fan-out).
    public func sendLiveActivity(payload: [UInt8], to deviceTokens: [String], bundleID: String, priority: Int = 10,
                                 expiration: Int64? = nil, apnsIDs: [String]? = nil, successIDs: Bool = true) async -> [APNsResult] {
        var headers = [HTTP2Header("apns-push-type", "liveactivity"), HTTP2Header("apns-topic", "\(bundleID).push-type.liveactivity"),
                       HTTP2Header("apns-priority", String(priority))]
        if let expiration { headers.append(HTTP2Header("apns-expiration", String(expiration))) }
        // The tokens are the path suffixes as given (no string per request): the template
        // carries "/3/device/".
        return await perform(method: "POST", sharedHeaders: headers, body: HTTP2Body(payload),
                             targets: Targets(pathPrefix: "/3/device/", paths: deviceTokens, apnsIDs: apnsIDs, successIDs: successIDs),
                             service: .devicePush, priority: priority)
    }

    /// One broadcast to a channel (`/4/broadcasts/apps/<bundle>`). The expiration follows the
    /// channel's storage policy: always 0 on a policy-0 channel (APNs answers BadExpirationDate
    /// otherwise); on a policy-1 channel `expiration`, or 8 hours from now (how long APNs keeps
    /// the latest message).
    public func broadcast(payload: [UInt8], channelID: String, bundleID: String, priority: Int = 10, storagePolicy: Int = 0,
                          expiration: Int64? = nil) async -> APNsResult {
        let expiration = storagePolicy == 0 ? 0 : (expiration ?? Int64(Date().timeIntervalSince1970) + 8 * 3600)
        let headers = [HTTP2Header("apns-push-type", "liveactivity"), HTTP2Header("apns-channel-id", channelID),
                       HTTP2Header("apns-priority", String(priority)), HTTP2Header("apns-expiration", String(expiration))]
        return await perform(method: "POST", sharedHeaders: headers, body: HTTP2Body(payload),
                             targets: Targets(pathPrefix: "", paths: ["/4/broadcasts/apps/\(bundleID)"]), service: .broadcast,
                             priority: priority)[0]
    }

    /// Any single request (channel management): the provider token is added.
    public func request(method: String, path: String, headers: [HTTP2Header], body: [UInt8]? = nil) async -> APNsResult {
        await perform(method: method, sharedHeaders: headers, body: body.map { HTTP2Body($0) },
                      targets: Targets(pathPrefix: "", paths: [path]), service: .channelManagement)[0]
    }

    /// Asks `service` something it answers when it works, whatever became of other requests,
    /// with a 4xx about the request and nothing that can reach a device or change a channel: a
    /// push to the device token "00" (too short: `BadDeviceToken`), a broadcast without a
    /// channel id, a channel read without one (`MissingChannelId`), each for `bundleID`'s real
    /// topic. The answer is recorded like any other (`stats.answeredNormally`), so a send whose
    /// requests all failed on an otherwise idle client can tell its own failure from an
    /// outage of the service. A caller waits for it at most `configuration.probeTimeout`.
    ///
    /// In an outage every failing send asks: those to one service share one request, callers
    /// while it is out waiting for its answer, and that answer answers the probes of the next
    /// `configuration.probeReuse` (1 s) too, so a backlog failing at once sends each service
    /// about one probe a second from this client, not one per send.
    public func probe(_ service: APNsService, bundleID: String) async -> APNsResult {
        enum Source { case answered(APNsResult), out(Task<APNsResult, Never>) }
        let source = probes.withLock { all -> Source in
            var p = all[service] ?? Probes()
            defer { all[service] = p }
            if let last = p.last, ContinuousClock.now - last.at < configuration.probeReuse { return .answered(last.result) }
            if let task = p.inFlight { return .out(task) }
            // The only one in flight for the service: it puts its answer in its own place.
            let task = Task {
                let result = await self.sendProbe(service, bundleID: bundleID)
                self.probes.withLock { $0[service] = Probes(inFlight: nil, last: (ContinuousClock.now, result)) }
                return result
            }
            p.inFlight = task
            return .out(task)
        }
        switch source {
        case .answered(let result):
            return result
        case .out(let task):
            let timeout = configuration.probeTimeout
            return await Self.value(of: task, within: timeout)
                ?? .failed(APNsTransportError(.timeout, "no answer to the outage probe within \(timeout)"))
        }
    }

    private func sendProbe(_ service: APNsService, bundleID: String) async -> APNsResult {
        let live = HTTP2Header("apns-push-type", "liveactivity"), empty = HTTP2Body(Array(#"{"aps":{}}"#.utf8))
        let (method, path, headers, body): (String, String, [HTTP2Header], HTTP2Body?) = switch service {
        case .devicePush:
            ("POST", "/3/device/00", [live, HTTP2Header("apns-topic", "\(bundleID).push-type.liveactivity"), HTTP2Header("apns-priority", "5")], empty)
        case .broadcast:
            ("POST", "/4/broadcasts/apps/\(bundleID)", [live, HTTP2Header("apns-priority", "5"), HTTP2Header("apns-expiration", "0")], empty)
        case .channelManagement:
            ("GET", "/1/apps/\(bundleID)/channels", [], nil)
        }
        return await perform(method: method, sharedHeaders: headers, body: body, targets: Targets(pathPrefix: "", paths: [path]),
                             service: service, windowed: false)[0]
    }

    /// `task`'s value, or nil if it takes longer than `timeout` (the task goes on).
    private static func value(of task: Task<APNsResult, Never>, within timeout: Duration) async -> APNsResult? {
        final class Waiter: Sendable {
            let continuation = Mutex<CheckedContinuation<APNsResult?, Never>?>(nil)
            func resume(_ result: APNsResult?) { continuation.withLock { $0.take() }?.resume(returning: result) }
        }
        let waiter = Waiter()
        return await withCheckedContinuation { continuation in
            waiter.continuation.withLock { $0 = continuation }
            let timer = Task { if (try? await Task.sleep(for: timeout)) != nil { waiter.resume(nil) } }
            Task {
                let result = await task.value
                timer.cancel()
                waiter.resume(result)
            }
        }
    }

    /// The requests of one batch: each one's `:path` is `pathPrefix` (carried by the request
    /// template) followed by its entry in `paths`, with an `apns-id` header when `apnsIDs` has one.
    /// `successIDs`: whether a 2xx answer keeps its ids.
    struct Targets: Sendable {
        var pathPrefix: String
        var paths: [String]
        var apnsIDs: [String]?
        var successIDs = true

        init(pathPrefix: String, paths: [String], apnsIDs: [String]? = nil, successIDs: Bool = true) {
            self.pathPrefix = pathPrefix
            self.paths = paths
            self.apnsIDs = apnsIDs
            self.successIDs = successIDs
        }

        var count: Int { paths.count }
        var isEmpty: Bool { paths.isEmpty }

        /// The extra headers of request `index` (none, in the common case: no allocation).
        @inline(__always)
        func headers(_ index: Int) -> [HTTP2Header] {
            guard let apnsIDs else { return [] }
            return [HTTP2Header("apns-id", apnsIDs[index])]
        }

        /// The targets at `indices`, in that order.
        func subset(_ indices: [Int]) -> Targets {
            Targets(pathPrefix: pathPrefix, paths: indices.map { paths[$0] }, apnsIDs: apnsIDs.map { ids in indices.map { ids[$0] } },
                    successIDs: successIDs)
        }

        func slice(_ range: Range<Int>) -> Targets {
            Targets(pathPrefix: pathPrefix, paths: Array(paths[range]), apnsIDs: apnsIDs.map { Array($0[range]) }, successIDs: successIDs)
        }
    }

    /// `priority`: the requests' lane in the in-flight window (see `RequestWindow`).
    /// `windowed` false: not held in the in-flight window (an outage probe, which must leave
    /// even when the window is full of requests APNs doesn't answer).
    private func perform(method: String, sharedHeaders: [HTTP2Header], body: HTTP2Body?, targets: Targets, service: APNsService,
                         priority: Int = 10, windowed: Bool = true) async -> [APNsResult] {
        guard !targets.isEmpty else { return [] }
        var token: ProviderToken?
        if let tokens {
            do { token = try await tokens.currentToken() } catch {
                let e = APNsResult.failed(APNsTransportError(.providerToken, "no provider token: \(error)"))
                return Array(repeating: e, count: targets.count)
            }
        }
        func send(_ targets: Targets, _ token: ProviderToken?) async -> [APNsResult] {
            windowed ? await dispatch(method: method, headers: sharedHeaders, token: token, body: body, targets: targets, service: service, priority: priority)
                : await dispatchSlice(method: method, headers: sharedHeaders, token: token, body: body, targets: targets, service: service, priority: priority)
        }
        var results = await send(targets, token)
        var used = token

        // Refused provider token: refresh once (shared with the fleet) and resend those requests —
        // unless it is too young to replace (`TokenRefreshPolicy.mayReplace`): then the
        // credentials are wrong, and the requests fail as refused.
        let refused = results.indices.filter { results[$0].action == .refreshProviderToken }
        if !refused.isEmpty, let tokens, let token {
            let reason = results[refused[0]].response?.reason?.rawValue ?? "?"
            do {
                let fresh = try await tokens.refresh(rejected: token)
                guard fresh != token else {
                    noteCredentials(results, token: token)
                    return results
                }
                stats.tokenRefreshes.add(1, ordering: .relaxed)
                logger.warning("APNs refused the provider token; refreshing", metadata: ["reason": "\(reason)", "requests": "\(refused.count)"])
                let again = await send(targets.subset(refused), fresh)
                for (i, r) in zip(refused, again) { results[i] = r }
                used = fresh
            } catch {
                logger.error("provider token refresh failed", metadata: ["error": "\(error)"])
            }
        }
        noteCredentials(results, token: used)
        return results
    }

    /// Whether `results` show APNs refusing our credentials (`APNsReason.refusesCredentials`: a
    /// token too young to replace, a key or certificate it doesn't take) or taking them (a 2xx):
    /// a condition logged when it starts, at most every 10 s while it lasts (a misconfigured
    /// fleet's fan-outs meet it on every batch), and when it ends (`ConditionLog`).
    private func noteCredentials(_ results: [APNsResult], token: ProviderToken?) {
        var refused = 0, reason: APNsReason?, accepted = false
        for case .response(let response) in results {
            if let why = response.reason, why.refusesCredentials {
                refused += 1
                if reason == nil { reason = why }
            } else if (200..<300).contains(response.status) {
                accepted = true
            }
        }
        let endpoint = "\(configuration.endpoint)"
        if let reason {
            var metadata: Logger.Metadata = ["endpoint": "\(endpoint)", "reason": "\(reason.rawValue)", "requests": "\(refused)"]
            if let token { metadata["token_age_s"] = "\(token.age(now: nowSeconds()))" }
            conditions.report("credentials", "APNs refuses our credentials: check apns.team_id, apns.key_id and the key file; the work waits",
                              metadata)
            stats.noteTrouble(.credentials, "APNs refuses our credentials: \(reason.rawValue)")
        } else if accepted {
            conditions.clear("credentials", "APNs accepts our credentials again", ["endpoint": "\(endpoint)"])
            stats.clearTrouble(.credentials)
        }
    }

    private func dispatch(method: String, headers: [HTTP2Header], token: ProviderToken?, body: HTTP2Body?, targets: Targets,
                          service: APNsService, priority: Int) async -> [APNsResult] {
        // Within the in-flight window: slices of at most its lane's size, each waiting for room.
        let size = priority >= 10 ? configuration.maxInFlight : window.lowLimit
        if targets.count > size {
            var results: [APNsResult] = []
            results.reserveCapacity(targets.count)
            var start = 0
            while start < targets.count {
                let end = min(start + size, targets.count)
                results += await dispatch(method: method, headers: headers, token: token, body: body, targets: targets.slice(start..<end),
                                          service: service, priority: priority)
                start = end
            }
            return results
        }
        await window.acquire(targets.count, priority: priority)
        defer { window.release(targets.count, priority: priority) }
        return await dispatchSlice(method: method, headers: headers, token: token, body: body, targets: targets, service: service,
                                   priority: priority)
    }

    private func dispatchSlice(method: String, headers: [HTTP2Header], token: ProviderToken?, body: HTTP2Body?, targets: Targets,
                               service: APNsService, priority: Int) async -> [APNsResult] {
        var all = headers
        if let token { all.append(HTTP2Header("authorization", "bearer \(token.value)")) }
        let template: HTTP2RequestTemplate
        do {
            template = try HTTP2RequestTemplate(method: method, scheme: configuration.plaintext ? "http" : "https",
                                                authority: configuration.endpoint.host, pathPrefix: targets.pathPrefix, headers: all)
        } catch {
            return Array(repeating: .failed(APNsTransportError(.configuration, "bad request headers: \(error)")), count: targets.count)
        }
        return await withCheckedContinuation { continuation in
            let work = BatchWork(template: template, body: body, targets: targets, lane: priority >= 10 ? 0 : 1, service: service,
                                 completion: BatchCompletion(count: targets.count, continuation: continuation))
            // One contiguous slice per event loop, starting from a rotating one.
            let n = loops.count
            let first = next.add(1, ordering: .relaxed).newValue
            let per = (targets.count + n - 1) / n
            var start = 0
            var k = 0
            while start < targets.count {
                let end = min(start + per, targets.count)
                loops[(first + k) % n].enqueue(work: work, start..<end)
                start = end
                k += 1
            }
        }
    }
}

/// Counts requests in flight across callers, in two lanes. Priority-10 requests wait only for
/// room in the window; priority-5 requests may also hold no more than `lowLimit` in flight (about
/// what the connections carry at once), so a flood of them never builds a queue at the
/// connections that a priority-10 request would wait behind. Waiters are served priority 10
/// first, each lane in order; a priority-5 waiter older than `aging` is served as if it were 10,
/// so priority 5 never starves.
final class RequestWindow: Sendable {
    private struct Waiter {
        var count: Int
        var since: ContinuousClock.Instant
        var continuation: CheckedContinuation<Void, Never>
    }
    private struct State {
        var available: Int
        var low = 0
        var high: [Waiter] = []
        var routine: [Waiter] = []
    }
    private let state: Mutex<State>
    let lowLimit: Int
    let aging: Duration

    init(size: Int, lowLimit: Int? = nil, aging: Duration = .milliseconds(100)) {
        state = Mutex(State(available: size))
        self.lowLimit = max(1, min(size, lowLimit ?? size))
        self.aging = aging
    }

    /// Room for `n` requests of `priority` (10 is the high lane; anything else the low one).
    func acquire(_ n: Int, priority: Int = 10) async {
        let high = priority >= 10
        let n = high ? n : min(n, lowLimit)
        let granted = state.withLock { s -> Bool in
            guard s.high.isEmpty, high ? !aged(s) : s.routine.isEmpty, fits(s, n, high) else { return false }
            take(&s, n, high)
            return true
        }
        if granted { return }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.high.isEmpty, high ? !aged(s) : s.routine.isEmpty, fits(s, n, high) { take(&s, n, high); return true }
                let w = Waiter(count: n, since: .now, continuation: c)
                if high { s.high.append(w) } else { s.routine.append(w) }
                return false
            }
            if now { c.resume() }
        }
    }

    func release(_ n: Int, priority: Int = 10) {
        let high = priority >= 10
        let n = high ? n : min(n, lowLimit)
        let ready = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.available += n
            if !high { s.low -= n }
            var out: [CheckedContinuation<Void, Never>] = []
            let now = ContinuousClock.now
            while true {
                // An aged priority-5 waiter goes first; then priority 10; then priority 5.
                if let first = s.routine.first, now - first.since > aging, fits(s, first.count, false) {
                    take(&s, first.count, false); out.append(first.continuation); s.routine.removeFirst(); continue
                }
                if let first = s.high.first {
                    guard fits(s, first.count, true) else { break }
                    take(&s, first.count, true); out.append(first.continuation); s.high.removeFirst(); continue
                }
                if let first = s.routine.first, fits(s, first.count, false) {
                    take(&s, first.count, false); out.append(first.continuation); s.routine.removeFirst(); continue
                }
                break
            }
            return out
        }
        ready.forEach { $0.resume() }
    }

    /// Waiters per lane (for tests).
    var waiting: (high: Int, low: Int) { state.withLock { ($0.high.count, $0.routine.count) } }

    /// A priority-5 waiter has waited past `aging`: it goes before any new priority-10 request.
    private func aged(_ s: State) -> Bool { s.routine.first.map { ContinuousClock.now - $0.since > aging } ?? false }

    private func fits(_ s: State, _ n: Int, _ high: Bool) -> Bool { s.available >= n && (high || s.low + n <= lowLimit) }

    private func take(_ s: inout State, _ n: Int, _ high: Bool) {
        s.available -= n
        if !high { s.low += n }
    }
}
