import ActivityCastSend
import ActivityCastSettings
import Foundation

extension InspectReport {
    /// Characters a table cell shows of a name, id or reason before it is cut (`… (N bytes)`).
    public static let cellLimit = 200
    /// Rows a table shows before `… and N more`; `--json` lists everything.
    public static let rowLimit = 100

    /// A human-readable table. Everything that came from Redis is shown through
    /// `VisibleText.escaped` and cut at `cellLimit` characters, and each table at `rowLimit` rows,
    /// so the output stays small and holds no control character but its own newlines, whatever
    /// the keys contain.
    /// First thing on the page while a worker can't use APNs: which, since when, and why.
    public func apnsUnusableLines() -> [String] {
        guard !apnsUnusable.isEmpty else { return [] }
        var lines = ["", "APNS UNUSABLE: \(apnsUnusable.count) worker endpoint\(apnsUnusable.count == 1 ? "" : "s") can't reach APNs or are refused"]
        lines += table([["worker", "endpoint", "since", "why", "last error"]] + apnsUnusable.map { u in
            let stale = generatedAtMillis - u.refreshedMillis > 60_000 ? " (not refreshed for \(formatAge(generatedAtMillis - u.refreshedMillis)))" : ""
            return [cell(u.consumer), cell(u.endpoint), "\(formatAge(max(0, generatedAtMillis - u.sinceMillis))) ago\(stale)", u.why, cell(u.error)]
        }).split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { !$0.isEmpty }
        return lines + [""]
    }

    public func rendered() -> String {
        var out = "ActivityCast at \(cell(redis))\n"
        let errors = errors
        if !errors.isEmpty {
            out += "\n\(errors.count) section\(errors.count == 1 ? "" : "s") could not be read: see the 'error:' lines\n"
        }
        out += apnsUnusableLines().joined(separator: "\n")
        if !nodes.isEmpty {
            out += "\nREDIS \(nodes.count == 1 ? "NODE" : "PRIMARIES (\(nodes.count))")\n"
            var rows = [["node", "keys", "used memory", "maxmemory"]]
            for n in nodes {
                func mb(_ v: Int64?) -> String { v.map { String(format: "%.1f MB", Double($0) / 1e6) } ?? "-" }
                rows.append([cell(n.address), n.error != nil ? "ERROR" : n.keys.map(String.init) ?? "-", mb(n.usedMemory),
                             n.maxMemory == 0 ? "none" : mb(n.maxMemory)])
            }
            out += table(rows)
            for n in nodes { if let error = n.error { out += errorLine(error) } }
        }
        out += "\nSTREAMS\n"
        var rows = [["stream", "kind", "length", "oldest", "first id", "last id", "retention"]]
        for s in streams {
            rows.append([cell(s.name), s.kind, s.error != nil ? "ERROR" : s.exists ? "\(s.length)" : "missing",
                         s.oldestEntryAgeMillis.map { formatAge($0) } ?? "-", cell(s.firstID ?? "-"), cell(s.lastID ?? "-"), s.retention ?? "-"])
        }
        out += table(rows)
        for s in streams { if let error = s.error { out += errorLine(error) } }
        let totals = feedTotals
        if !totals.isEmpty {
            out += "\nSHARDED FEEDS (their shards added up)\n"
            rows = [["feed", "kind", "shards", "length", "group", "pending", "lag"]]
            for t in totals {
                if t.groups.isEmpty { rows.append([cell(t.feed), t.kind, "\(t.shards)", "\(t.length)", "-", "-", "-"]) }
                for g in t.groups {
                    rows.append([cell(t.feed), t.kind, "\(t.shards)", "\(t.length)", cell(g.name), "\(g.pending)", g.lag.map(String.init) ?? "?"])
                }
            }
            out += table(rows)
        }
        out += "\nGROUPS\n"
        rows = [["stream", "group", "consumers", "pending", "oldest pending", "lag", "last delivered"]]
        for s in streams {
            for g in s.groups {
                rows.append([cell(s.name), cell(g.name), "\(g.consumers.count)", "\(g.pending)",
                             g.oldestPendingAgeMillis.map { formatAge($0) } ?? "-", g.lag.map(String.init) ?? "?", cell(g.lastDeliveredID)])
            }
        }
        out += table(rows)
        out += "\nCONSUMERS\n"
        rows = [["stream", "group", "consumer", "pending", "idle"]]
        for s in streams {
            for g in s.groups {
                for c in g.consumers { rows.append([cell(s.name), cell(g.name), cell(c.name), "\(c.pending)", formatAge(c.idleMillis)]) }
            }
        }
        out += table(rows)
        out += "\nDEAD LETTERS  \(cell(deadLetterStream)): \(deadLetterError == nil ? "\(deadLetterCount)" : "ERROR")\n"
        if let deadLetterError { out += errorLine(deadLetterError) }
        if !latestDeadLetters.isEmpty {
            rows = [["id", "source", "reason"]]
            for d in latestDeadLetters {
                rows.append([cell(d.id), cell("\(d.stream)/\(d.entryID)"),
                             VisibleText.escaped(d.reason, limit: Self.cellLimit, totalBytes: d.reasonBytes)])
            }
            out += table(rows)
        }
        let r = registrations
        out += "\nREGISTRATIONS\(r.truncated ? " (partial counts: large index)" : "")\n"
        out += table([["activity keys", "activity tokens", "push-to-start tokens", "follows"],
                      ["\(r.activityKeys)", "\(r.activityTokens)", "\(r.pushToStartTokens)", "\(r.follows)"]])
        if let error = r.error { out += errorLine(error) }
        out += "\nCOUNTERS  \(cell(counters.key))\(counters.truncated ? " (partial: a large hash)" : "")\n"
        out += table([["counter", "value"]] + counters.values.sorted { $0.key < $1.key }.map { [cell($0.key), "\($0.value)"] })
        if let error = counters.error { out += errorLine(error) }
        out += "\nCHANNELS\(channels.truncated ? " (partial: many keys)" : "")\n"
        out += table([["key", "env", "id", "policy", "age", "broadcasts", "state"]] + channels.channels.map { c in
            [cell(c.key), c.environment, cell(c.id ?? "-"), c.storagePolicy.map(String.init) ?? "-", c.ageMillis.map { formatAge($0) } ?? "-",
             "\(c.broadcasts)", c.state == "ending" ? "ending, deleted in \(formatAge(max(0, (c.deleteAtMillis ?? 0) - generatedAtMillis)))" : c.state]
        })
        if let error = channels.error { out += errorLine(error) }
        out += "\nSEND FAILURES: \(channels.sendFailures)\n"
        for line in channels.latestSendFailures { out += "  \(cell(line))\n" }
        out += "\nBUDGETS\(budgets.truncated ? " (partial: many keys)" : "")  tokens refilled to now with budgets.*"
            + "\(budgets.redisClock ? "" : " (this machine's clock: Redis refused TIME)")\n"
        out += table([["key", "audience", "tokens", "capacity", "p10", "p5", "downgraded", "coalesced", "flushed", "stale", "unchanged", "waiting"]]
            + budgets.budgets.map { b in
                [cell(b.key), Self.audienceLabel(b), Self.tokensText(ticks: b.ticks), "\(b.capacity)", "\(b.priority10)", "\(b.priority5)",
                 "\(b.downgraded)", "\(b.coalesced)", "\(b.flushed)", "\(b.stale)", "\(b.unchanged)", waiting(b)]
            })
        if budgets.hiddenWithoutDevices > 0 {
            out += "  \(budgets.hiddenWithoutDevices) tiers' budgets not shown: no device of that tier (--all-budgets shows them)\n"
        }
        if let error = budgets.error { out += errorLine(error) }
        out += "  due flushes in \(cell(budgets.schedule)): \(budgets.scheduled), overdue \(budgets.overdue)\n"
        return out
    }

    /// `standard`, `frequent`, or the channel with its storage policy as route files name it
    /// (`channel (no-storage)`); `?` when the policy is not on record but taken from the routes.
    static func audienceLabel(_ b: Budget) -> String {
        let storage: String
        switch b.policy {
        case "channel_no_storage": storage = "no-storage"
        case "channel_latest_message": storage = "latest-message"
        default: return b.audience
        }
        return "\(b.audience) (\(storage)\(b.policyKnown ? "" : "?"))"
    }

    /// Tokens to one decimal, rounded down (in integer ticks, exactly): 0.96 shows 0.9, not a
    /// whole token that a critical update could not spend.
    static func tokensText(ticks: Int64) -> String {
        let tenths = max(0, ticks) / (BudgetState.ticksPerToken / 10)
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// Whether a coalesced state waits, and when it is due: `due in 12 s` (rounded up), `due now`
    /// (within the second), `overdue 3 s` (rounded down), or `not scheduled` (nothing in the
    /// schedule will flush it); `-` when nothing waits.
    func waiting(_ b: Budget) -> String {
        guard b.pendingMillis != nil else { return "-" }
        guard let due = b.dueAtMillis else { return "not scheduled" }
        let ms = due - budgets.nowMillis
        if ms > 0 { return "due in \((ms + 999) / 1000) s" }
        return ms > -1000 ? "due now" : "overdue \(-ms / 1000) s"
    }

    private func cell(_ text: String) -> String { VisibleText.escaped(text, limit: Self.cellLimit) }

    private func errorLine(_ message: String) -> String { "  error: \(VisibleText.escaped(message, limit: 4 * Self.cellLimit))\n" }

    private func formatAge(_ ms: Int64) -> String {
        if ms < 1000 { return "\(ms)ms" }
        if ms < 120_000 { return String(format: "%.1fs", Double(ms) / 1000) }
        if ms < 7_200_000 { return "\(ms / 60_000)m" }
        return "\(ms / 3_600_000)h"
    }

    private func table(_ rows: [[String]]) -> String { TextTable.render(rows, limit: Self.rowLimit, more: "inspect --json lists them all") }

    /// The report as JSON (sorted keys, indented). JSON already escapes C0 controls in strings;
    /// DEL, C1 controls and the invisible formatting characters are escaped here as well
    /// (`\u009b`), which JSON allows for any character, so no byte of the output can steer a terminal.
    public func json() throws -> String { try SafeJSON.encode(self) }
}
