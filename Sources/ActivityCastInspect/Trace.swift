import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import Foundation
import RedisClient

/// `activitycast trace KEY`: the key's trail (`TrailRecord`s in `{key}:trail`) read back as one
/// element per feed entry of the key, with what the merge did, each audience's decision and
/// budget, and every broadcast attempt with APNs's answer (docs/schema.md, "Trails").
public struct TraceReport: Codable, Sendable {
    public struct Budget: Codable, Sendable, Equatable {
        /// Tokens left after the decision, to a tenth (rounded down), and the bucket's size.
        public var tokensLeft: Double
        public var capacity: Int
    }

    public struct Audience: Codable, Sendable, Equatable {
        /// `channel`, `standard` or `frequent`: the budget audiences.
        public var audience: String
        /// `p10`, `p5`, `downgraded`, `coalesced`, `stale`, `unchanged`, `none`.
        public var decision: String
        public var why: String?
        public var budget: Budget?
    }

    public struct Broadcast: Codable, Sendable, Equatable {
        public var atMillis: Int64
        public var environment: String
        public var channel: String
        public var priority: Int
        public var alert: Bool
        /// APNs's status; nil when no answer came (the push may have gone out: `fate` says so).
        public var status: Int?
        /// `delivered`, `refused`, or `unknown` (no answer).
        public var fate: String
        public var reason: String?
        public var apnsID: String?
        public var apnsUniqueID: String?
    }

    /// An event's push-to-start: devices sent a start, over their start budget, and activities
    /// past Apple's 8 hours started again (`st` records).
    public struct Starts: Codable, Sendable, Equatable {
        public var sent = 0
        public var overBudget = 0
        public var relaunched = 0
        public init(sent: Int = 0, overBudget: Int = 0, relaunched: Int = 0) {
            (self.sent, self.overBudget, self.relaunched) = (sent, overBudget, relaunched)
        }
    }

    public struct Event: Codable, Sendable {
        public var stream: String
        public var entryID: String
        public var type: String
        public var tsMillis: Int64?
        /// When its record was written (the trail's clock: Redis's).
        public var atMillis: Int64
        /// The Live Activity event it is (`update`, `end`, `start`, `none`) and its class.
        public var event: String
        public var priorityClass: String?
        public var alert: Bool
        /// The content-state fields it carried.
        public var fields: [String]
        /// What the merge did: `changed`, `unchanged`, `stale <newest ms>`, `after-end`, `refused`.
        public var merge: String?
        /// Why, in words: why nothing went, what a stale event did, why it was refused.
        public var why: String?
        public var audiences: [Audience]
        /// What was about to go when the record was written: `channel` (priority, channel per
        /// environment, alert), `tokens` (each tier's priority), `starts`.
        public var sending: [String: String]
        public var broadcasts: [Broadcast]
        /// Its fan-out's fate when it sent nobody (`older`: a newer one was under way; `noAudience`).
        public var fanout: String?
        /// The delivery failed and the entry stays pending (it is tried again: another element).
        public var failed: String?
        /// Set when the event was processed more than once (a redelivery): each time is an element.
        public var delivery: Int
        public var starts: Starts?
    }

    public var key: String
    public var trail: String
    /// Records the trail holds, and whether older ones were trimmed (`trace.max_records`).
    public var records: Int
    public var trimmed: Bool
    public var events: [Event]
    /// Redis's error reading the trail, if any.
    public var error: String?
}

public struct Tracer: Sendable {
    let settings: Settings
    let redis: RedisConnection

    public init(settings: Settings, redis: RedisConnection) {
        self.settings = settings
        self.redis = redis
    }

    /// A record with its stream id's time.
    public struct Read: Sendable {
        public var id: String
        public var atMillis: Int64
        public var record: TrailRecord

        public init(id: String, atMillis: Int64, record: TrailRecord) {
            self.id = id
            self.atMillis = atMillis
            self.record = record
        }
    }

    /// Every record of the key's trail, oldest first, and whether records were trimmed.
    public func records(_ key: ActivityKey) async throws -> (records: [Read], trimmed: Bool) {
        let name = settings.keys.trail(key)
        let replies = try await redis.pipeline([RedisCommand("XRANGE", name, "-", "+"), RedisCommand("XINFO", "STREAM", name)])
        let entries = try (replies[0].orThrow("XRANGE \(name)").array ?? []).map(StreamReplies.entry)
        var out: [Read] = []
        for e in entries {
            guard let f = e.fields else { continue }
            var pairs: [(String, String)] = []
            for i in stride(from: 0, to: f.count - 1, by: 2) {
                pairs.append((String(decoding: f[i], as: UTF8.self), String(decoding: f[i + 1], as: UTF8.self)))
            }
            guard let r = TrailRecord(streamFields: pairs) else { continue }
            out.append(Read(id: e.id, atMillis: Int64(StreamID(e.id)?.ms ?? 0), record: r))
        }
        // XINFO STREAM's `entries-added` (Redis 7): more added than held means the oldest were trimmed.
        var added: Int64?
        if let info = replies[1].array {
            for i in stride(from: 0, to: info.count - 1, by: 2) where info[i].string == "entries-added" { added = info[i + 1].int }
        }
        return (out, (added ?? Int64(out.count)) > Int64(out.count))
    }

    /// The key's trail as events (the last `last` of them, or all).
    public func report(_ key: ActivityKey, last: Int? = nil) async throws -> TraceReport {
        let (records, trimmed) = try await records(key)
        var events = Self.events(records)
        if let last, events.count > last { events = Array(events.suffix(last)) }
        return TraceReport(key: key.description, trail: settings.keys.trail(key), records: records.count, trimmed: trimmed, events: events)
    }

    /// Event records and what follows them, grouped by entry (pure: tested with plain values).
    public static func events(_ records: [Read]) -> [TraceReport.Event] {
        var out: [TraceReport.Event] = []
        // The latest element of each entry: records after an event's name its entry (`e`).
        var latest: [String: Int] = [:]
        // An event's record written again by the same delivery (`dv`: its decisions after its
        // intent) is the same element.
        var byDelivery: [String: Int] = [:]
        var fieldsOf: [Int: [String: String]] = [:]
        var deliveries: [String: Int] = [:]
        for read in records {
            let f = read.record.fields
            let entry = f["e"] ?? ""
            switch read.record.kind {
            case .event:
                if let dv = f["dv"], let i = byDelivery["\(entry) \(dv)"] {
                    // Its decisions: what changed since its intent.
                    let at = out[i].atMillis, delivery = out[i].delivery, broadcasts = out[i].broadcasts
                    let all = (fieldsOf[i] ?? [:]).merging(f) { _, new in new }
                    fieldsOf[i] = all
                    let starts = out[i].starts
                    out[i] = event(all, at: at, delivery: delivery)
                    out[i].starts = starts
                    out[i].broadcasts = broadcasts.filter { !out[i].broadcasts.contains($0) } + out[i].broadcasts
                    continue
                }
                deliveries[entry, default: 0] += 1
                let e = event(f, at: read.atMillis, delivery: deliveries[entry]!)
                latest[entry] = out.count
                if let dv = f["dv"] { byDelivery["\(entry) \(dv)"] = out.count }
                fieldsOf[out.count] = f
                out.append(e)
            case .broadcast:
                guard let i = latest[entry] else { continue }
                out[i].broadcasts.append(broadcast(f, at: read.atMillis))
            case .fanout:
                if let i = latest[entry] { out[i].fanout = f["r"] }
            case .start:
                guard let i = latest[entry] else { continue }
                let n = TrailRecord.names(f["acts"]), count = n.names.count + n.more
                var starts = out[i].starts ?? .init()
                switch f["what"] {
                case "sent"?: starts.sent += count
                case "over budget"?: starts.overBudget += count
                case "relaunched"?: starts.relaunched += count
                default: break
                }
                out[i].starts = starts
            default:
                continue
            }
        }
        for i in out.indices { out[i].broadcasts.sort { $0.atMillis < $1.atMillis } }
        return out
    }

    /// A broadcast attempt from a `bc` record's fields.
    static func broadcast(_ f: [String: String], at: Int64) -> TraceReport.Broadcast {
        let status = f["st"].flatMap { Int($0) }
        let fate = status.map { (200..<300).contains($0) ? "delivered" : "refused" } ?? "unknown"
        return .init(atMillis: at, environment: f["env"] ?? "", channel: f["ch"] ?? "", priority: Int(f["pr"] ?? "") ?? 0,
                     alert: f["al"] == "1", status: status, fate: fate, reason: f["r"], apnsID: f["id"], apnsUniqueID: f["u"])
    }

    /// The first broadcast attempt of each environment, folded into the event's record
    /// (`b:<env>` = `status priority alert channel apns-id unique-id reason`), as `bc` fields.
    static func folded(_ f: [String: String]) -> [[String: String]] {
        f.keys.sorted().filter { $0.hasPrefix("b:") }.map { name in
            let p = f[name]!.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            func at(_ i: Int) -> String? { i < p.count && p[i] != "-" ? p[i] : nil }
            var out = ["env": String(name.dropFirst(2))]
            for (k, i) in [("st", 0), ("pr", 1), ("al", 2), ("ch", 3), ("id", 4), ("u", 5), ("r", 6)] { if let v = at(i) { out[k] = v } }
            return out
        }
    }

    /// One element from an event record's fields.
    static func event(_ f: [String: String], at: Int64, delivery: Int) -> TraceReport.Event {
        let (stream, id) = split(f["e"] ?? "")
        var e = TraceReport.Event(stream: stream, entryID: id, type: f["ty"] ?? "", tsMillis: f["ts"].flatMap { Int64($0) },
                                  atMillis: at, event: f["ev"] ?? "none", priorityClass: f["pc"], alert: f["al"] == "1",
                                  fields: TrailRecord.names(f["f"]).names, merge: f["m"], why: f["w:merge"] ?? f["w:send"],
                                  audiences: [], sending: [:], broadcasts: folded(f).map { broadcast($0, at: at) }, fanout: nil, failed: f["x"],
                                  delivery: delivery)
        if f["m"] == nil, f["x"] == nil {
            e.why = "its decisions were not recorded: the worker stopped after its merge (anything it sent has its fate unknown)"
        }
        if let t = f["t"] { e.why = [e.why, t].compactMap { $0 }.joined(separator: "; ") }
        for (name, value) in f.sorted(by: { $0.key < $1.key }) {
            if name.hasPrefix("a:") {
                let audience = String(name.dropFirst(2))
                let parts = value.split(separator: " ")
                var budget: TraceReport.Budget?
                if parts.count == 3, let ticks = Int64(parts[1]), let capacity = Int(parts[2]) {
                    let tenths = max(0, ticks) / (BudgetState.ticksPerToken / 10)
                    budget = .init(tokensLeft: Double(tenths) / 10, capacity: capacity)
                }
                e.audiences.append(.init(audience: audience, decision: parts.first.map(String.init) ?? value, why: f["w:\(audience)"], budget: budget))
            } else if name.hasPrefix("s:") {
                e.sending[String(name.dropFirst(2))] = value
            }
        }
        e.audiences.sort { order($0.audience) < order($1.audience) }
        return e
    }

    static func order(_ audience: String) -> Int { ["channel": 0, "standard": 1, "frequent": 2][audience] ?? 3 }

    /// `<stream>/<id>` into its parts (a stream name may hold `/`; an entry id doesn't).
    static func split(_ entry: String) -> (String, String) {
        guard let slash = entry.lastIndex(of: "/") else { return ("", entry) }
        return (String(entry[..<slash]), String(entry[entry.index(after: slash)...]))
    }
}

/// The terminal's view of a trace.
public enum TraceText {
    public static func render(_ r: TraceReport) -> String {
        func cell(_ s: String, _ n: Int = 80) -> String { VisibleText.escaped(s, limit: n) }
        var out = "TRAIL \(cell(r.key, 200)): \(r.events.count) events, \(r.records) records"
            + (r.trimmed ? " (the oldest were trimmed: trace.max_records)" : "") + "\n"
        var rows: [[String]] = [["at", "entry", "type", "ts", "merge", "audience", "decision", "budget", "sent", "why"]]
        for e in r.events {
            let head = [DeadLetterTool.utc(e.atMillis), cell(e.entryID, 30) + (e.delivery > 1 ? " #\(e.delivery)" : ""), cell(e.type, 30),
                        e.tsMillis.map(String.init) ?? "-", cell(e.merge ?? "-", 30)]
            let lines = max(1, e.audiences.count)
            for i in 0..<lines {
                let a = i < e.audiences.count ? e.audiences[i] : nil
                let budget = a?.budget.map { "\($0.tokensLeft)/\($0.capacity)" } ?? "-"
                let sent: String
                switch a?.audience {
                case "channel"?:
                    sent = e.broadcasts.isEmpty ? (e.sending["channel"] != nil ? "broadcast, no answer recorded" : "-")
                        : e.broadcasts.map { b in "\(b.environment) \(b.status.map(String.init) ?? "unknown")\(b.reason.map { " \($0)" } ?? "") p\(b.priority)\(b.alert ? " alert" : "")" }
                            .joined(separator: ", ")
                case let t? where e.sending["tokens"]?.contains("\(t)=") == true: sent = "per token"
                default: sent = "-"
                }
                let starts = e.starts.map { s in
                    [s.sent > 0 ? "\(s.sent) started" : nil, s.overBudget > 0 ? "\(s.overBudget) over start budget" : nil,
                     s.relaunched > 0 ? "\(s.relaunched) relaunched" : nil].compactMap { $0 }.joined(separator: ", ")
                }
                let shown = i == 0 && starts != nil ? (sent == "-" ? starts! : "\(sent); \(starts!)") : sent
                let why = i == 0 ? [e.why, a?.why, e.failed, e.fanout.map { "fan-out: \($0)" }].compactMap { $0 }.joined(separator: "; ") : (a?.why ?? "")
                rows.append((i == 0 ? head : ["", "", "", "", ""]) + [a?.audience ?? "-", a?.decision ?? "-", budget, cell(shown, 60), cell(why, 160)])
            }
        }
        out += TextTable.render(rows, limit: 100_000, more: "")
        return out
    }
}
