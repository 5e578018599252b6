import ActivityCastSettings
import ActivityCastWorker
import Foundation
import Logging
import RedisClient
import TestSupport

/// Settings for a test worker against `server`, with a unique prefix and fast timings.
func testSettings(_ server: RedisServer, _ extra: [String: String] = [:]) throws -> Settings {
    var overrides = [
        "redis.url": server.urlString, "prefix": "t\(UInt32.random(in: 0...UInt32.max))",
        "worker.block_ms": "100", "worker.claim_interval_ms": "200", "worker.visibility_timeout_ms": "2000", "worker.send": "false",
        "worker.shutdown_deadline_ms": "5000",
    ]
    overrides.merge(extra) { _, new in new }
    return try SettingsLoader.load(file: nil, environment: [:], overrides: overrides)
}

let quietLogger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// The group's view of `stream`: entries delivered and pending.
struct GroupState: Equatable {
    var entriesRead: Int64
    var pending: Int64
    var lag: Int64?
}

func groupState(_ redis: RedisConnection, stream: String, group: String = "activitycast") async throws -> GroupState? {
    let reply = try await redis.send(RedisCommand("XINFO", "GROUPS", stream))
    for g in reply.array ?? [] {
        let items = g.array ?? []
        var map: [String: RESPValue] = [:]
        var i = 0
        while i + 1 < items.count { if let k = items[i].string { map[k] = items[i + 1] }; i += 2 }
        if map["name"]?.string == group {
            return GroupState(entriesRead: map["entries-read"]?.int ?? 0, pending: map["pending"]?.int ?? 0,
                              lag: map["lag"].flatMap { $0.isNull ? nil : $0.int })
        }
    }
    return nil
}

/// The keys matching `pattern` on every node serving data (the one Redis, or every primary of a
/// cluster: `KEYS` has no key to be routed by).
func keysEverywhere(_ redis: RedisConnection, _ pattern: String) async throws -> [String] {
    var names: [String] = []
    for node in try await redis.primaries() {
        names += try await redis.pipeline([RedisCommand("KEYS", pattern)], on: node)[0].array?.compactMap(\.string) ?? []
    }
    return names
}

/// True once every entry of `stream` was delivered to the group and none is pending.
func drained(_ redis: RedisConnection, _ stream: String) async -> Bool {
    guard let s = try? await groupState(redis, stream: stream) else { return false }
    return s.lag == 0 && s.pending == 0
}

/// True once every input stream and the slices stream are drained.
func drained(_ redis: RedisConnection, _ settings: Settings) async -> Bool {
    for stream in settings.inputStreams.map(\.stream) + settings.keys.sliceStreams where !(await drained(redis, stream)) { return false }
    return true
}

func xadd(_ redis: RedisConnection, _ stream: String, _ fields: [(String, String)]) async throws -> String {
    try await redis.send(RedisCommand("XADD", [stream, "*"] + fields.flatMap { [$0.0, $0.1] as [any RedisArgument] })).string ?? ""
}

/// Runs an in-process worker for the duration of `body`, then stops it and returns its counters.
func withWorker(_ settings: Settings, _ body: (Worker) async throws -> Void) async throws -> WorkerStats.Snapshot {
    let worker = Worker(settings: settings, logger: quietLogger)
    let task = Task { try await worker.run() }
    do {
        try await body(worker)
    } catch {
        worker.requestStop()
        _ = try? await task.value
        throw error
    }
    worker.requestStop()
    return try await task.value
}

/// Adds `count` valid entries in pipelined chunks: feed events on both feeds and, every fifth, a
/// follow. Returns the feed entries as `stream/id`, the way plan lines name them.
func publishMixed(_ redis: RedisConnection, _ settings: Settings, count: Int, from start: Int = 0) async throws -> [String] {
    var feedEntries: [String] = []
    var i = start
    while i < start + count {
        let n = min(1000, start + count - i)
        var commands: [RedisCommand] = []
        var streams: [String?] = []
        for k in i..<(i + n) {
            if k % 5 == 4 {
                commands.append(RedisCommand("XADD", settings.registrationsStream, "*", "type", "follow", "ts", 1000 + k,
                                             "device", "d-\(k)", "target", "team:t\(k % 20)"))
                streams.append(nil)
            } else if k % 2 == 0 {
                commands.append(RedisCommand("XADD", settings.feeds[0].stream, "*", "type", "match.score", "ts", 1000 + k,
                                             "match", "m\(k % 50)", "home_score", k % 9, "away_score", k % 4))
                streams.append(settings.feeds[0].stream)
            } else {
                commands.append(RedisCommand("XADD", settings.feeds[1].stream, "*", "type", "trip.eta", "ts", 1000 + k,
                                             "trip", "t\(k % 50)", "stop", "s\(k % 7)", "eta", 2_000_000 + k))
                streams.append(settings.feeds[1].stream)
            }
        }
        let replies = try await redis.pipeline(commands)
        for (reply, stream) in zip(replies, streams) {
            guard let stream else { continue }
            feedEntries.append("\(stream)/\(try reply.orThrow().string ?? "")")
        }
        i += n
    }
    return feedEntries
}

/// The most of `times` (sorted) that fall within any window of `span` (same unit): the busiest
/// second, hour, … of a delivery log.
func mostWithin(_ span: Int64, of times: [Int64]) -> Int {
    var most = 0, j = 0
    for i in times.indices {
        while times[i] - times[j] >= span { j += 1 }
        most = max(most, i - j + 1)
    }
    return most
}

extension SandboxProcess {
    /// Every delivery in the sandbox's log, oldest first (paged, `GET /sandbox/deliveries?since=`).
    /// Fails if the log overwrote any (the sandbox's `--delivery-log` was too small).
    func deviceDeliveries() async throws -> [FanoutTests.Delivered] {
        var out: [FanoutTests.Delivered] = []
        var since = 0
        let file = directory.path + "/deliveries-page.json"
        while true {
            let curl = try ChildProcess(executable: "/usr/bin/curl",
                                        arguments: ["-s", "--http2", "--cacert", "\(directory.path)/cert.pem", "-o", file,
                                                    "-w", "%{http_code}", "https://127.0.0.1:\(port)/sandbox/deliveries?since=\(since)&limit=50000"],
                                        logName: "curl")
            defer { curl.removeLogs() }
            guard await curl.waitForExit(timeout: .seconds(60)) == 0, curl.stdout == "200" else {
                throw RedisServerError(description: "GET /sandbox/deliveries failed: \(curl.stdout) \(curl.stderr)")
            }
            let data = try Data(contentsOf: URL(fileURLWithPath: file))
            guard let page = try JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let list = page["deliveries"] as? [[String: Any]], let last = page["last"] as? Int else {
                throw RedisServerError(description: "GET /sandbox/deliveries: not a page")
            }
            let overwritten = page["overwritten"] as? Int ?? 0
            if overwritten > 0 { throw RedisServerError(description: "the sandbox's delivery log overwrote \(overwritten) deliveries: raise --delivery-log") }
            for d in list {
                guard let sequence = d["sequence"] as? Int else { continue }
                since = sequence
                guard d["kind"] as? String == "device", let target = d["target"] as? String else { continue }
                out.append(FanoutTests.Delivered(target: target, timestamp: (d["timestamp"] as? NSNumber)?.doubleValue ?? -1,
                                     event: d["event"] as? String ?? "", timeMillis: (d["timeMillis"] as? NSNumber)?.int64Value ?? 0,
                                     priority: (d["priority"] as? NSNumber)?.intValue ?? 0))
            }
            if list.isEmpty || since >= last { break }
        }
        try? FileManager.default.removeItem(atPath: file)
        return out
    }
}
