import APNs
import ActivityCastCore
import ActivityCastSend
import CoreMetrics
import Prometheus
import RedisClient
import Synchronization

/// The worker's metrics in the Prometheus text format, made at scrape time from the counters the
/// worker keeps anyway (`WorkerStats`, `SendStats`, the Redis connections' counters) and from the
/// group monitor's last view: the hot path pays nothing for them beyond its atomics.
///
/// The values go through swift-metrics handles (`Counter`, `Gauge`) made by a
/// `PrometheusMetricsFactory` on a registry of this worker's own (no global bootstrap), and the
/// registry writes the text. A counter handle is advanced by the difference since the last scrape,
/// so it stays monotonic. Every label takes values from a bounded set: stream names from the
/// settings, kinds, outcomes (Apple's reasons are a fixed list), audiences — never a token, a
/// device, a key or an entry id.
final class WorkerMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    private struct State {
        var counters: [String: (handle: CoreMetrics.Counter, last: Int)] = [:]
        var gauges: [String: CoreMetrics.Gauge] = [:]
    }

    private let state = Mutex(State())

    init() {
        factory = PrometheusMetricsFactory(registry: registry)
    }

    /// What a scrape reads besides the worker's counters.
    struct Inputs {
        var streams: [String: GroupMonitor.StreamView]
        var ready: Bool
        var sinceProgress: Double
        var inFlight: Int
        /// The fleet's schedule of coalesced states: members, and those past due.
        var schedule: (due: Int64, overdue: Int64)? = nil
        /// The fleet's channels by state (`GroupMonitor.lastChannels`).
        var channels: [(state: String, count: Int64)]? = nil
        /// Redis's memory (`GroupMonitor.lastMemory`).
        var redisMemory: RedisMemory? = nil
    }

    /// The exposition text, after bringing every series up to date. Scrapes are serialised, so
    /// that deltas are taken once.
    func render(worker: Worker, inputs: Inputs) -> [UInt8] {
        state.withLock { state in
            var r = Recorder(state: state, factory: factory)
            r.streams(worker, inputs)
            if let sends = worker.sender?.stats { r.sends(sends) }
            let clients = worker.apns?.clients ?? []
            r.apns(clients)
            r.redisAndHealth(worker, inputs)
            state = r.state
            var text = registry.emitToBuffer()
            if !clients.isEmpty {
                var lanes: [Int: RequestDurations] = [:]
                for client in clients {
                    for (priority, h) in client.stats.requestDurations { lanes[priority, default: RequestDurations()].add(h) }
                }
                text += Self.histogram("activitycast_apns_request_duration_seconds",
                                       help: "Time from a request's submission on an APNs connection to its complete answer",
                                       label: "priority", lanes.sorted { $0.key > $1.key }.map { (String($0.key), $0.value) })
            }
            return text
        }
    }

    /// Brings the series of one scrape up to date: a counter by its growth since the last
    /// scrape, a gauge to its value.
    private struct Recorder {
        var state: State
        let factory: PrometheusMetricsFactory

        mutating func counter(_ name: String, _ labels: [(String, String)] = [], _ value: Int) {
            let key = name + labels.map { "|\($0.0)=\($0.1)" }.joined()
            if state.counters[key] == nil {
                state.counters[key] = (CoreMetrics.Counter(label: name, dimensions: labels, factory: factory), 0)
            }
            let delta = value - state.counters[key]!.last
            guard delta > 0 else { return }
            state.counters[key]!.handle.increment(by: delta)
            state.counters[key]!.last = value
        }

        mutating func gauge(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            let key = name + labels.map { "|\($0.0)=\($0.1)" }.joined()
            let handle = state.gauges[key] ?? CoreMetrics.Gauge(label: name, dimensions: labels, factory: factory)
            state.gauges[key] = handle
            handle.record(value)
        }

        /// Streams: how entries ended, and the group's view.
        mutating func streams(_ worker: Worker, _ inputs: Inputs) {
            let stats = worker.stats
            let repaired = stats.textRepaired.withLock { $0 }
            for reason in FreeText.Repair.allCases {
                counter("activitycast_text_repaired_total", [("reason", reason.rawValue)], repaired[reason] ?? 0)
            }
            for (stream, c) in stats.streams.sorted(by: { $0.key < $1.key }) {
                counter("activitycast_stream_entries_read_total", [("stream", stream)], c.read.load(ordering: .relaxed))
                for (outcome, n) in c.byOutcome {
                    counter("activitycast_stream_entries_total", [("stream", stream), ("outcome", outcome)], n)
                }
                counter("activitycast_dead_letters_total", [("stream", stream)], c.deadLettered.load(ordering: .relaxed))
                counter("activitycast_stream_entries_misplaced_total", [("stream", stream)], c.misplaced.load(ordering: .relaxed))
            }
            for (stream, view) in inputs.streams {
                gauge("activitycast_stream_lag", [("stream", stream)], view.lag.map(Double.init) ?? .nan)
                gauge("activitycast_stream_pending", [("stream", stream)], Double(view.pending))
                gauge("activitycast_stream_oldest_pending_seconds", [("stream", stream)], view.oldestPendingSeconds)
            }
            for (stream, n) in worker.trimmer?.removed.withLock({ $0 }) ?? [:] {
                counter("activitycast_stream_entries_trimmed_total", [("stream", stream)], n)
            }
            counter("activitycast_plans_total", [], stats.plans.load(ordering: .relaxed))
            gauge("activitycast_entries_in_flight", [], Double(inputs.inFlight))
            if let schedule = inputs.schedule {
                gauge("activitycast_budget_flushes_due", [], Double(schedule.due))
                gauge("activitycast_budget_flushes_overdue", [], Double(schedule.overdue))
            }
            for (state, count) in inputs.channels ?? [] { gauge("activitycast_channels", [("state", state)], Double(count)) }
            if let m = inputs.redisMemory {
                gauge("activitycast_redis_used_memory_bytes", [], Double(m.used))
                gauge("activitycast_redis_maxmemory_bytes", [], Double(m.max))
            }
        }

        mutating func sends(_ sends: SendStats) {
            for (key, n) in sends.byOutcomeAndPriority {
                let parts = key.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
                guard parts.count == 3 else { continue }
                counter("activitycast_pushes_total", [("kind", parts[0]), ("outcome", parts[1]), ("priority", parts[2])], n)
            }
            for (key, n) in sends.budgetDecisions {
                let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { continue }
                counter("activitycast_budget_decisions_total", [("audience", parts[0]), ("outcome", parts[1])], n)
            }
            counter("activitycast_fanouts_total", [], sends.fanouts.load(ordering: .relaxed))
            counter("activitycast_fanout_slices_total", [("outcome", "finished")], sends.slicesFinished.load(ordering: .relaxed))
            counter("activitycast_fanout_slices_total", [("outcome", "superseded")], sends.slicesSuperseded.load(ordering: .relaxed))
            counter("activitycast_fanout_tokens_resent_total", [], sends.tokensResent.load(ordering: .relaxed))
            counter("activitycast_fanout_tokens_waited_total", [], sends.tokensWaited.load(ordering: .relaxed))
            counter("activitycast_tokens_forgotten_total", [], sends.tokensForgotten.load(ordering: .relaxed))
            counter("activitycast_send_failures_total", [], sends.failedTokens.load(ordering: .relaxed))
            counter("activitycast_channel_fallbacks_total", [], sends.channelFallbacks.load(ordering: .relaxed))
            counter("activitycast_events_stale_total", [], sends.stale.load(ordering: .relaxed))
            counter("activitycast_events_after_end_total", [], sends.afterEnd.load(ordering: .relaxed))
            counter("activitycast_tokens_past_lifetime_total", [], sends.tokensPastLifetime.load(ordering: .relaxed))
            counter("activitycast_activities_relaunched_total", [], sends.relaunched.load(ordering: .relaxed))
            counter("activitycast_relaunches_skipped_total", [], sends.relaunchesSkipped.load(ordering: .relaxed))
            counter("activitycast_tokens_caught_up_total", [], sends.caughtUp.load(ordering: .relaxed))
            counter("activitycast_catch_ups_skipped_total", [], sends.catchUpsSkipped.load(ordering: .relaxed))
            counter("activitycast_text_trimmed_to_fit_total", [], sends.textTrimmedToFit.load(ordering: .relaxed))
            counter("activitycast_pushes_resent_quietly_total", [], sends.quietResends.load(ordering: .relaxed))
            counter("activitycast_starts_unknown_fate_total", [], sends.startsUnknownFate.load(ordering: .relaxed))
            counter("activitycast_starts_over_budget_total", [], sends.startsOverBudget.load(ordering: .relaxed))
            counter("activitycast_rate_guard_waits_total", [], sends.rateWaits.load(ordering: .relaxed))
        }

        /// APNs connections, summed over the worker's clients (pushes and channel management).
        mutating func apns(_ clients: [APNsClient]) {
            guard !clients.isEmpty else { return }
            let apns = clients.map(\.stats.snapshot)
            func sum(_ f: (APNsClientStats.Snapshot) -> Int) -> Int { apns.reduce(0) { $0 + f($1) } }
            gauge("activitycast_apns_connections", [], Double(clients.reduce(0) { $0 + $1.stats.openConnections }))
            counter("activitycast_apns_connects_total", [], sum(\.connects))
            counter("activitycast_apns_connections_lost_total", [], sum(\.connectionsLost))
            counter("activitycast_apns_goaways_total", [], sum(\.goAways))
            counter("activitycast_apns_unknown_fate_total", [], sum(\.unknownFate))
            counter("activitycast_apns_request_timeouts_total", [], sum(\.timeouts))
            counter("activitycast_apns_requests_retried_total", [], sum(\.retried))
            counter("activitycast_apns_provider_token_refreshes_total", [], sum(\.tokenRefreshes))
            // Each client that can't use APNs now: since when (epoch seconds), and why in a word.
            for client in clients {
                let endpoint = "\(client.configuration.endpoint)"
                let trouble = client.stats.trouble
                for why in APNsTrouble.whys {
                    gauge("activitycast_apns_unusable", [("endpoint", endpoint), ("why", why)], trouble?.why == why ? 1 : 0)
                }
                gauge("activitycast_apns_unusable_since_seconds", [("endpoint", endpoint)], trouble.map { Double($0.sinceMillis) / 1000 } ?? 0)
            }
        }

        /// Redis (the reading and the command connections), and health as the probes see it.
        mutating func redisAndHealth(_ worker: Worker, _ inputs: Inputs) {
            let redis = worker.redisStats
            counter("activitycast_redis_round_trips_total", [], redis.roundTrips)
            counter("activitycast_redis_commands_total", [], redis.commands)
            counter("activitycast_redis_connects_total", [], redis.connects)
            counter("activitycast_redis_errors_total", [], redis.failures)
            gauge("activitycast_ready", [], inputs.ready ? 1 : 0)
            gauge("activitycast_draining", [], worker.isStopping ? 1 : 0)
            gauge("activitycast_read_loop_idle_seconds", [], inputs.sinceProgress)
        }
    }

    /// A histogram in the text format, one series per label value: cumulative `_bucket`s with
    /// `le` bounds, `_sum` in seconds and `_count`.
    static func histogram(_ name: String, help: String, label: String, _ series: [(String, RequestDurations)]) -> [UInt8] {
        var out = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        for (value, h) in series {
            var cumulative = 0
            for (i, bound) in RequestDurations.bounds.enumerated() {
                cumulative += h.counts[i]
                out += "\(name)_bucket{\(label)=\"\(value)\",le=\"\(bound)\"} \(cumulative)\n"
            }
            out += "\(name)_bucket{\(label)=\"\(value)\",le=\"+Inf\"} \(h.count)\n"
            out += "\(name)_sum{\(label)=\"\(value)\"} \(Double(h.sumNanos) / 1e9)\n"
            out += "\(name)_count{\(label)=\"\(value)\"} \(h.count)\n"
        }
        return Array(out.utf8)
    }
}
