import Foundation
import RedisClient
import Testing
import TestSupport

/// What ships for Prometheus and Grafana (Deploy/prometheus, Deploy/grafana): a real Prometheus
/// scraping a real worker through a match, the alert rules and their unit tests run by promtool,
/// and the dashboard checked against Grafana's structure and the documented metric list.
@Suite(.serialized) struct PrometheusTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let deploy = "\(repository)/Deploy"
    static let job = "activitycast-worker"

    // MARK: - A real Prometheus scrapes a worker

    /// A worker plays the existing metrics test's small match while Prometheus scrapes it every
    /// second with the shipped alert rules loaded: Prometheus's view (its query API) of the entries
    /// equals what was published and of the pushes what the sandbox accepted; the rules evaluate;
    /// a stopped worker shows as down and its alert goes pending; every dashboard query runs.
    @Test func prometheusScrapesAWorkerThroughAMatch() async throws {
        try PrometheusProcess.requireInstalled()
        let ops = OpsEndpointTests()
        let rig = try await SendingRig()
        let (server, sandbox, prefix, redis, env) = (rig.server, rig.sandbox, rig.prefix, rig.redis, rig.env)
        // The rig holds the processes: alive to the end of the test, whatever is used last.
        defer { redis.close(); withExtendedLifetime(rig) {} }
        let (w, port) = try await ops.worker(server, env, name: "prom-a")
        defer { w.removeLogs() }
        let prometheus = try await PrometheusProcess(config: """
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
              evaluation_interval: 1s
            rule_files:
              - \(Self.deploy)/prometheus/alerts.yml
            scrape_configs:
              - job_name: \(Self.job)
                static_configs:
                  - targets: ["127.0.0.1:\(port)"]
            """)
        let started = ContinuousClock.now

        var up: [(labels: [String: String], value: Double)] = []
        #expect(try await eventually(timeout: .seconds(20)) {
            up = try await prometheus.query("up{job=\"\(Self.job)\"}")
            return up.count == 1 && up[0].value == 1
        }, "up: \(up)")
        #expect(up.first?.labels["instance"] == "127.0.0.1:\(port)")

        let reg = "\(prefix):registrations", sports = "\(prefix):feed:sports"
        let (registrations, events) = try await ops.playSmallMatch(redis, prefix: prefix)

        // Entries acknowledged per stream, as Prometheus stored them: what was published.
        var acked: [String: Double] = [:]
        let expected = [reg: Double(registrations), sports: Double(events)]
        #expect(try await eventually(timeout: .seconds(20)) {
            acked = [:]
            // (The slices stream, the worker's own, is left out.)
            for s in try await prometheus.query("activitycast_stream_entries_total{job=\"\(Self.job)\",outcome=\"acked\"}")
            where expected[s.labels["stream"] ?? "?"] != nil {
                acked[s.labels["stream"] ?? "?"] = s.value
            }
            return acked == expected
        }, "Prometheus \(acked), published \(expected)")
        let read = try await prometheus.query("activitycast_stream_entries_read_total{job=\"\(Self.job)\",stream=\"\(sports)\"}")
        #expect(read.map(\.value) == [Double(events)])
        #expect(try await prometheus.query("sum(activitycast_dead_letters_total{job=\"\(Self.job)\"})").map(\.value) == [0])

        // Pushes by kind as Prometheus stored them, against what the sandbox accepted. Coalesced
        // states may still be flushed: compare once both sides agree.
        var last = ("", "")
        var byKind: [String: Int] = [:]
        let agree = try await eventually(timeout: .seconds(60)) {
            let stats = try #require(try await sandbox.get("/sandbox/stats"))
            byKind = [:]
            for s in try await prometheus.query("sum by (kind) (activitycast_pushes_total{job=\"\(Self.job)\",outcome=\"ok\"})") {
                byKind[s.labels["kind"] ?? "?"] = Int(s.value)
            }
            let ours = "token+start \((byKind["token"] ?? 0) + (byKind["start"] ?? 0)) broadcast \(byKind["broadcast"] ?? 0) channel_create \(byKind["channel_create"] ?? 0)"
            let theirs = "token+start \(stats["devicePushes"] as? Int ?? -1) broadcast \(stats["broadcasts"] as? Int ?? -1) channel_create \(stats["channelsCreated"] as? Int ?? -1)"
            last = (ours, theirs)
            return ours == theirs
        }
        #expect(agree, "Prometheus \(last.0), sandbox \(last.1)")
        // Not a trivial agreement: every kind the match sends was counted.
        #expect(byKind["start"] == 1 && (byKind["token"] ?? 0) >= 1 && (byKind["broadcast"] ?? 0) >= 1 && (byKind["channel_create"] ?? 0) >= 1,
                "\(byKind)")
        #expect(try await prometheus.query("activitycast_ready{job=\"\(Self.job)\"}").map(\.value) == [1])

        // The shipped rules loaded and evaluate against real series without errors; none fires
        // for a healthy worker.
        var health: [String: String] = [:]
        #expect(try await eventually(timeout: .seconds(10)) {
            health = [:]
            let data = try await prometheus.api("/api/v1/rules")
            for group in (data as? [String: Any])?["groups"] as? [[String: Any]] ?? [] {
                for rule in group["rules"] as? [[String: Any]] ?? [] {
                    health[rule["name"] as? String ?? "?"] = rule["health"] as? String ?? "?"
                }
            }
            return !health.isEmpty && health.values.allSatisfy { $0 == "ok" }
        }, "\(health)")
        let alerts = try alertNames()
        #expect(health.count == alerts.count, "\(health.keys.sorted())")
        let firing = try await prometheus.query("ALERTS{alertstate=\"firing\"}")
        #expect(firing.isEmpty, "\(firing.map(\.labels))")

        // Every query of the dashboard runs on this Prometheus (the variables as Grafana would
        // substitute them).
        for (panel, expr) in try dashboardQueries() {
            let concrete = expr.replacingOccurrences(of: "$__rate_interval", with: "15s").replacingOccurrences(of: "$job", with: Self.job)
                .replacingOccurrences(of: "$instance", with: ".*")
            do { _ = try await prometheus.query(concrete) } catch { Issue.record("panel \(panel): \(expr): \(error)") }
        }
        // Series the dashboard's main panels show are there.
        for expr in ["max by (stream) (activitycast_stream_lag{job=\"\(Self.job)\"})", "activitycast_budget_flushes_due{job=\"\(Self.job)\"}",
                     "activitycast_redis_round_trips_total{job=\"\(Self.job)\"}",
                     "activitycast_apns_request_duration_seconds_bucket{job=\"\(Self.job)\"}",
                     "activitycast_budget_decisions_total{job=\"\(Self.job)\"}"] {
            #expect(try await prometheus.query(expr).isEmpty == false, "\(expr)")
        }

        // The worker stops: Prometheus sees it down, and the rule for that goes pending.
        #expect(await w.stop() == 0)
        var down: [String] = []
        #expect(try await eventually(timeout: .seconds(15)) {
            down = try await prometheus.query("ALERTS{alertname=\"ActivityCastWorkerDown\"}").map { $0.labels["alertstate"] ?? "?" }
            return try await prometheus.query("up{job=\"\(Self.job)\"}").map(\.value) == [0] && down == ["pending"]
        }, "ActivityCastWorkerDown: \(down)")
        let ran = ContinuousClock.now - started
        print("prometheus scraped the worker for \(ran): entries \(acked), pushes \(byKind)")
        #expect(await prometheus.stop() == 0, "\(prometheus.child.stderr.suffix(500))")
    }

    // MARK: - Alert rules

    /// promtool checks the rules, runs their unit tests, and checks the example configuration;
    /// each alert has a test where it fires and one where it must stay silent.
    @Test func alertRulesPassTheirUnitTests() async throws {
        let dir = "\(Self.deploy)/prometheus"
        for arguments in [["check", "rules", "\(dir)/alerts.yml"], ["test", "rules", "\(dir)/alerts.test.yml"],
                          ["check", "config", "\(dir)/prometheus.yml"]] {
            let (status, output) = try await promtool(arguments)
            #expect(status == 0 && output.contains("SUCCESS"), "promtool \(arguments.joined(separator: " ")) exited \(status.map(String.init) ?? "-"):\n\(output)")
        }
        let (_, output) = try await promtool(["check", "rules", "\(dir)/alerts.yml"])
        let alerts = try alertNames()
        #expect(alerts.count >= 10 && output.contains("SUCCESS: \(alerts.count) rules found"), "\(output)")

        // In the unit tests, an `alertname:` check followed by `exp_alerts:` expects it to fire;
        // one without expects silence.
        let lines = try String(contentsOfFile: "\(dir)/alerts.test.yml", encoding: .utf8).split(separator: "\n")
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        var fires: Set<String> = [], silent: Set<String> = []
        for (i, line) in lines.enumerated() where line.hasPrefix("alertname:") {
            let name = line.dropFirst("alertname:".count).trimmingCharacters(in: .whitespaces)
            if i + 1 < lines.count, lines[i + 1].hasPrefix("exp_alerts:") { fires.insert(name) } else { silent.insert(name) }
        }
        for name in alerts {
            #expect(fires.contains(name), "no unit test where \(name) fires")
            #expect(silent.contains(name), "no unit test where \(name) stays silent")
        }
    }

    // MARK: - Grafana dashboard

    /// The dashboard is a Grafana dashboard (title, uid, schema version, a Prometheus datasource
    /// variable, panels with grid positions and queries on that datasource), its queries are valid
    /// PromQL (promtool), it shows what an operator needs, and every metric and label it and the
    /// alert rules use is one docs/operations.md documents, so renaming a metric breaks this test.
    @Test func dashboardUsesDocumentedMetrics() async throws {
        let dashboard = try loadDashboard()
        #expect((dashboard["title"] as? String)?.isEmpty == false)
        #expect((dashboard["uid"] as? String)?.isEmpty == false)
        #expect(dashboard["schemaVersion"] is Int)
        let variables = (dashboard["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? []
        let datasourceVariable = variables.first { $0["type"] as? String == "datasource" && $0["query"] as? String == "prometheus" }
        let datasource = try #require(datasourceVariable?["name"] as? String, "no datasource variable of type prometheus: \(variables)")
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 10)
        var ids: Set<Int> = []
        var titles: [String] = []
        for panel in panels {
            let title = panel["title"] as? String ?? ""
            #expect(!title.isEmpty, "a panel without a title: \(panel)")
            let id = try #require(panel["id"] as? Int, "\(title): no id")
            #expect(ids.insert(id).inserted, "\(title): id \(id) twice")
            let grid = panel["gridPos"] as? [String: Int] ?? [:]
            #expect(["h", "w", "x", "y"].allSatisfy { grid[$0] != nil } && grid["x", default: 0] + grid["w", default: 0] <= 24, "\(title): gridPos \(grid)")
            if panel["type"] as? String == "row" { continue }
            titles.append(title)
            #expect(["timeseries", "stat", "gauge", "bargauge", "table", "heatmap"].contains(panel["type"] as? String ?? ""), "\(title): type")
            #expect((panel["datasource"] as? [String: Any])?["uid"] as? String == "${\(datasource)}", "\(title): datasource")
            let targets = panel["targets"] as? [[String: Any]] ?? []
            #expect(!targets.isEmpty, "\(title): no targets")
            #expect(Set(targets.compactMap { $0["refId"] as? String }).count == targets.count, "\(title): refIds")
            for target in targets {
                #expect((target["expr"] as? String)?.isEmpty == false, "\(title): a target without expr")
                #expect((target["datasource"] as? [String: Any])?["uid"] as? String == "${\(datasource)}", "\(title): a target's datasource")
            }
        }

        let documented = try documentedMetrics()
        #expect(documented.count >= 30, "the metric table of docs/operations.md was not found: \(documented.keys.sorted())")
        let allowedLabels = documented.values.reduce(into: Set(["job", "instance", "le"])) { $0.formUnion($1.labels) }
        let queries = try dashboardQueries()
        var used: Set<String> = []
        for (panel, expr) in queries {
            for name in metricNames(in: expr) {
                used.insert(name)
                let known = isDocumented(name, documented)
                #expect(known, "panel \(panel) uses \(name), which docs/operations.md does not list")
            }
            for label in labelNames(in: expr) {
                #expect(allowedLabels.contains(label), "panel \(panel) uses label \(label), which no documented metric has")
            }
        }
        let rules = try String(contentsOfFile: "\(Self.deploy)/prometheus/alerts.yml", encoding: .utf8)
        for name in metricNames(in: rules) {
            let known = isDocumented(name, documented)
            #expect(known, "alerts.yml uses \(name), which docs/operations.md does not list")
        }
        for label in labelNames(in: rules) {
            #expect(allowedLabels.contains(label), "alerts.yml uses label \(label), which no documented metric has")
        }

        // What an operator needs on it (issue 13).
        let needed = ["activitycast_stream_lag", "activitycast_stream_pending", "activitycast_stream_oldest_pending_seconds",
                      "activitycast_stream_entries_total", "activitycast_dead_letters_total", "activitycast_pushes_total",
                      "activitycast_apns_request_duration_seconds_bucket", "activitycast_budget_decisions_total",
                      "activitycast_budget_flushes_due", "activitycast_budget_flushes_overdue", "activitycast_ready",
                      "activitycast_redis_round_trips_total", "activitycast_redis_errors_total", "up"]
        for name in needed {
            let shown = used.contains(name)
            #expect(shown, "the dashboard does not show \(name)")
        }

        // Valid PromQL: every query as a recording rule, checked by promtool.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var file = "groups:\n  - name: dashboard\n    rules:\n"
        for (i, (_, expr)) in queries.enumerated() {
            let concrete = expr.replacingOccurrences(of: "$__rate_interval", with: "1m").replacingOccurrences(of: "$job", with: Self.job)
                .replacingOccurrences(of: "$instance", with: ".*")
            let quoted = String(data: try JSONSerialization.data(withJSONObject: [concrete], options: .withoutEscapingSlashes), encoding: .utf8)!.dropFirst().dropLast()
            file += "      - record: dashboard:query_\(i)\n        expr: \(quoted)\n"
        }
        try file.write(toFile: "\(dir.path)/dashboard-rules.yml", atomically: true, encoding: .utf8)
        let (status, output) = try await promtool(["check", "rules", "\(dir.path)/dashboard-rules.yml"])
        #expect(status == 0 && output.contains("SUCCESS: \(queries.count) rules found"), "\(output)")
    }

    // MARK: - Helpers

    /// Runs promtool; fails with what to install when it is missing.
    func promtool(_ arguments: [String]) async throws -> (Int32?, String) {
        let path = "/usr/bin/promtool"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw RedisServerError(description: "\(path) not found: install Debian's prometheus package (scripts/install-deps.sh does)")
        }
        let child = try ChildProcess(executable: path, arguments: arguments, logName: "promtool")
        defer { child.removeLogs() }
        let status = await child.waitForExit(timeout: .seconds(60))
        if status == nil { await child.stop() }
        return (status, child.stdout + child.stderr)
    }

    /// The alerts of Deploy/prometheus/alerts.yml.
    func alertNames() throws -> [String] {
        try String(contentsOfFile: "\(Self.deploy)/prometheus/alerts.yml", encoding: .utf8).split(separator: "\n").compactMap { line in
            let t = line.trimmingCharacters(in: .whitespaces)
            return t.hasPrefix("- alert:") ? t.dropFirst("- alert:".count).trimmingCharacters(in: .whitespaces) : nil
        }
    }

    func loadDashboard() throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: "\(Self.deploy)/grafana/activitycast-workers.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "the dashboard is not a JSON object")
    }

    /// Every query of the dashboard: (panel title, expr).
    func dashboardQueries() throws -> [(String, String)] {
        var out: [(String, String)] = []
        func walk(_ panels: [[String: Any]]) {
            for panel in panels {
                for target in panel["targets"] as? [[String: Any]] ?? [] {
                    if let expr = target["expr"] as? String { out.append((panel["title"] as? String ?? "?", expr)) }
                }
                walk(panel["panels"] as? [[String: Any]] ?? [])  // a collapsed row holds its panels
            }
        }
        walk(try loadDashboard()["panels"] as? [[String: Any]] ?? [])
        return out
    }

    /// The metric table of docs/operations.md's `/metrics` section: name → (type, labels).
    func documentedMetrics() throws -> [String: (type: String, labels: Set<String>)] {
        let text = try String(contentsOfFile: "\(Self.repository)/docs/operations.md", encoding: .utf8)
        var out: [String: (type: String, labels: Set<String>)] = [:]
        var inSection = false
        for line in text.split(separator: "\n") {
            if line.hasPrefix("#") { inSection = line.hasPrefix("### `/metrics`"); continue }
            guard inSection, line.hasPrefix("| `") else { continue }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 4 else { continue }
            let labels = Set(backticked(cells[3]))
            for name in backticked(cells[1]) { out[name] = (cells[2], labels) }
        }
        return out
    }

    func backticked(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// A documented name, a histogram's `_bucket`, `_sum` or `_count` series, or Prometheus's own
    /// `up`.
    func isDocumented(_ name: String, _ documented: [String: (type: String, labels: Set<String>)]) -> Bool {
        if name == "up" || documented[name] != nil { return true }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            if documented[String(name.dropLast(suffix.count))]?.type == "histogram" { return true }
        }
        return false
    }

    /// The `activitycast_…` metric names in a text, and `up`.
    func metricNames(in text: String) -> Set<String> {
        var names: Set<String> = []
        let regex = try! Regex("activitycast_[a-z0-9_]+")
        for match in text.matches(of: regex) { names.insert(String(text[match.range])) }
        if text.contains("up{") { names.insert("up") }
        return names
    }

    /// Label names in `by (…)`, `without (…)`, `on (…)`, `ignoring (…)` and in matchers.
    func labelNames(in text: String) -> Set<String> {
        var names: Set<String> = []
        for match in text.matches(of: try! Regex(#"\b(?:by|without|on|ignoring) \(([a-z_, ]*)\)"#)) {
            let list = String(text[match.range]).split(separator: "(", maxSplits: 1).last ?? ""
            for label in list.dropLast().split(separator: ",") { names.insert(label.trimmingCharacters(in: .whitespaces)) }
        }
        for match in text.matches(of: try! Regex(#"[{,]\s*([a-z_]+)\s*(?:=~|!~|!=|=)\s*""#)) {
            let s = String(text[match.range]).dropFirst().trimmingCharacters(in: .whitespaces)
            names.insert(String(s.prefix { $0.isLetter || $0 == "_" }))
        }
        names.remove("")
        return names
    }
}
