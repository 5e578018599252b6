import ActivityCastCore
import APNsCore
import Foundation
import HTTP2Kit
import Synchronization

/// The APNs sandbox's request-handling core: turns a decoded HTTP/2 request into APNs's answer and
/// keeps what a device would show. Pure: no I/O, no clocks (the caller passes the time), so the
/// server loop (sockets, TLS, HTTP/2) lives elsewhere and everything here is testable with values.
///
/// ## Endpoints (shared/APNS.md)
/// - `POST /3/device/<hex token>`: device push (start, update, end).
/// - `POST /4/broadcasts/apps/<bundle id>`: broadcast to a channel.
/// - `POST|GET|DELETE /1/apps/<bundle id>/channels`: create, read, delete a channel.
/// - `GET /1/apps/<bundle id>/all-channels`: list channels.
/// - Anything else: 404 `BadPath`; a known path with another method: 405 `MethodNotAllowed`.
/// - `/sandbox/…`: the admin API, see `SandboxState+Admin.swift`.
///
/// ## Order of checks
/// Apple doesn't document which error wins when a request has several; the sandbox answers with
/// the first of:
/// 1. routing (404, 405);
/// 2. connection state: streams after a GOAWAY fault answer 503 `Shutdown`;
/// 3. injected faults (reset, 429 `TooManyRequests`, 500, 503 `ServiceUnavailable`; a slow
///    response delays whatever the answer turns out to be);
/// 4. `DuplicateHeaders` (any `apns-*` header, or `authorization`, given twice);
/// 5. the provider token: `MissingProviderToken`, `InvalidProviderToken` (not a bearer ES256 JWT,
///    unknown `kid`, wrong `iss`, bad signature, `iat` more than `clockSkew` in the future),
///    `ExpiredProviderToken`, key restrictions (`BadEnvironmentKeyIdInToken`, `Forbidden`), then
///    the connection's rules (`UnrelatedKeyIdInToken`, 429 `TooManyProviderTokenUpdates`);
/// 6. headers, in the order each endpoint's file lists;
/// 7. the body (`PayloadEmpty`, 413 `PayloadTooLarge`, `BadRequestPayload`);
/// 8. state: device tokens (410 `Unregistered`/`ExpiredToken`, `DeviceTokenNotForTopic`),
///    channels (`ChannelNotRegistered`, the storage-policy-0 expiration rule, the channel limit).
///
/// ## Threads and cost
/// Call it from any number of threads. One mutex guards the mutable state; parsing, header and
/// payload validation, and building the response happen outside it, and under it a device push
/// does a few hash lookups, updates one view and writes one log entry (a few hundred
/// nanoseconds). ECDSA verification of a provider token also happens outside the lock, once per
/// distinct token string (the verdict is cached, `tokenCacheCapacity`), and a body identical to
/// one scanned recently is not scanned again (`PayloadCache`). Throughput: see `SandboxBench` in
/// the tests (about 2 µs per device push on a loaded two-core VM).
public final class SandboxState: Sendable {
    let settings: SandboxSettings
    let store: Mutex<SandboxStore>
    let ids = IDGenerator()
    let payloads = PayloadCache()

    public var configuration: SandboxConfiguration { settings.configuration }

    public init(configuration: SandboxConfiguration) {
        let settings = SandboxSettings(configuration)
        self.settings = settings
        store = Mutex(SandboxStore(settings))
    }

    /// Answers one request and updates the sandbox's state. `nowMillis` is the wall-clock time
    /// (ms since 1970): token ages, budget hours and log times are judged against it.
    public func handle(_ request: SandboxRequest, nowMillis: Int64) -> SandboxResponse {
        handle(request, nowMicros: nowMillis * 1000)
    }

    /// `handle(_:nowMillis:)` with the time in µs since 1970 (the server's receipt time), which
    /// the delivery log keeps as `receivedMicros`.
    public func handle(_ request: SandboxRequest, nowMicros: Int64) -> SandboxResponse {
        let nowMillis = nowMicros / 1000
        let headers = RequestHeaders(request.headers)
        var route = headers.withValue(headers.pathIndex) { Route(pathBytes: $0) }
        if case .admin = route { route = Route(path: request.path) }
        let method = headers.withValue(headers.methodIndex) { HTTPMethod($0) }
        switch route {
        case .device(let token):
            guard method == .post else { return unrouted(.methodNotAllowed, request, idHeader: "apns-id") }
            return handleDevice(request, headers, token: token, nowMicros: nowMicros)
        case .broadcast(let bundle):
            guard method == .post else { return unrouted(.methodNotAllowed, request, idHeader: "apns-request-id") }
            return handleBroadcast(request, headers, bundle: bundle, nowMicros: nowMicros)
        case .channels(let bundle):
            let operation: ChannelOperation
            switch method {
            case .post: operation = .create
            case .get: operation = .read
            case .delete: operation = .delete
            case .other: return unrouted(.methodNotAllowed, request, idHeader: "apns-request-id")
            }
            return handleChannels(request, headers, bundle: bundle, operation: operation, nowMillis: nowMillis)
        case .allChannels(let bundle):
            guard method == .get else { return unrouted(.methodNotAllowed, request, idHeader: "apns-request-id") }
            return handleChannels(request, headers, bundle: bundle, operation: .list, nowMillis: nowMillis)
        case .admin(let rest, let query):
            return handleAdmin(method: request.method, path: rest, query: query, body: request.body, nowMillis: nowMillis)
        case .notFound:
            return unrouted(.badPath, request, idHeader: "apns-id")
        }
    }

    // MARK: Faults and state

    /// The faults in force (device tokens lowercase).
    public var faults: SandboxFaults { store.withLock { $0.faults } }

    /// Replaces the faults. A seed restarts the fault sequence.
    public func updateFaults(_ faults: SandboxFaults) {
        store.withLock { $0.setFaults(faults) }
    }

    /// Changes only the faults that `json` (an object of `SandboxFaults` keys) names: a key given
    /// replaces that fault, `null` resets it to its default, the others stay as they are; the
    /// fault sequence restarts only if it names a `seed`. All or nothing: throws (and changes
    /// nothing) if the result is not a valid set. Returns the faults now in force.
    @discardableResult
    public func patchFaults(json: [UInt8]) throws -> SandboxFaults {
        let namesSeed: Bool
        if case .object(let members)? = JSONValue.parse(json) { namesSeed = members["seed"] != nil } else { namesSeed = false }
        // Decoded outside the lock, set only if no other change came in between (else again).
        while true {
            let current = faults
            let decoder = JSONDecoder()
            decoder.userInfo[SandboxFaults.patchBase] = current
            let patched = try decoder.decode(SandboxFaults.self, from: Data(json))
            if let problem = patched.problem { throw SandboxFaultsProblem(description: problem) }
            let now: SandboxFaults? = store.withLock { store in
                guard store.faults == current else { return nil }
                store.setFaults(patched, restartingSequence: namesSeed)
                return store.faults
            }
            if let now { return now }
        }
    }

    /// From now on, pushes to `token` answer 410 `Unregistered` with `timestampMillis` (the time
    /// APNs last knew the token valid). Returns false if `token` isn't a device token.
    @discardableResult
    public func markUnregistered(token: String, timestampMillis: Int64) -> Bool {
        guard let key = TokenKey(hex: token) else { return false }
        store.withLock { $0.markUnregistered(key, timestampMillis: timestampMillis) }
        return true
    }

    /// Sets a device token's budget tier (the app reports `frequentPushesEnabled` to its server;
    /// the sandbox can't see it). Returns false if `token` isn't a device token.
    @discardableResult
    public func setTier(_ tier: Tier, token: String) -> Bool {
        guard let key = TokenKey(hex: token) else { return false }
        store.withLock { $0.setTier(tier, token: key, settings: settings) }
        return true
    }

    /// What the device with this token shows, if it received anything.
    public func deviceView(token: String) -> DeviceView? {
        guard let key = TokenKey(hex: token) else { return nil }
        return store.withLock { $0.devices[key]?.view }
    }

    /// What activities subscribed to this channel show (also for deleted channels).
    public func channelView(id: String) -> DeviceView? {
        store.withLock { $0.channels[id]?.view }
    }

    /// The newest `limit` accepted pushes, oldest first.
    public func recentDeliveries(limit: Int) -> [Delivery] {
        let records = store.withLock { $0.deliveries.last(limit) }
        return records.map { $0.item.delivery(sequence: $0.sequence, bundleNames: settings.bundleNames) }
    }

    /// Up to `limit` accepted pushes with a sequence number above `sequence`, oldest first (page
    /// on with the last one's), and how many after `sequence` the log has already overwritten.
    /// Only the records are copied under the lock; the `Delivery` values are made outside it.
    public func deliveries(after sequence: Int, limit: Int) -> (deliveries: [Delivery], overwritten: Int) {
        let (records, overwritten) = store.withLock { $0.deliveries.after(sequence, limit: limit) }
        return (records.map { $0.item.delivery(sequence: $0.sequence, bundleNames: settings.bundleNames) }, overwritten)
    }

    /// The sequence number of the newest delivery (0 before the first).
    public var lastDeliverySequence: Int { store.withLock { $0.deliveries.appended } }

    public var stats: SandboxStats { store.withLock { $0.stats } }

    /// Forgets a closed connection's streams and provider token.
    public func connectionClosed(_ connectionID: UInt64) {
        _ = store.withLock { $0.connections.removeValue(forKey: connectionID) }
    }

    // MARK: Shared response building

    private func unrouted(_ reason: APNsReason, _ request: SandboxRequest, idHeader: StaticString) -> SandboxResponse {
        store.withLock { $0.unrouted(reason, connection: request.connectionID) }
        let lowercase = idHeader.description == "apns-id"
        let given = request.header(idHeader.description).flatMap { HeaderValue.isUUID($0, lowercase: lowercase) ? MessageID.text($0) : nil }
        var headers = HTTP2HeaderList()
        (given ?? ids.nextID()).append(to: &headers, name: idHeader)
        return SandboxResponse(status: reason.status, headerList: headers, body: Self.errorBody(reason, timestamp: nil))
    }

    /// Runs a locked step, verifying the provider token outside the lock when it is new.
    @inline(__always)
    func locked(_ step: (inout SandboxStore, ProviderTokenCheck?) -> Locked) -> Outcome {
        var verified: ProviderTokenCheck?
        while true {
            switch store.withLock({ step(&$0, verified) }) {
            case .done(let outcome):
                return outcome
            case .verify(let authorization):
                verified = ProviderTokenCheck.verify(authorization: String(decoding: authorization, as: UTF8.self), teamID: settings.configuration.teamID,
                                                     keys: settings.configuration.keys)
            }
        }
    }

    /// The response for an outcome: `idHeader` always, `apns-unique-id` on success when asked,
    /// the error body on failure.
    func response(_ o: Outcome, idName: StaticString, id: MessageID, uniqueID: Bool) -> SandboxResponse {
        // Processed, and its answer lost: the connection resets instead.
        if o.effects.loseAnswer { return SandboxResponse(status: 0, connectionFault: .reset) }
        let fault: ConnectionFault?
        switch o.effects.fault {
        case .reset: return SandboxResponse(status: 0, connectionFault: .reset)
        case .goAway: fault = .goAway(debugData: SandboxStore.shutdownDebugData)
        case .none: fault = nil
        }
        var headers = HTTP2HeaderList()
        headers.reserveCapacity(fields: 3, bytes: 128)
        id.append(to: &headers, name: idName)
        var body: [UInt8] = []
        if let reason = o.reason {
            body = Self.errorBody(reason, timestamp: o.timestamp)
        } else if uniqueID {
            ids.nextID().append(to: &headers, name: "apns-unique-id")
        }
        return SandboxResponse(status: o.status, headerList: headers, body: body, delay: o.effects.delay,
                               connectionFault: fault, maxConcurrentStreams: o.effects.maxConcurrentStreams)
    }

    /// `{"reason":"…"}`, with `"timestamp"` for 410 Unregistered. Built byte by byte: reasons
    /// are plain ASCII names, and error answers can be a benchmark's hot path too.
    static func errorBody(_ reason: APNsReason, timestamp: Int64?) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        out.append(contentsOf: #"{"reason":""#.utf8)
        let name = reason.rawValue
        if name.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) {
            out.append(contentsOf: name.utf8)
            out.append(UInt8(ascii: "\""))
        } else {
            // Only an `.unknown` reason could need escaping; let the JSON encoder do it.
            out.removeLast(1)
            JSONValue.string(name).encode(into: &out)
        }
        if let timestamp {
            out.append(contentsOf: #","timestamp":"#.utf8)
            out.append(contentsOf: String(timestamp).utf8)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}
