import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import OpenSSLKit

/// Real keys, a real signer and a sandbox configured for one app, plus request builders.
struct Fixture: Sendable {
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundle = "com.example.app"
    static let topic = "com.example.app.push-type.liveactivity"
    static let token = String(repeating: "ab", count: 32)
    /// 2024-11-22T00:00:00Z.
    static let now: Int64 = 1_732_233_600_000

    let key: ES256PrivateKey
    let signer: ProviderTokenSigner
    /// One token (60 s old) for every default request: ECDSA signatures are randomized, so
    /// minting per request would make each request change the connection's token.
    let defaultBearer: String

    init() throws {
        key = try ES256PrivateKey.generate()
        signer = ProviderTokenSigner(key: key, identity: try ProviderIdentity(keyID: Self.keyID, teamID: Self.teamID))
        defaultBearer = "bearer " + (try signer.token(issuedAt: Self.now / 1000 - 60).value)
    }

    func configuration(_ adjust: (inout SandboxConfiguration) -> Void = { _ in }) -> SandboxConfiguration {
        var c = SandboxConfiguration(bundleIDs: [Self.bundle], teamID: Self.teamID, keys: [Self.keyID: key.publicKey])
        adjust(&c)
        return c
    }

    func sandbox(_ adjust: (inout SandboxConfiguration) -> Void = { _ in }) -> SandboxState {
        SandboxState(configuration: configuration(adjust))
    }

    /// `bearer <JWT>` issued `ageSeconds` before `now`: the shared default token, or a fresh one.
    func bearer(ageSeconds: Int64 = 60, signer: ProviderTokenSigner? = nil) throws -> String {
        if ageSeconds == 60 && signer == nil { return defaultBearer }
        return "bearer " + (try (signer ?? self.signer).token(issuedAt: Self.now / 1000 - ageSeconds).value)
    }

    /// The headers of a valid device push.
    func deviceHeaders(priority: String? = "10") throws -> Headers {
        var h = Headers([("authorization", try bearer()), ("apns-push-type", "liveactivity"), ("apns-topic", Self.topic)])
        if let priority { h.set("apns-priority", priority) }
        return h
    }

    func devicePush(token: String = Fixture.token, headers: Headers? = nil, body: [UInt8] = update(timestamp: 100),
                    connection: UInt64 = 1) throws -> SandboxRequest {
        SandboxRequest(method: "POST", path: "/3/device/\(token)", headers: try (headers ?? deviceHeaders()).fields, body: body,
                       connectionID: connection)
    }

    /// The headers of a valid broadcast to `channel`.
    func broadcastHeaders(channel: String?, priority: String = "10", expiration: String? = "0") throws -> Headers {
        var h = Headers([("authorization", try bearer()), ("apns-push-type", "liveactivity"), ("apns-priority", priority)])
        if let channel { h.set("apns-channel-id", channel) }
        if let expiration { h.set("apns-expiration", expiration) }
        return h
    }

    func broadcast(headers: Headers, body: [UInt8] = update(timestamp: 100), bundle: String = Fixture.bundle,
                   connection: UInt64 = 1) -> SandboxRequest {
        SandboxRequest(method: "POST", path: "/4/broadcasts/apps/\(bundle)", headers: headers.fields, body: body, connectionID: connection)
    }

    func channelRequest(_ method: String, channel: String? = nil, body: [UInt8] = [], bundle: String = Fixture.bundle,
                        all: Bool = false, connection: UInt64 = 1) throws -> SandboxRequest {
        var h = Headers([("authorization", try bearer())])
        if let channel { h.set("apns-channel-id", channel) }
        return SandboxRequest(method: method, path: "/1/apps/\(bundle)/\(all ? "all-channels" : "channels")", headers: h.fields,
                              body: body, connectionID: connection)
    }

    static func createBody(policy: Int) -> [UInt8] {
        Array(#"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#.utf8)
    }

    /// Creates a channel and returns its id.
    func createChannel(_ sandbox: SandboxState, policy: Int, bundle: String = Fixture.bundle) throws -> String {
        let r = sandbox.handle(try channelRequest("POST", body: Self.createBody(policy: policy), bundle: bundle), nowMillis: Self.now)
        guard r.status == 201, let id = r.header("apns-channel-id") else {
            throw FixtureError(description: "channel create answered \(r.status) \(String(decoding: r.body, as: UTF8.self))")
        }
        return id
    }
}

struct FixtureError: Error, CustomStringConvertible { var description: String }

/// Header fields in order, with replace/remove helpers.
struct Headers: Sendable {
    var fields: [(name: String, value: String)]
    init(_ fields: [(name: String, value: String)]) { self.fields = fields }
    mutating func set(_ name: String, _ value: String) {
        if let i = fields.firstIndex(where: { $0.name == name }) { fields[i].value = value } else { fields.append((name, value)) }
    }
    mutating func remove(_ name: String) { fields.removeAll { $0.name == name } }
    mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }
    func with(_ name: String, _ value: String) -> Headers { var h = self; h.set(name, value); return h }
    func without(_ name: String) -> Headers { var h = self; h.remove(name); return h }
    func adding(_ name: String, _ value: String) -> Headers { var h = self; h.add(name, value); return h }
}

/// An update payload made by the project's own encoder.
func update(timestamp: Int64, state: [String: JSONValue] = ["score": "1-0"], stale: Int64? = nil) -> [UInt8] {
    LiveActivityPayload(event: .update, timestamp: timestamp, contentState: state, staleDate: stale).encoded()
}

func end(timestamp: Int64, state: [String: JSONValue] = ["score": "2-1"], dismissal: Int64? = nil) -> [UInt8] {
    LiveActivityPayload(event: .end, timestamp: timestamp, contentState: state, dismissalDate: dismissal).encoded()
}

func start(timestamp: Int64, state: [String: JSONValue] = ["score": "0-0"]) -> [UInt8] {
    LiveActivityPayload(event: .start, timestamp: timestamp, contentState: state,
                        alert: .init(title: "Kick-off", body: "ARS v CHE"), attributesType: "MatchAttributes",
                        attributes: ["home": "ARS", "away": "CHE"], inputPushToken: true).encoded()
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

extension SandboxResponse {
    /// The `reason` of an error body.
    var reason: String? {
        guard let o = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return nil }
        return o["reason"] as? String
    }

    var json: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] }
}
