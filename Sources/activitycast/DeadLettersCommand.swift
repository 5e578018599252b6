import ActivityCastCommandSupport
import ActivityCastInspect
import ActivityCastSettings
import ArgumentParser
import Foundation
import RedisClient

/// `activitycast deadletters list|show|replay|discard`: the dead-letter stream, by its own ids.
struct DeadLettersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deadletters",
        abstract: "List, show, replay or discard dead letters (by the dead letter's own entry id).",
        subcommands: [List.self, Show.self, Replay.self, Discard.self])

    /// Runs `body` with the tool on the configured Redis; a Redis failure is the command's.
    static func withTool<T>(_ common: CommonOptions, _ body: (DeadLetterTool) async throws -> T) async throws -> T {
        let settings = try common.settings()
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        do {
            return try await body(DeadLetterTool(settings: settings, redis: redis))
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure("deadletters failed: \(error)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The newest dead letters, or those whose reason contains a text.")
        @OptionGroup var common: CommonOptions
        @Option(help: "Only letters whose reason contains this text (case-insensitive).")
        var reason: String?
        @Option(help: "At most this many letters (1-10000).")
        var limit = 20
        @Option(help: "Read at most this many entries looking for them (a stream has no index).")
        var scan = 10_000
        @Flag(help: "Print JSON instead of a table.")
        var json = false

        func validate() throws {
            guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be 1-10000, got \(limit)") }
            guard (1...10_000_000).contains(scan) else { throw ValidationError("--scan must be 1-10000000, got \(scan)") }
        }

        func run() async throws {
            let listing = try await DeadLettersCommand.withTool(common) { try await $0.list(reason: reason, limit: limit, scan: scan) }
            print(json ? try SafeJSON.encode(listing) : DeadLetterText.listing(listing), terminator: json ? "\n" : "")
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One dead letter with every field it copied.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "The dead letter's entry id.")
        var id: String
        @Flag(help: "Print JSON.")
        var json = false

        func run() async throws {
            guard let letter = try await DeadLettersCommand.withTool(common, { try await $0.show(id) }) else {
                throw CommandFailure("no dead letter \(VisibleText.escaped(id, limit: 100))")
            }
            print(json ? try SafeJSON.encode(letter) : DeadLetterText.letter(letter), terminator: json ? "\n" : "")
        }
    }

    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add letters' entries, as they were (ts included), to the streams they came from, with x-replayed-from.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "Dead letter ids.")
        var ids: [String] = []
        @Flag(help: "Every letter (with --reason: every letter whose reason contains it).")
        var all = false
        @Option(help: "With --all: only letters whose reason contains this text.")
        var reason: String?
        @Option(help: "With --all: read at most this many letters.")
        var scan = 100_000
        @Flag(help: "Replay a letter replayed before.")
        var force = false

        func validate() throws {
            if reason != nil && !all { throw ValidationError("--reason goes with --all") }
            if all == !ids.isEmpty { throw ValidationError("give dead letter ids, or --all (with --reason to pick by reason)") }
        }

        func run() async throws {
            let results = try await DeadLettersCommand.withTool(common) { tool in
                var ids = self.ids
                if all {
                    // Oldest first: registrations and events go back in their order.
                    ids = try await tool.list(reason: reason, limit: scan, scan: scan).letters.map(\.id).reversed()
                }
                return try await tool.replay(ids, force: force)
            }
            var refused = 0
            for (id, outcome) in results {
                switch outcome {
                case .replayed(let stream, let entry): print("\(id)  replayed to \(VisibleText.escaped(stream, limit: 200)) as \(entry)")
                case .refused(let why):
                    refused += 1
                    print("\(VisibleText.escaped(id, limit: 100))  not replayed: \(VisibleText.escaped(why, limit: 400))")
                }
            }
            if results.isEmpty { print("no dead letters matched") }
            if refused > 0 { throw ExitCode(1) }
        }
    }

    struct Discard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete dead letters by id.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "Dead letter ids.")
        var ids: [String]

        func run() async throws {
            let missing = try await DeadLettersCommand.withTool(common) { try await $0.discard(ids) }
            print("discarded \(ids.count - missing.count) of \(ids.count)")
            for id in missing { print("\(VisibleText.escaped(id, limit: 100))  not found") }
            if !missing.isEmpty { throw ExitCode(1) }
        }
    }
}

/// The terminal's view of dead letters.
enum DeadLetterText {
    static func listing(_ l: DeadLetterTool.Listing) -> String {
        let filter = l.reasonFilter.map { ", reason contains '\(VisibleText.escaped($0, limit: 100))'" } ?? ""
        var out = "DEAD LETTERS in \(VisibleText.escaped(l.stream, limit: 200)): \(l.total)\(filter); \(l.letters.count) shown, "
            + (l.complete ? "every entry read\n" : "the newest \(l.scanned) entries read (--scan reads more)\n")
        out += TextTable.render([["id", "at", "from", "entry", "deliveries", "replayed", "reason"]] + l.letters.map { d in
            [d.id, d.atMillis.map(DeadLetterTool.utc) ?? "-", VisibleText.escaped(d.stream, limit: 60), VisibleText.escaped(d.entryID, limit: 40),
             d.deliveries.map(String.init) ?? "-", d.replayed.map { "as \($0.entryID)" } ?? (d.unreplayable == nil ? "no" : "can't"),
             VisibleText.escaped(d.reason, limit: 120)]
        }, limit: 10_000, more: "")
        return out
    }

    static func letter(_ d: DeadLetter) -> String {
        func cell(_ s: String) -> String { VisibleText.escaped(s, limit: 2000) }
        var out = "dead letter \(d.id)\n"
        out += "  reason      \(cell(d.reason))\n"
        out += "  from        \(cell(d.stream)) \(cell(d.entryID))\n"
        out += "  at          \(d.atMillis.map(DeadLetterTool.utc) ?? "-")  deliveries \(d.deliveries.map(String.init) ?? "-")  consumer \(cell(d.consumer ?? "-"))\n"
        out += "  replayed    \(d.replayed.map { "\(DeadLetterTool.utc($0.atMillis)) as \($0.entryID)" } ?? "no")\n"
        if let why = d.unreplayable { out += "  replay      not possible: \(cell(why))\n" }
        out += "  fields\n"
        out += TextTable.render([["name", "value"]] + d.fields.map { [cell($0.name), cell($0.value)] }, limit: 1000, more: "")
        return out
    }
}
