import ActivityCastCore
import ActivityCastSend
import Foundation
import RedisClient
import Yams

/// Everything a worker (and `inspect`/`publish`) is configured with. Sources, later ones winning:
/// built-in defaults, the YAML file (`--config` or `ACTIVITYCAST_CONFIG`), environment variables
/// `ACTIVITYCAST_<KEY>` (the key upper-cased, dots as underscores: `worker.batch_size` is
/// `ACTIVITYCAST_WORKER_BATCH_SIZE`), then command-line flags. See docs/configuration.md.
public struct Settings: Sendable {
    public struct Feed: Sendable, Equatable {
        public var kind: StreamKind
        public var stream: String
        /// Set when the feed is sharded (`streams.shards` > 1): each shard is a feed of its own
        /// here (read, trimmed, inspected as one), and this says which (`FeedShards`).
        public var shard: Shard?
        public init(kind: StreamKind, stream: String, shard: Shard? = nil) { self.kind = kind; self.stream = stream; self.shard = shard }

        public struct Shard: Sendable, Equatable {
            /// The feed's name as configured (its shards' streams are `<feed>:{<index>}`).
            public var feed: String
            public var index: Int
            public var count: Int
        }
    }

    public var redisURL: RedisURL
    public var connectTimeout: Duration
    public var commandTimeout: Duration
    public var prefix: String
    public var group: String
    public var registrationsStream: String
    public var deadLetterStream: String
    /// Approximate cap on the dead-letter stream's length (`XADD … MAXLEN ~`): the oldest dead
    /// letters are trimmed (`streams.dead_letter_max_len`, 100…100,000,000, default 100,000).
    public var deadLetterMaxLength: Int
    /// What the workers keep of the streams they read once every group acknowledged it
    /// (`streams.retention_ms`, `streams.retention_entries`, `streams.trim_interval_ms`).
    public var retention = StreamRetention()
    public var feeds: [Feed]
    /// Empty: `<hostname>-<pid>`, unique per process.
    public var consumer: String
    public var batchSize: Int
    public var block: Duration
    public var maxInFlight: Int
    public var visibilityTimeout: Duration
    public var claimInterval: Duration
    public var maxDeliveries: Int
    public var shutdownDeadline: Duration
    /// Send the pushes each feed event plans (true), or only log the plans (false: no APNs needed).
    public var send: Bool
    /// Push-to-start requests per second per event (paced, not burst).
    public var startsPerSecond: Int
    /// Fan-out: tokens per slice, tokens per step of a slice, a batch's lease, and how many
    /// slices one worker takes at once (`fanout.*`).
    public var sliceSize: Int = 4096
    public var sliceBatch: Int = 256
    public var sliceLease: Duration = .seconds(10)
    /// Slices of priority-10 fan-outs one worker sends at once (`fanout.slices_in_hand`).
    public var slicesInHand: Int = 4
    /// Slices of priority-5 fan-outs (routine updates, budget flushes) one worker sends at once,
    /// beside the priority-10 ones (`fanout.priority5_slices_in_hand`).
    public var priority5SlicesInHand: Int = 4
    /// Slices of fan-outs at `priority` one worker may hold.
    public func slicesInHand(priority: Int) -> Int { priority >= 10 ? slicesInHand : priority5SlicesInHand }
    /// How long a feed batch's acknowledgement may wait for others to share its round trip
    /// (`AcknowledgementQueue`); zero sends each at once.
    public var ackDelay: Duration = .milliseconds(2)
    /// Attempts a fan-out makes per token for retryable answers (`fanout.token_attempts`).
    public var tokenAttempts: Int = 16
    /// Priority-10 budgets per audience and push-to-start per device (`budgets.*`,
    /// docs/budgets.md); checked with `BudgetPolicy.problems` at load.
    public var budgets: BudgetPolicy = .default
    public var limits: DecodeLimits
    /// How far an entry's `ts` may be ahead of Redis's clock when it was added (its id's time):
    /// a later one is dead-lettered, since every later event of its key would be older than it
    /// (`limits.max_future_ms`).
    public var maxFutureMillis: Int64 = 300_000
    /// How long a Live Activity takes updates after it began (`ttl.activity_active_s`): Apple's
    /// system ends one after 8 hours active.
    public var activityActiveSeconds = 28_800
    /// Whether an activity past `activityActiveSeconds` is started again by push-to-start while
    /// its key is live (`worker.relaunch_past_lifetime`, off by default).
    public var relaunchPastLifetime = false
    /// About how many entries `<prefix>:outcomes` keeps (`streams.outcomes_max_len`); 0: not written.
    public var outcomesMaxLength = 100_000
    /// Records a key's trail keeps (`trace.max_records`; 0: no trail), and how long it outlives
    /// the key's end or last record (`trace.retention_s`).
    public var traceMaxRecords = 20_000
    public var traceRetentionSeconds = 86_400
    public var activityTTLSeconds: Int
    public var deviceTTLSeconds: Int
    public var logLevel: String
    public var logFormat: String
    /// Where the worker serves `/metrics`, `/healthz` and `/readyz` (`ops.listen`); nil: off.
    public var opsListen: OpsListen? = OpsListen(host: "127.0.0.1", port: 9464)
    /// `activitycast console` (`console.*`).
    public var console = ConsoleSettings()
    public var apns: APNsSettings
    /// The route file of each feed (`routes.sports`, `routes.transit`); nil: the built-in routes.
    /// Read by `loadRoutes()`, which the worker calls at start.
    public var sportsRoutesFile: String? = nil
    public var transitRoutesFile: String? = nil
    /// Problems that did not stop loading but that the operator should see, e.g. an
    /// `ACTIVITYCAST_*` variable that is no setting (a misspelt `ACTIVITYCAST_WORKER_BATCH_SIZE`):
    /// commands log each at start.
    public var warnings: [String] = []

    /// The streams the worker reads, registrations first, each with its kind.
    public var inputStreams: [Feed] {
        [Feed(kind: .registrations, stream: registrationsStream)] + feeds
    }

    public var redisConfiguration: RedisConfiguration {
        RedisConfiguration(url: redisURL, connectTimeout: connectTimeout, commandTimeout: commandTimeout)
    }

    public var keys: RedisKeys { RedisKeys(prefix: prefix) }
}

/// A setting that is wrong: which key, where it came from, and why.
public struct SettingsError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

public enum SettingsLoader {
    /// Every key the file may contain, with its default (nil: derived or required elsewhere).
    static let known: [(key: String, help: String)] = [
        ("redis.url", "redis://127.0.0.1:6379"),
        ("redis.connect_timeout_ms", "3000"),
        ("redis.command_timeout_ms", "5000"),
        ("prefix", "ac"),
        ("group", "activitycast"),
        ("streams.registrations", "<prefix>:registrations"),
        ("streams.dead_letter", "<prefix>:deadletter"),
        ("streams.dead_letter_max_len", "100000"),
        ("streams.outcomes_max_len", "100000"),
        ("streams.retention_ms", "60000"),
        ("streams.retention_entries", "10000"),
        ("streams.trim_interval_ms", "10000"),
        ("streams.feeds", "sports=<prefix>:feed:sports,transit=<prefix>:feed:transit"),
        ("streams.shards", "1"),
        ("worker.consumer", "<hostname>-<pid>"),
        ("worker.batch_size", "256"),
        ("worker.block_ms", "1000"),
        ("worker.max_in_flight", "4096"),
        ("worker.visibility_timeout_ms", "30000"),
        ("worker.claim_interval_ms", "5000"),
        ("worker.max_deliveries", "5"),
        ("worker.shutdown_deadline_ms", "10000"),
        ("worker.send", "true"),
        ("worker.starts_per_second", "500"),
        ("worker.ack_delay_ms", "2"),
        ("worker.relaunch_past_lifetime", "false"),
        ("fanout.slice_size", "4096"),
        ("fanout.batch", "256"),
        ("fanout.lease_ms", "10000"),
        ("fanout.slices_in_hand", "4"),
        ("fanout.priority5_slices_in_hand", "4"),
        ("fanout.token_attempts", "16"),
    ] + budgetKeys + [
        ("limits.max_fields", "64"),
        ("limits.max_value_bytes", "1024"),
        ("limits.max_entry_bytes", "8192"),
        ("limits.max_text_bytes", "256"),
        ("limits.max_future_ms", "300000"),
        ("ttl.activity_s", "43200"),
        ("ttl.activity_active_s", "28800"),
        ("ttl.device_s", "7776000"),
        ("trace.max_records", "20000"),
        ("trace.retention_s", "86400"),
        ("log.level", "info"),
        ("log.format", "text"),
        ("ops.listen", "127.0.0.1:9464"),
        ("console.listen", "127.0.0.1:9310"),
        ("console.allow_actions", "false"),
        ("console.metrics", "(none: the workers' /metrics URLs, comma-separated)"),
        ("console.metrics_service", "(none: a headless Service's host:port, each of its addresses a worker's ops port)"),
        ("console.refresh_ms", "3000"),
        ("console.token", "(secret; ACTIVITYCAST_CONSOLE_TOKEN, or --token-file)"),
        ("apns.endpoint", "sandbox (127.0.0.1:2197)"),
        ("apns.channels_endpoint", "the push endpoint's channel host"),
        ("apns.bundle_id", "com.example.activitycast"),
        ("apns.team_id", "SANDBOXTM1 with the sandbox"),
        ("apns.key_id", "SANDBOXK01 with the sandbox"),
        ("apns.key_file", "<sandbox.dir>/AuthKey_SANDBOXK01.p8 with the sandbox"),
        ("apns.key", "(PEM text; ACTIVITYCAST_APNS_KEY)"),
        ("apns.ca_file", "<sandbox.dir>/cert.pem with the sandbox, else system CAs"),
        ("apns.verify", "true"),
        ("apns.connections", "2"),
        ("apns.max_concurrent_streams", "1000"),
        ("apns.request_timeout_ms", "30000"),
        ("apns.rate_per_second", "0"),
        ("apns.priority5_in_flight", "a quarter of connections × max_concurrent_streams"),
        ("apns.rate_burst", "the rate"),
        ("sandbox.dir", ".activitycast/sandbox"),
        ("sandbox.listen", "127.0.0.1:2197"),
        ("routes.sports", "the built-in routes (activitycast routes show sports)"),
        ("routes.transit", "the built-in routes (activitycast routes show transit)"),
    ]

    /// The `budgets.*` audiences, as the settings name them, with their defaults.
    static let budgetAudiences: [(name: String, defaults: AudiencePolicy)] = [
        ("standard", BudgetPolicy.default.standard), ("frequent", BudgetPolicy.default.frequent),
        ("channel_no_storage", BudgetPolicy.default.channelNoStorage),
        ("channel_latest_message", BudgetPolicy.default.channelLatestMessage),
    ]

    /// The `budgets.*` keys with their defaults, taken from `BudgetPolicy.default` so the two
    /// can't disagree.
    static let budgetKeys: [(key: String, help: String)] = budgetAudiences.flatMap { a in [
        ("budgets.\(a.name).capacity", "\(a.defaults.bucket.capacity)"),
        ("budgets.\(a.name).refill_per_hour", "\(a.defaults.bucket.refillPerHour)"),
        ("budgets.\(a.name).spacing_ms", "\(a.defaults.minSpacingMillis)"),
        ("budgets.\(a.name).end_reserve", "\(a.defaults.endReserve)"),
    ] } + [
        ("budgets.start.capacity", "\(BudgetPolicy.default.pushToStart.capacity)"),
        ("budgets.start.refill_per_hour", "\(BudgetPolicy.default.pushToStart.refillPerHour)"),
    ]

    /// Every setting's key (`worker.batch_size`), in the order docs/configuration.md lists them.
    public static var settingNames: [String] { known.map(\.key) }

    public static func environmentName(_ key: String) -> String {
        "ACTIVITYCAST_" + key.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    /// `ACTIVITYCAST_*` variables that are read elsewhere and are no settings: the configuration
    /// file's path, and the knobs of the opt-in benchmarks among the tests
    /// (Tests/APNsSandboxTests/SandboxBench.swift, Tests/HTTP2KitTests/BenchmarkTests.swift).
    public static let otherVariables: Set<String> = [
        "ACTIVITYCAST_CONFIG",
        "ACTIVITYCAST_SANDBOX_BENCH", "ACTIVITYCAST_SANDBOX_BENCH_ROUNDS", "ACTIVITYCAST_SANDBOX_BENCH_THREADS",
        "ACTIVITYCAST_SANDBOX_BENCH_TOKENS", "ACTIVITYCAST_SANDBOX_BENCH_FANOUT_TOKENS",
        "ACTIVITYCAST_H2_BENCH", "ACTIVITYCAST_H2_BENCH_REQUESTS",
        // Tests: run the suites that take a `RedisServer` on a cluster of N primaries.
        "ACTIVITYCAST_TEST_REDIS_CLUSTER",
        // Test-only failpoint (EntryProcessor): crash on an entry with this field value.
        "ACTIVITYCAST_FAILPOINT_CRASH_ON",
        // Test-only failpoint (EntryProcessor): wait before sending a redelivered entry.
        "ACTIVITYCAST_FAILPOINT_PAUSE_REDELIVERED_MS",
        // Test-only: a compressed clock for budget decisions (BudgetClock).
        "ACTIVITYCAST_TEST_BUDGET_CLOCK",
        // Tests keep their children's log files (TestSupport's ChildProcess.removeLogs).
        "ACTIVITYCAST_TEST_KEEP_LOGS",
    ]

    /// One warning per `ACTIVITYCAST_*` variable that is neither a setting nor one of
    /// `otherVariables`, with the closest known name when it is near: a misspelt variable would
    /// otherwise be ignored without a word. Only names are shown, never values (they may be keys).
    public static func unknownVariables(in environment: [String: String]) -> [String] {
        let settingNames = known.map { environmentName($0.key) }
        let all = Set(settingNames).union(otherVariables)
        return environment.keys.filter { $0.hasPrefix("ACTIVITYCAST_") && !all.contains($0) }.sorted().map { name in
            let close = (settingNames + otherVariables.sorted()).min { distance($0, name) < distance($1, name) }
            let hint = close.map { distance($0, name) <= 3 ? " (did you mean \($0)?)" : "" } ?? ""
            return "environment variable \(VisibleText.escaped(name, limit: 100)) is not a setting and is ignored\(hint)"
        }
    }

    /// Loads and validates. `overrides` are command-line values by key (e.g. `redis.url`).
    public static func load(file: String?, environment: [String: String] = ProcessInfo.processInfo.environment,
                            overrides: [String: String] = [:]) throws -> Settings {
        var raw: [String: (value: String, source: String)] = [:]
        let path = file ?? environment["ACTIVITYCAST_CONFIG"]
        if let path, !path.isEmpty {
            for (key, value) in try flatten(yaml: try readFile(path), file: path) { raw[key] = (value, path) }
        }
        for (key, _) in known {
            let name = environmentName(key)
            if let value = environment[name] { raw[key] = (value, name) }
        }
        for (key, value) in overrides { raw[key] = (value, "the command line") }
        var settings = try build(raw)
        settings.warnings += unknownVariables(in: environment)
        return settings
    }

    /// A configuration file is never larger than this; more means the path names something else.
    static let maxFileBytes = 1 << 20

    /// The text of the configuration file at `path`, or an error in the operator's terms: the
    /// system's reason when it can't be opened or read (`No such file or directory`, `Permission
    /// denied`), and plain words for a directory, something too large, or bytes that are not
    /// UTF-8. An empty file (or `/dev/null`) is an empty text: no settings.
    static func readFile(_ path: String, noun: String = "configuration file") throws -> String {
        func failure(_ why: String) -> SettingsError { SettingsError(description: "cannot read the \(noun) \(path): \(why)") }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure(String(cString: strerror(errno))) }
        defer { close(fd) }
        var info = stat()
        if fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
            throw SettingsError(description: "\(path) is a directory, not a \(noun)")
        }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw failure(String(cString: strerror(errno)))
            }
            if n == 0 { break }
            bytes += buffer[..<n]
            // Bounded, so /dev/zero or a log file given by mistake can't fill the memory.
            if bytes.count > maxFileBytes { throw SettingsError(description: "\(path) is larger than 1 MB, not a \(noun)") }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw SettingsError(description: "\(path) is not UTF-8 text, not a \(noun)")
        }
        return text
    }

    /// Reads YAML into dotted keys. Nested mappings become `a.b`; the feed list may be a sequence
    /// of `{kind, stream}` mappings. A null value (`worker:` with nothing under it, `prefix: ~`)
    /// is an empty section or a setting not set.
    static func flatten(yaml: String, file: String) throws -> [(String, String)] {
        let node: Node?
        do { node = try Yams.compose(yaml: yaml) } catch {
            throw SettingsError(description: "\(file) is not valid YAML: \(error)")
        }
        guard let node else { return [] }
        guard let root = node.mapping else { throw SettingsError(description: "\(file): the top level must be a mapping of settings") }
        var out: [(String, String)] = []
        let knownKeys = Set(known.map(\.key))
        func walk(_ mapping: Node.Mapping, prefix: String) throws {
            for (k, v) in mapping {
                guard let name = k.string else { throw SettingsError(description: "\(file): keys must be strings") }
                let key = prefix.isEmpty ? name : "\(prefix).\(name)"
                if v.null != nil {
                    guard knownKeys.contains(key) || sections.contains(key) else { throw unknownKey(key, file: file) }
                    continue
                }
                if key == "streams.feeds", let list = v.sequence {
                    var parts: [String] = []
                    for item in list {
                        guard let m = item.mapping, let kind = m["kind"]?.string, let stream = m["stream"]?.string, m.count == 2 else {
                            throw SettingsError(description: "\(file): streams.feeds: each feed needs exactly 'kind' and 'stream'")
                        }
                        parts.append("\(kind)=\(stream)")
                    }
                    out.append((key, parts.joined(separator: ",")))
                } else if let m = v.mapping {
                    // Checked here too, or an empty mapping under a misspelt section would pass.
                    guard sections.contains(key) else { throw unknownKey(key, file: file) }
                    try walk(m, prefix: key)
                } else if let s = v.scalar?.string {
                    guard knownKeys.contains(key) else { throw unknownKey(key, file: file) }
                    out.append((key, s))
                } else {
                    throw SettingsError(description: "\(file): \(key) must be a single value")
                }
            }
        }
        try walk(root, prefix: "")
        return out
    }

    /// The sections of the file: `redis`, `streams`, `worker`, … and, for deeper keys, every level
    /// above them (`budgets` and `budgets.standard` for `budgets.standard.capacity`).
    static let sections: Set<String> = Set(known.flatMap { entry in
        entry.key.indices.filter { entry.key[$0] == "." }.map { String(entry.key[..<$0]) }
    })

    static func unknownKey(_ key: String, file: String) -> SettingsError {
        let close = (known.map(\.key) + sections.sorted()).min { distance($0, key) < distance($1, key) }
        let hint = close.map { distance($0, key) <= 3 ? " (did you mean \($0)?)" : "" } ?? ""
        return SettingsError(description: "\(file): unknown setting '\(shown(key))'\(hint)")
    }

    static func build(_ raw: [String: (value: String, source: String)]) throws -> Settings {
        func wrong(_ key: String, _ why: String) -> SettingsError {
            let source = raw[key]?.source ?? "the defaults"
            return SettingsError(description: "setting \(key) (from \(source)): \(why)")
        }
        func string(_ key: String, _ fallback: String) -> String { raw[key]?.value ?? fallback }
        func int(_ key: String, _ fallback: Int, _ range: ClosedRange<Int>) throws -> Int {
            guard let text = raw[key]?.value else { return fallback }
            guard let v = Int(text.trimmingCharacters(in: .whitespaces)) else { throw wrong(key, "must be a whole number, got '\(shown(text))'") }
            guard range.contains(v) else { throw wrong(key, "must be between \(range.lowerBound) and \(range.upperBound), got \(v)") }
            return v
        }
        func millis(_ key: String, _ fallback: Int, _ range: ClosedRange<Int>) throws -> Duration {
            .milliseconds(try int(key, fallback, range))
        }
        func bool(_ key: String, _ fallback: Bool) throws -> Bool {
            guard let text = raw[key]?.value else { return fallback }
            switch text.trimmingCharacters(in: .whitespaces) {
            case "true": return true
            case "false": return false
            default: throw wrong(key, "must be true or false, got '\(shown(text))'")
            }
        }
        func name(_ key: String, _ fallback: String) throws -> String {
            let v = string(key, fallback)
            if let problem = nameProblem(v) { throw wrong(key, problem) }
            return v
        }

        let url: RedisURL
        do { url = try RedisURL(string("redis.url", "redis://127.0.0.1:6379")) } catch {
            throw wrong("redis.url", "\(error)")
        }
        let prefix = try name("prefix", "ac")
        guard !prefix.contains("{") && !prefix.contains("}") else { throw wrong("prefix", "must not contain { or } (they mark Cluster hash tags)") }

        var feeds: [Settings.Feed] = []
        let feedText = string("streams.feeds", "sports=\(prefix):feed:sports,transit=\(prefix):feed:transit")
        // No feeds must be asked for by name: an empty value is more often a variable that lost
        // its value than a wish to stop reading every feed.
        if feedText.trimmingCharacters(in: .whitespaces) != "none" {
            for part in feedText.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !part.isEmpty {
                let kv = part.split(separator: "=", maxSplits: 1).map(String.init)
                guard kv.count == 2, let kind = StreamKind(rawValue: kv[0]), kind != .registrations, !kv[1].isEmpty else {
                    throw wrong("streams.feeds", "each feed is kind=stream with kind sports or transit, got '\(shown(part))'")
                }
                if let problem = nameProblem(kv[1]) { throw wrong("streams.feeds", "the \(kind.rawValue) stream name \(problem)") }
                feeds.append(.init(kind: kind, stream: kv[1]))
            }
            if feeds.isEmpty {
                throw wrong("streams.feeds", "is empty; write 'none' to read no feed stream (the worker then applies only registrations)")
            }
        }
        let shards = try int("streams.shards", 1, 1...1024)
        if shards > 1 {
            if let braced = feeds.first(where: { $0.stream.contains("{") || $0.stream.contains("}") }) {
                throw wrong("streams.shards", "a sharded feed's stream name must not contain { or } (each shard's hash tag is added to it), got '\(shown(braced.stream))'")
            }
            feeds = feeds.flatMap { feed in
                (0..<shards).map { Settings.Feed(kind: feed.kind, stream: FeedShards.stream(feed.stream, shard: $0),
                                                  shard: .init(feed: feed.stream, index: $0, count: shards)) }
            }
        }
        let registrations = try name("streams.registrations", "\(prefix):registrations")
        let deadLetter = try name("streams.dead_letter", "\(prefix):deadletter")
        let all = feeds.map(\.stream) + [registrations, deadLetter]
        if Set(all).count != all.count {
            throw wrong("streams.feeds", "every stream (feeds, registrations, dead letters) must be distinct: \(shown(all.joined(separator: ", ")))")
        }

        var limits = DecodeLimits()
        limits.maxFields = try int("limits.max_fields", 64, 2...4096)
        limits.maxValueBytes = try int("limits.max_value_bytes", 1024, 16...(1 << 20))
        limits.maxEntryBytes = try int("limits.max_entry_bytes", 8192, 64...(16 << 20))
        limits.maxTextBytes = try int("limits.max_text_bytes", 256, 16...(1 << 20))

        let level = string("log.level", "info")
        guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(level) else {
            throw wrong("log.level", "must be one of trace, debug, info, notice, warning, error, critical; got '\(shown(level))'")
        }
        let format = string("log.format", "text")
        guard ["text", "json"].contains(format) else { throw wrong("log.format", "must be text or json, got '\(shown(format))'") }

        var settings = Settings(
            redisURL: url,
            connectTimeout: try millis("redis.connect_timeout_ms", 3000, 10...600_000),
            commandTimeout: try millis("redis.command_timeout_ms", 5000, 10...600_000),
            prefix: prefix,
            group: try name("group", "activitycast"),
            registrationsStream: registrations,
            deadLetterStream: deadLetter,
            deadLetterMaxLength: try int("streams.dead_letter_max_len", 100_000, 100...100_000_000),
            feeds: feeds,
            consumer: string("worker.consumer", ""),
            batchSize: try int("worker.batch_size", 256, 1...10_000),
            block: try millis("worker.block_ms", 1000, 1...60_000),
            maxInFlight: try int("worker.max_in_flight", 4096, 1...1_000_000),
            visibilityTimeout: try millis("worker.visibility_timeout_ms", 30_000, 100...86_400_000),
            claimInterval: try millis("worker.claim_interval_ms", 5000, 10...3_600_000),
            maxDeliveries: try int("worker.max_deliveries", 5, 1...1000),
            shutdownDeadline: try millis("worker.shutdown_deadline_ms", 10_000, 0...3_600_000),
            send: try bool("worker.send", true),
            startsPerSecond: try int("worker.starts_per_second", 500, 1...100_000),
            limits: limits,
            activityTTLSeconds: try int("ttl.activity_s", 43_200, 60...(30 * 86_400)),
            deviceTTLSeconds: try int("ttl.device_s", 7_776_000, 60...(3650 * 86_400)),
            logLevel: level,
            logFormat: format,
            apns: try APNsSettings.build(string: { raw[$0]?.value }, wrong: wrong, int: int))
        let trimEvery = try int("streams.trim_interval_ms", 10_000, 0...86_400_000)
        if trimEvery > 0, trimEvery < 100 { throw wrong("streams.trim_interval_ms", "must be 0 (never trim) or at least 100, got \(trimEvery)") }
        settings.retention = StreamRetention(millis: Int64(try int("streams.retention_ms", 60_000, 0...(30 * 86_400_000))),
                                             entries: try int("streams.retention_entries", 10_000, 0...100_000_000),
                                             interval: trimEvery == 0 ? nil : .milliseconds(trimEvery))
        settings.sliceSize = try int("fanout.slice_size", 4096, 16...1_000_000)
        settings.sliceBatch = try int("fanout.batch", 256, 1...1000)
        settings.sliceLease = try millis("fanout.lease_ms", 10_000, 100...600_000)
        settings.slicesInHand = try int("fanout.slices_in_hand", 4, 1...256)
        settings.priority5SlicesInHand = try int("fanout.priority5_slices_in_hand", 4, 1...256)
        settings.ackDelay = try millis("worker.ack_delay_ms", 2, 0...1000)
        settings.tokenAttempts = try int("fanout.token_attempts", 16, 1...100)
        settings.budgets = try budgets(int: int, wrong: wrong, source: { raw[$0]?.source })
        settings.maxFutureMillis = Int64(try int("limits.max_future_ms", 300_000, 0...(365 * 86_400_000)))
        settings.activityActiveSeconds = try int("ttl.activity_active_s", 28_800, 60...(30 * 86_400))
        settings.relaunchPastLifetime = try bool("worker.relaunch_past_lifetime", false)
        settings.outcomesMaxLength = try int("streams.outcomes_max_len", 100_000, 0...100_000_000)
        settings.traceMaxRecords = try int("trace.max_records", 20_000, 0...1_000_000)
        settings.traceRetentionSeconds = try int("trace.retention_s", 86_400, 60...(30 * 86_400))
        if settings.maxInFlight < settings.batchSize {
            throw wrong("worker.max_in_flight", "must be at least worker.batch_size (\(settings.batchSize)), got \(settings.maxInFlight)")
        }
        if !settings.consumer.isEmpty, let problem = consumerProblem(settings.consumer) {
            throw wrong("worker.consumer", problem)
        }
        // Only the paths here; the files are read and checked by `loadRoutes()`.
        for key in ["routes.sports", "routes.transit"] where raw[key]?.value.isEmpty == true {
            throw wrong(key, "must be the path of a route file; leave it unset for the built-in routes")
        }
        if let text = raw["ops.listen"]?.value {
            guard let listen = OpsListen(parsing: text) else {
                throw wrong("ops.listen", "must be host:port (port 0…65535; [::1]:9464 for IPv6) or off, got '\(shown(text))'")
            }
            settings.opsListen = listen.port == nil ? nil : listen
        }
        settings.console = try console(raw: { raw[$0]?.value }, bool: bool, int: int, wrong: wrong)
        settings.sportsRoutesFile = raw["routes.sports"]?.value
        settings.transitRoutesFile = raw["routes.transit"]?.value
        return settings
    }

    /// The `console.*` settings (docs/configuration.md, "console").
    static func console(raw: (String) -> String?, bool: (String, Bool) throws -> Bool, int: (String, Int, ClosedRange<Int>) throws -> Int,
                        wrong: (String, String) -> SettingsError) throws -> ConsoleSettings {
        var console = ConsoleSettings()
        if let text = raw("console.listen") {
            guard let listen = OpsListen(parsing: text), listen.port != nil else {
                throw wrong("console.listen", "must be host:port (port 0…65535; [::1]:9310 for IPv6), got '\(shown(text))'")
            }
            console.listen = listen
        }
        console.allowActions = try bool("console.allow_actions", false)
        if let token = raw("console.token"), !token.isEmpty { console.token = token }
        console.refreshMillis = try int("console.refresh_ms", 3000, 500...600_000)
        if let text = raw("console.metrics_service"), !text.isEmpty {
            guard let service = OpsListen(parsing: text), let port = service.port, port > 0 else {
                throw wrong("console.metrics_service", "must be host:port (a headless Service's name and the workers' ops port), got '\(shown(text))'")
            }
            console.metricsService = (service.host, port)
        }
        console.metrics = (raw("console.metrics") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return console
    }

    /// The `budgets.*` settings, each in its range, then the policy as a whole through
    /// `BudgetPolicy.problems` (an end reserve must be below its capacity, which may come from
    /// another source): the first problem stops the load, naming its key.
    static func budgets(int: (String, Int, ClosedRange<Int>) throws -> Int, wrong: (String, String) -> SettingsError,
                        source: (String) -> String?) throws -> BudgetPolicy {
        func bucket(_ name: String, _ defaults: BucketPolicy) throws -> BucketPolicy {
            BucketPolicy(capacity: try int("budgets.\(name).capacity", defaults.capacity, BucketPolicy.capacityRange),
                         refillPerHour: try int("budgets.\(name).refill_per_hour", defaults.refillPerHour, BucketPolicy.refillRange))
        }
        let spacing = Int(AudiencePolicy.spacingRange.lowerBound)...Int(AudiencePolicy.spacingRange.upperBound)
        // Below the largest capacity here; below this audience's capacity is checked with the rest.
        let reserve = 0...(BucketPolicy.capacityRange.upperBound - 1)
        var audiences: [AudiencePolicy] = []
        for (name, defaults) in budgetAudiences {
            audiences.append(AudiencePolicy(
                bucket: try bucket(name, defaults.bucket),
                minSpacingMillis: Int64(try int("budgets.\(name).spacing_ms", Int(defaults.minSpacingMillis), spacing)),
                endReserve: try int("budgets.\(name).end_reserve", defaults.endReserve, reserve)))
        }
        let policy = BudgetPolicy(standard: audiences[0], frequent: audiences[1], channelNoStorage: audiences[2],
                                  channelLatestMessage: audiences[3], pushToStart: try bucket("start", BudgetPolicy.default.pushToStart))
        // Each problem reads `<key> <why>`.
        if let problem = policy.problems.first {
            let parts = problem.split(separator: " ", maxSplits: 1).map(String.init)
            let key = parts[0], why = parts.count > 1 ? parts[1] : "is not usable"
            var note = ""
            if key.hasSuffix(".end_reserve") {
                // The capacity it is compared with may have been set somewhere else.
                let capacity = String(key.dropLast(".end_reserve".count)) + ".capacity"
                if let from = source(capacity), from != source(key) { note = " (\(capacity) from \(from))" }
            }
            throw wrong(key, why + note)
        }
        return policy
    }

    /// Longest name (prefix, group, stream, consumer) in bytes.
    public static let maxNameBytes = 200

    /// Why `name` can't be a prefix, group or stream name (nil when it can): names are 1 to 200
    /// bytes without spaces or control characters, which would reach keys, `XINFO` output and log
    /// lines as they are.
    public static func nameProblem(_ name: String) -> String? {
        if name.isEmpty { return "must not be empty" }
        if name.utf8.count > maxNameBytes { return "must be at most \(maxNameBytes) bytes, got \(name.utf8.count): '\(shown(name))'" }
        if name.unicodeScalars.contains(where: VisibleText.needsEscape) {
            return "must not contain control characters, got '\(shown(name))'"
        }
        if name.contains(where: \.isWhitespace) { return "must not contain spaces, got '\(shown(name))'" }
        return nil
    }

    /// Why `name` can't be a consumer name (nil when it can). Stricter than other names: it goes
    /// into the connections' Redis client names (`CLIENT SETNAME activitycast-reader-<consumer>`),
    /// which Redis refuses unless every byte is printable ASCII other than space.
    public static func consumerProblem(_ name: String) -> String? {
        if let problem = nameProblem(name) { return problem }
        guard name.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            return "must be printable ASCII without spaces ('!' to '~': letters, digits and punctuation), because it is part of "
                + "the connections' Redis client names; got '\(shown(name))'"
        }
        return nil
    }

    /// A value quoted in an error or warning: escaped and cut, so it can't garble the log line.
    static func shown(_ value: String) -> String { VisibleText.escaped(value, limit: 100) }

    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var row = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var prev = row[0]
            row[0] = i
            for j in 1...max(b.count, 1) where !b.isEmpty {
                let cur = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1))
                prev = cur
            }
        }
        return row[b.count]
    }
}

/// Where and how to reach APNs. With nothing configured, the built-in sandbox on this machine
/// (`activitycast sandbox`), with the development key and certificate it writes to `sandbox.dir`.
public struct APNsSettings: Sendable {
    /// `development`, `production`, `host:port`, or `sandbox` (the local sandbox at `sandbox.listen`).
    public var endpoint: String
    public var channelsEndpoint: String
    public var usesLocalSandbox: Bool
    public var bundleID: String
    public var teamID: String
    public var keyID: String
    public var keyFile: String?
    /// PEM text from the environment (`ACTIVITYCAST_APNS_KEY`); never logged.
    public var keyPEM: String?
    public var caFile: String?
    public var verifyPeer: Bool
    public var connections: Int
    public var maxConcurrentStreams: Int
    /// Priority-5 requests in flight at most (nil: the client's default).
    public var priority5InFlight: Int?
    /// The fleet's requests per second for this app (0: no guard), and the burst it allows.
    public var ratePerSecond: Int = 0
    public var rateBurst: Int?
    public var requestTimeout: Duration
    public var sandboxDirectory: String
    public var sandboxListen: String

    public static let sandboxTeamID = "SANDBOXTM1"
    public static let sandboxKeyID = "SANDBOXK01"

    static func build(string given: (String) -> String?, wrong: (String, String) -> SettingsError,
                      int: (String, Int, ClosedRange<Int>) throws -> Int) throws -> APNsSettings {
        // An empty value is no value: `ACTIVITYCAST_APNS_CA_FILE=` leaves the CA file unset
        // rather than naming the path ''.
        func string(_ key: String) -> String? { given(key).flatMap { $0.isEmpty ? nil : $0 } }
        let dir = string("sandbox.dir") ?? ".activitycast/sandbox"
        let listen = string("sandbox.listen") ?? "127.0.0.1:2197"
        let endpoint = string("apns.endpoint") ?? "sandbox"
        let local = endpoint == "sandbox"
        let known = ["apple", "development", "production", "sandbox"]
        if !known.contains(endpoint) && endpoint.split(separator: ":").count < 2 {
            throw wrong("apns.endpoint", "must be apple, development, production, sandbox or host:port, got '\(SettingsLoader.shown(endpoint))'")
        }
        let channels = string("apns.channels_endpoint") ?? {
            switch endpoint {
            case "development": return "development-channels"
            case "production": return "production-channels"
            case "apple": return "apple-channels"
            default: return local ? listen : endpoint
            }
        }()
        let verify = string("apns.verify") ?? "true"
        guard ["true", "false"].contains(verify) else { throw wrong("apns.verify", "must be true or false, got '\(SettingsLoader.shown(verify))'") }
        let settings = APNsSettings(
            endpoint: local ? listen : endpoint,
            channelsEndpoint: channels,
            usesLocalSandbox: local,
            bundleID: string("apns.bundle_id") ?? "com.example.activitycast",
            teamID: string("apns.team_id") ?? (local ? sandboxTeamID : ""),
            keyID: string("apns.key_id") ?? (local ? sandboxKeyID : ""),
            keyFile: string("apns.key_file") ?? (local ? "\(dir)/AuthKey_\(sandboxKeyID).p8" : nil),
            keyPEM: string("apns.key"),
            caFile: string("apns.ca_file") ?? (local ? "\(dir)/cert.pem" : nil),
            verifyPeer: verify == "true",
            connections: try int("apns.connections", 2, 1...64),
            maxConcurrentStreams: try int("apns.max_concurrent_streams", 1000, 1...100_000),
            priority5InFlight: try string("apns.priority5_in_flight").map { _ in try int("apns.priority5_in_flight", 1, 1...1_000_000) },
            ratePerSecond: try int("apns.rate_per_second", 0, 0...10_000_000),
            rateBurst: try string("apns.rate_burst").map { _ in try int("apns.rate_burst", 1, 1...10_000_000) },
            requestTimeout: .milliseconds(try int("apns.request_timeout_ms", 30_000, 100...600_000)),
            sandboxDirectory: dir,
            sandboxListen: listen)
        if settings.bundleID.isEmpty || settings.bundleID.contains(" ") {
            throw wrong("apns.bundle_id", "must be the app's bundle id, got '\(SettingsLoader.shown(settings.bundleID))'")
        }
        return settings
    }
}

/// `activitycast console`'s settings (docs/configuration.md, "console"). Its operator token is
/// not one of them: it comes from `ACTIVITYCAST_CONSOLE_TOKEN` or `--token-file`, never a file
/// of settings.
public struct ConsoleSettings: Sendable, Equatable {
    public var listen = OpsListen(host: "127.0.0.1", port: 9310)
    /// Replay and discard dead letters (POSTs with the token); off: read-only.
    public var allowActions = false
    /// Each worker's `/metrics` URL.
    public var metrics: [String] = []
    /// A headless Service's name and the workers' ops port: each address the name resolves to,
    /// at each reading, is a worker (`console.metrics_service`).
    public var metricsService: (host: String, port: Int)? {
        get { metricsServiceHost.map { ($0, metricsServicePort) } }
        set { (metricsServiceHost, metricsServicePort) = (newValue?.host, newValue?.port ?? 0) }
    }
    var metricsServiceHost: String?
    var metricsServicePort = 0
    /// How often an open overview reads again.
    public var refreshMillis = 3000
    /// The operator token (`ACTIVITYCAST_CONSOLE_TOKEN`); never logged.
    public var token: String?

    public init() {}
}

/// `ops.listen`: the address of a worker's ops endpoints, or off.
public struct OpsListen: Sendable, Equatable {
    public var host: String
    /// nil: off.
    public var port: Int?

    public init(host: String, port: Int?) {
        self.host = host
        self.port = port
    }

    /// `host:port`, `[v6]:port`, or `off`. Nil when it is none of these.
    public init?(parsing text: String) {
        let t = text.trimmingCharacters(in: .whitespaces)
        if t == "off" { self.init(host: "", port: nil); return }
        guard let colon = t.lastIndex(of: ":") else { return nil }
        var host = String(t[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "/" }),
              let port = Int(t[t.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        self.init(host: host, port: port)
    }

    public var description: String { port.map { host.contains(":") ? "[\(host)]:\($0)" : "\(host):\($0)" } ?? "off" }
}

extension Settings {
    /// `<hostname>-<pid>`: unique per process, readable in `inspect`. Only the characters Redis
    /// accepts in a client name.
    public static func defaultConsumerName() -> String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "worker"
        let safe = String(host.unicodeScalars.filter { $0.value > 0x20 && $0.value < 0x7F }.prefix(60))
        return "\(safe.isEmpty ? "worker" : safe)-\(getpid())"
    }
}
