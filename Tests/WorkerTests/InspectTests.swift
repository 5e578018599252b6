import ActivityCastCore
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

    /// The text from the line starting with `from` up to the line starting with `to`.
    func section(_ text: String, from: String, to: String) -> Substring? {
        guard let start = text.range(of: "\n" + from), let end = text.range(of: "\n" + to, range: start.upperBound..<text.endIndex) else {
            return nil
        }
        return text[start.upperBound..<end.lowerBound]
    }
}
