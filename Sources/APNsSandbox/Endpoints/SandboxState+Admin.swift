import ActivityCastCore
import Foundation

/// The admin API under `/sandbox/`: JSON in and out, no authentication (serve it only where
/// developers and tests can reach it). Not counted in the stats and never faulted.
///
/// | request | answer |
/// | --- | --- |
/// | `GET /sandbox/devices/<token>` | 200 `DeviceView.json`; 404 if the token received nothing |
/// | `GET /sandbox/channels/<id>` | 200 the channel's view (`id` percent-decoded, may contain `/`) |
/// | `GET /sandbox/deliveries?limit=N` | 200 `{"deliveries":[…]}`, the newest N (default 100), oldest first |
/// | `GET /sandbox/deliveries?since=S&limit=N` | 200 `{"deliveries":[…],"overwritten":M,"last":L}`: up to N (default 100) with a `sequence` above S, oldest first (page on with the last one's); M of those after S were already overwritten (the log keeps `--delivery-log` deliveries); L is the newest sequence number |
/// | `GET /sandbox/stats` | 200 `SandboxStats.json` |
/// | `GET /sandbox/faults` | 200 the faults in force (`SandboxFaults` as JSON, every key; unset ones `null`) |
/// | `POST /sandbox/faults` | body: `SandboxFaults` JSON → 200 the faults now in force. It replaces the whole set: omitted keys take their defaults (off) |
/// | `PATCH /sandbox/faults` | body: some `SandboxFaults` keys → 200 the faults now in force. Only the keys given change (`null`: back to the default); the others stay |
/// | `POST /sandbox/unregister` | body `{"token":"<hex>","timestamp":<ms>}` (timestamp optional: now) → 200; the token answers 410 `Unregistered` |
/// | `POST /sandbox/tier` | body `{"token":"<hex>","tier":"standard"\|"frequent"}` → 200; the token's budget tier |
///
/// Errors: 400 (bad body, an unknown fault key: nothing changes), 404 (unknown path or nothing to show), 405 (wrong method), each with
/// `{"error":"…"}`. Responses carry `content-type: application/json`.
extension SandboxState {
    func handleAdmin(method: String, path: Substring, query: Substring?, body: [UInt8], nowMillis: Int64) -> SandboxResponse {
        let parts = path.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let resource = parts.first.map(String.init) ?? ""
        let argument = parts.count > 1 ? String(parts[1]) : nil

        func require(_ expected: String...) -> SandboxResponse? {
            expected.contains(method) ? nil : Self.adminError(405, "use \(expected.joined(separator: " or ")) for /sandbox/\(resource)")
        }

        switch (resource, argument) {
        case ("devices", let token?) where !token.isEmpty:
            if let refused = require("GET") { return refused }
            guard let view = deviceView(token: token.removingPercentEncoding ?? token) else {
                return Self.adminError(404, "no pushes received for device token \(token.prefix(80))")
            }
            return Self.adminJSON(view.json)
        case ("channels", let id?) where !id.isEmpty:
            if let refused = require("GET") { return refused }
            let channel = id.removingPercentEncoding ?? id
            guard let view = channelView(id: channel) else { return Self.adminError(404, "no channel \(channel.prefix(80))") }
            return Self.adminJSON(view.json)
        case ("deliveries", nil):
            if let refused = require("GET") { return refused }
            var limit = 100
            if let value = queryValue(query, "limit") {
                guard let n = Int(value), n >= 0 else { return Self.adminError(400, "limit must be a non-negative integer") }
                limit = n
            }
            if let value = queryValue(query, "since") {
                guard let since = Int(value), since >= 0 else { return Self.adminError(400, "since must be a non-negative integer (a sequence number)") }
                let (page, overwritten) = deliveries(after: since, limit: limit)
                return Self.adminJSON(.object(["deliveries": .array(page.map(\.json)), "overwritten": .int(Int64(overwritten)),
                                               "last": .int(Int64(lastDeliverySequence))]))
            }
            return Self.adminJSON(.object(["deliveries": .array(recentDeliveries(limit: limit).map(\.json))]))
        case ("stats", nil):
            if let refused = require("GET") { return refused }
            return Self.adminJSON(stats.json)
        case ("faults", nil):
            if let refused = require("GET", "POST", "PATCH") { return refused }
            if method == "GET" { return Self.adminFaults(faults) }
            guard case .object(let members)? = JSONValue.parse(body) else {
                return Self.adminError(400, "the body must be a JSON object of faults (SandboxFaults keys)")
            }
            if let unknown = members.keys.sorted().first(where: { !SandboxFaults.keys.contains($0) }) {
                return Self.adminError(400, "unknown fault '\(unknown.prefix(80))'; the faults are \(SandboxFaults.keys.sorted().joined(separator: ", "))")
            }
            if method == "PATCH" {
                do {
                    return Self.adminFaults(try patchFaults(json: body))
                } catch let problem as SandboxFaultsProblem {
                    return Self.adminError(400, problem.description)
                } catch {
                    return Self.adminError(400, "the body is not SandboxFaults JSON: \(error)")
                }
            }
            let decoded: SandboxFaults
            do {
                decoded = try JSONDecoder().decode(SandboxFaults.self, from: Data(body))
            } catch {
                return Self.adminError(400, "the body is not SandboxFaults JSON: \(error)")
            }
            if let problem = decoded.problem { return Self.adminError(400, problem) }
            updateFaults(decoded)
            return Self.adminFaults(faults)
        case ("unregister", nil):
            if let refused = require("POST") { return refused }
            guard case .object(let o)? = JSONValue.parse(body), case .string(let token)? = o["token"] else {
                return Self.adminError(400, #"the body must be {"token":"<hex>","timestamp":<ms>}"#)
            }
            var timestamp = nowMillis
            if let t = o["timestamp"] {
                guard case .int(let ms) = t else { return Self.adminError(400, "timestamp must be an integer (ms since 1970)") }
                timestamp = ms
            }
            guard markUnregistered(token: token, timestampMillis: timestamp) else {
                return Self.adminError(400, "not a device token (32-512 hex digits, even count)")
            }
            return Self.adminJSON(.object(["token": .string(token.lowercased()), "timestamp": .int(timestamp)]))
        case ("tier", nil):
            if let refused = require("POST") { return refused }
            guard case .object(let o)? = JSONValue.parse(body), case .string(let token)? = o["token"],
                  case .string(let name)? = o["tier"], let tier = Tier(rawValue: name) else {
                return Self.adminError(400, #"the body must be {"token":"<hex>","tier":"standard"|"frequent"}"#)
            }
            guard setTier(tier, token: token) else { return Self.adminError(400, "not a device token (32-512 hex digits, even count)") }
            return Self.adminJSON(.object(["token": .string(token.lowercased()), "tier": .string(tier.rawValue),
                                           "budgetPerHour": .int(Int64(configuration.budget(for: tier)))]))
        default:
            return Self.adminError(404, "unknown admin path /sandbox/\(path.prefix(100))")
        }
    }

    private func queryValue(_ query: Substring?, _ name: String) -> String? {
        guard let query else { return nil }
        for pair in query.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if kv.first == Substring(name) { return kv.count > 1 ? String(kv[1]) : "" }
        }
        return nil
    }

    static func adminJSON(_ value: JSONValue, status: Int = 200) -> SandboxResponse {
        SandboxResponse(status: status, headers: [("content-type", "application/json")], body: value.encoded())
    }

    static func adminError(_ status: Int, _ message: String) -> SandboxResponse {
        adminJSON(.object(["error": .string(message)]), status: status)
    }

    static func adminFaults(_ faults: SandboxFaults) -> SandboxResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Encoding plain numbers, strings and dictionaries can't fail.
        let data = (try? encoder.encode(faults)) ?? Data("{}".utf8)
        return SandboxResponse(status: 200, headers: [("content-type", "application/json")], body: Array(data))
    }
}
