import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSettings
import ActivityCastWorker
import ArgumentParser
import Foundation
import RedisClient

struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Add an event or registration to its stream (an example, or the fields you give).",
        discussion: """
        Examples:
          activitycast publish match.score match=4711 home_score=1 away_score=0
          activitycast publish activity.token            (the built-in example)
          activitycast publish --list
        `ts` defaults to now. On a sharded feed (streams.shards) the entry goes to its key's shard.
        The entry is not validated here: a bad one becomes a dead letter,
        which is how the worker's error handling can be demonstrated.
        """)

    @OptionGroup var common: CommonOptions

    @Argument(help: "The entry type (match.score, trip.eta, activity.token, …).")
    var type: String?

    @Argument(help: "Fields as name=value; none: the type's example fields.")
    var fields: [String] = []

    @Option(help: "Stream to add to (default: the configured stream for the type's kind).")
    var stream: String?

    @Option(help: "Add the entry this many times (pipelined).")
    var count = 1

    @Flag(help: "List the types with their example fields.")
    var list = false

    func validate() throws {
        // An empty --stream would XADD to the key "" (and control characters to a name no one
        // can read back in a terminal): the same rule as the configured stream names.
        if let stream, let problem = SettingsLoader.nameProblem(stream) {
            throw ValidationError("--stream: the stream name \(problem)")
        }
    }

    func run() async throws {
        if list {
            for e in Examples.byType {
                print("\(e.type.padding(toLength: 16, withPad: " ", startingAt: 0)) \(e.kind.rawValue.padding(toLength: 14, withPad: " ", startingAt: 0)) \(e.fields.map { "\($0.0)=\($0.1)" }.joined(separator: " "))")
            }
            return
        }
        guard let type else { throw ValidationError("give an entry type, or --list") }
        guard count >= 1 && count <= 10_000_000 else { throw ValidationError("--count must be 1…10000000") }
        let settings = try common.settings()
        var pairs: [(String, String)]
        if fields.isEmpty {
            guard let example = Examples.fields(for: type) else { throw ValidationError("no example for '\(type)'; give fields as name=value (see --list)") }
            pairs = example.fields
        } else {
            pairs = try fields.map { f in
                guard let eq = f.firstIndex(of: "="), eq != f.startIndex else { throw ValidationError("fields are name=value, got '\(f)'") }
                return (String(f[..<eq]), String(f[f.index(after: eq)...]))
            }
        }
        if !pairs.contains(where: { $0.0 == "ts" }) { pairs.insert(("ts", String(Int64(Date().timeIntervalSince1970 * 1000))), at: 0) }
        pairs.insert(("type", type), at: 0)
        let target: String
        if let stream {
            target = stream
        } else {
            switch Examples.kind(of: type) {
            case .registrations: target = settings.registrationsStream
            case .some(let kind):
                // A sharded feed: the shard of the entry's key (FeedShards).
                guard let feed = settings.feedStream(kind, fields: pairs) else { throw ValidationError("no \(kind.rawValue) feed is configured; use --stream") }
                target = feed
            case nil: throw ValidationError("unknown type '\(type)': say which stream with --stream")
            }
        }
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let command = RedisCommand("XADD", [target, "*"] + pairs.flatMap { [$0.0, $0.1] as [any RedisArgument] })
        var remaining = count
        var lastID = ""
        while remaining > 0 {
            let n = min(remaining, 1000)
            let replies = try await redis.pipeline(Array(repeating: command, count: n))
            for r in replies { lastID = try r.orThrow("XADD").string ?? "" }
            remaining -= n
        }
        print(count == 1 ? "\(target) \(lastID)" : "\(target) \(count) entries, last \(lastID)")
    }
}
