import ActivityCastCore
import ActivityCastInspect
import ActivityCastSend
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import RedisClient
import Testing
import TestSupport

/// `Inspector` against a real Redis holding what a long-running deployment accumulates: old
/// entries, keys of the wrong type, hostile text, counters.
@Suite struct InspectTests {
    @Test func oldestPendingAgeIsTheTimeSinceDeliveryNotTheIDsTime() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let stream = settings.feeds[0].stream
        // Ids from January 1970: the id's time says these entries are 55 years old.
        for ms in [1_000_000, 2_000_000, 3_000_000] {
            try await redis.command("XADD", stream, "\(ms)-0", "type", "match.started", "ts", "1", "match", "1")
        }
        try await redis.ensureGroup(stream: stream, group: settings.group)
        _ = try await redis.readGroup(group: settings.group, consumer: "first", count: 1, block: nil, streams: [(stream, ">")])
        try await Task.sleep(for: .milliseconds(400))
        _ = try await redis.readGroup(group: settings.group, consumer: "second", count: 10, block: nil, streams: [(stream, ">")])

        let report = try await Inspector(settings: settings, redis: redis).report()
        let group = try #require(report.streams.first { $0.name == stream }?.groups.first)
        #expect(group.pending == 3)
        #expect(group.oldestPendingID == "1000000-0")
        // The longest wait since delivery: the first entry's, delivered ~400 ms before the others.
        let age = try #require(group.oldestPendingAgeMillis)
        #expect(age >= 400 && age < 60_000, "oldest pending age \(age) ms")
    }

    /// Each node serving data, with its keys and memory: the one Redis, or every primary of a
    /// cluster (ACTIVITYCAST_TEST_REDIS_CLUSTER) — the keys add up to what was written.
    @Test func everyNodeIsListedWithItsKeysAndMemory() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        _ = try await redis.pipeline((0..<30).map { RedisCommand("SET", "\(settings.prefix):n\($0)", $0) })
        let report = try await Inspector(settings: settings, redis: redis).report()
        let expected = server.cluster?.primaryCount ?? 1
        #expect(report.nodes.count == expected)
        #expect(Set(report.nodes.map(\.address)).count == expected)
        #expect(report.nodes.allSatisfy { $0.error == nil && ($0.usedMemory ?? 0) > 0 && $0.maxMemory != nil }, "\(report.nodes)")
        #expect(report.nodes.compactMap(\.keys).reduce(0, +) == 30, "\(report.nodes)")
        let table = report.rendered()
        #expect(table.contains(expected == 1 ? "REDIS NODE\n" : "REDIS PRIMARIES (\(expected))\n"), "\(table)")
        let (status, json, err) = try await runActivitycast(["inspect", "--json"], redis: server, settings: ["prefix": settings.prefix])
        #expect(status == 0, "\(err)")
        #expect(try JSONDecoder().decode(InspectReport.self, from: Data(json.utf8)).nodes.map(\.address) == report.nodes.map(\.address))
    }

    @Test func aKeyOfTheWrongTypeSpoilsOnlyItsOwnSection() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let keys = settings.keys
        let sports = try #require(settings.feeds.first { $0.kind == .sports }).stream
        let transit = try #require(settings.feeds.first { $0.kind == .transit }).stream
        _ = try await xadd(redis, sports, [("type", "match.started"), ("ts", "1"), ("match", "1")])
        try await redis.command("SET", transit, "x")
        try await redis.command("SET", settings.deadLetterStream, "x")
        try await redis.command("SET", keys.activityTypes, "x")
        let one = try #require(ActivityKey(parsing: "match:1")), two = try #require(ActivityKey(parsing: "match:2"))
        try await redis.command("ZADD", keys.keysIndex, 1, "match:1", 2, "match:2")
        try await redis.command("SET", keys.tokens(one), "x")
        try await redis.command("HSET", keys.tokens(two), "A1", "9f3c")

        let report = try await Inspector(settings: settings, redis: redis).report()
        let transitReport = try #require(report.streams.first { $0.name == transit })
        #expect(transitReport.error == "WRONGTYPE: \(transit) is a string, not a stream")
        let sportsReport = try #require(report.streams.first { $0.name == sports })
        #expect(sportsReport.error == nil && sportsReport.exists && sportsReport.length == 1)
        #expect(report.streams.first { $0.name == settings.registrationsStream }?.error == nil)
        #expect(report.deadLetterError == "WRONGTYPE: \(settings.deadLetterStream) is a string, not a stream")
        #expect(report.registrations.error == "WRONGTYPE: \(keys.activityTypes) is a string, not a set; "
            + "not counted: WRONGTYPE: \(keys.tokens(one)) is a string, not a hash")
        #expect(report.registrations.activityKeys == 2 && report.registrations.activityTokens == 1)
        #expect(report.errors.count == 3)
        let table = report.rendered()
        #expect(table.contains("3 sections could not be read"))
        #expect(table.contains("\n  error: WRONGTYPE: \(transit) is a string, not a stream\n"), "\(table)")
        #expect(table.contains("\(settings.deadLetterStream): ERROR\n  error: WRONGTYPE: "), "\(table)")

        // The command still prints its report and succeeds; the JSON has an error per section.
        let env = ["prefix": settings.prefix]
        let (status, out, err) = try await runActivitycast(["inspect"], redis: server, settings: env)
        #expect(status == 0, "\(err)")
        #expect(out.contains("  error: WRONGTYPE: \(transit) is a string, not a stream") && out.contains("REGISTRATIONS"), "\(out)")
        let (jsonStatus, json, jsonErr) = try await runActivitycast(["inspect", "--json"], redis: server, settings: env)
        #expect(jsonStatus == 0, "\(jsonErr)")
        let decoded = try JSONDecoder().decode(InspectReport.self, from: Data(json.utf8))
        #expect(decoded.streams.first { $0.name == transit }?.error == transitReport.error)
        #expect(decoded.deadLetterError == report.deadLetterError && decoded.registrations.error == report.registrations.error)
    }

    @Test func textFromRedisIsEscapedAndTheOutputStaysSmall() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let sports = settings.feeds[0].stream
        // A 100 KB reason of terminal escape sequences (clear screen, set title, bell), CR LF, an
        // 8-bit CSI and a bidi override; hostile stream, id and consumer names.
        var reason = ""
        while reason.utf8.count < 99_980 { reason += "\u{1b}[2J\u{1b}]0;owned\u{07}\r\n\u{9b}31m\u{202E}gnol " }
        reason += String(repeating: "x", count: 100_000 - reason.utf8.count)
        #expect(reason.utf8.count == 100_000)
        try await redis.command("XADD", settings.deadLetterStream, "*", "reason", reason, "stream", "ac:\u{1b}[31mred", "id", "1-0\n",
                                "f:type", String(repeating: "\u{1b}", count: 50_000))
        try await redis.ensureGroup(stream: sports, group: settings.group)
        try await redis.command("XGROUP", "CREATECONSUMER", sports, settings.group, "a-evil\u{1b}[2Jname")
        // Many consumers with 10 KB names: each row used to be padded to the widest name.
        for i in 0..<150 {
            try await redis.command("XGROUP", "CREATECONSUMER", sports, settings.group, String(repeating: "c", count: 10_000) + "\(i)")
        }

        let report = try await Inspector(settings: settings, redis: redis).report()
        let dead = try #require(report.latestDeadLetters.first)
        #expect(dead.reasonBytes == 100_000 && dead.reason.utf8.count <= Inspector.deadLetterTextBytes)
        let table = report.rendered()
        let raw = table.unicodeScalars.filter { $0 != "\n" && VisibleText.needsEscape($0) }
        #expect(raw.isEmpty, "raw control characters: \(raw.map { String($0.value, radix: 16) })")
        let deadSection = try #require(section(table, from: "DEAD LETTERS", to: "REGISTRATIONS"))
        #expect(deadSection.utf8.count < 10_000, "dead-letter section is \(deadSection.utf8.count) bytes")
        #expect(deadSection.contains("\\x1b[2J\\x1b]0;owned\\x07\\r\\n\\u{9B}31m\\u{202E}gnol"), "\(deadSection)")
        #expect(deadSection.contains("… (100000 bytes)") && deadSection.contains("ac:\\x1b[31mred/1-0\\n"), "\(deadSection)")
        let consumers = try #require(section(table, from: "CONSUMERS", to: "DEAD LETTERS"))
        #expect(consumers.contains("a-evil\\x1b[2Jname"))
        #expect(consumers.contains("… and 51 more"), "\(consumers.suffix(300))")
        #expect(consumers.utf8.count < 50_000, "consumers section is \(consumers.utf8.count) bytes")
        #expect(table.utf8.count < 100_000, "table is \(table.utf8.count) bytes")

        // JSON escapes them too (C0 by JSON itself, DEL, C1 and bidi by the report), and decodes back.
        let json = try report.json()
        #expect(json.unicodeScalars.allSatisfy { $0 == "\n" || !VisibleText.needsEscape($0) })
        #expect(json.contains("\\u009b31m\\u202egnol"))
        let decoded = try JSONDecoder().decode(InspectReport.self, from: Data(json.utf8))
        #expect(decoded.latestDeadLetters.first?.reason == dead.reason)

        // What the command prints is the same.
        let (status, out, err) = try await runActivitycast(["inspect"], redis: server, settings: ["prefix": settings.prefix])
        #expect(status == 0, "\(err)")
        #expect(out.unicodeScalars.allSatisfy { $0 == "\n" || !VisibleText.needsEscape($0) } && out.utf8.count < 100_000)
    }

    @Test func countersShowEveryFieldWorkersIncrement() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let key = settings.keys.counters
        let inspector = Inspector(settings: settings, redis: redis)

        let empty = try await inspector.report()
        #expect(empty.counters.key == key && empty.counters.values.isEmpty && empty.counters.error == nil)
        #expect(empty.rendered().contains("COUNTERS  \(key)\n  (none)\n"))

        try await redis.command("HINCRBY", key, "registrations_stale", 3)
        try await redis.command("HINCRBY", key, "registrations_stale", 2)
        try await redis.command("HINCRBY", key, "entries_dead_lettered", 7)
        let report = try await inspector.report()
        #expect(report.counters.values == ["registrations_stale": 5, "entries_dead_lettered": 7])
        #expect(report.counters.error == nil && !report.counters.truncated)
        let table = report.rendered()
        #expect(table.contains("""
            COUNTERS  \(key)
              counter                value
              entries_dead_lettered  7
              registrations_stale    5

            """), "\(table)")

        // The command's JSON carries them too.
        let (status, json, err) = try await runActivitycast(["inspect", "--json"], redis: server, settings: ["prefix": settings.prefix])
        #expect(status == 0, "\(err)")
        let decoded = try JSONDecoder().decode(InspectReport.self, from: Data(json.utf8))
        #expect(decoded.counters.values == report.counters.values)

        // A value that is not an integer is named and left out; the others are shown.
        try await redis.command("HSET", key, "note", "hello")
        let odd = try await inspector.report()
        #expect(odd.counters.values.count == 2 && odd.counters.error == "\(key): not an integer, left out: 'note'")
        // A counters key of another type is this section's error only.
        try await redis.command("DEL", key)
        try await redis.command("SET", key, "x")
        let wrong = try await inspector.report()
        #expect(wrong.counters.error == "WRONGTYPE: \(key) is a string, not a hash" && wrong.errors.count == 1)
    }

    /// BUDGETS: one row per (key, audience) budget hash of the live keys, refilled to now with the
    /// settings' policy, with its counters and, for a coalesced state, when the schedule flushes it.
    @Test func budgetsShowTokensCountersAndDueFlushes() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let keys = settings.keys
        let policy = settings.budgets
        let match = try #require(ActivityKey(parsing: "match:4711")), trip = try #require(ActivityKey(parsing: "trip:t-1"))
        let gone = try #require(ActivityKey(parsing: "match:gone"))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        @discardableResult
        func decide(_ key: ActivityKey, _ audience: BudgetAudience, _ event: BudgetEvent, at ms: Int64) async throws -> BudgetDecision {
            let command = BudgetScripts.decideCommand(budgetKey: keys.budget(key, audience), event: event, nowMillis: ms,
                                                      policy: policy.audience(audience), ttlSeconds: 3600)
            return try BudgetScripts.parse(try await redis.send(command)).decision
        }
        try await redis.command("ZADD", keys.keysIndex, now, match.description, now, trip.description, now, "route:quiet")
        // match:4711's channel is on record with storage policy 1 (latest message).
        try await redis.command("HSET", "\(keys.prefix):{\(match)}:channels", "development", "ch-1 1 \(now - 120_000)")

        // Standard, a minute ago: three critical updates at 10, the fourth downgraded (the last
        // token is the end's reserve), then a routine one within the spacing: coalesced, due 30 s
        // after the last send, and scheduled then (30 s ago).
        let t0 = now - 60_000
        for ms in 1...3 { #expect(try await decide(match, .tier(.standard), .update(millis: Int64(ms), priority: .critical), at: t0) == .priority10) }
        #expect(try await decide(match, .tier(.standard), .update(millis: 4, priority: .critical), at: t0) == .priority5)
        #expect(try await decide(match, .tier(.standard), .update(millis: 5, priority: .routine), at: t0 + 1000)
            == .coalesce(dueAtMillis: t0 + 30_000))
        try await redis.command("ZADD", keys.budgetDue, t0 + 30_000, "\(match)|standard")
        // Frequent: a routine update, then a coalesced one that nothing scheduled.
        try await decide(match, .tier(.frequent), .update(millis: 10, priority: .routine), at: now - 5000)
        try await decide(match, .tier(.frequent), .update(millis: 11, priority: .routine), at: now - 4000)
        // The channel: the end at 10, then an update after it (stale). Sized by channel_latest_message.
        #expect(try await decide(match, .channel(.latestMessage), .end(millis: 20), at: t0) == .priority10)
        #expect(try await decide(match, .channel(.latestMessage), .update(millis: 21, priority: .routine), at: t0) == .stale)
        // trip:t-1 has no channel on record: its channel budget is sized by the transit routes'
        // storage policy (latest message). A routine update, then one coalesced and due in 55 s.
        try await decide(trip, .channel(.latestMessage), .update(millis: 30, priority: .routine), at: now - 5000)
        try await decide(trip, .channel(.latestMessage), .update(millis: 31, priority: .routine), at: now - 4000)
        try await redis.command("ZADD", keys.budgetDue, now + 55_000, "\(trip)|channel")
        // A key no longer in the index is not listed, but its due flush counts (overdue).
        try await decide(gone, .tier(.standard), .update(millis: 1, priority: .critical), at: t0)
        try await redis.command("ZADD", keys.budgetDue, now - 1000, "\(gone)|standard")
        // A budget key of the wrong type, and a hash that is no budget, are this section's error only.
        try await redis.command("SET", keys.budget(trip, .tier(.standard)), "x")
        try await redis.command("HSET", keys.budget(trip, .tier(.frequent)), "p10", "1")

        let asked = Int64(Date().timeIntervalSince1970 * 1000)
        let report = try await Inspector(settings: settings, redis: redis).report()
        let answered = Int64(Date().timeIntervalSince1970 * 1000)
        let at = report.budgets.nowMillis  // Redis's clock (the same machine's here): read while the report was made
        #expect(report.budgets.redisClock && at >= asked - 5 && at <= answered + 5, "\(asked) \(at) \(answered)")
        let budgets = report.budgets
        #expect(budgets.budgets.map { "\($0.key)|\($0.audience)" } == ["match:4711|standard", "match:4711|frequent", "match:4711|channel", "trip:t-1|channel"])
        let standard = try #require(budgets.budgets.first)
        // One token left a minute ago, plus 8 per hour since (8 ticks per ms).
        #expect(standard.ticks == BudgetState.ticksPerToken + 8 * (at - (t0 + 1000)) + 8 * 1000)
        #expect(standard.capacity == 4 && standard.policy == "standard" && standard.policyKnown)
        #expect(standard.priority10 == 3 && standard.priority5 == 1 && standard.downgraded == 1 && standard.coalesced == 1)
        #expect(standard.pendingMillis == 5 && standard.dueAtMillis == t0 + 30_000)
        let channel = budgets.budgets[2], tripChannel = budgets.budgets[3]
        #expect(channel.policy == "channel_latest_message" && channel.policyKnown && channel.capacity == 2)
        #expect(channel.priority10 == 1 && channel.stale == 1 && channel.endedMillis == 20)
        #expect(tripChannel.policy == "channel_latest_message" && !tripChannel.policyKnown && tripChannel.dueAtMillis == now + 55_000)
        #expect(budgets.scheduled == 3 && budgets.overdue == 2 && budgets.schedule == keys.budgetDue && !budgets.truncated)
        #expect(budgets.error == "2 budgets not read, the first: WRONGTYPE: \(keys.budget(trip, .tier(.standard))) is a string, not a hash")
        #expect(report.errors == [budgets.error])

        // The table: one line per budget, columns as the header names them.
        let table = report.rendered()
        let text = try #require(table.range(of: "\nBUDGETS").map { String(table[$0.lowerBound...]) })  // the last section
        // Cells are apart by two spaces or more; within a cell, by one.
        let rows = text.split(separator: "\n").map {
            $0.components(separatedBy: "  ").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        #expect(rows.first == ["BUDGETS", "tokens refilled to now with budgets.*"], "\(text)")
        #expect(rows.dropFirst().first == ["key", "audience", "tokens", "capacity", "p10", "p5", "downgraded", "coalesced", "flushed", "stale", "unchanged", "waiting"],
                "\(text)")
        let overdue = "overdue \((at - (t0 + 30_000)) / 1000) s", dueIn = "due in \((now + 55_000 - at + 999) / 1000) s"
        #expect(rows.contains(["match:4711", "standard", "1.1", "4", "3", "1", "1", "1", "0", "0", "0", overdue]), "\(text)")
        #expect(rows.contains(["match:4711", "frequent", "10.0", "10", "0", "1", "0", "1", "0", "0", "0", "not scheduled"]), "\(text)")
        #expect(rows.contains(["match:4711", "channel (latest-message)", "1.0", "2", "1", "0", "0", "0", "0", "1", "0", "-"]), "\(text)")
        #expect(rows.contains(["trip:t-1", "channel (latest-message?)", "2.0", "2", "0", "1", "0", "1", "0", "0", "0", dueIn]), "\(text)")
        #expect(text.contains("\n  error: 2 budgets not read, the first: WRONGTYPE: \(keys.budget(trip, .tier(.standard))) is a string, not a hash\n"), "\(text)")
        #expect(text.contains("\n  due flushes in \(keys.budgetDue): 3, overdue 2\n"), "\(text)")
        #expect(!text.contains("gone") && !text.contains("route:quiet"))

        // The command prints the same section, and its JSON carries every budget.
        let (status, out, err) = try await runActivitycast(["inspect"], redis: server, settings: ["prefix": settings.prefix])
        #expect(status == 0, "\(err)")
        #expect(out.contains("\nBUDGETS  tokens refilled to now with budgets.*\n") && out.contains("channel (latest-message?)"), "\(out)")
        #expect(out.contains("due flushes in \(keys.budgetDue): 3, overdue 2"), "\(out)")
        let (jsonStatus, json, jsonErr) = try await runActivitycast(["inspect", "--json"], redis: server, settings: ["prefix": settings.prefix])
        #expect(jsonStatus == 0, "\(jsonErr)")
        let decoded = try JSONDecoder().decode(InspectReport.self, from: Data(json.utf8))
        #expect(decoded.budgets.budgets.map(\.key) == budgets.budgets.map(\.key) && decoded.budgets.overdue == 2)
        #expect(decoded.budgets.budgets.first?.dueAtMillis == t0 + 30_000 && decoded.budgets.error == budgets.error)
    }

    /// A critical update decides both tiers, one without devices too (docs/sending.md): the tier
    /// with no per-token device of the key is not listed by default, counted, and listed with
    /// `--all-budgets`. A registration without its own tier takes its device's (standard without).
    @Test func budgetsOfTiersWithoutDevicesAreHiddenByDefault() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let keys = settings.keys
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let both = try #require(ActivityKey(parsing: "match:both")), frequent = try #require(ActivityKey(parsing: "match:frequent"))
        let byDevice = try #require(ActivityKey(parsing: "match:bydevice")), unknown = try #require(ActivityKey(parsing: "match:unknown"))
        var commands: [RedisCommand] = []
        for key in [both, frequent, byDevice, unknown] {
            commands.append(RedisCommand("ZADD", keys.keysIndex, now, key.description))
            for tier in [Tier.standard, .frequent] {
                commands.append(BudgetScripts.decideCommand(budgetKey: keys.budget(key, .tier(tier)), event: .update(millis: 1, priority: .critical),
                                                            nowMillis: now, policy: settings.budgets.audience(.tier(tier)), ttlSeconds: 600))
            }
        }
        // match:both: a frequent device and one whose tier is its device's (none: standard).
        commands.append(RedisCommand("HSET", keys.direct(both), "_", "1", "a1", "\(now) d1 - frequent 0 tok1", "a2", "\(now) d2 - - 0 tok2"))
        // match:frequent: frequent devices only, one by its registration, one by its device's setting.
        commands.append(RedisCommand("HSET", keys.direct(frequent), "_", "1", "a3", "\(now) d3 - frequent 0 tok3", "a4", "\(now) d4 - - 0 tok4"))
        commands.append(RedisCommand("HSET", keys.device("d4"), "tier", "frequent"))
        // match:bydevice: a device whose setting says standard.
        commands.append(RedisCommand("HSET", keys.direct(byDevice), "_", "1", "a5", "\(now) d5 - - 0 tok5"))
        commands.append(RedisCommand("HSET", keys.device("d5"), "tier", "standard"))
        // match:unknown has no `direct` hash (its audience is not known): every tier is listed.
        _ = try await redis.pipeline(commands)

        let report = try await Inspector(settings: settings, redis: redis).report()
        let rows = report.budgets.budgets.map { "\($0.key)|\($0.audience)" }
        #expect(rows == ["match:both|standard", "match:both|frequent", "match:bydevice|standard", "match:frequent|frequent",
                         "match:unknown|standard", "match:unknown|frequent"], "\(rows)")
        #expect(report.budgets.hiddenWithoutDevices == 2)
        #expect(report.rendered().contains("\n  2 tiers' budgets not shown: no device of that tier (--all-budgets shows them)\n"))
        let all = try await Inspector(settings: settings, redis: redis).report(allBudgets: true)
        #expect(all.budgets.budgets.count == 8 && all.budgets.hiddenWithoutDevices == 0)
        #expect(!all.rendered().contains("not shown: no device"))
        let (status, out, err) = try await runActivitycast(["inspect", "--all-budgets"], redis: server, settings: ["prefix": settings.prefix])
        #expect(status == 0 && out.contains("match:frequent  standard"), "\(err)\(out)")
    }

    /// Many keys with budgets: the table stops at `rowLimit` rows and says how many more; the
    /// JSON has them all.
    @Test func manyBudgetsAreCappedInTheTable() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let keys = settings.keys
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var commands: [RedisCommand] = []
        for i in 0..<130 {
            let key = try #require(ActivityKey(parsing: "match:m\(1000 + i)"))
            commands.append(RedisCommand("ZADD", keys.keysIndex, now, key.description))
            commands.append(BudgetScripts.decideCommand(budgetKey: keys.budget(key, .tier(.standard)), event: .update(millis: 1, priority: .critical),
                                                        nowMillis: now, policy: settings.budgets.standard, ttlSeconds: 600))
        }
        _ = try await redis.pipeline(commands)
        let report = try await Inspector(settings: settings, redis: redis).report()
        #expect(report.budgets.budgets.count == 130 && report.budgets.error == nil)
        let table = report.rendered()
        #expect(table.contains("  … and 30 more (inspect --json lists them all)\n  due flushes in \(keys.budgetDue): 0, overdue 0\n"), "\(table.suffix(500))")
        #expect(table.contains("match:m1099") && !table.contains("match:m1100"))
    }

    /// A user without `TIME` still gets the section, measured on this machine's clock, and is told.
    @Test(.enabled(if: RedisServer.clusterPrimaries == nil, "a user without TIME on the one Redis: on one Redis only (ACTIVITYCAST_TEST_REDIS_CLUSTER)"))
    func budgetsFallBackToTheLocalClockWithoutTime() async throws {
        let server = try await RedisServer()
        let admin = server.connection()
        defer { admin.close() }
        _ = try await admin.send(RedisCommand("ACL", "SETUSER", "noclock", "on", ">pw", "~*", "&*", "+@all", "-time"))
        let settings = try testSettings(server, ["redis.url": "redis://noclock:pw@127.0.0.1:\(server.port)"])
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let key = try #require(ActivityKey(parsing: "match:7"))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try await admin.send(RedisCommand("ZADD", settings.keys.keysIndex, now, key.description))
        _ = try await admin.send(BudgetScripts.decideCommand(budgetKey: settings.keys.budget(key, .tier(.standard)),
                                                             event: .update(millis: 1, priority: .critical), nowMillis: now,
                                                             policy: settings.budgets.standard, ttlSeconds: 600))
        let report = try await Inspector(settings: settings, redis: redis).report()
        #expect(!report.budgets.redisClock && report.budgets.nowMillis == report.generatedAtMillis)
        #expect(report.budgets.budgets.map(\.priority10) == [1] && report.errors.isEmpty, "\(report.errors)")
        #expect(report.rendered().contains("BUDGETS  tokens refilled to now with budgets.* (this machine's clock: Redis refused TIME)\n"))
    }

    /// The text from the line starting with `from` up to the line starting with `to`.
    func section(_ text: String, from: String, to: String) -> Substring? {
        guard let start = text.range(of: "\n" + from), let end = text.range(of: "\n" + to, range: start.upperBound..<text.endIndex) else {
            return nil
        }
        return text[start.upperBound..<end.lowerBound]
    }
}
