import ActivityCastSettings
import Foundation

/// One reading of `activitycast top`: Inspector's report (or why Redis could not be read) and
/// each worker's `/metrics`, taken at `at`.
public struct TopReading: Sendable {
    public var at: ContinuousClock.Instant
    public var report: InspectReport?
    /// Why there is no report: shown in its place.
    public var redisError: String?
    public var workers: [WorkerReading]

    public init(at: ContinuousClock.Instant, report: InspectReport?, redisError: String?, workers: [WorkerReading]) {
        self.at = at
        self.report = report
        self.redisError = redisError
        self.workers = workers
    }
}

/// One worker's scrape: its samples, or why there are none.
public struct WorkerReading: Sendable {
    public var endpoint: String
    public var samples: [PrometheusSample]?
    public var error: String?

    public init(endpoint: String, samples: [PrometheusSample]?, error: String?) {
        self.endpoint = endpoint
        self.samples = samples
        self.error = error
    }
}

/// What `activitycast top` shows: the latest reading, with rates from the one before it. Pure:
/// the command reads, records and draws the lines this returns.
public struct TopState: Sendable {
    public var redisURL: String
    public var interval: Duration
    /// The latest reading, successful or not.
    public private(set) var latest: TopReading?
    /// The last two readings that had a report: rates are their differences.
    private var reports: (previous: Stamped<InspectReport>?, current: Stamped<InspectReport>?) = (nil, nil)
    /// The same per endpoint for the workers' samples.
    private var scrapes: [String: (previous: Stamped<[PrometheusSample]>?, current: Stamped<[PrometheusSample]>?)] = [:]

    struct Stamped<T: Sendable>: Sendable {
        var at: ContinuousClock.Instant
        var value: T
    }

    public init(redisURL: String, interval: Duration) {
        self.redisURL = redisURL
        self.interval = interval
    }

    public mutating func record(_ reading: TopReading) {
        latest = reading
        if let report = reading.report { reports = (reports.current, Stamped(at: reading.at, value: report)) }
        for worker in reading.workers {
            guard let samples = worker.samples else { continue }
            scrapes[worker.endpoint] = (scrapes[worker.endpoint]?.current, Stamped(at: reading.at, value: samples))
        }
    }

    /// The frame: at most `height` lines, none longer than `width` characters (cut, never
    /// wrapped). `interactive` adds the key help and keeps long lists short; `busySince` is when
    /// the reading under way started, if one is.
    public func lines(width: Int, height: Int, now: ContinuousClock.Instant, interactive: Bool,
                      busySince: ContinuousClock.Instant? = nil) -> [String] {
        var out: [String] = []
        let every = String(format: "%g", interval.inSeconds)
        out.append("activitycast top  \(cell(redisURL))  every \(every)s  \(clock())" + (interactive ? "  (q quits)" : ""))
        if let reading = latest, reading.report == nil {
            var line = "\(VisibleText.escaped(reading.redisError ?? "Redis unreachable", limit: 300))  (retrying every \(every)s"
            if let last = reports.current { line += "; last read \(seconds(now - last.at)) ago" }
            out.append(line + ")")
        } else if latest == nil {
            out.append("reading Redis…")
        }
        if let busySince, now - busySince > interval * 2 {
            out.append("waiting for Redis for \(seconds(now - busySince))")
        }
        let rowLimit = interactive ? 10 : InspectReport.rowLimit
        if let report = latest?.report {
            out += text(streams(report))
            out += summary(report)
        }
        out += text(pushes())
        if let report = latest?.report {
            out += text(counters(report))
            out += text(budgets(report, rowLimit: rowLimit))
            out += text(channels(report, rowLimit: rowLimit))
        }
        var cut = out.map { fit($0, width) }
        if cut.count > height {
            // The last row says how much is missing, unless the header is all there is room for.
            let hidden = cut.count - height + 1
            cut = height < 2 ? Array(cut.prefix(max(height, 0)))
                : Array(cut.prefix(height - 1)) + [fit("… \(hidden) more lines (a taller terminal shows them)", width)]
        }
        return cut
    }

    // MARK: Sections

    /// One section of the frame as data: a heading line (nil: the first table's header names
    /// it), its tables (each with its header row first), and lines after them (errors, "and N
    /// more"). The terminal draws it as text (`text`); the console as HTML.
    public struct Section: Sendable, Equatable {
        public var heading: String?
        /// Lines between the heading and the tables (`(none yet)`).
        public var lead: [String] = []
        public var tables: [[[String]]]
        public var notes: [String]
    }

    /// The sections the frame is made of, for a reading that has a report (the console's).
    public func sections(rowLimit: Int) -> (streams: Section, pushes: Section, counters: Section, budgets: Section, channels: Section)? {
        guard let report = latest?.report else { return nil }
        return (streams(report), pushes(), counters(report), budgets(report, rowLimit: rowLimit), channels(report, rowLimit: rowLimit))
    }

    /// When the latest reading was taken, and whether it failed (and why).
    public var latestReadingAt: ContinuousClock.Instant? { latest?.at }

    private func text(_ section: Section) -> [String] {
        [""] + (section.heading.map { [$0] } ?? []) + section.lead + section.tables.flatMap(table) + section.notes
    }

    private func streams(_ report: InspectReport) -> Section {
        let previous = reports.previous?.value.streams
        let dt = span()
        // The numbers to watch first, so a narrow terminal still shows them.
        var rows = [["STREAM", "group", "lag", "pending", "in/s", "out/s", "length", "oldest pending", "consumers", "kind", "kept"]]
        var errors: [String] = []
        for s in report.streams {
            if let error = s.error {
                rows.append([cell(s.name), "ERROR", "", "", "", "", "", "", "", s.kind, ""])
                errors.append("  error: \(VisibleText.escaped(error, limit: 300))")
                continue
            }
            guard s.exists else { rows.append([cell(s.name), "missing", "", "", "", "", "", "", "", s.kind, ""]); continue }
            let before = previous?.first { $0.name == s.name }
            let added = rate(s.entriesAdded, before?.entriesAdded, dt)
            // What trimming keeps: the oldest entry's age (about the retention, more behind a lag).
            let kept = s.oldestEntryAgeMillis.map(age) ?? "-"
            if s.groups.isEmpty { rows.append([cell(s.name), "no group", "", "", added, "", "\(s.length)", "", "", s.kind, kept]) }
            for g in s.groups {
                let was = before?.groups.first { $0.name == g.name }
                rows.append([cell(s.name), cell(g.name), g.lag.map(String.init) ?? "?", "\(g.pending)", added, rate(g.entriesRead, was?.entriesRead, dt),
                             "\(s.length)", g.oldestPendingAgeMillis.map(age) ?? "-", "\(g.consumers.count)", s.kind, kept])
            }
        }
        // A sharded feed's shards added up, after them.
        for t in report.feedTotals {
            let before = reports.previous?.value.feedTotals.first { $0.feed == t.feed }
            for g in t.groups {
                let was = before?.groups.first { $0.name == g.name }
                rows.append([cell("\(t.feed) (\(t.shards) shards)"), cell(g.name), g.lag.map(String.init) ?? "?", "\(g.pending)",
                             rate(t.entriesAdded, before?.entriesAdded, dt), rate(g.entriesRead, was?.entriesRead, dt),
                             "\(t.length)", "", "\(g.consumers)", t.kind, ""])
            }
        }
        return Section(heading: nil, tables: [rows], notes: errors)
    }

    private func summary(_ report: InspectReport) -> [String] {
        let dead = report.deadLetterError == nil ? "\(report.deadLetterCount) (\(rate(report.deadLetterCount, reports.previous?.value.deadLetterCount, span()))/s)" : "ERROR"
        let r = report.registrations
        return report.apnsUnusableLines() + ["",
                "DEAD LETTERS \(dead)   SEND FAILURES \(report.channels.sendFailures)   REGISTRATIONS \(r.activityKeys) keys, "
                    + "\(r.activityTokens) tokens, \(r.pushToStartTokens) push-to-start, \(r.follows) follows\(r.truncated ? " (partial)" : "")"]
    }

    /// PUSHES by kind and outcome and one line per worker, from the workers' `/metrics`.
    private func pushes() -> Section {
        guard let workers = latest?.workers, !workers.isEmpty else {
            return Section(heading: "PUSHES  (pass --metrics http://HOST:PORT/metrics, a worker's ops.listen, to see pushes and APNs requests)", tables: [], notes: [])
        }
        var totals: [String: (kind: String, outcome: String, total: Double, rate: Double?)] = [:]
        var workerRows = [["WORKER", "state", "in flight", "read/s", "pushes/s", "not ok/s", "dead letters"]]
        var apnsRate: Double?, okRate: Double?
        var errors: [String] = []
        for w in workers {
            guard let samples = w.samples else {
                workerRows.append([cell(w.endpoint), "down", "-", "-", "-", "-", "-"])
                errors.append("  \(cell(w.endpoint)) unreachable: \(VisibleText.escaped(w.error ?? "?", limit: 200))")
                continue
            }
            var before: (samples: [PrometheusSample], seconds: Double)?
            if let p = scrapes[w.endpoint]?.previous, let c = scrapes[w.endpoint]?.current { before = (p.value, (c.at - p.at).inSeconds) }
            func rateOf(_ name: String, _ match: (PrometheusSample) -> Bool = { _ in true }) -> Double? {
                guard let before, before.seconds > 0 else { return nil }
                let old = before.samples, dt = before.seconds
                let now = samples.filter { $0.name == name && match($0) }.reduce(0) { $0 + $1.value }
                let was = old.filter { $0.name == name && match($0) }.reduce(0) { $0 + $1.value }
                return now >= was ? (now - was) / dt : nil  // a restart resets counters
            }
            for s in samples where s.name == "activitycast_pushes_total" {
                let kind = s.labels["kind"] ?? "?", outcome = s.labels["outcome"] ?? "?"
                let r = rateOf(s.name) { $0.labels == s.labels }
                let key = "\(kind)\u{0}\(outcome)"
                let old = totals[key]
                totals[key] = (kind, outcome, (old?.total ?? 0) + s.value, add(old.map { $0.rate } ?? 0, r))
            }
            let pushRate = rateOf("activitycast_pushes_total")
            let workerOK = rateOf("activitycast_pushes_total") { $0.labels["outcome"] == "ok" }
            apnsRate = add(apnsRate ?? 0, pushRate)
            okRate = add(okRate ?? 0, workerOK)
            func gauge(_ name: String) -> Double? { samples.first { $0.name == name }?.value }
            let state = gauge("activitycast_draining") == 1 ? "draining" : gauge("activitycast_ready").map { $0 == 1 ? "ready" : "not ready" } ?? "?"
            let dead = samples.filter { $0.name == "activitycast_dead_letters_total" }.reduce(0) { $0 + $1.value }
            workerRows.append([cell(w.endpoint), state, gauge("activitycast_entries_in_flight").map { "\(Int($0))" } ?? "-",
                               format(rateOf("activitycast_stream_entries_read_total")), format(pushRate),
                               format(pushRate.flatMap { p in workerOK.map { max(0, p - $0) } }), "\(Int(dead))"])
        }
        var rows = [["PUSH KIND", "outcome", "total", "/s"]]
        for t in totals.values.sorted(by: { ($0.kind, $0.outcome) < ($1.kind, $1.outcome) }) {
            rows.append([cell(t.kind), cell(t.outcome), "\(Int(t.total))", format(t.rate)])
        }
        let scraped = workers.filter { $0.samples != nil }.count
        let heading = "PUSHES  APNs requests \(format(apnsRate))/s, ok \(format(okRate))/s  (\(scraped) of \(workers.count) workers' /metrics)"
        if rows.count > 1 { return Section(heading: heading, tables: [rows, workerRows], notes: errors) }
        // No push yet: said where the table would be (the text keeps its order).
        return Section(heading: heading, lead: ["  (none yet)"], tables: [workerRows], notes: errors)
    }

    private func counters(_ report: InspectReport) -> Section {
        let c = report.counters
        let before = reports.previous?.value.counters.values ?? [:]
        var rows = [["COUNTER", "value", "/s"]]
        for (name, value) in c.values.sorted(by: { $0.key < $1.key }) {
            rows.append([cell(name), "\(value)", rate(value, before[name], span())])
        }
        return Section(heading: rows.count > 1 ? nil : "COUNTERS  (none)", tables: rows.count > 1 ? [rows] : [],
                       notes: c.error.map { ["  error: \(VisibleText.escaped($0, limit: 300))"] } ?? [])
    }

    private func budgets(_ report: InspectReport, rowLimit: Int) -> Section {
        let b = report.budgets
        var rows = [["BUDGET KEY", "audience", "tokens", "capacity", "p10", "p5", "downgraded", "coalesced", "waiting"]]
        for budget in b.budgets.prefix(rowLimit) {
            rows.append([cell(budget.key), InspectReport.audienceLabel(budget), InspectReport.tokensText(ticks: budget.ticks), "\(budget.capacity)",
                         "\(budget.priority10)", "\(budget.priority5)", "\(budget.downgraded)", "\(budget.coalesced)", report.waiting(budget)])
        }
        var notes: [String] = []
        if b.budgets.count > rowLimit { notes.append("  … and \(b.budgets.count - rowLimit) more (inspect lists them)") }
        if let error = b.error { notes.append("  error: \(VisibleText.escaped(error, limit: 300))") }
        return Section(heading: "BUDGETS  \(b.budgets.count)\(b.truncated ? "+" : "") (key, audience)  due flushes \(b.scheduled), overdue \(b.overdue)",
                       tables: rows.count > 1 ? [rows] : [], notes: notes)
    }

    private func channels(_ report: InspectReport, rowLimit: Int) -> Section {
        let c = report.channels
        let before = reports.previous?.value.channels.channels ?? []
        let count = { (state: String) in c.channels.filter { $0.state == state }.count }
        var rows = [["CHANNEL KEY", "env", "id", "state", "broadcasts", "/s"]]
        for ch in c.channels.prefix(rowLimit) {
            let was = before.first { $0.key == ch.key && $0.environment == ch.environment }
            rows.append([cell(ch.key), ch.environment, cell(ch.id ?? "-"), ch.state, "\(ch.broadcasts)", rate(ch.broadcasts, was?.broadcasts, span())])
        }
        var notes: [String] = []
        if c.channels.count > rowLimit { notes.append("  … and \(c.channels.count - rowLimit) more (inspect lists them)") }
        if let error = c.error { notes.append("  error: \(VisibleText.escaped(error, limit: 300))") }
        return Section(heading: "CHANNELS  live \(count("live")), ending \(count("ending")), fallback \(count("fallback"))\(c.truncated ? " (partial)" : "")",
                       tables: rows.count > 1 ? [rows] : [], notes: notes)
    }

    // MARK: Helpers

    /// Seconds between the two readings with a report, nil until there are two.
    private func span() -> Double? {
        guard let p = reports.previous, let c = reports.current else { return nil }
        let s = (c.at - p.at).inSeconds
        return s > 0 ? s : nil
    }

    /// Per second, one decimal; `-` without two readings or when the value went down (a trimmed
    /// or recreated key, a restarted worker).
    private func rate(_ now: Int64?, _ before: Int64?, _ seconds: Double?) -> String {
        guard let now, let before, let seconds, now >= before else { return "-" }
        return format(Double(now - before) / seconds)
    }

    private func add(_ a: Double?, _ b: Double?) -> Double? {
        guard let a, let b else { return nil }
        return a + b
    }

    private func format(_ value: Double?) -> String { value.map { String(format: "%.1f", $0) } ?? "-" }

    private func seconds(_ d: Duration) -> String { String(format: "%.0fs", d.inSeconds) }

    private func age(_ ms: Int64) -> String {
        if ms < 1000 { return "\(ms)ms" }
        if ms < 120_000 { return String(format: "%.1fs", Double(ms) / 1000) }
        if ms < 7_200_000 { return "\(ms / 60_000)m" }
        return "\(ms / 3_600_000)h"
    }

    private func clock() -> String {
        let s = Int(Date().timeIntervalSince1970) % 86_400
        return String(format: "%02d:%02d:%02d UTC", s / 3600, s / 60 % 60, s % 60)
    }

    private func cell(_ text: String) -> String { VisibleText.escaped(text, limit: 80) }

    /// `line` cut to `width` characters (Unicode scalars, the unit cells are escaped in).
    private func fit(_ line: String, _ width: Int) -> String {
        guard line.unicodeScalars.count > width else { return line }
        var out = String.UnicodeScalarView()
        out.append(contentsOf: line.unicodeScalars.prefix(max(width, 0)))
        return String(out)
    }

    /// Columns padded to their widest cell; the header row names the section.
    private func table(_ rows: [[String]]) -> [String] {
        let columns = rows.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, c) in row.enumerated() { widths[i] = max(widths[i], c.unicodeScalars.count) } }
        return rows.enumerated().map { index, row in
            var line = index == 0 ? "" : "  "
            for (i, c) in row.enumerated() {
                line += c
                if i < row.count - 1 { line += String(repeating: " ", count: widths[i] - c.unicodeScalars.count + (index == 0 && i == 0 ? 4 : 2)) }
            }
            return line
        }
    }
}

extension Duration {
    fileprivate var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
