import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import Foundation
import RedisClient

/// `inspect --key KEY`: one activity key's state, channels, budgets, audience and trail.
public struct KeyInspection: Codable, Sendable {
    public struct Device: Codable, Sendable, Equatable {
        public var activity: String
        public var device: String
        public var tier: String?
        public var env: String?
        public var onBroadcast: Bool?
        public var registeredMillis: Int64?
        /// `live`, or `unregistered` (a tombstone).
        public var state: String
    }

    public var key: String
    /// The merged content-state (JSON per field), its newest event and time; nil: no state.
    public var contentState: [String: String]?
    public var newestEvent: String?
    public var newestMillis: Int64?
    /// When the key's end was sent (its state's `_end`, or the tombstone after the state expired).
    public var endedMillis: Int64?
    /// `<env>` → `<channel id> <policy> <created ms>` and the other fields of `{key}:channels`.
    public var channels: [String: String]
    /// Each audience's budget hash as stored (`ticks`, counters…).
    public var budgets: [String: [String: String]]
    public var tokensByTier: [String: Int]
    public var onBroadcast: Int
    public var devices: [Device]
    /// More registrations than listed.
    public var devicesTruncated: Bool
    public var trailRecords: Int64
}

/// `inspect --device ID`: one device's settings, start tokens, follows and keys.
public struct DeviceInspection: Codable, Sendable {
    public struct Key: Codable, Sendable, Equatable {
        public var key: String
        public var activity: String
        /// Its registration in the key's audience (`{key}:meta`), or nil when it is gone.
        public var registration: String?
    }

    public var device: String
    public var exists: Bool
    public var settings: [String: String]
    /// activity type → `<ts> <first 8 characters of the token>…`.
    public var startTokens: [String: String]
    /// target → following (`1`) or not (`0`), with the time.
    public var follows: [String: String]
    public var keys: [Key]
    /// Set when the device was unregistered (`gone` → ts).
    public var goneMillis: Int64?
}

extension Inspector {
    public static let deviceListLimit = 100

    public func key(_ key: ActivityKey) async throws -> KeyInspection {
        let keys = settings.keys
        let audiences = ["standard", "frequent", "channel"]
        let replies = try await redis.pipeline([
            RedisCommand("HGETALL", keys.state(key)), RedisCommand("GET", keys.ended(key)), RedisCommand("HGETALL", keys.channels(key)),
            RedisCommand("HGETALL", keys.meta(key)), RedisCommand("XLEN", keys.trail(key)),
        ] + audiences.map { RedisCommand("HGETALL", keys.budget(key, audience: $0)) })
        func hash(_ r: RESPValue) throws -> [String: String] {
            let items = try r.orThrow("inspect --key").array ?? []
            var out: [String: String] = [:]
            for i in stride(from: 0, to: items.count - 1, by: 2) { if let k = items[i].string { out[k] = items[i + 1].string ?? "" } }
            return out
        }
        let state = KeyStateScripts.read(try replies[0].orThrow("HGETALL \(keys.state(key))"))
        var out = KeyInspection(key: key.description, contentState: state.map { $0.contentState.mapValues { String(decoding: $0.encoded(), as: UTF8.self) } },
                                newestEvent: state?.newestEvent?.rawValue, newestMillis: state?.newestMillis,
                                endedMillis: state?.endedMillis ?? replies[1].string.flatMap { Int64($0) }, channels: try hash(replies[2]),
                                budgets: [:], tokensByTier: [:], onBroadcast: 0, devices: [], devicesTruncated: false, trailRecords: replies[4].int ?? 0)
        let meta = try replies[3].orThrow("HGETALL \(keys.meta(key))").array ?? []
        var unknownTier: [Int] = []
        for i in stride(from: 0, to: meta.count - 1, by: 2) {
            guard let activity = meta[i].string, let bytes = meta[i + 1].bytes else { continue }
            guard let m = RegistrationMeta(bytes) else {
                if out.devices.count < Self.deviceListLimit { out.devices.append(.init(activity: activity, device: "-", state: "unregistered")) }
                continue
            }
            if m.broadcast == true { out.onBroadcast += 1 } else if let t = m.tier { out.tokensByTier[t.rawValue, default: 0] += 1 } else { unknownTier.append(i) }
            if out.devices.count < Self.deviceListLimit {
                out.devices.append(.init(activity: activity, device: m.device, tier: m.tier?.rawValue, env: m.env?.rawValue, onBroadcast: m.broadcast,
                                         registeredMillis: m.millis, state: "live"))
            } else {
                out.devicesTruncated = true
            }
        }
        // Registrations that left their tier to the device (standard when it has none).
        if !unknownTier.isEmpty { out.tokensByTier["standard or the device's", default: 0] += unknownTier.count }
        for (audience, reply) in zip(audiences, replies.suffix(audiences.count)) {
            let h = try hash(reply)
            if !h.isEmpty { out.budgets[audience] = h }
        }
        return out
    }

    public func device(_ id: String) async throws -> DeviceInspection {
        let items = try await redis.send(RedisCommand("HGETALL", settings.keys.device(id))).orThrow("HGETALL \(settings.keys.device(id))").array ?? []
        var out = DeviceInspection(device: id, exists: !items.isEmpty, settings: [:], startTokens: [:], follows: [:], keys: [], goneMillis: nil)
        var acts: [(ActivityKey, String)] = []
        for i in stride(from: 0, to: items.count - 1, by: 2) {
            guard let name = items[i].string, let value = items[i + 1].string else { continue }
            if ["env", "tier", "broadcast"].contains(name) { out.settings[name] = value }
            else if name.hasPrefix("start:") {
                let parts = value.split(separator: " ", maxSplits: 1)
                out.startTokens[String(name.dropFirst(6))] = parts.count == 2 ? "\(parts[0]) \(parts[1].prefix(8))…" : value
            } else if name.hasPrefix("follow:") { out.follows[String(name.dropFirst(7))] = value }
            else if name == "gone" { out.goneMillis = Int64(value.split(separator: " ").first ?? "") }
            else if name.hasPrefix("act:") {
                let parts = name.dropFirst(4).split(separator: " ", maxSplits: 1)
                if parts.count == 2, let key = ActivityKey(parsing: String(parts[0])) { acts.append((key, String(parts[1]))) }
            }
        }
        let metas = try await redis.pipeline(acts.map { RedisCommand("HGET", settings.keys.meta($0.0), $0.1) })
        for ((key, activity), meta) in zip(acts, metas) {
            // The token shortened, as everywhere a person reads it.
            let registration = meta.string.map { v -> String in
                var parts = v.split(separator: " ").map(String.init)
                if parts.count == 6 { parts[5] = String(parts[5].prefix(8)) + "…" }
                return parts.joined(separator: " ")
            }
            out.keys.append(.init(key: key.description, activity: activity, registration: registration))
        }
        out.keys.sort { $0.key < $1.key }
        return out
    }
}

/// The terminal's view of one key or device.
public enum InspectOneText {
    static func cell(_ s: String, _ n: Int = 120) -> String { VisibleText.escaped(s, limit: n) }

    public static func render(_ k: KeyInspection) -> String {
        var out = "KEY \(cell(k.key))"
        if let ended = k.endedMillis { out += "  ended at \(ended)" }
        out += "\nSTATE " + (k.contentState == nil ? "none\n" : "newest \(k.newestEvent ?? "-") at \(k.newestMillis.map(String.init) ?? "-")\n")
        out += TextTable.render([["field", "value"]] + (k.contentState ?? [:]).sorted { $0.key < $1.key }.map { [cell($0.key), cell($0.value, 200)] }, limit: 200, more: "--json")
        out += "CHANNELS\n" + TextTable.render([["field", "value"]] + k.channels.sorted { $0.key < $1.key }.map { [cell($0.key), cell($0.value)] }, limit: 50, more: "--json")
        out += "BUDGETS\n" + TextTable.render([["audience", "ticks", "p10", "p5", "downgraded", "coalesced", "stale", "unchanged"]] + k.budgets.sorted { $0.key < $1.key }.map { a, h in
            [a, h["ticks"] ?? "-", h["p10"] ?? "0", h["p5"] ?? "0", h["downgraded"] ?? "0", h["coalesced"] ?? "0", h["stale"] ?? "0", h["unchanged"] ?? "0"]
        }, limit: 10, more: "--json")
        out += "AUDIENCE \(k.onBroadcast) on broadcast; per token " + k.tokensByTier.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + "\n"
        out += TextTable.render([["activity", "device", "tier", "env", "broadcast", "registered", "state"]] + k.devices.map { d in
            [cell(d.activity, 60), cell(d.device, 60), d.tier ?? "-", d.env ?? "-", d.onBroadcast.map { $0 ? "yes" : "no" } ?? "-",
             d.registeredMillis.map(String.init) ?? "-", d.state]
        }, limit: Inspector.deviceListLimit, more: "--json")
        if k.devicesTruncated { out += "  (more registrations than listed)\n" }
        out += "TRAIL \(k.trailRecords) records (activitycast trace \(cell(k.key)))\n"
        return out
    }

    public static func render(_ d: DeviceInspection) -> String {
        guard d.exists else { return "DEVICE \(cell(d.device)): not registered (no device hash)\n" }
        var out = "DEVICE \(cell(d.device))" + (d.goneMillis.map { "  unregistered at \($0)" } ?? "") + "\n"
        out += "SETTINGS " + (d.settings.isEmpty ? "none" : d.settings.sorted { $0.key < $1.key }.map { "\($0.key)=\(cell($0.value, 40))" }.joined(separator: " ")) + "\n"
        out += "START TOKENS\n" + TextTable.render([["activity type", "ts token"]] + d.startTokens.sorted { $0.key < $1.key }.map { [cell($0.key), cell($0.value)] }, limit: 100, more: "--json")
        out += "FOLLOWS\n" + TextTable.render([["target", "ts following"]] + d.follows.sorted { $0.key < $1.key }.map { [cell($0.key), cell($0.value)] }, limit: 200, more: "--json")
        out += "KEYS\n" + TextTable.render([["key", "activity", "registration (ts device env tier broadcast token)"]] + d.keys.map {
            [cell($0.key), cell($0.activity, 60), cell($0.registration ?? "gone", 200)]
        }, limit: 500, more: "--json")
        return out
    }
}

