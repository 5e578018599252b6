import ActivityCastCore
import ActivityCastSettings
import Foundation
import RedisClient

/// `activitycast trace KEY --device ID`: one device's view of the key's trail — every push its
/// token (or, on broadcast, its channel) was sent, with APNs's answer, and for each of the key's
/// events it was not sent, why (docs/schema.md, "Trails").
///
/// Derived from the records, not kept per push: a fan-out's tokens were each sent the push at
/// their tier's priority unless a `tokens` record of that fan-out names them (refused, retried,
/// forgotten, unanswered, sent quietly); a fan-out whose slices did not all end leaves its
/// tokens' fate unknown, and a registration of the device's activity while the fan-out ran makes
/// it uncertain whether the fan-out reached it: both are said, never guessed.
public struct DeviceTrace: Codable, Sendable {
    public struct Token: Codable, Sendable, Equatable {
        /// `registered`, `forgotten` (APNs said it is dead), `unregistered`, or `unknown` (no
        /// registration of it is on the trail or in the key's audience).
        public var state: String
        public var reason: String?
        public var activity: String?
        public var tier: String?
        public var onBroadcast: Bool
    }

    public struct Push: Codable, Sendable, Equatable {
        public var atMillis: Int64
        public var entryID: String
        /// The `aps.timestamp` sent (seconds).
        public var timestamp: Int64?
        public var event: String
        public var priority: Int
        /// `token` or `channel`.
        public var via: String
        public var channel: String?
        public var alert: Bool
        /// APNs's status; nil when its fate is unknown (no answer came, or the trail does not say).
        public var status: Int?
        public var reason: String?
        /// `delivered`, `refused`, `unknown`, or `uncertain` (it may not have been sent at all).
        public var fate: String
        public var note: String?
    }

    public struct NotSent: Codable, Sendable, Equatable {
        public var entryID: String
        public var tsMillis: Int64?
        public var reason: String
    }

    public var key: String
    public var device: String
    public var token: Token
    public var pushes: [Push]
    public var notSent: [NotSent]
    public var trimmed: Bool
}

extension Tracer {
    /// What Redis says of the device beyond the trail: its activities in the key's audience now
    /// (`{key}:meta`), and its own settings (`broadcast`, `tier`, `env`).
    public struct DeviceFacts: Sendable {
        public var activities: [String: RegistrationMeta] = [:]
        public var onBroadcast: Bool?
        public var tier: String?
        public var env: String?
        public init() {}
    }

    public func device(_ key: ActivityKey, _ device: String) async throws -> DeviceTrace {
        let (records, trimmed) = try await records(key)
        var facts = DeviceFacts()
        let replies = try await redis.pipeline([RedisCommand("HGETALL", settings.keys.meta(key)),
                                                RedisCommand("HMGET", settings.keys.device(device), "broadcast", "tier", "env")])
        let meta = try replies[0].orThrow("HGETALL \(settings.keys.meta(key))").array ?? []
        for i in stride(from: 0, to: meta.count - 1, by: 2) {
            guard let activity = meta[i].string, let bytes = meta[i + 1].bytes, let m = RegistrationMeta(bytes), m.device == device else { continue }
            facts.activities[activity] = m
        }
        let own = replies[1].array ?? []
        if own.count == 3 {
            facts.onBroadcast = own[0].string.map { $0 == "1" }
            facts.tier = own[1].string
            facts.env = own[2].string
        }
        var trace = Self.device(records, key: key.description, device: device, facts: facts)
        trace.trimmed = trimmed
        return trace
    }

    /// The derivation, on plain values.
    public static func device(_ records: [Read], key: String, device: String, facts: DeviceFacts) -> DeviceTrace {
        // The device's registrations on the trail, in order.
        let regs = records.filter { $0.record.kind == .registration && $0.record.fields["device"] == device }
        var activities = Set(facts.activities.keys)
        for r in regs { if let a = r.record.fields["activity"] { activities.insert(a) } }
        let last = regs.last?.record.fields
        let activity = last?["activity"] ?? facts.activities.keys.sorted().first
        let onBroadcast = facts.activities.values.first?.broadcast ?? last?["broadcast"].map { $0 == "1" } ?? facts.onBroadcast ?? false
        let tier = facts.activities.values.first?.tier?.rawValue ?? last?["tier"] ?? facts.tier ?? "standard"
        let env = facts.activities.values.first?.env?.rawValue ?? last?["env"] ?? facts.env ?? "production"

        /// When the device's activity was live: from a registration to an unregister or a 410.
        func registered(at ms: Int64) -> Bool {
            var live = regs.isEmpty && !facts.activities.isEmpty  // registered before the trail began
            for r in regs where r.atMillis <= ms {
                live = r.record.fields["what"] != "unregister"
            }
            if let gone = forgotten, gone.atMillis <= ms { live = false }
            return live
        }
        var forgotten: Read?
        var forgottenReason: String?
        for r in records where r.record.kind == .tokens && r.record.fields["what"] == "forgotten" {
            if TrailRecord.names(r.record.fields["acts"]).names.contains(where: activities.contains) {
                forgotten = r
                forgottenReason = r.record.fields["r"]
            }
        }
        if let f = forgotten, let later = regs.last, later.atMillis > f.atMillis, later.record.fields["what"] != "unregister" { forgotten = nil; forgottenReason = nil }

        var pushes: [DeviceTrace.Push] = [], notSent: [DeviceTrace.NotSent] = []
        // Each entry's records, in order: what follows an event is looked up, not scanned for.
        let byEntry = Dictionary(grouping: records) { $0.record.fields["e"] ?? "" }
        func after(_ entry: String, _ at: Int64) -> [Read] { (byEntry[entry] ?? []).filter { $0.atMillis >= at } }
        // An event's record written twice by one delivery (intent, then decisions): one event,
        // at its first time, with its last fields.
        var events: [Read] = [], seen: [String: Int] = [:]
        for r in records where r.record.kind == .event {
            let id = "\(r.record.fields["e"] ?? "") \(r.record.fields["dv"] ?? r.id)"
            if let i = seen[id] { events[i].record.fields.merge(r.record.fields) { _, new in new } } else { seen[id] = events.count; events.append(r) }
        }
        for ev in events {
            let f = ev.record.fields
            let entry = f["e"] ?? ""
            let entryID = Tracer.split(entry).1
            let ts = f["ts"].flatMap { Int64($0) }
            func skip(_ why: String) { notSent.append(.init(entryID: entryID, tsMillis: ts, reason: why)) }
            if f["ev"] == "start" {
                let (sent, why) = startPushes(after(entry, ev.atMillis), device: device, entryID: entryID, startedBefore: pushes.contains { $0.event == "start" })
                pushes += sent
                if let why { skip(why(registered(at: ev.atMillis))) }
                continue
            }
            if f["m"] == nil && f["x"] == nil {
                // Only its intent is on the trail: the worker stopped before its decisions were written.
                if registered(at: ev.atMillis), f["ev"] != "none" {
                    pushes.append(.init(atMillis: ev.atMillis, entryID: entryID, timestamp: nil, event: f["ev"] ?? "update", priority: 0,
                                        via: onBroadcast ? "channel" : "token", channel: nil, alert: false, status: nil, reason: nil, fate: "unknown",
                                        note: "the worker stopped after the event's merge: it may have been sent (its redelivery is another event element)"))
                }
                continue
            }
            if let m = f["m"], m.hasPrefix("stale") || m == "after-end" || m == "refused" {
                if f["s:channel"] == nil && f["s:tokens"] == nil { skip(f["w:merge"] ?? m); continue }
            }
            if f["m"] == "dead-lettered" { skip("dead-lettered: \(f["w:merge"] ?? "no reason recorded")"); continue }
            if f["ev"] == "none" || f["ev"] == nil { skip(f["w:merge"] ?? "nothing to send for this event"); continue }
            if let x = f["x"], f["s:channel"] == nil && f["s:tokens"] == nil { skip(x); continue }
            let audience = onBroadcast ? "channel" : tier
            let decision = f["a:\(audience)"]?.split(separator: " ").first.map(String.init)
            let later = after(entry, ev.atMillis)
            if onBroadcast {
                guard registered(at: ev.atMillis) else { skip("not registered for the key yet"); continue }
                let mine = Tracer.folded(f).filter { $0["env"] == env }.map { Read(id: ev.id, atMillis: ev.atMillis, record: TrailRecord(.broadcast, $0)) }
                    + later.filter { $0.record.kind == .broadcast && $0.record.fields["env"] == env }
                if mine.isEmpty {
                    if let s = f["s:channel"], decision == "p10" || decision == "p5" || decision == nil {
                        let p = Int(s.split(separator: " ").first ?? "") ?? 10
                        pushes.append(.init(atMillis: ev.atMillis, entryID: entryID, timestamp: f["pts"].flatMap { Int64($0) }, event: f["ev"] ?? "update",
                                            priority: p, via: "channel", channel: nil, alert: s.hasSuffix(" alert"), status: nil, reason: nil,
                                            fate: "unknown", note: "no answer was recorded: it may have gone out"))
                    } else {
                        skip(why(f, audience, decision))
                    }
                    continue
                }
                for b in mine {
                    let bf = b.record.fields
                    let st = bf["st"].flatMap { Int($0) }
                    pushes.append(.init(atMillis: b.atMillis, entryID: entryID, timestamp: f["pts"].flatMap { Int64($0) }, event: f["ev"] ?? "update",
                                        priority: Int(bf["pr"] ?? "") ?? 0, via: "channel", channel: bf["ch"], alert: bf["al"] == "1", status: st,
                                        reason: bf["r"], fate: st.map { (200..<300).contains($0) ? "delivered" : "refused" } ?? "unknown", note: nil))
                }
                continue
            }
            // Per token.
            guard let sending = f["s:tokens"], let p = sending.split(separator: " ").first(where: { $0.hasPrefix("\(tier)=") }).flatMap({ Int($0.split(separator: "=")[1]) }) else {
                skip(why(f, audience, decision))
                continue
            }
            guard registered(at: ev.atMillis) else { skip("not registered for the key yet (a later registration is caught up with the key's state)"); continue }
            let fo = later.first { $0.record.kind == .fanout }
            if let r = fo?.record.fields["r"], r != "created" {
                skip(r == "older" ? "a newer event's fan-out was under way and carries the state" : "its fan-out sent nobody (\(r))")
                continue
            }
            let alert = f["al"] == "1" && p == 10
            pushes += tokenPushes(later, activities: activities, entryID: entryID, at: ev.atMillis, timestamp: f["pts"].flatMap { Int64($0) },
                                  event: f["ev"] ?? "update", priority: p, alert: alert, slices: fo?.record.fields["of"].flatMap { Int($0) },
                                  changedMeanwhile: regs.contains { $0.atMillis > ev.atMillis && $0.atMillis <= (later.last?.atMillis ?? ev.atMillis) })
            // An activity past Apple's 8 hours started again beside the update.
            pushes += startPushes(later, device: device, entryID: entryID, startedBefore: false, what: "relaunched").pushes
        }
        // Pushes not of an event: flushes of the device's audience, and catch-ups of its activities.
        for r in records {
            let f = r.record.fields
            let entry = f["e"] ?? ""
            let later = after(entry, r.atMillis)
            let stateTs = f["ms"].flatMap { Int64($0) }.map { $0 / 1000 }
            if r.record.kind == .flush, f["audience"] == (onBroadcast ? "channel" : tier), registered(at: r.atMillis) {
                if onBroadcast {
                    for b in later where b.record.kind == .broadcast && b.record.fields["env"] == env {
                        let st = b.record.fields["st"].flatMap { Int($0) }
                        pushes.append(.init(atMillis: b.atMillis, entryID: entry, timestamp: stateTs, event: "update", priority: 5, via: "channel",
                                            channel: b.record.fields["ch"], alert: false, status: st, reason: b.record.fields["r"],
                                            fate: st.map { (200..<300).contains($0) ? "delivered" : "refused" } ?? "unknown", note: "a coalesced state flushed"))
                    }
                } else {
                    pushes += tokenPushes(later, activities: activities, entryID: entry, at: r.atMillis, timestamp: stateTs, event: "update", priority: 5,
                                          alert: false, slices: f["of"].flatMap { Int($0) }, changedMeanwhile: false).map { var p = $0; p.note = "a coalesced state flushed"; return p }
                }
            } else if r.record.kind == .catchUp, TrailRecord.names(f["acts"]).names.contains(where: activities.contains) {
                var mine = tokenPushes(later, activities: activities, entryID: entry, at: r.atMillis, timestamp: stateTs, event: f["ev"] ?? "update",
                                       priority: 5, alert: false, slices: nil, changedMeanwhile: false)
                for i in mine.indices { mine[i].note = "caught up with the key's state when its token was registered" }
                pushes += mine
            }
        }
        pushes.sort { $0.atMillis < $1.atMillis }
        let state = forgotten != nil ? "forgotten" : regs.last?.record.fields["what"] == "unregister" ? "unregistered"
            : (regs.isEmpty && facts.activities.isEmpty) ? "unknown" : "registered"
        return DeviceTrace(key: key, device: device,
                           token: .init(state: state, reason: forgottenReason, activity: activity, tier: onBroadcast ? nil : tier, onBroadcast: onBroadcast),
                           pushes: pushes, notSent: notSent, trimmed: false)
    }

    /// Why an audience got nothing for an event, in words.
    static func why(_ f: [String: String], _ audience: String, _ decision: String?) -> String {
        if let w = f["w:\(audience)"] { return "\(decision ?? "not sent"): \(w)" }
        if let d = decision { return "\(d) for \(audience)" }
        if audience == "channel", f["s:channels"] == "none live" { return "its channel was not live" }
        return f["w:merge"] ?? f["x"] ?? "no push for \(audience)"
    }

    /// The push-to-start an event sent the device (`st` records naming it, `what` `sent` or
    /// `relaunched`), each with its answers; or, when it was sent none, why (given whether the
    /// device had an activity for the key then).
    static func startPushes(_ later: [Read], device: String, entryID: String, startedBefore: Bool,
                            what: String = "sent") -> (pushes: [DeviceTrace.Push], why: ((Bool) -> String)?) {
        let mine = later.filter { $0.record.kind == .start && TrailRecord.names($0.record.fields["acts"]).names.contains(device) }
        if mine.contains(where: { $0.record.fields["what"] == "over budget" }) {
            return ([], { _ in "push-to-start skipped: the device's start budget was spent (a later event can start it)" })
        }
        guard let st = mine.first(where: { $0.record.fields["what"] == what }) else {
            if what != "sent" { return ([], nil) }
            return ([], { registered in
                registered ? "it has an activity for the key: a start is for devices without one"
                    : startedBefore ? "started by an earlier event: a device gets one start per key"
                    : "no start: the device follows none of the event's targets with a start token for its type, or a start of the key reached it before the trail began"
            })
        }
        let f = st.record.fields
        let answers = later.filter { $0.atMillis >= st.atMillis && ($0.record.kind != .tokens || $0.record.fields["kind"] == "start") }
        var out = tokenPushes(answers, activities: [device], entryID: entryID, at: st.atMillis, timestamp: f["pts"].flatMap { Int64($0) },
                              event: "start", priority: 10, alert: f["al"] == "1", slices: nil, changedMeanwhile: false, kind: "start")
        for i in out.indices {
            out[i].channel = f["ch"]
            let started = what == "relaunched" ? "started again: its activity was past Apple's 8 hours" : "push-to-start"
            out[i].note = [started, f["ch"].map { "the activity then listens on channel \($0)" }, out[i].note].compactMap { $0 }.joined(separator: "; ")
        }
        return (out, nil)
    }

    /// The pushes a fan-out (or a catch-up) sent the device's token: each answer the trail names
    /// it in, and the push as sent when no record says otherwise.
    static func tokenPushes(_ later: [Read], activities: Set<String>, entryID: String, at: Int64, timestamp: Int64?, event: String, priority: Int,
                            alert: Bool, slices: Int?, changedMeanwhile: Bool, kind: String? = nil) -> [DeviceTrace.Push] {
        var out: [DeviceTrace.Push] = []
        var final = false
        // A start's answers are its own (`kind` start), apart from the activity's pushes.
        func ofKind(_ f: [String: String]) -> Bool { kind == nil ? f["kind"] != "start" : f["kind"] == kind }
        for r in later where r.record.kind == .tokens && ofKind(r.record.fields) && TrailRecord.names(r.record.fields["acts"]).names.contains(where: activities.contains) {
            let f = r.record.fields
            let st = f["st"].flatMap { Int($0) }
            let what = f["what"] ?? ""
            if what == "gave up" { final = true; continue }
            out.append(.init(atMillis: r.atMillis, entryID: entryID, timestamp: timestamp, event: event, priority: priority, via: "token", channel: nil,
                             alert: alert && f["al"] != "0", status: st, reason: f["r"],
                             fate: what == "delivered" ? "delivered" : st == nil ? "unknown" : "refused",
                             note: what == "retry" ? "tried again" : what == "forgotten" ? "the token was forgotten" : nil))
            if what == "delivered" || what == "forgotten" || what == "failed" { final = true }
        }
        if final { return out }
        // No record says otherwise: delivered as sent, once its slices all ended.
        let ends = later.filter { $0.record.kind == .slice && $0.record.fields["r"] != "relaid" }
        let superseded = ends.contains { $0.record.fields["r"] == "superseded" }
        let relaid = later.contains { $0.record.kind == .slice && $0.record.fields["r"] == "relaid" }
        let done = slices == nil || ends.count >= (slices ?? 0)
        var push = DeviceTrace.Push(atMillis: ends.last?.atMillis ?? at, entryID: entryID, timestamp: timestamp, event: event, priority: priority, via: "token",
                                    channel: nil, alert: alert, status: 200, reason: nil, fate: "delivered", note: nil)
        if !done {
            (push.status, push.fate, push.note) = (nil, "unknown", "its fan-out's slices have not all ended (under way, or a worker died mid-slice)")
        } else if superseded || changedMeanwhile {
            (push.status, push.fate) = (nil, "uncertain")
            push.note = superseded ? "a newer fan-out took over before every slice was sent: sent, or left to the newer one"
                : "the device's registration changed while the fan-out ran: sent or not"
        }
        if relaid { push.note = (push.note.map { $0 + "; " } ?? "") + "a Redis restart started its fan-out again: it may have been sent twice" }
        out.append(push)
        return out
    }
}

extension TraceText {
    public static func render(_ d: DeviceTrace) -> String {
        func cell(_ s: String, _ n: Int = 80) -> String { VisibleText.escaped(s, limit: n) }
        var out = "DEVICE \(cell(d.device, 100)) on \(cell(d.key, 100)): token \(d.token.state)\(d.token.reason.map { " (\(cell($0)))" } ?? "")"
            + "\(d.token.onBroadcast ? ", on broadcast" : ", per token, \(d.token.tier ?? "standard") tier")"
            + (d.trimmed ? " (the trail's oldest records were trimmed)" : "") + "\n"
        out += "PUSHES \(d.pushes.count)\n"
        out += TextTable.render([["at", "entry", "event", "timestamp", "priority", "via", "alert", "status", "fate", "note"]] + d.pushes.map { p in
            [DeadLetterTool.utc(p.atMillis), cell(p.entryID, 40), p.event, p.timestamp.map(String.init) ?? "-", "\(p.priority)",
             p.via + (p.channel.map { " \(cell($0, 30))" } ?? ""), p.alert ? "yes" : "no",
             p.status.map(String.init) ?? "-" + (p.reason.map { " \($0)" } ?? ""), p.fate, cell(p.note ?? "", 120)]
        }, limit: 100_000, more: "")
        out += "NOT SENT \(d.notSent.count)\n"
        out += TextTable.render([["entry", "ts", "why"]] + d.notSent.map { [cell($0.entryID, 40), $0.tsMillis.map(String.init) ?? "-", cell($0.reason, 200)] },
                                limit: 100_000, more: "")
        return out
    }
}
