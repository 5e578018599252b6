import ActivityCastCore
import RedisClient
import Synchronization

/// Writing a key's trail (`TrailRecord`): `XADD … MAXLEN ~ trace.max_records` and an `EXPIRE`
/// of the key's life plus `trace.retention_s`, in whatever pipeline the record rides with.
public enum Trail {
    /// nil `maxRecords` or 0: no trail, no commands.
    /// `expire` false: the trail's life was set by this event's earlier write.
    public static func commands(_ keys: RedisKeys, _ key: ActivityKey, _ records: [TrailRecord], maxRecords: Int, ttlSeconds: Int,
                                expire: Bool = true) -> [RedisCommand] {
        guard maxRecords > 0, !records.isEmpty else { return [] }
        let name = keys.trail(key)
        // Trimmed exactly: `~` trims whole nodes of 100 entries, too coarse for a small cap.
        var out = records.map { r in RedisCommand("XADD", [name, "MAXLEN", maxRecords, "*"] + r.streamFields) }
        if expire { out.append(RedisCommand("EXPIRE", name, ttlSeconds)) }
        return out
    }
}

extension SendRole {
    func trailCommands(_ key: ActivityKey, _ records: [TrailRecord], expire: Bool = true) -> [RedisCommand] {
        Trail.commands(keys, key, records, maxRecords: configuration.trailMaxRecords,
                       ttlSeconds: configuration.stateTTLSeconds + configuration.trailRetentionSeconds, expire: expire)
    }

    /// The commands of what `trail` has unwritten (nil trail: none).
    func trailCommands(_ trail: EventTrail?) -> [RedisCommand] {
        guard let trail else { return [] }
        let (records, first) = trail.take()
        return trailCommands(trail.key, records, expire: first)
    }

    /// Writes what `trail` has unwritten, now.
    func write(_ trail: EventTrail?) async {
        guard let trail else { return }
        let (records, first) = trail.take()
        await self.trail(trail.key, records, expire: first)
    }

    /// Writes `records` now and waits for it: what is about to go is written before it goes. A
    /// trail that can't be written never stops a push (logged).
    func trail(_ key: ActivityKey, _ records: [TrailRecord], expire: Bool = true) async {
        let commands = trailCommands(key, records, expire: expire)
        guard !commands.isEmpty else { return }
        do {
            let replies = try await redis.pipeline(commands)
            if let e = replies.lazy.compactMap(\.errorMessage).first { throw RedisError(.server, e) }
        } catch {
            logger.warning("writing the key's trail failed", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }
}

/// One event's trail as the send path fills it in: its event record (`EventNote`), written before
/// its first push goes (`take` hands out what is unwritten, for the pipeline that goes first), and
/// the records that follow it (broadcast answers), written with the next pipeline.
final class EventTrail: Sendable {
    let key: ActivityKey
    let entry: String
    /// The note, whether it was written, whether it changed since, and the records after it.
    private let state: Mutex<(note: EventNote, written: Bool, dirty: Bool, after: [TrailRecord], sent: [String: String])>

    init(_ plan: Plan, entry: String) {
        key = plan.key
        self.entry = entry
        var note = EventNote(plan, entry: entry)
        // This delivery's own id: its record written again (with its decisions) is one element.
        note.record.fields["dv"] = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        state = Mutex((note, false, false, [], [:]))
    }

    /// A trail whose first record is `record` (a flush's): what follows names `entry`.
    init(_ key: ActivityKey, entry: String, first record: TrailRecord) {
        self.key = key
        self.entry = entry
        var note = EventNote(Plan(key: key, event: nil, priority: .routine, timestampMillis: 0, audience: .none), entry: entry)
        note.record = record
        note.record.fields["e"] = entry
        state = Mutex((note, false, false, [], [:]))
    }

    func note(_ change: (inout EventNote) -> Void) {
        state.withLock { s in
            change(&s.note)
            if s.written { s.dirty = true }
        }
    }
    /// A broadcast attempt's answer: the first one per environment of an event folds into the
    /// event's record (`b:<env>`: one XADD an event, not one per broadcast); others follow it.
    func answer(_ record: TrailRecord, first: Bool) {
        let env = record.fields["env"] ?? ""
        let folded: Bool = state.withLock { s in
            guard first, s.note.record.kind == .event, s.note.record.fields["b:\(env)"] == nil else { return false }
            let f = record.fields
            s.note.record.fields["b:\(env)"] = [f["st"] ?? "-", f["pr"] ?? "-", f["al"] ?? "0", f["ch"] ?? "-", f["id"] ?? "-", f["u"] ?? "-", f["r"] ?? "-"]
                .joined(separator: " ")
            if s.written { s.dirty = true }
            return true
        }
        if !folded { append(record) }
    }

    /// A record after the event's, naming its entry (`e`).
    func append(_ record: TrailRecord) {
        var r = record
        if r.fields["e"] == nil { r.fields["e"] = entry }
        state.withLock { $0.after.append(r) }
    }

    /// What is not written yet: the event record (the first time, and again once it changed:
    /// the intent is written with the merge, the decisions after them), then the records after
    /// it; and whether this is the event's first write (which sets the trail's life: one
    /// `EXPIRE` an event).
    func take() -> (records: [TrailRecord], first: Bool) {
        state.withLock { s in
            let first = !s.written
            var out: [TrailRecord] = []
            if !s.written {
                out.append(s.note.record)
                s.sent = s.note.record.fields
            } else if s.dirty {
                // Only what changed since, with what names the delivery: the reader merges them.
                var changed = s.note.record
                changed.fields = s.note.record.fields.filter { s.sent[$0.key] != $0.value || $0.key == "e" || $0.key == "dv" }
                out.append(changed)
                s.sent = s.note.record.fields
            }
            (s.written, s.dirty) = (true, false)
            out += s.after
            s.after = []
            return (out, first)
        }
    }
}

/// The event record (`TrailRecord.Kind.event`).
struct EventNote: Sendable {
    var record: TrailRecord

    init(_ plan: Plan, entry: String) {
        record = TrailRecord(.event, ["e": entry, "ty": plan.entryType, "ts": String(plan.timestampMillis),
                                      "ev": plan.event?.rawValue ?? "none", "pc": plan.priority.rawValue,
                                      "f": TrailRecord.list(plan.contentState.keys.sorted(), limit: 20)])
        if plan.alert != nil { record.fields["al"] = "1" }
    }

    /// What the merge did: `changed`, `unchanged`, `stale <newest ms>`, `after-end`, `refused`.
    mutating func merge(_ what: String) { record.fields["m"] = what }

    /// One audience's decision: `<decision> [<tokens left as ticks> <capacity>]`, and why in words.
    mutating func audience(_ name: String, _ decision: String, ticks: Int64? = nil, capacity: Int? = nil, why: String? = nil) {
        var v = decision
        if let ticks, let capacity { v += " \(ticks) \(capacity)" }
        record.fields["a:\(name)"] = v
        if let why { record.fields["w:\(name)"] = why }
    }

    /// What goes: `channel <env>…` at priority, tokens by tier.
    mutating func sending(_ what: String, _ value: String) { record.fields["s:\(what)"] = value }
}
