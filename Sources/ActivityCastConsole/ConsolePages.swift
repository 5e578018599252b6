import ActivityCastCore
import ActivityCastInspect
import Foundation
import Hummingbird
import RedisClient

/// The pages' reads and their views.
extension Console {
    typealias Table = ConsoleViews.Table

    // MARK: Overview

    func overview(_ f: Frame, live: Bool) async throws -> String {
        let top = await readings.current(reader)
        let report = top.latest?.report
        var cards: [[String: Any]] = []
        var tables: [Table] = []
        if let report {
            let b = report.budgets
            cards.append(["label": "dead letters", "value": report.deadLetterError == nil ? "\(report.deadLetterCount)" : "error"])
            cards.append(["label": "activity keys", "value": "\(report.registrations.activityKeys)",
                          "note": "\(report.registrations.activityTokens) tokens, \(report.registrations.follows) follows"])
            cards.append(["label": "due flushes", "value": "\(b.scheduled)", "note": "\(b.overdue) overdue"])
            for node in report.nodes {
                let mb = node.usedMemory.map { String(format: "%.1f MB", Double($0) / 1e6) } ?? "?"
                cards.append(["label": "Redis \(node.address)", "value": mb, "note": node.error ?? "\(node.keys ?? 0) keys"])
            }
            for line in report.apnsUnusableLines() { cards.append(["label": "APNs unusable", "value": "!", "note": line.trimmingCharacters(in: .whitespaces)]) }
        }
        if let s = top.sections(rowLimit: 20) {
            let keyLink: [Int: (String) -> String?] = [0: { "/keys/\(Self.segment($0))" }]
            tables.append(Table(title: "Streams", rows: s.streams.tables.first ?? [], notes: s.streams.notes))
            tables.append(contentsOf: s.pushes.tables.enumerated().map { i, t in
                Table(title: i == 0 ? s.pushes.heading.map(Self.titled) : nil, rows: t, notes: i == s.pushes.tables.count - 1 ? s.pushes.lead + s.pushes.notes : [])
            })
            if s.pushes.tables.isEmpty { tables.append(Table(title: s.pushes.heading.map(Self.titled), rows: [], notes: s.pushes.notes)) }
            tables.append(Table(title: s.budgets.heading.map(Self.titled), rows: s.budgets.tables.first ?? [], links: keyLink, notes: s.budgets.notes))
            tables.append(Table(title: s.channels.heading.map(Self.titled), rows: s.channels.tables.first ?? [], links: keyLink, notes: s.channels.notes))
            tables.append(Table(title: "Counters", rows: s.counters.tables.first ?? [], empty: "none yet", notes: s.counters.notes))
        }
        let values: [String: Any] = [
            "readAt": Self.clock(Self.nowMillis() - Int64(((top.latestReadingAt.map { ContinuousClock.now - $0 }) ?? .zero).components.seconds * 1000)),
            "everySeconds": String(format: "%g", Double(settings.console.refreshMillis) / 1000),
            "cards": cards, "tables": tables,
        ].merging(top.latest?.redisError.map { ["redisError": $0] } ?? [:]) { a, _ in a }
        if live { return ConsoleViews.render("overviewLive", values) }
        return ConsoleViews.render("overview", frame(f, title: "Overview", extra: values, live: "/overview/live"))
    }

    /// `BUDGETS  12 (key, audience)…` → `Budgets: 12 (key, audience)…`.
    static func titled(_ heading: String) -> String {
        let parts = heading.split(separator: " ", maxSplits: 1)
        guard let first = parts.first else { return heading }
        let rest = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
        return first.prefix(1) + first.dropFirst().lowercased() + (rest.isEmpty ? "" : ": \(rest)")
    }

    /// `16:44:29.287` (UTC): a trail's times, to the millisecond; the date is the day's.
    static func time(_ ms: Int64) -> String {
        let s = Int(ms / 1000) % 86_400
        return String(format: "%02d:%02d:%02d.%03d", s / 3600, s / 60 % 60, s % 60, Int(ms % 1000))
    }

    static func clock(_ ms: Int64) -> String {
        let s = Int(ms / 1000) % 86_400
        return String(format: "%02d:%02d:%02d UTC", s / 3600, s / 60 % 60, s % 60)
    }

    // MARK: Budgets and channels

    /// Rows per page of the budgets and channels tables (rendering is most of a page's time).
    static let tableRows = 100

    func table(_ f: Frame, _ title: String, sort: String?, desc: Bool, page: Int = 0,
               _ pick: ((streams: TopState.Section, pushes: TopState.Section, counters: TopState.Section, budgets: TopState.Section, channels: TopState.Section)) -> TopState.Section) async throws -> String {
        let top = await readings.current(reader)
        guard let s = top.sections(rowLimit: 5000) else { throw RedisError(.connectionFailed, top.latest?.redisError ?? "Redis unreachable") }
        let section = pick(s)
        var rows = section.tables.first ?? []
        let path = "/\(title.lowercased())"
        if rows.count > 1, let sort, let column = rows[0].firstIndex(where: { $0.lowercased() == sort.lowercased() }) {
            let body = rows.dropFirst().sorted { a, b in
                let (x, y) = (column < a.count ? a[column] : "", column < b.count ? b[column] : "")
                let less = Double(x).flatMap { dx in Double(y).map { dx < $0 } } ?? (x < y)
                return desc ? !less && x != y : less
            }
            rows = [rows[0]] + body
        }
        // A page of the sorted rows.
        let total = max(rows.count - 1, 0)
        let first = min(max(page, 0) * Self.tableRows, total)
        let shown = rows.isEmpty ? [] : [rows[0]] + rows.dropFirst().dropFirst(first).prefix(Self.tableRows)
        let order = sort.map { "sort=\(Self.queryValue($0))\(desc ? "&desc=1" : "")&" } ?? ""
        var notes = section.notes
        if total > Self.tableRows { notes.insert("rows \(first + 1)–\(first + shown.count - 1) of \(total)", at: 0) }
        let table = Table(title: section.heading.map(Self.titled), rows: shown, links: [0: { "/keys/\(Self.segment($0))" }],
                          sort: { h in "\(path)?sort=\(Self.queryValue(h.lowercased()))\(sort?.lowercased() == h.lowercased() && !desc ? "&desc=1" : "")" },
                          empty: "none", notes: notes)
        var values: [String: Any] = ["heading": title, "tables": [table]]
        if first > 0 { values["prev"] = "\(path)?\(order)page=\(max(page, 0) - 1)" }
        if first + Self.tableRows < total { values["next"] = "\(path)?\(order)page=\(max(page, 0) + 1)" }
        return ConsoleViews.render("plain", frame(f, title: title, extra: values))
    }

    // MARK: Keys

    func keys(_ f: Frame, query: String?) async throws -> String {
        let index = settings.keys.keysIndex
        var found: [(String, Int64)] = []
        var summary: String
        if let query {
            // A sorted set has no index by text: a bounded ZSCAN, and the page says how far it looked.
            var cursor = "0", scanned = 0
            repeat {
                let reply = try await redis.send(RedisCommand("ZSCAN", index, cursor, "MATCH", "*\(Self.glob(query))*", "COUNT", 1000)).orThrow("ZSCAN \(index)")
                let parts = reply.array ?? []
                cursor = parts.first?.string ?? "0"
                found += Self.scored(parts.count > 1 ? parts[1].array ?? [] : [])
                scanned += 1000
            } while cursor != "0" && scanned < Self.keySearchScan && found.count < Self.keysListed
            found.sort { $0.1 > $1.1 }
            found = Array(found.prefix(Self.keysListed))
            summary = "\(found.count) keys containing “\(query)”" + (cursor == "0" ? " (the whole index read)" : " (read about \(scanned) of the index; refine the search for more)")
        } else {
            let reply = try await redis.pipeline([RedisCommand("ZRANGE", index, "+inf", "-inf", "BYSCORE", "REV", "LIMIT", 0, Self.keysListed, "WITHSCORES"), RedisCommand("ZCARD", index)])
            found = Self.scored(try replies(reply[0], "ZRANGE \(index)"))
            let total = reply[1].int ?? Int64(found.count)
            summary = "\(total) live keys, newest event first" + (total > Int64(found.count) ? "; the newest \(found.count) shown (search for others)" : "")
        }
        let rows = [["key", "newest event (UTC)", "age"]] + found.map { k, ms in [k, DeadLetterTool.utc(ms), Self.age(Self.nowMillis() - ms)] }
        let table = Table(title: nil, rows: rows, links: [0: { "/keys/\(Self.segment($0))" }], empty: "No live keys.")
        return ConsoleViews.render("keys", frame(f, title: "Keys", extra: ["query": query ?? "", "summary": summary, "table": table]))
    }

    func replies(_ reply: RESPValue, _ what: String) throws -> [RESPValue] { try reply.orThrow(what).array ?? [] }

    /// Members with their scores (ms), flat (`m1 s1 m2 s2`, RESP2 and ZSCAN) or in pairs (RESP3's `WITHSCORES`).
    static func scored(_ items: [RESPValue]) -> [(String, Int64)] {
        func score(_ v: RESPValue) -> Int64 { Int64(v.string.flatMap { Double($0) } ?? 0) }
        if items.first?.array != nil {
            return items.compactMap { pair in
                guard let p = pair.array, p.count == 2, let k = p[0].string else { return nil }
                return (k, score(p[1]))
            }
        }
        return stride(from: 0, to: items.count - 1, by: 2).compactMap { i in items[i].string.map { ($0, score(items[i + 1])) } }
    }

    /// `text` with glob's special characters escaped, for `MATCH`.
    static func glob(_ text: String) -> String {
        var out = ""
        for c in text { if "*?[]\\".contains(c) { out.append("\\") }; out.append(c) }
        return out
    }

    static func age(_ ms: Int64) -> String {
        if ms < 0 { return "-" }
        if ms < 120_000 { return "\(ms / 1000)s" }
        if ms < 7_200_000 { return "\(ms / 60_000)m" }
        return "\(ms / 3_600_000)h"
    }

    func activityKey(_ text: String) throws -> ActivityKey {
        guard let key = ActivityKey(parsing: text) else { throw Missing(what: "“\(text)” is not an activity key (kind:id, such as match:4711)") }
        return key
    }

    func key(_ f: Frame, _ text: String) async throws -> String {
        let key = try activityKey(text)
        let inspector = Inspector(settings: settings, redis: redis)
        let k = try await inspector.key(key)
        let trace = try await Tracer(settings: settings, redis: redis).report(key, last: 500)
        let link = "/keys/\(Self.segment(k.key))/devices/"
        var cards: [[String: Any]] = [
            ["label": "newest event", "value": k.newestEvent ?? "none"],
            ["label": "newest ts", "value": k.newestMillis.map(DeadLetterTool.utc) ?? "-"],
            ["label": "ended", "value": k.endedMillis.map(DeadLetterTool.utc) ?? "no"],
            ["label": "on broadcast", "value": "\(k.onBroadcast)"],
        ]
        for (tier, n) in k.tokensByTier.sorted(by: { $0.key < $1.key }) { cards.append(["label": "tokens \(tier)", "value": "\(n)"]) }
        var tables: [Table] = []
        tables.append(Table(title: "Content-state", rows: [["field", "value"]] + (k.contentState ?? [:]).sorted { $0.key < $1.key }.map { [$0.key, $0.value] },
                            empty: "No state (no event yet, or it expired).", wide: [1]))
        tables.append(Table(title: "Devices", rows: [["device", "activity", "state", "tier", "env", "broadcast", "registered"]] + k.devices.map { d in
            [d.device, d.activity, d.state, d.tier ?? "-", d.env ?? "-", d.onBroadcast.map { $0 ? "yes" : "no" } ?? "-", d.registeredMillis.map(DeadLetterTool.utc) ?? "-"]
        }, links: [0: { $0 == "-" ? nil : link + Self.segment($0) }], empty: "No registrations.",
           notes: k.devicesTruncated ? ["More registrations than listed (the first \(Inspector.deviceListLimit))."] : []))
        tables.append(Table(title: "Channels", rows: [["environment", "value"]] + k.channels.sorted { $0.key < $1.key }.map { [$0.key, $0.value] }, empty: "No channels."))
        // The audiences' budget hashes side by side: a row per field.
        let audiences = k.budgets.keys.sorted()
        let names = Set(k.budgets.values.flatMap(\.keys)).sorted()
        tables.append(Table(title: "Budgets", rows: [["field"] + audiences] + names.map { n in [n] + audiences.map { k.budgets[$0]?[n] ?? "-" } },
                            empty: "No budget yet (no event decided)."))
        tables.append(Table(title: "Trail: \(trace.events.count) events, newest first" + (trace.trimmed ? " (the oldest were trimmed: trace.max_records)" : ""),
                            rows: [["at (UTC)", "entry", "type", "event", "ts (UTC)", "merge", "decisions", "broadcasts", "why"]] + trace.events.reversed().map(Self.eventRow),
                            empty: "Nothing on the trail (trace.max_records 0, or nothing happened to this key).", wide: [6, 7, 8]))
        return ConsoleViews.render("key", frame(f, title: k.key, extra: ["key": k.key, "cards": cards, "tables": tables]))
    }

    static func eventRow(_ e: TraceReport.Event) -> [String] {
        let decisions = e.audiences.map { a in
            "\(a.audience) \(a.decision)" + (a.budget.map { String(format: " (%.1f of %d left)", $0.tokensLeft, $0.capacity) } ?? "")
        }.joined(separator: "; ")
        let broadcasts = e.broadcasts.map { "\($0.environment) \($0.status.map(String.init) ?? "?") \($0.fate)" }.joined(separator: "; ")
        var why = [e.why, e.failed, e.fanout.map { "fan-out: \($0)" }].compactMap { $0 }.joined(separator: "; ")
        if let s = e.starts { why += (why.isEmpty ? "" : "; ") + "starts: \(s.sent) sent, \(s.overBudget) over budget, \(s.relaunched) relaunched" }
        return [Self.time(e.atMillis), e.entryID + (e.delivery > 1 ? " (delivery \(e.delivery))" : ""), e.type, e.event,
                e.tsMillis.map(Self.time) ?? "-", e.merge ?? "-", decisions.isEmpty ? "-" : decisions, broadcasts.isEmpty ? "-" : broadcasts,
                why.isEmpty ? "-" : why]
    }

    func keyDevice(_ f: Frame, _ keyText: String, _ device: String) async throws -> String {
        let key = try activityKey(keyText)
        let d = try await Tracer(settings: settings, redis: redis).device(key, device)
        let token = "token \(d.token.state)" + (d.token.reason.map { " (\($0))" } ?? "")
            + (d.token.onBroadcast ? ", on broadcast" : ", per token, \(d.token.tier ?? "standard") tier")
            + (d.trimmed ? "; the trail's oldest records were trimmed" : "")
        let pushes = Table(title: "Pushes: \(d.pushes.count)", rows: [["at (UTC)", "entry", "event", "timestamp", "priority", "via", "alert", "status", "fate", "note"]]
                           + d.pushes.map { p in
                               [Self.time(p.atMillis), p.entryID, p.event, p.timestamp.map(String.init) ?? "-", "\(p.priority)",
                                p.via + (p.channel.map { " \($0)" } ?? ""), p.alert ? "yes" : "no",
                                (p.status.map(String.init) ?? "-") + (p.reason.map { " \($0)" } ?? ""), p.fate, p.note ?? ""]
                           }, empty: "No push on the trail.", wide: [9])
        let notSent = Table(title: "Not sent: \(d.notSent.count)", rows: [["entry", "ts", "why"]] + d.notSent.map { [$0.entryID, $0.tsMillis.map(String.init) ?? "-", $0.reason] },
                            empty: "Every event on the trail was sent.", wide: [2])
        return ConsoleViews.render("device", frame(f, title: "\(device) on \(key)", extra: [
            "heading": "Device \(device) on \(key.description)", "summary": token, "tables": [pushes, notSent],
        ]))
    }

    func device(_ f: Frame, _ id: String) async throws -> String {
        let d = try await Inspector(settings: settings, redis: redis).device(id)
        guard d.exists || !d.keys.isEmpty else { throw Missing(what: "No device “\(id)” is registered (or its registrations expired: ttl.device_s).") }
        var tables: [Table] = []
        tables.append(Table(title: "Settings", rows: [["setting", "value"]] + d.settings.sorted { $0.key < $1.key }.map { [$0.key, $0.value] }, empty: "Defaults."))
        tables.append(Table(title: "Keys", rows: [["key", "activity", "registration"]] + d.keys.map { [$0.key, $0.activity, $0.registration ?? "-"] },
                            links: [0: { "/keys/\(Self.segment($0))/devices/\(Self.segment(id))" }], empty: "No activity registered."))
        // What it was sent for each key, the last few pushes with their answers (the key's
        // device page has all, and why not for the other events).
        let tracer = Tracer(settings: settings, redis: redis)
        for k in d.keys.prefix(20) {
            guard let key = ActivityKey(parsing: k.key) else { continue }
            let view = try await tracer.device(key, id)
            let last = view.pushes.suffix(10)
            tables.append(Table(title: "\(k.key): \(view.pushes.count) pushes, \(view.notSent.count) events not sent" + (view.pushes.count > last.count ? " (the last \(last.count))" : ""),
                                rows: [["at (UTC)", "entry", "event", "priority", "via", "alert", "status", "fate"]] + last.map { p in
                                    [Self.time(p.atMillis), p.entryID, p.event, "\(p.priority)", p.via, p.alert ? "yes" : "no",
                                     (p.status.map(String.init) ?? "-") + (p.reason.map { " \($0)" } ?? ""), p.fate]
                                }, empty: "No push for this key on its trail."))
        }
        tables.append(Table(title: "Push-to-start tokens", rows: [["activity type", "token"]] + d.startTokens.sorted { $0.key < $1.key }.map { [$0.key, $0.value] }, empty: "None."))
        tables.append(Table(title: "Follows", rows: [["target", "since"]] + d.follows.sorted { $0.key < $1.key }.map { [$0.key, $0.value] }, empty: "None."))
        return ConsoleViews.render("device", frame(f, title: "Device \(id)", extra: [
            "heading": "Device \(id)", "summary": d.goneMillis.map { "Unregistered at \(DeadLetterTool.utc($0))." } ?? "", "tables": tables,
        ]))
    }

    // MARK: Dead letters

    func deadLetters(_ f: Frame, reason: String?, before: String?, flash: String? = nil, error: String? = nil) async throws -> String {
        let tool = DeadLetterTool(settings: settings, redis: redis)
        let listing = try await tool.list(reason: reason, limit: Self.lettersPerPage, scan: Self.filterScan, before: before)
        let letters: [[String: Any]] = listing.letters.map { l in
            ["id": l.id, "at": l.atMillis.map(DeadLetterTool.utc) ?? "-", "reason": String(l.reason.prefix(300)), "stream": l.stream, "entryID": l.entryID,
             "deliveries": l.deliveries.map(String.init) ?? "-", "replayed": l.replayed.map { "→ \($0.entryID)" } ?? ""]
        }
        var summary = "\(listing.total) dead letters in \(listing.stream); read \(listing.scanned)" + (listing.complete ? " (to the oldest)" : "")
        if let reason { summary += "; \(listing.letters.count) whose reason contains “\(reason)”" }
        var values: [String: Any] = ["reason": reason ?? "", "summary": summary, "letters": letters, "hasLetters": !letters.isEmpty]
        if let reason { values["reasonText"] = reason }
        if canAct(f.access) { values["actions"] = true }
        if let last = listing.lastScannedID {
            values["next"] = "/deadletters?before=\(Self.queryValue(last))" + (reason.map { "&reason=\(Self.queryValue($0))" } ?? "")
        }
        return ConsoleViews.render("deadletters", frame(f, title: "Dead letters", extra: values, flash: flash, error: error))
    }

    func deadLetter(_ f: Frame, _ id: String) async throws -> String {
        guard let l = try await DeadLetterTool(settings: settings, redis: redis).show(id) else { throw Missing(what: "No dead letter \(id).") }
        let about = Table(title: nil, rows: [["", "value"], ["reason", l.reason], ["from", "\(l.stream) \(l.entryID)"], ["deliveries", l.deliveries.map(String.init) ?? "-"],
                                            ["consumer", l.consumer ?? "-"], ["at", l.atMillis.map(DeadLetterTool.utc) ?? "-"],
                                            ["copy", l.truncated ?? "whole"], ["replayed", l.replayed.map { "at \(DeadLetterTool.utc($0.atMillis)) as \($0.entryID)" } ?? "no"]],
                          wide: [1])
        let fields = Table(title: "Fields", rows: [["name", "value"]] + l.fields.map { [$0.name, $0.value] }, empty: "No fields were copied.", wide: [1])
        var values: [String: Any] = ["id": l.id, "table": about, "fields": fields]
        if canAct(f.access), l.unreplayable == nil { values["actions"] = true }
        return ConsoleViews.render("deadletter", frame(f, title: "Dead letter \(l.id)", extra: values, error: l.unreplayable))
    }

    func canAct(_ access: ConsoleAuth.Access) -> Bool { auth.allowActions && access.operator_ }
}
