/// Values the send path keeps in Redis, each with its writer and reader side by side
/// (docs/schema.md). Key names are `RedisKeys`'.

/// A key's broadcast channel in one APNs environment, as stored in `<prefix>:{key}:channels`
/// (field `<env>` → `<id> <policy> <created ms>`).
public struct ChannelRecord: Sendable, Equatable {
    public var id: String
    public var policy: ChannelStoragePolicy
    public var createdMillis: Int64

    public init?(_ text: String) {
        let parts = text.split(separator: " ")
        guard parts.count == 3, let p = Int(parts[1]), let policy = ChannelStoragePolicy(rawValue: p), let created = Int64(parts[2]) else { return nil }
        self.id = String(parts[0])
        self.policy = policy
        self.createdMillis = created
    }

    public init(id: String, policy: ChannelStoragePolicy, createdMillis: Int64) {
        self.id = id
        self.policy = policy
        self.createdMillis = createdMillis
    }

    /// A Lua pattern that matches a stored record (and not `<env>:fallback`'s `1`): what a
    /// script that reads the channels hash tests a value with.
    public static let luaPattern = "^%S+ %d+ %d+$"

    /// How it is kept in `{key}:channels` under its environment: `<id> <policy> <created ms>`.
    public var stored: String { "\(id) \(policy.rawValue) \(createdMillis)" }
}

/// One `{key}:meta` value, `ts device env tier broadcast token` (`-` where the registration gave
/// none; `ts -` is a tombstone; values written before the token was added end at `broadcast`),
/// read from its bytes.
public struct RegistrationMeta: Equatable, Sendable {
    /// What a registration writes before its time and token (`RegistrationScripts.activityToken`
    /// puts `ts ` before and ` token` after): `device env tier broadcast`, `-` where not given.
    public static func written(device: String, _ settings: DeviceSettings) -> String {
        "\(device) \(settings.env?.rawValue ?? "-") \(settings.tier?.rawValue ?? "-") \(settings.broadcast.map { $0 ? "1" : "0" } ?? "-")"
    }

    public var millis: Int64?
    public var device: String
    /// nil: not given (`-`) or not one we know: the device's setting applies.
    public var env: APNsEnvironment?
    /// nil: not given (`-`): the device's setting applies (standard when it has none).
    public var tier: Tier?
    public var broadcast: Bool?
    /// The activity's update token; nil in values written before it was kept here.
    public var token: String?

    /// nil for a tombstone or a value of another shape. Read in place (a fan-out reads one per
    /// token): the fields' bounds are found in one pass, with no array of them.
    public init?(_ bytes: [UInt8]) {
        // The ends of the first five fields (the fifth's is the end when there is no token).
        let space = UInt8(ascii: " ")
        func end(after start: Int) -> Int? { bytes[start...].firstIndex(of: space) }
        // Fewer than five fields: a tombstone (`ts -`) or another shape.
        guard let e0 = end(after: 0), let e1 = end(after: e0 + 1), let e2 = end(after: e1 + 1), let e3 = end(after: e2 + 1) else { return nil }
        let e4 = end(after: e3 + 1) ?? bytes.count
        var ms: Int64 = 0
        var digits = 0
        for b in bytes[0..<e0] {
            guard b >= 48, b <= 57, digits < 18 else { ms = -1; break }
            ms = ms * 10 + Int64(b - 48)
            digits += 1
        }
        millis = ms >= 0 && digits > 0 ? ms : nil
        device = String(decoding: bytes[(e0 + 1)..<e1], as: UTF8.self)
        let e = bytes[(e1 + 1)..<e2]
        env = e.elementsEqual("development".utf8) ? .development : e.elementsEqual("production".utf8) ? .production : nil
        let t = bytes[(e2 + 1)..<e3]
        tier = t.elementsEqual("frequent".utf8) ? .frequent : t.elementsEqual("standard".utf8) ? .standard : nil
        let b = bytes[(e3 + 1)..<e4]
        broadcast = b.elementsEqual("1".utf8) ? true : b.elementsEqual("0".utf8) ? false : nil
        // The token runs to the next space, if any (as the sixth of fields split at every space).
        let tokenEnd = e4 < bytes.count ? end(after: e4 + 1) ?? bytes.count : e4
        token = tokenEnd > e4 + 1 ? String(decoding: bytes[(e4 + 1)..<tokenEnd], as: UTF8.self) : nil
    }
}


/// The fields of one pending entry in `RedisKeys.errors(stream)`: its last error, the deliveries
/// that started processing it, and the delivery that counted last — so a count sent again after
/// its reply was lost counts once.
public enum EntryErrorFields {
    /// `<id>`: why its last delivery failed.
    public static func lastError(_ id: String) -> String { id }
    /// `<id>#n`: deliveries that started processing it (given back when one ended in an outage).
    public static func attempts(_ id: String) -> String { "\(id)#n" }
    /// `<id>#c`: the delivery (a name each delivery makes up) that counted last.
    public static func countedBy(_ id: String) -> String { "\(id)#c" }
    /// Every field of `ids`, to clear once they are done.
    public static func all(_ ids: [String]) -> [String] { ids.flatMap { [lastError($0), attempts($0), countedBy($0)] } }
}
