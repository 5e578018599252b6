import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import Testing
import TestSupport

@Suite struct SettingsTests {
    @Test func defaultsAreSensible() throws {
        let s = try SettingsLoader.load(file: nil, environment: [:])
        #expect(s.redisURL.host == "127.0.0.1" && s.redisURL.port == 6379)
        #expect(s.prefix == "ac" && s.group == "activitycast")
        #expect(s.registrationsStream == "ac:registrations" && s.deadLetterStream == "ac:deadletter")
        #expect(s.feeds == [.init(kind: .sports, stream: "ac:feed:sports"), .init(kind: .transit, stream: "ac:feed:transit")])
        #expect(s.maxDeliveries == 5 && s.batchSize == 256)
    }

    @Test func fileThenEnvironmentThenCommandLine() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/ac.yaml"
        try """
        redis:
          url: redis://10.0.0.1:7000
        prefix: live
        worker:
          batch_size: 100
          max_deliveries: 3
        streams:
          feeds:
            - kind: sports
              stream: scores
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let s = try SettingsLoader.load(file: file, environment: ["ACTIVITYCAST_WORKER_BATCH_SIZE": "50"],
                                        overrides: ["redis.url": "redis://127.0.0.1:7001"])
        #expect(s.redisURL.port == 7001)              // command line wins
        #expect(s.batchSize == 50)                    // environment beats the file
        #expect(s.maxDeliveries == 3 && s.prefix == "live")
        #expect(s.feeds == [.init(kind: .sports, stream: "scores")])
        #expect(s.registrationsStream == "live:registrations")  // derived from the prefix
    }

    @Test func errorsNameTheKeyTheSourceAndWhy() throws {
        func failure(_ env: [String: String]) -> String {
            do { _ = try SettingsLoader.load(file: nil, environment: env); return "no error" } catch { return "\(error)" }
        }
        #expect(failure(["ACTIVITYCAST_WORKER_BATCH_SIZE": "lots"]) == "setting worker.batch_size (from ACTIVITYCAST_WORKER_BATCH_SIZE): must be a whole number, got 'lots'")
        #expect(failure(["ACTIVITYCAST_WORKER_MAX_DELIVERIES": "0"]).contains("must be between 1 and 1000, got 0"))
        #expect(failure(["ACTIVITYCAST_REDIS_URL": "http://x"]).contains("setting redis.url (from ACTIVITYCAST_REDIS_URL)"))
        #expect(failure(["ACTIVITYCAST_STREAMS_FEEDS": "cricket=x"]).contains("kind sports or transit"))
        #expect(failure(["ACTIVITYCAST_STREAMS_FEEDS": "sports=ac:registrations"]).contains("must be distinct"))
        #expect(failure(["ACTIVITYCAST_LOG_LEVEL": "loud"]).contains("log.level"))
        #expect(failure(["ACTIVITYCAST_PREFIX": "a{b}"]).contains("hash tags"))
        #expect(failure(["ACTIVITYCAST_WORKER_MAX_IN_FLIGHT": "10"]).contains("at least worker.batch_size"))
    }

    @Test func unknownFileKeysAreRejectedWithAHint() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/bad.yaml"
        try "worker:\n  batchsize: 10\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect {
            try SettingsLoader.load(file: file, environment: [:])
        } throws: { error in
            "\(error)" == "\(file): unknown setting 'worker.batchsize' (did you mean worker.batch_size?)"
        }
        try "worker: [1, 2\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(throws: SettingsError.self) { try SettingsLoader.load(file: file, environment: [:]) }
        #expect(throws: SettingsError.self) { try SettingsLoader.load(file: dir.path + "/missing.yaml", environment: [:]) }
    }

    /// `streams.shards`: each feed becomes that many streams `<feed>:{<i>}`, read as feeds of
    /// their own; publishing picks the shard of the entry's key (`CLUSTER KEYSLOT` modulo N).
    @Test func shardedFeedsAreSeveralStreamsAndPublishingPicksTheKeysShard() throws {
        let one = try SettingsLoader.load(file: nil, environment: [:], overrides: [:])
        #expect(one.feeds.map(\.stream) == ["ac:feed:sports", "ac:feed:transit"] && one.feeds.allSatisfy { $0.shard == nil })
        #expect(one.feedStream(.sports, fields: [("match", "4711")]) == "ac:feed:sports")

        let s = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_SHARDS": "3"], overrides: [:])
        #expect(s.feeds.map(\.stream) == ["ac:feed:sports:{0}", "ac:feed:sports:{1}", "ac:feed:sports:{2}",
                                          "ac:feed:transit:{0}", "ac:feed:transit:{1}", "ac:feed:transit:{2}"])
        #expect(s.feeds.map { $0.shard?.index } == [0, 1, 2, 0, 1, 2] && s.feeds.allSatisfy { $0.shard?.count == 3 })
        #expect(s.inputStreams.count == 7)
        // CLUSTER KEYSLOT 123456789 is 12739 (CRC16-XMODEM's check value 0x31C3): shard 12739 % 3 = 1.
        #expect(FeedShards.shard(ofKey: "123456789", count: 3) == 1 && FeedShards.shard(ofKey: "123456789", count: 4) == 3)
        #expect(FeedShards.key(kind: .sports, fields: [("type", "match.score"), ("match", "4711")]) == "match:4711")
        #expect(FeedShards.key(kind: .transit, fields: [("trip", "t9"), ("route", "r1")]) == "trip:t9")
        #expect(FeedShards.key(kind: .transit, fields: [("route", "r1")]) == "route:r1")
        #expect(FeedShards.key(kind: .transit, fields: [("trip", ""), ("stop", "s")]) == nil)
        let key = "match:4711", shard = FeedShards.shard(ofKey: key, count: 3)
        #expect(s.feedStream(.sports, fields: [("match", "4711")]) == "ac:feed:sports:{\(shard)}")
        #expect(s.feedStream(.sports, fields: [("home", "ars")]) == "ac:feed:sports:{0}")  // no key: shard 0 (a dead letter there)
        // Spread: 1,000 matches over 3 shards, none with fewer than a quarter.
        let counts = (0..<1000).reduce(into: [0, 0, 0]) { c, i in c[FeedShards.shard(ofKey: "match:\(i)", count: 3)] += 1 }
        #expect(counts.allSatisfy { $0 > 250 }, "\(counts)")

        func failure(_ env: [String: String]) -> String {
            do { _ = try SettingsLoader.load(file: nil, environment: env, overrides: [:]); return "no error" } catch { return "\(error)" }
        }
        #expect(failure(["ACTIVITYCAST_STREAMS_SHARDS": "0"]).contains("streams.shards"))
        #expect(failure(["ACTIVITYCAST_STREAMS_SHARDS": "2000"]).contains("streams.shards"))
        #expect(failure(["ACTIVITYCAST_STREAMS_SHARDS": "2", "ACTIVITYCAST_STREAMS_FEEDS": "sports=f:{x}"])
            == "setting streams.shards (from ACTIVITYCAST_STREAMS_SHARDS): a sharded feed's stream name must not contain { or } "
            + "(each shard's hash tag is added to it), got 'f:{x}'")
    }

    @Test func namesRejectControlCharactersAndConsumersNonASCII() throws {
        func failure(_ env: [String: String] = [:], _ overrides: [String: String] = [:]) -> String {
            do { _ = try SettingsLoader.load(file: nil, environment: env, overrides: overrides); return "no error" } catch { return "\(error)" }
        }
        #expect(failure(["ACTIVITYCAST_PREFIX": "ac\u{1b}[31m"])
            == "setting prefix (from ACTIVITYCAST_PREFIX): must not contain control characters, got 'ac\\x1b[31m'")
        #expect(failure(["ACTIVITYCAST_GROUP": "g\nfake log line"])
            == "setting group (from ACTIVITYCAST_GROUP): must not contain control characters, got 'g\\nfake log line'")
        #expect(failure(["ACTIVITYCAST_STREAMS_REGISTRATIONS": "r\u{7f}"]).contains("must not contain control characters, got 'r\\x7f'"))
        #expect(failure(["ACTIVITYCAST_STREAMS_DEAD_LETTER": "d\u{9b}"]).contains("must not contain control characters, got 'd\\u{9B}'"))
        #expect(failure(["ACTIVITYCAST_STREAMS_FEEDS": "sports=s\u{202E}x"])
            == "setting streams.feeds (from ACTIVITYCAST_STREAMS_FEEDS): the sports stream name must not contain control characters, "
            + "got 's\\u{202E}x'")
        #expect(failure(["ACTIVITYCAST_STREAMS_FEEDS": "sports=a b"]).contains("the sports stream name must not contain spaces"))
        #expect(failure(["ACTIVITYCAST_GROUP": ""]) == "setting group (from ACTIVITYCAST_GROUP): must not be empty")
        #expect(failure(["ACTIVITYCAST_PREFIX": String(repeating: "p", count: 201)]).contains("must be at most 200 bytes, got 201"))
        #expect(failure(["ACTIVITYCAST_PREFIX": String(repeating: "p", count: 180)]) == "no error")  // derived names stay under 200

        // The consumer name goes into CLIENT SETNAME: printable ASCII only.
        #expect(failure([:], ["worker.consumer": "wörker"])
            == "setting worker.consumer (from the command line): must be printable ASCII without spaces ('!' to '~': letters, digits "
            + "and punctuation), because it is part of the connections' Redis client names; got 'wörker'")
        #expect(failure(["ACTIVITYCAST_WORKER_CONSUMER": "a b"]).contains("must not contain spaces"))
        #expect(failure(["ACTIVITYCAST_WORKER_CONSUMER": "a\tb"]).contains("must not contain control characters, got 'a\\tb'"))
        #expect(failure(["ACTIVITYCAST_WORKER_CONSUMER": String(repeating: "c", count: 201)]).contains("at most 200 bytes"))
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_WORKER_CONSUMER": "pod-7.ns_1:x~!"]).consumer == "pod-7.ns_1:x~!")
        // Empty still means the default, <hostname>-<pid>.
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_WORKER_CONSUMER": ""]).consumer == "")
        // Values quoted in other errors are escaped too.
        #expect(failure(["ACTIVITYCAST_WORKER_BATCH_SIZE": "1\u{1b}[2J"]).hasSuffix("must be a whole number, got '1\\x1b[2J'"))
    }

    @Test func aConfigurationPathThatIsNoFileSaysWhatItIs() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        func failure(_ path: String) -> String {
            do { _ = try SettingsLoader.load(file: path, environment: [:]); return "no error" } catch { return "\(error)" }
        }
        #expect(failure(dir.path) == "\(dir.path) is a directory, not a configuration file")
        #expect(failure(dir.path + "/missing.yaml") == "cannot read the configuration file \(dir.path)/missing.yaml: No such file or directory")
        #expect(failure("/dev/zero") == "/dev/zero is larger than 1 MB, not a configuration file")
        let binary = dir.path + "/binary.yaml"
        try Data([0x70, 0x72, 0x65, 0x66, 0x69, 0x78, 0x3A, 0x20, 0xFF, 0xFE, 0x0A]).write(to: URL(fileURLWithPath: binary))
        #expect(failure(binary) == "\(binary) is not UTF-8 text, not a configuration file")
        if getuid() != 0 {  // root reads any file
            let locked = dir.path + "/locked.yaml"
            try "prefix: x\n".write(toFile: locked, atomically: true, encoding: .utf8)
            chmod(locked, 0)
            #expect(failure(locked) == "cannot read the configuration file \(locked): Permission denied")
        }
        // An empty file, /dev/null, or only comments: no settings, the defaults.
        let empty = dir.path + "/empty.yaml"
        try "".write(toFile: empty, atomically: true, encoding: .utf8)
        let comments = dir.path + "/comments.yaml"
        try "# nothing set yet\n\n".write(toFile: comments, atomically: true, encoding: .utf8)
        for path in [empty, "/dev/null", comments] {
            #expect(try SettingsLoader.load(file: path, environment: [:]).prefix == "ac", "\(path)")
        }
    }

    @Test func emptySectionsAndNullValuesAreNotSettings() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/nulls.yaml"
        try """
        worker:
        redis:
          url:
        prefix: ~
        group: null
        streams:
          feeds:
        limits: {}
        log:
          level: debug

        """.write(toFile: file, atomically: true, encoding: .utf8)
        let s = try SettingsLoader.load(file: file, environment: [:])
        #expect(s.prefix == "ac" && s.group == "activitycast" && s.batchSize == 256 && s.redisURL.port == 6379)
        #expect(s.feeds.count == 2 && s.logLevel == "debug")
        // A quoted empty string is a value, not null.
        try "group: ''\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect { try SettingsLoader.load(file: file, environment: [:]) } throws: { "\($0)".contains("setting group (from \(file)): must not be empty") }
        // Unknown names are still unknown, empty or not.
        try "wroker:\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect { try SettingsLoader.load(file: file, environment: [:]) } throws: {
            "\($0)" == "\(file): unknown setting 'wroker' (did you mean worker?)"
        }
        try "wroker: {}\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect { try SettingsLoader.load(file: file, environment: [:]) } throws: { "\($0)".contains("unknown setting 'wroker'") }
        try "worker:\n  batchsize:\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect { try SettingsLoader.load(file: file, environment: [:]) } throws: {
            "\($0)" == "\(file): unknown setting 'worker.batchsize' (did you mean worker.batch_size?)"
        }
    }

    @Test func noFeedsMustBeAskedForWithNone() throws {
        let empty = "setting streams.feeds (from ACTIVITYCAST_STREAMS_FEEDS): is empty; write 'none' to read no feed stream "
            + "(the worker then applies only registrations)"
        for value in ["", " ", " , "] {
            #expect { try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_FEEDS": value]) } throws: { "\($0)" == empty }
        }
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_FEEDS": "none"]).feeds.isEmpty)
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_FEEDS": "none"]).inputStreams.map(\.kind)
            == [.registrations])

        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/feeds.yaml"
        try "streams:\n  feeds: []\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect { try SettingsLoader.load(file: file, environment: [:]) } throws: { "\($0)".contains("is empty; write 'none'") }
        try "streams:\n  feeds: none\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try SettingsLoader.load(file: file, environment: [:]).feeds.isEmpty)
    }

    @Test func deadLetterMaxLength() throws {
        #expect(try SettingsLoader.load(file: nil, environment: [:]).deadLetterMaxLength == 100_000)
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_DEAD_LETTER_MAX_LEN": "500"]).deadLetterMaxLength == 500)
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_DEAD_LETTER_MAX_LEN": "100000000"])
            .deadLetterMaxLength == 100_000_000)
        for wrong in ["99", "100000001"] {
            #expect {
                try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_STREAMS_DEAD_LETTER_MAX_LEN": wrong])
            } throws: {
                "\($0)" == "setting streams.dead_letter_max_len (from ACTIVITYCAST_STREAMS_DEAD_LETTER_MAX_LEN): must be between 100 and "
                    + "100000000, got \(wrong)"
            }
        }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/dlq.yaml"
        try "streams:\n  dead_letter: dead\n  dead_letter_max_len: 2500\n".write(toFile: file, atomically: true, encoding: .utf8)
        let s = try SettingsLoader.load(file: file, environment: [:])
        #expect(s.deadLetterMaxLength == 2500 && s.deadLetterStream == "dead")
    }

    @Test func unknownEnvironmentVariablesAreWarnedAbout() throws {
        let s = try SettingsLoader.load(file: nil, environment: [
            "ACTIVITYCAST_WORKER_BATCHSIZE": "10", "ACTIVITYCAST_WORKER_BATCH_SIZE": "100", "ACTIVITYCAST_NOT_EVEN_CLOSE": "x",
            "ACTIVITYCAST_CONFIG": "", "ACTIVITYCAST_SANDBOX_BENCH": "1", "ACTIVITYCAST_H2_BENCH_REQUESTS": "5",
            "ACTIVITYCAST_APNS_KEYS": "secret", "HOME": "/root",
        ])
        #expect(s.batchSize == 100)
        #expect(s.warnings == [
            "environment variable ACTIVITYCAST_APNS_KEYS is not a setting and is ignored (did you mean ACTIVITYCAST_APNS_KEY?)",
            "environment variable ACTIVITYCAST_NOT_EVEN_CLOSE is not a setting and is ignored",
            "environment variable ACTIVITYCAST_WORKER_BATCHSIZE is not a setting and is ignored (did you mean ACTIVITYCAST_WORKER_BATCH_SIZE?)",
        ])
        #expect(!s.warnings.joined().contains("secret"))  // names only, never values
        #expect(try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_PREFIX": "x"]).warnings.isEmpty)
    }

    /// Every `ACTIVITYCAST_*` name the repository uses is a setting or one of the known others, so
    /// no legitimate variable draws the misspelling warning. (This file is skipped: it misspells
    /// names on purpose.)
    @Test func everyVariableTheRepositoryUsesIsKnown() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let pattern = try NSRegularExpression(pattern: "ACTIVITYCAST_[A-Z0-9_]*[A-Z0-9]")
        var unknown: Set<String> = []
        var files = 0
        for folder in ["Sources", "Tests", "scripts", "Deploy"] {
            let base = root.appendingPathComponent(folder)
            guard let walker = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let path as String in walker where !path.hasSuffix("SettingsTests.swift") {
                guard let text = try? String(contentsOfFile: base.appendingPathComponent(path).path, encoding: .utf8) else { continue }
                files += 1
                for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                    let name = String(text[Range(match.range, in: text)!])
                    if !SettingsLoader.unknownVariables(in: [name: ""]).isEmpty { unknown.insert(name) }
                }
            }
        }
        #expect(files > 50)
        #expect(unknown.isEmpty, "used in the repository but would draw a warning: \(unknown.sorted())")
    }
}

/// `budgets.*`: the numbers of `BudgetPolicy` (docs/budgets.md), read like every other setting.
@Suite struct BudgetSettingsTests {
    func failure(_ env: [String: String], file: String? = nil) -> String {
        do { _ = try SettingsLoader.load(file: file, environment: env); return "no error" } catch { return "\(error)" }
    }

    @Test func defaultsAreThePolicyDefaults() throws {
        #expect(try SettingsLoader.load(file: nil, environment: [:]).budgets == BudgetPolicy.default)
    }

    @Test func theFileAndTheEnvironmentSetThem() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/budgets.yaml"
        try """
        budgets:
          standard:
            capacity: 6
            end_reserve: 2
          channel_latest_message:
            spacing_ms: 120000
          start:
            refill_per_hour: 2
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let s = try SettingsLoader.load(file: file, environment: [
            SettingsLoader.environmentName("budgets.standard.capacity"): "8",  // beats the file's 6
            SettingsLoader.environmentName("budgets.frequent.refill_per_hour"): "90",
            SettingsLoader.environmentName("budgets.channel_no_storage.spacing_ms"): "0",
        ])
        #expect(SettingsLoader.environmentName("budgets.channel_no_storage.spacing_ms") == "ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_SPACING_MS")
        var expected = BudgetPolicy.default
        expected.standard.bucket.capacity = 8
        expected.standard.endReserve = 2
        expected.frequent.bucket.refillPerHour = 90
        expected.channelNoStorage.minSpacingMillis = 0
        expected.channelLatestMessage.minSpacingMillis = 120_000
        expected.pushToStart.refillPerHour = 2
        #expect(s.budgets == expected)
        #expect(s.warnings.isEmpty)
        // A misspelt key in the section draws a hint, like any other.
        try "budgets:\n  standard:\n    capacty: 6\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(failure([:], file: file) == "\(file): unknown setting 'budgets.standard.capacty' (did you mean budgets.standard.capacity?)")
    }

    @Test func aValueOutOfItsRangeNamesTheKey() throws {
        let cases: [(key: String, value: String, why: String)] = [
            ("budgets.standard.capacity", "0", "must be between 1 and 10000, got 0"),
            ("budgets.frequent.capacity", "10001", "must be between 1 and 10000, got 10001"),
            ("budgets.channel_no_storage.refill_per_hour", "100001", "must be between 0 and 100000, got 100001"),
            ("budgets.channel_latest_message.spacing_ms", "3600001", "must be between 0 and 3600000, got 3600001"),
            ("budgets.standard.end_reserve", "-1", "must be between 0 and 9999, got -1"),
            ("budgets.start.capacity", "0", "must be between 1 and 10000, got 0"),
            ("budgets.start.refill_per_hour", "many", "must be a whole number, got 'many'"),
        ]
        for c in cases {
            let name = SettingsLoader.environmentName(c.key)
            #expect(failure([name: c.value]) == "setting \(c.key) (from \(name)): \(c.why)")
        }
        // The ends of the ranges are fine.
        let edges = ["budgets.standard.capacity": "10000", "budgets.frequent.capacity": "1", "budgets.frequent.end_reserve": "0",
                     "budgets.channel_no_storage.refill_per_hour": "100000", "budgets.channel_latest_message.spacing_ms": "3600000"]
        let s = try SettingsLoader.load(file: nil, environment: Dictionary(uniqueKeysWithValues: edges.map { (SettingsLoader.environmentName($0.key), $0.value) }))
        #expect(s.budgets.standard.bucket.capacity == 10_000 && s.budgets.frequent.bucket.capacity == 1)
        #expect(s.budgets.channelLatestMessage.minSpacingMillis == 3_600_000)
    }

    @Test func anEndReserveNotBelowTheCapacityNamesTheKey() throws {
        let reserve = SettingsLoader.environmentName("budgets.frequent.end_reserve")
        #expect(failure([reserve: "10"])
            == "setting budgets.frequent.end_reserve (from \(reserve)): must be 0 or more and below the capacity (10), got 10")
        #expect(failure([reserve: "9"]) == "no error")
        // The capacity lowered elsewhere under the default reserve: both sources are named.
        let capacity = SettingsLoader.environmentName("budgets.channel_latest_message.capacity")
        #expect(failure([capacity: "1"])
            == "setting budgets.channel_latest_message.end_reserve (from the defaults): must be 0 or more and below the capacity (1), "
            + "got 1 (budgets.channel_latest_message.capacity from \(capacity))")
        #expect(failure([capacity: "1", SettingsLoader.environmentName("budgets.channel_latest_message.end_reserve"): "0"]) == "no error")
    }

    /// docs/configuration.md documents every setting the loader reads and no other, and its
    /// `budgets.*` defaults are `BudgetPolicy.default`.
    @Test func theConfigurationDocumentListsEverySetting() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let name = try NSRegularExpression(pattern: "`([a-z_][a-z0-9_]*(\\.[a-z0-9_]+)*)`")
        var documented: [String: String] = [:]  // key → default cell
        for line in doc.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 3 else { continue }
            let first = cells[1]
            for match in name.matches(in: first, range: NSRange(first.startIndex..., in: first)) {
                documented[String(first[Range(match.range(at: 1), in: first)!])] = cells[2]
            }
        }
        let known = SettingsLoader.settingNames
        #expect(Set(known).subtracting(documented.keys).sorted() == [], "settings missing from docs/configuration.md")
        #expect(Set(documented.keys).subtracting(known).sorted() == [], "documented but not read by the loader")
        let d = BudgetPolicy.default
        var expected: [String: Int] = ["budgets.start.capacity": d.pushToStart.capacity, "budgets.start.refill_per_hour": d.pushToStart.refillPerHour]
        for (audience, a) in [("standard", d.standard), ("frequent", d.frequent), ("channel_no_storage", d.channelNoStorage),
                              ("channel_latest_message", d.channelLatestMessage)] {
            expected["budgets.\(audience).capacity"] = a.bucket.capacity
            expected["budgets.\(audience).refill_per_hour"] = a.bucket.refillPerHour
            expected["budgets.\(audience).spacing_ms"] = Int(a.minSpacingMillis)
            expected["budgets.\(audience).end_reserve"] = a.endReserve
        }
        #expect(known.filter { $0.hasPrefix("budgets.") }.sorted() == expected.keys.sorted())
        for (key, value) in expected {
            #expect(documented[key] == "\(value)", "\(key): documented default \(documented[key] ?? "none"), BudgetPolicy.default has \(value)")
        }
    }
}
