import ActivityCastInspect
import Foundation
import RedisClient
import Testing
import TestSupport

/// `activitycast deadletters`: list (by reason), show, replay (once unless forced, never a letter
/// copied in part) and discard, through the command against a worker's real dead letters.
extension SendTests {
    @Test func deadLettersAreListedShownReplayedAndDiscarded() async throws {
        let r = try await rig()
        defer { r.redis.close() }
        let w = try r.worker("w")
        defer { w.removeLogs() }
        let device = token("d1")
        try await register(r, device: "d", key: "match:dl1", activity: "A", token: device, ts: now() - 60_000)
        // A real dead letter: a score that isn't a number.
        let sports = r.settings.feeds[0].stream
        try await r.add(sports, [("type", "match.score"), ("ts", String(now())), ("match", "dl1"), ("home_score", "x"), ("away_score", "0")])
        #expect(await eventually { await r.drainedAll() })
        // A letter of a good event, as a worker writes one (its first deliveries failed for APNs, say).
        let good = try #require(try await r.redis.send(RedisCommand(
            "XADD", r.settings.deadLetterStream, "*", "reason", "sending failed 5 times: APNs kept answering 500", "stream", sports, "id", "1-1",
            "deliveries", 5, "consumer", "w", "at", now(), "f:type", "match.score", "f:ts", String(now()), "f:match", "dl1",
            "f:home_score", "3", "f:away_score", "1")).string)
        let cut = try #require(try await r.redis.send(RedisCommand(
            "XADD", r.settings.deadLetterStream, "*", "reason", "entry too large", "stream", sports, "id", "1-2", "deliveries", 1,
            "truncated", "no fields copied: the entry was too large to read (9 fields, 99999 bytes)")).string)
        let settings = ["prefix": r.settings.prefix]
        func cli(_ args: [String]) async throws -> (Int32, String, String) { try await runActivitycast(["deadletters"] + args, redis: r.server, settings: settings) }

        var (status, out, err) = try await cli(["list"])
        #expect(status == 0, "\(err)")
        #expect(out.hasPrefix("DEAD LETTERS in \(r.settings.deadLetterStream): 3; 3 shown, every entry read\n"), "\(out)")
        #expect(out.contains(good) && out.contains(cut) && out.contains("home_score"), "\(out)")
        (status, out, err) = try await cli(["list", "--reason", "HOME_SCORE", "--json"])
        #expect(status == 0, "\(err)")
        let listing = try JSONDecoder().decode(DeadLetterTool.Listing.self, from: Data(out.utf8))
        #expect(listing.letters.count == 1 && listing.total == 3 && listing.complete)
        let real = try #require(listing.letters.first)
        #expect(real.stream == sports && real.fields.map(\.name) == ["type", "ts", "match", "home_score", "away_score"] && real.replayed == nil)

        (status, out, err) = try await cli(["show", good])
        #expect(status == 0 && out.contains("APNs kept answering 500") && out.contains("home_score  3"), "\(err)\(out)")
        (status, _, err) = try await cli(["show", "1-0"])
        #expect(status == 1 && err.contains("no dead letter 1-0"), "\(err)")

        // Replayed: the event goes to its stream again and the device shows it.
        (status, out, err) = try await cli(["replay", good])
        #expect(status == 0 && out.contains("\(good)  replayed to \(sports) as "), "\(err)\(out)")
        #expect(await eventually { state(try? await r.device(device))["homeScore"] as? Int == 3 })
        let replayedEntry = try await r.redis.send(RedisCommand("XREVRANGE", sports, "+", "-", "COUNT", 1))
        #expect("\(replayedEntry)".contains("x-replayed-from") && "\(replayedEntry)".contains(good))
        // Once, unless forced; a letter copied in part never.
        (status, out, _) = try await cli(["replay", good])
        #expect(status == 1 && out.contains("not replayed: already replayed at ") && out.contains("--force"), "\(out)")
        (status, out, _) = try await cli(["replay", "--force", good])
        #expect(status == 0 && out.contains("replayed to"), "\(out)")
        (status, out, _) = try await cli(["replay", cut])
        #expect(status == 1 && out.contains("not replayed: its entry was not copied whole"), "\(out)")
        (status, out, _) = try await cli(["list"])
        let rows = out.split(separator: "\n")
        #expect(rows.contains { $0.contains(good) && $0.contains(" as ") } && rows.contains { $0.contains(cut) && $0.contains("can't") }, "\(out)")

        // --all by reason: the bad score goes again, and is dead-lettered again, carrying where it came from.
        (status, out, _) = try await cli(["replay", "--all", "--reason", "home_score"])
        #expect(status == 0 && out.contains("\(real.id)  replayed to"), "\(out)")
        #expect(await eventually { await r.drainedAll() })
        (status, out, _) = try await cli(["list", "--reason", "home_score", "--json"])
        let again = try JSONDecoder().decode(DeadLetterTool.Listing.self, from: Data(out.utf8))
        #expect(again.letters.count == 2 && again.letters[0].fields.contains { $0.name == "x-replayed-from" && $0.value == real.id }, "\(out)")

        (status, out, _) = try await cli(["discard", cut, "1-0"])
        #expect(status == 1 && out.contains("discarded 1 of 2") && out.contains("1-0  not found"), "\(out)")
        #expect(try await r.redis.send(RedisCommand("XLEN", r.settings.deadLetterStream)).int == 3)
        (status, _, err) = try await cli(["replay", "--reason", "x"])
        #expect(status != 0 && err.contains("--reason goes with --all"), "\(err)")
        #expect(await w.stop() == 0)
    }
}
