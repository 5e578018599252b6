import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import ActivityCastSettings
import ActivityCastWorker
import APNs
import APNsCore
import ArgumentParser
import Foundation
import Logging
import RedisClient

/// Per-token fan-out end to end: an activity key whose audience is N tokens loaded straight into
/// Redis (docs/schema.md: `{key}:tokens` and `{key}:meta`), one `match.score` event `XADD`ed to
/// the sports feed, and the time until the sandbox has received the last of the N device pushes
/// (`/sandbox/stats`: `devicePushes`, `lastDevicePushMicros`). Compared with h2load sending N
/// requests of the same shape (headers, the fan-out's own payload, distinct device tokens)
/// through the same connections and streams to the same sandbox. Also: the workers' peak RSS
/// (VmHWM) during each fan-out, the CPU of every process, and what Redis processed per event
/// for small and large audiences.
struct FanoutBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout",
        abstract: "Per-token fan-out: tokens/s from XADD to the sandbox's last receipt, against h2load; workers' peak RSS; Redis work per event by audience size.",
        discussion: """
        Needs workers consuming the same Redis and prefix and sending to the sandbox given here. scripts/bench-fanout.sh
        starts them all on free loopback ports. Writes under the configured prefix and deletes the audiences it loaded;
        use a Redis nobody else uses.
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "The sandbox, host:port (default: sandbox.listen). Its certificate and key are read from sandbox.dir.") var sandbox: String?
    @Option(help: "Audience sizes to fan out to, comma-separated.") var tokens = "100000,1000000"
    @Option(help: "Runs per audience size (each a fresh key and audience); medians are reported.") var runs = 1
    @Option(help: "Audience sizes for the Redis-work-per-event measurement, comma-separated ('none' to skip).") var trips = "1,1000,100000"
    @Option(help: "Label of this sitting in the output (e.g. '1 worker').") var label = ""
    @Option(help: "A worker's PID (repeatable): its CPU, threads and peak RSS are reported.") var workerPid: [Int32] = []
    @Option(help: "The sandbox's PID: its CPU and busiest thread are reported.") var sandboxPid: Int32?
    @Option(help: "redis-server's PID (once per node of a cluster): its CPU is reported.") var redisPid: [Int32] = []
    @Option(help: "The h2load binary.") var h2load = "/usr/bin/h2load"
    @Flag(help: "Skip the h2load comparison.") var noH2load = false
    @Flag(name: .customLong("uuid-ids"), help: "Activity and device ids of 36 characters, as an app's UUIDs are (default: a<n> and d<n>, short enough for Swift's inline strings).")
    var uuidIDs = false
    @Option(help: "Give up on a fan-out when the sandbox has received nothing new for this many seconds.") var stallTimeout = 60.0

    func parseList(_ text: String, _ name: String) throws -> [Int] {
        if text == "none" || text.isEmpty { return [] }
        let values = text.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard values.allSatisfy({ $0 != nil && $0! >= 1 && $0! <= 10_000_000 }) else {
            throw ValidationError("--\(name) is a comma-separated list of sizes 1…10000000, got '\(text)'")
        }
        return values.map { $0! }
    }

    func validate() throws {
        _ = try parseList(tokens, "tokens")
        _ = try parseList(trips, "trips")
        guard runs >= 1 else { throw ValidationError("--runs must be at least 1") }
    }

    func run() async throws {
        let (settings, logger) = try benchSetup(common, sandbox: sandbox)
        let bench = try Bench(settings: settings, logger: logger, workers: workerPid, sandboxPid: sandboxPid, redisPid: redisPid, stallTimeout: stallTimeout,
                              uuidIDs: uuidIDs)
        defer { bench.close() }
        let admin = bench.admin, feed = bench.feed
        let tag = label.isEmpty ? "" : "[\(label)] "
        let c = settings.apns.connections, m = settings.apns.maxConcurrentStreams
        print("\(tag)target: sandbox \(admin.configuration.endpoint), stream \(feed), prefix \(settings.prefix); APNs \(c) connection(s) x \(m) streams; "
              + "fanout.slice_size \(settings.sliceSize), fanout.batch \(settings.sliceBatch), fanout.slices_in_hand \(settings.slicesInHand) (at 5: \(settings.priority5SlicesInHand)); "
              + "\(workerPid.count) worker(s)")

        // The stats connection first, before any worker connects (they do at their first push):
        // the sandbox gives each new connection to its loop with the fewest, and a worker's two
        // connections, made one after the other, should get one loop each, as h2load's do.
        _ = try await bench.sandbox.read()
        // Warm-up: the workers' APNs connections, provider token and scripts; not measured.
        let warm = try await bench.fanout(tokens: 2000)
        print(String(format: "\(tag)warm-up: 2,000 tokens in %.2f s (connections, provider token, scripts; not measured)", warm.seconds))

        var results: [Int: [FanoutResult]] = [:]
        var h2: [Int: [H2Result]] = [:]
        for n in try parseList(tokens, "tokens") {
            for run in 1...runs {
                let r = try await bench.fanout(tokens: n)
                results[n, default: []].append(r)
                print("\(tag)\(r.report(tokens: n, run: run))")
                if !noH2load {
                    let h = try await bench.h2load(requests: n, connections: c, streams: m, payload: r.payload, priority: r.priority, binary: h2load)
                    h2[n, default: []].append(h)
                    print("\(tag)\(h.report(requests: n, connections: c, streams: m, ours: r.rate))")
                }
            }
        }

        var tripRows: [TripResult] = []
        let tripSizes = try parseList(trips, "trips")
        if !tripSizes.isEmpty {
            let idle = try await bench.idleRedis(seconds: 2)
            print(String(format: "\(tag)Redis work per event (idle traffic subtracted: %.1f reads/s, %.1f commands/s, %.0f µs CPU/s; the bench's own commands taken out, its polls' CPU not):",
                         idle.reads, idle.commands, idle.cpu * 1e6))
            for size in tripSizes {
                let events = max(2, min(100, 200_000 / size))
                let t = try await bench.trips(tokens: size, events: events, idle: idle)
                tripRows.append(t)
                print("\(tag)\(t.report)")
            }
        }

        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        print("\(tag)summary (\(runs) run\(runs == 1 ? "" : "s") per size\(runs > 1 ? ", medians" : "")):")
        for n in try parseList(tokens, "tokens") {
            guard let rs = results[n] else { continue }
            let rate = median(rs.map(\.rate))
            let hwm = rs.map(\.peakRSSMiB).max() ?? 0
            var line = String(format: "  %@ tokens: fan-out %.0f tokens/s", n.formatted(), rate)
            if let hs = h2[n] {
                let hr = median(hs.map(\.rate))
                line += String(format: ", h2load %.0f req/s, ratio %.2f (goal ≥ 0.85)", hr, median(zip(rs, hs).map { $0.rate / $1.rate }))
            }
            line += String(format: "; worker peak RSS %.1f MiB (the largest worker's; goal ≤ 64 MiB at 1M)", hwm)
            line += String(format: "; Redis %.2f µs CPU/token, %.3f round trips/token", median(rs.map(\.redisMicrosPerToken)), median(rs.map(\.readsPerToken)))
            print(line)
        }
        for t in tripRows { print("  \(t.summary)") }
    }
}

// MARK: - The measurements

struct FanoutResult {
    var seconds: Double
    var rate: Double
    var received: Int
    var rejected: Int
    var loadSeconds: Double
    var drainSeconds: Double
    var peakRSSMiB: Double
    var memory: [String]
    var cpu: CPUProbe
    var busyCores: Double?
    var steal: Double?
    var threads: [String]
    var sandboxBusiest: Double
    var sandboxMicrosPerPush: Double
    var redis: RedisDelta
    var payload: [UInt8]
    var priority: Int

    var redisMicrosPerToken: Double { redis.cpuSeconds * 1e6 / Double(max(1, received)) }
    var readsPerToken: Double { Double(redis.reads) / Double(max(1, received)) }

    func report(tokens n: Int, run: Int) -> String {
        var lines: [String] = []
        lines.append(String(format: "%@ tokens, run %d: XADD → last receipt %.3f s = %.0f tokens/s (%@ received, %d rejected; audience loaded in %.1f s; acknowledged %.0f ms after the last receipt)",
                            n.formatted(), run, seconds, rate, received.formatted(), rejected, loadSeconds, drainSeconds * 1000))
        lines.append("       worker memory: \(memory.joined(separator: "; "))")
        var cpuLine = "       CPU (share of one core over the fan-out): \(cpu)"
        if let busyCores { cpuLine += String(format: "; machine %.2f of %d cores busy, %.2f of them other processes", busyCores, ProcessInfo.processInfo.activeProcessorCount, max(0, busyCores - cpu.total)) }
        if let steal { cpuLine += String(format: "; host steal %.0f%%", steal * 100) }
        lines.append(cpuLine)
        lines.append(String(format: "       sandbox %.2f µs CPU/push, busiest sandbox thread %.0f%%%@; busiest worker threads: %@", sandboxMicrosPerPush, sandboxBusiest * 100,
                            sandboxBusiest >= ServerLoad.saturation ? " (SATURATED)" : "", threads.joined(separator: ", ")))
        lines.append("       Redis: \(redis.describe(per: received, unit: "token"))")
        return lines.joined(separator: "\n")
    }
}

struct H2Result {
    var rate: Double
    var cpuPerRequest: Double
    var server: ServerLoad?
    var distinct: Int
    var busyCores: Double?

    func report(requests n: Int, connections c: Int, streams m: Int, ours: Double) -> String {
        var line = String(format: "  h2load: %@ requests (-c %d -m %d -t 1, %@ distinct device tokens, the fan-out's payload and headers): %.0f req/s, %.2f µs CPU/req; ratio fan-out/h2load %.2f",
                          n.formatted(), c, m, distinct.formatted(), rate, cpuPerRequest, ours / rate)
        if let server {
            line += String(format: "\n       sandbox during h2load: %.2f µs CPU/req, busiest thread %.0f%%%@", server.cpuPerRequest, server.busiestThread * 100,
                           server.saturated ? " (SATURATED)" : "")
        }
        if let busyCores { line += String(format: "; machine %.2f cores busy", busyCores) }
        return line
    }
}

struct TripResult {
    var tokens: Int
    var events: Int
    var delta: RedisDelta
    var idleSubtracted: IdleRedis

    var report: String {
        "  audience \(tokens.formatted()), \(events) events one after another: per event \(delta.describe(per: events, unit: "event", top: 12))"
    }

    var summary: String {
        let e = Double(events)
        return String(format: "audience %@: per event %.1f round trips (reads), %.1f commands (incl. script calls), %.1f EVALSHA, Redis %.0f µs CPU",
                      tokens.formatted(), Double(delta.reads) / e, Double(delta.commands) / e, Double(delta.calls["evalsha"]?.calls ?? 0) / e,
                      delta.cpuSeconds * 1e6 / e)
    }
}

/// What Redis processed between two `INFO` snapshots, the bench's own commands taken out.
struct RedisDelta {
    /// `total_reads_processed`: reads of client sockets, about one per round trip (a pipeline
    /// that arrives in one read counts once).
    var reads: Int
    /// `total_commands_processed`: every command executed, those called by Lua scripts included.
    var commands: Int
    /// `used_cpu_user + used_cpu_sys` of the server.
    var cpuSeconds: Double
    /// `INFO commandstats`: calls and µs per command (script calls counted under their command).
    var calls: [String: (calls: Int, usec: Int)]
    /// On a cluster, each primary's CPU seconds (by address); empty on one node.
    var nodeCPU: [(node: String, seconds: Double)] = []

    func describe(per n: Int, unit: String, top: Int = 8) -> String {
        let d = Double(max(1, n))
        let evalsha = calls["evalsha"] ?? (0, 0)
        var s = String(format: "%.3f round trips (reads)/%@, %.2f commands/%@ (incl. those scripts called), %.4f EVALSHA/%@, %.2f µs Redis CPU/%@",
                       Double(reads) / d, unit, Double(commands) / d, unit, Double(evalsha.calls) / d, unit, cpuSeconds * 1e6 / d, unit)
        if evalsha.calls > 0 {
            // commandstats times a call on the wall clock: on a busy machine a script that loses
            // its CPU meanwhile counts that too, so this can exceed the CPU Redis used.
            s += String(format: " (EVALSHA: %.1f µs each inside Redis, %.0f%% of Redis CPU time)", Double(evalsha.usec) / Double(evalsha.calls),
                        cpuSeconds > 0 ? Double(evalsha.usec) / (cpuSeconds * 1e6) * 100 : 0)
        }
        // By the time inside Redis (a script's includes the commands it calls, which count under their own names too).
        let sorted = calls.filter { $0.value.calls > 0 }.sorted { $0.value.usec > $1.value.usec }.prefix(top)
        s += "; calls and µs inside Redis/\(unit): " + sorted.map {
            String(format: "%@ %.3f %.2f µs", $0.key, Double($0.value.calls) / d, Double($0.value.usec) / d)
        }.joined(separator: ", ")
        if nodeCPU.count > 1 {
            s += "; Redis CPU/\(unit) per primary: " + nodeCPU.map { String(format: "%@ %.2f µs", $0.node, $0.seconds * 1e6 / d) }.joined(separator: ", ")
        }
        return s
    }
}

/// One `INFO stats cpu commandstats` reading (on a cluster, every primary's added up).
struct RedisSnapshot {
    var reads = 0
    var commands = 0
    var cpuSeconds = 0.0
    var calls: [String: (calls: Int, usec: Int)] = [:]
    /// The `INFO` replies this adds up: one per node.
    var infos = 1
    /// Per node (on a cluster): CPU seconds.
    var nodeCPU: [(node: String, seconds: Double)] = []

    /// The nodes' readings added up.
    init(nodes: [(node: String, snapshot: RedisSnapshot)]) {
        infos = 0
        for (node, n) in nodes {
            reads += n.reads
            commands += n.commands
            cpuSeconds += n.cpuSeconds
            infos += n.infos
            for (name, v) in n.calls {
                let was = calls[name] ?? (0, 0)
                calls[name] = (was.calls + v.calls, was.usec + v.usec)
            }
            nodeCPU.append((node, n.cpuSeconds))
        }
    }

    init(_ text: String) {
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = String(raw)
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = String(line[..<colon]), value = String(line[line.index(after: colon)...])
            switch name {
            case "total_reads_processed": reads = Int(value) ?? 0
            case "total_commands_processed": commands = Int(value) ?? 0
            case "used_cpu_user", "used_cpu_sys": cpuSeconds += Double(value) ?? 0
            default:
                guard name.hasPrefix("cmdstat_") else { continue }
                var n = 0, usec = 0
                for part in value.split(separator: ",") {
                    let kv = part.split(separator: "=")
                    guard kv.count == 2 else { continue }
                    if kv[0] == "calls" { n = Int(kv[1]) ?? 0 }
                    if kv[0] == "usec" { usec = Int(kv[1]) ?? 0 }
                }
                calls[String(name.dropFirst("cmdstat_".count)).lowercased()] = (n, usec)
            }
        }
    }

    /// `later - self`, without what the bench itself sent in between (`own`: its commands by
    /// name, `ownTrips`), the `INFO` that took this snapshot, and an idle rate over `seconds`.
    func delta(to later: RedisSnapshot, own: [String: Int], ownTrips: Int, idle: IdleRedis = IdleRedis(), seconds: Double = 0) -> RedisDelta {
        var calls: [String: (calls: Int, usec: Int)] = [:]
        for (name, v) in later.calls {
            let before = self.calls[name] ?? (0, 0)
            var n = v.calls - before.calls - (own[name] ?? 0)
            if name == "info" { n -= later.infos }
            if n > 0 { calls[name] = (n, v.usec - before.usec) }
        }
        let ownCommands = own.values.reduce(0, +) + later.infos
        var delta = RedisDelta(reads: max(0, later.reads - reads - ownTrips - later.infos - Int((idle.reads * seconds).rounded())),
                               commands: max(0, later.commands - commands - ownCommands - Int((idle.commands * seconds).rounded())),
                               cpuSeconds: max(0, later.cpuSeconds - cpuSeconds - idle.cpu * seconds), calls: calls)
        if later.nodeCPU.count > 1 {
            delta.nodeCPU = later.nodeCPU.map { node in
                (node.node, max(0, node.seconds - (nodeCPU.first { $0.node == node.node }?.seconds ?? 0)))
            }
        }
        return delta
    }
}

/// What Redis does per second with idle workers (blocking reads that time out and are sent
/// again, claims, its own timers).
struct IdleRedis {
    var reads = 0.0, commands = 0.0, cpu = 0.0
}

/// The bench's Redis connection, counting its own commands by name (to take them out of what
/// Redis reports).
final class CountingRedis: @unchecked Sendable {
    // Used by one task at a time.
    let connection: RedisConnection
    private(set) var sent: [String: Int] = [:]
    private(set) var trips = 0

    init(_ connection: RedisConnection) { self.connection = connection }

    func pipeline(_ commands: [RedisCommand]) async throws -> [RESPValue] {
        for c in commands {
            // INFO commandstats names container commands with their subcommand (`xinfo|groups`).
            var name = c.name.lowercased()
            if name == "xinfo", c.arguments.count > 1 { name += "|" + String(decoding: c.arguments[1], as: UTF8.self).lowercased() }
            sent[name, default: 0] += 1
        }
        trips += 1
        return try await connection.pipeline(commands)
    }

    @discardableResult
    func send(_ command: RedisCommand) async throws -> RESPValue { try await pipeline([command])[0].orThrow(command.name) }

    /// `INFO` sections the bench reads; not counted (the snapshot accounts for its own INFO).
    func snapshot() async throws -> (RedisSnapshot, own: [String: Int], trips: Int) {
        // Every primary of a cluster, added up (one node otherwise).
        var nodes: [(node: String, snapshot: RedisSnapshot)] = []
        for node in try await connection.primaries() {
            let reply = try await connection.pipeline([RedisCommand("INFO", "stats", "cpu", "commandstats")], on: node)[0].orThrow("INFO")
            nodes.append(("\(node)", RedisSnapshot(reply.string ?? "")))
        }
        return (RedisSnapshot(nodes: nodes), sent, trips)
    }
}

/// `GET /sandbox/stats`: device pushes accepted, the last one's receipt time, rejections.
struct SandboxStatsReader {
    let client: APNsClient

    struct Reading { var devicePushes: Int; var lastMicros: Int64; var rejected: Int }

    func read() async throws -> Reading {
        let result = await client.request(method: "GET", path: "/sandbox/stats", headers: [])
        guard case .response(let r) = result, r.status == 200,
              let o = try? JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any],
              let pushes = o["devicePushes"] as? Int else { throw CommandFailure("GET /sandbox/stats on the sandbox: \(result)") }
        guard let last = o["lastDevicePushMicros"] as? Int else {
            throw CommandFailure("the sandbox's stats have no lastDevicePushMicros: an older sandbox? (start this build's)")
        }
        return Reading(devicePushes: pushes, lastMicros: Int64(last), rejected: o["rejected"] as? Int ?? 0)
    }
}

/// Loads audiences in the documented schema: `{key}:tokens` (activity → token) and `{key}:meta`
/// (activity → `ts device env tier broadcast token`), N distinct 64-hex-digit tokens made by a script
/// in Redis (two SHA-1s of a per-key seed and the index), 1,000 per call, calls pipelined.
/// Activity and device ids are `a<n>` and `d<n>`, or (`uuids`) 36 characters each, as apps' are.
enum AudienceLoader {
    static let script = RedisScript("""
    local from, to, seed, tail = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
    local uuids = ARGV[6] == '1'
    local t, m = {}, {}
    for i = from, to do
      local a, d = 'a' .. i, 'd' .. i
      if uuids then
        local h = redis.sha1hex('id:' .. seed .. ':' .. i)
        a = string.sub(h, 1, 8) .. '-' .. string.sub(h, 9, 12) .. '-4' .. string.sub(h, 13, 15) .. '-8' .. string.sub(h, 16, 18) .. '-' .. string.sub(h, 19, 30)
        d = string.upper(string.sub(h, 11, 18) .. '-' .. string.sub(h, 19, 22) .. '-4' .. string.sub(h, 23, 25) .. '-8' .. string.sub(h, 26, 28) .. '-' .. string.sub(h, 29, 40))
      end
      local token = redis.sha1hex(seed .. ':' .. i) .. string.sub(redis.sha1hex(i .. ':' .. seed), 1, 24)
      t[#t + 1] = a
      t[#t + 1] = token
      m[#m + 1] = a
      m[#m + 1] = ARGV[5] .. ' ' .. d .. ' ' .. tail .. ' ' .. token
    end
    redis.call('HSET', KEYS[1], unpack(t))
    redis.call('HSET', KEYS[2], unpack(m))
    redis.call('EXPIRE', KEYS[1], 10800)
    redis.call('EXPIRE', KEYS[2], 10800)
    return to - from + 1
    """)

    static func load(_ redis: CountingRedis, keys: RedisKeys, key: ActivityKey, count: Int, env: String, ts: Int64, uuids: Bool = false) async throws {
        let seed = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let chunk = 1000, perPipeline = 20
        var from = 1
        while from <= count {
            var commands: [RedisCommand] = []
            while from <= count, commands.count < perPipeline {
                let to = min(count, from + chunk - 1)
                commands.append(.script(script, keys: [keys.tokens(key), keys.meta(key)], args: [from, to, seed, "\(env) standard 0", ts, uuids ? "1" : "0"]))
                from = to + 1
            }
            for r in try await redis.pipeline(commands) { _ = try r.orThrow("loading tokens") }
        }
    }
}

/// Peak resident memory of a process: `VmHWM` in /proc/<pid>/status, reset by writing 5 to
/// /proc/<pid>/clear_refs (Linux ≥ 4.0; the process's owner or root).
enum PeakMemory {
    static func reset(_ pid: Int32) -> Bool {
        guard let h = FileHandle(forWritingAtPath: "/proc/\(pid)/clear_refs") else { return false }
        defer { try? h.close() }
        do { try h.write(contentsOf: Data("5".utf8)); return true } catch { return false }
    }

    /// (VmRSS, VmHWM) in KiB.
    static func read(_ pid: Int32) -> (rss: Int, hwm: Int)? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        var rss: Int?, hwm: Int?
        for line in text.split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard parts.count >= 2 else { continue }
            if parts[0] == "VmRSS:" { rss = Int(parts[1]) }
            if parts[0] == "VmHWM:" { hwm = Int(parts[1]) }
        }
        guard let rss, let hwm else { return nil }
        return (rss, hwm)
    }
}

/// Thread names and CPU of a process, from /proc/<pid>/task.
enum ThreadCPU {
    static func sample(_ pid: Int32) -> [Int32: (name: String, cpu: Double)] {
        let cpu = ServerProbe.threadCPU(pid)
        var out: [Int32: (String, Double)] = [:]
        for (tid, seconds) in cpu {
            let name = (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            out[tid] = (name, seconds)
        }
        return out
    }
}

final class Bench: @unchecked Sendable {
    // Used by one task at a time.
    let settings: Settings
    let redis: CountingRedis
    /// An APNs client for the sandbox's own endpoints (its counters, its delivery log).
    let admin: APNsClient
    let sandbox: SandboxStatsReader
    let feed: String
    /// Every stream of the sports feed: its shards (`streams.shards`), or the feed alone.
    let feeds: [String]
    let workers: [Int32]
    let sandboxPid: Int32?
    let redisPid: [Int32]
    let stallTimeout: Double
    /// Audiences with 36-character activity and device ids (`--uuid-ids`).
    let uuidIDs: Bool
    private var lastTs: Int64 = 0
    private let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
    private var keyNumber = 0

    /// With the bench's own connections, which `close()` ends: Redis (its commands counted) and `admin`.
    init(settings: Settings, logger: Logger, workers: [Int32], sandboxPid: Int32?, redisPid: [Int32], stallTimeout: Double, uuidIDs: Bool = false) throws {
        self.settings = settings
        self.uuidIDs = uuidIDs
        feed = try settings.sportsFeed().stream
        feeds = settings.feeds.filter { $0.kind == .sports }.map(\.stream)
        admin = try makeAPNsClient(settings, channels: true, logger: logger)
        redis = CountingRedis(RedisConnection(configuration: settings.redisConfiguration))
        sandbox = SandboxStatsReader(client: admin)
        self.workers = workers
        self.sandboxPid = sandboxPid
        self.redisPid = redisPid
        self.stallTimeout = stallTimeout
    }

    func close() {
        redis.connection.close()
        admin.shutdown()
    }

    /// The environment the sandbox serves (its tokens' `env`).
    var env: String { "development" }

    /// A strictly increasing event time (ms), so no event of a key is older than the last.
    func nextTs() -> Int64 {
        lastTs = max(lastTs + 1, Int64(Date().timeIntervalSince1970 * 1000))
        return lastTs
    }

    func newKey(_ size: Int) -> ActivityKey {
        keyNumber += 1
        return ActivityKey(kind: .match, id: "fb\(run)-\(keyNumber)-n\(size)")
    }

    /// The match's shard of the feed (`streams.shards`; the feed itself when unsharded).
    func stream(of key: ActivityKey) -> String { settings.feedStream(.sports, fields: [("match", key.id)]) ?? feed }

    /// `XADD`s one `match.score` for `key`; returns its entry id and when the XADD was issued (µs).
    func publish(_ key: ActivityKey, clock: String) async throws -> (id: String, micros: Int64) {
        let ts = nextTs()
        let issued = wallMicros()
        let stream = stream(of: key)
        let reply = try await redis.send(RedisCommand("XADD", stream, "*", "type", "match.score", "ts", ts, "match", key.id,
                                                      "home_score", 1, "away_score", 0, "clock", clock))
        guard let id = reply.string else { throw CommandFailure("XADD \(stream): \(reply)") }
        return (id, issued)
    }

    /// A key whose channels exist (its first event made them: not part of any measurement) and
    /// whose audience is `tokens` tokens.
    func prepare(tokens: Int) async throws -> (key: ActivityKey, loadSeconds: Double) {
        let key = newKey(tokens)
        _ = try await publish(key, clock: "w")
        try await waitAcknowledged(timeout: 30)
        let t0 = ContinuousClock.now
        try await AudienceLoader.load(redis, keys: settings.keys, key: key, count: tokens, env: env, ts: nextTs(), uuids: uuidIDs)
        return (key, (ContinuousClock.now - t0).seconds)
    }

    func forget(_ key: ActivityKey) async throws {
        _ = try await redis.pipeline([RedisCommand("UNLINK", settings.keys.tokens(key), settings.keys.meta(key))])
    }

    /// Waits until the sandbox has accepted `count` more device pushes than `base`; returns the
    /// reading. Fails when nothing new arrives for `stallTimeout`.
    func waitReceived(base: SandboxStatsReader.Reading, count: Int, poll: Duration = .milliseconds(10)) async throws -> SandboxStatsReader.Reading {
        var last = base
        var progressAt = ContinuousClock.now
        while true {
            let now = try await sandbox.read()
            if now.devicePushes - base.devicePushes >= count { return now }
            if now.devicePushes != last.devicePushes { progressAt = .now }
            if (ContinuousClock.now - progressAt).seconds > stallTimeout {
                throw CommandFailure("the sandbox received \(now.devicePushes - base.devicePushes) of \(count) pushes and nothing more for \(Int(stallTimeout)) s (rejected \(now.rejected - base.rejected)): are the workers running against this Redis and sandbox?")
            }
            last = now
            try await Task.sleep(for: poll)
        }
    }

    /// Waits until the feed's consumer group has delivered and acknowledged every entry, and no
    /// slice is pending.
    func waitAcknowledged(timeout: Double) async throws {
        try await BenchRedis.waitConsumed(streams: feeds, slices: settings.keys.sliceStreams, group: settings.group, timeout: .seconds(timeout),
                                          poll: .milliseconds(5), hint: "are workers running against this Redis?") { try await redis.pipeline($0) }
    }

    /// After an event's last receipt (so the group has delivered it): until neither the feed nor
    /// the slices stream has an entry pending. Cheaper for Redis than `waitAcknowledged`.
    func waitNothingPending() async throws {
        let deadline = ContinuousClock.now + .seconds(stallTimeout)
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(2))
            let replies = try await redis.pipeline((feeds + settings.keys.sliceStreams).map { RedisCommand("XPENDING", $0, settings.group) })
            if replies.allSatisfy({ $0.array?.first?.int == 0 }) { return }
        }
        throw CommandFailure("entries still pending after \(Int(stallTimeout)) s")
    }

    /// One fan-out to a fresh audience of `tokens`.
    func fanout(tokens n: Int) async throws -> FanoutResult {
        let (key, loadSeconds) = try await prepare(tokens: n)
        // Let the loading's effects (Redis's allocator, the workers' idle reads) settle.
        try await Task.sleep(for: .milliseconds(300))
        let reset = workers.map { PeakMemory.reset($0) }
        let before = workers.map { PeakMemory.read($0) }
        let threads0 = workers.map { ThreadCPU.sample($0) }
        let (snap0, own0, trips0) = try await redis.snapshot()
        let base = try await sandbox.read()
        let cpu = CPUProbe(workers: workers, sandbox: sandboxPid, redis: redisPid)
        let server = ServerProbe(pid: sandboxPid)
        let host = HostProbe(), steal = StealProbe()

        let (entry, issued) = try await publish(key, clock: "f")
        let end = try await waitReceived(base: base, count: n)
        let seconds = Double(end.lastMicros - issued) / 1e6
        let load = cpu.finish(seconds: seconds)
        let serverLoad = server.finish(requests: n, seconds: seconds)
        let busy = host.finish(), stolen = steal.finish()
        let after = workers.map { PeakMemory.read($0) }
        let threads1 = workers.map { ThreadCPU.sample($0) }
        let drainStart = ContinuousClock.now
        try await waitAcknowledged(timeout: stallTimeout)
        let drain = (ContinuousClock.now - drainStart).seconds
        let own1 = redis.sent, trips1 = redis.trips
        let (snap1, _, _) = try await redis.snapshot()
        let own = own1.merging(own0) { $0 - $1 }
        let delta = snap0.delta(to: snap1, own: own, ownTrips: trips1 - trips0)
        let final = try await sandbox.read()

        // The fan-out's own payload and priority, for h2load.
        let (payload, priority) = try await ownPayload(key, entry: entry)
        try await forget(key)

        var memory: [String] = []
        var peak = 0.0
        for (i, pid) in workers.enumerated() {
            guard let a = after[i] else { memory.append("pid \(pid): gone"); continue }
            let hwm = Double(a.hwm) / 1024
            peak = max(peak, hwm)
            memory.append(String(format: "pid %d peak %.1f MiB (VmHWM %@), RSS %.1f → %.1f MiB", pid, hwm,
                                 reset[i] ? "since the XADD" : "since the worker started: /proc/<pid>/clear_refs refused",
                                 Double(before[i]?.rss ?? 0) / 1024, Double(a.rss) / 1024))
        }
        // The busiest threads of the workers over the fan-out, by name.
        var byName: [String: Double] = [:]
        for (i, _) in workers.enumerated() {
            for (tid, t) in threads1[i] { byName[t.name, default: 0] += t.cpu - (threads0[i][tid]?.cpu ?? 0) }
        }
        let threads = byName.sorted { $0.value > $1.value }.prefix(5).map { String(format: "%@ %.0f%%", $0.key, $0.value / seconds * 100) }
        let received = final.devicePushes - base.devicePushes
        return FanoutResult(seconds: seconds, rate: Double(n) / seconds, received: received, rejected: final.rejected - base.rejected,
                            loadSeconds: loadSeconds, drainSeconds: drain, peakRSSMiB: peak, memory: memory, cpu: load, busyCores: busy, steal: stolen,
                            threads: threads, sandboxBusiest: serverLoad?.busiestThread ?? 0, sandboxMicrosPerPush: serverLoad?.cpuPerRequest ?? 0, redis: delta, payload: payload, priority: priority)
    }

    /// The payload and priority the worker sent `entry` with: its fan-out record is gone once
    /// the entry is acknowledged, so the event is planned again as the worker did (the routes,
    /// the key's merged state) and built by the same `PushBuilder`.
    func ownPayload(_ key: ActivityKey, entry: String) async throws -> (payload: [UInt8], priority: Int) {
        let stream = stream(of: key)
        let reply = try await redis.send(RedisCommand("XRANGE", stream, entry, entry))
        guard let first = reply.array?.first, let raw = try StreamReplies.entry(first).fields else { throw CommandFailure("XRANGE \(stream) \(entry): gone") }
        let fields = stride(from: 0, to: raw.count - 1, by: 2).map { RawField(name: raw[$0], value: raw[$0 + 1]) }
        guard case .success(let decoded) = EntryDecoder(limits: settings.limits).decode(kind: .sports, fields: fields),
              let routes = try settings.loadRoutes().routes(for: .sports),
              case .success(let plan?) = routes.plan(entry: decoded, fields: fields),
              let state = KeyStateScripts.read(try await redis.send(RedisCommand("HGETALL", "\(settings.prefix):{\(key)}:state"))) else {
            throw CommandFailure("the measured event \(entry) could not be planned again for h2load's payload")
        }
        return (PushBuilder.payload(plan, contentState: state.contentState).encoded(), PushBuilder.priority(plan))
    }

    /// h2load with the fan-out's request: same headers, its payload, distinct device tokens
    /// (fresh ones: the sandbox keeps a view per device, so each request costs it what a fan-out's
    /// push does), the same connections and streams, one thread like our client's event loop.
    func h2load(requests n: Int, connections: Int, streams: Int, payload: [UInt8], priority: Int, binary: String) async throws -> H2Result {
        let signer = try ProviderTokenSigner.load(pemFile: settings.apns.keyFile, pem: settings.apns.keyPEM,
                                                  identity: try ProviderIdentity(keyID: settings.apns.keyID, teamID: settings.apns.teamID))
        let jwt = try await LocalProviderTokens(signer: signer).currentToken()
        let endpoint = try APNsEndpoint(parsing: settings.apns.endpoint)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bench-fanout-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let payloadFile = dir.appendingPathComponent("payload.json").path
        try Data(payload).write(to: URL(fileURLWithPath: payloadFile))
        // h2load's clients each walk the URI list from its start: with C connections, N/C
        // distinct tokens, each requested C times (by different connections, about together).
        let distinct = (n + connections - 1) / connections
        let uriFile = dir.appendingPathComponent("uris.txt").path
        var rng = SplitMix64()
        var text = ""
        text.reserveCapacity(distinct * 110)
        let base = "https://\(endpoint.host):\(endpoint.port)/3/device/"
        for _ in 0..<distinct {
            text += base
            for _ in 0..<4 {
                let hex = String(rng.next(), radix: 16)
                text += String(repeating: "0", count: 16 - hex.count) + hex
            }
            text += "\n"
        }
        try text.write(toFile: uriFile, atomically: false, encoding: .utf8)
        let topic = "\(settings.apns.bundleID).push-type.liveactivity"
        let c0 = cpuSeconds(RUSAGE_CHILDREN)
        let server = ServerProbe(pid: sandboxPid)
        let host = HostProbe()
        let t0 = ContinuousClock.now
        let output = try runCapturingOutput(binary, [
            "-n", String(n), "-c", String(connections), "-m", String(streams), "-t", "1",
            "-H", "apns-push-type: liveactivity", "-H", "apns-topic: \(topic)", "-H", "apns-priority: \(priority)",
            "-H", "authorization: bearer \(jwt.value)", "-d", payloadFile, "-i", uriFile])
        let wall = (ContinuousClock.now - t0).seconds
        let cpu = cpuSeconds(RUSAGE_CHILDREN) - c0
        let load = server.finish(requests: n, seconds: wall)
        let busy = host.finish()
        guard let rate = Self.h2loadRate(output), output.contains("\(n) succeeded"), output.contains("\(n) 2xx") else {
            throw CommandFailure("h2load did not deliver every request:\n\(output.suffix(800))")
        }
        return H2Result(rate: rate, cpuPerRequest: cpu / Double(n) * 1e6, server: load, distinct: distinct, busyCores: busy)
    }

    /// Redis traffic of idle workers (their blocking reads time out and are sent again, claims).
    func idleRedis(seconds: Double) async throws -> IdleRedis {
        let (s0, own0, t0) = try await redis.snapshot()
        try await Task.sleep(for: .seconds(seconds))
        let own1 = redis.sent, t1 = redis.trips
        let (s1, _, _) = try await redis.snapshot()
        let d = s0.delta(to: s1, own: own1.merging(own0) { $0 - $1 }, ownTrips: t1 - t0)
        return IdleRedis(reads: Double(d.reads) / seconds, commands: Double(d.commands) / seconds, cpu: d.cpuSeconds / seconds)
    }

    /// `events` events to one key with `tokens` tokens, one after another (each waits for its
    /// pushes and its acknowledgement): what Redis processed, per event.
    func trips(tokens n: Int, events: Int, idle: IdleRedis) async throws -> TripResult {
        let (key, _) = try await prepare(tokens: n)
        try await Task.sleep(for: .milliseconds(300))
        let (snap0, own0, trips0) = try await redis.snapshot()
        let t0 = ContinuousClock.now
        for i in 0..<events {
            let base = try await sandbox.read()
            _ = try await publish(key, clock: "t\(i)")
            _ = try await waitReceived(base: base, count: n, poll: .milliseconds(n <= 1000 ? 1 : 10))
            try await waitNothingPending()
        }
        let seconds = (ContinuousClock.now - t0).seconds
        let own1 = redis.sent, trips1 = redis.trips
        let (snap1, _, _) = try await redis.snapshot()
        let delta = snap0.delta(to: snap1, own: own1.merging(own0) { $0 - $1 }, ownTrips: trips1 - trips0, idle: idle, seconds: seconds)
        try await forget(key)
        return TripResult(tokens: n, events: events, delta: delta, idleSubtracted: idle)
    }

    /// "finished in 1.23s, 162601.22 req/s, …"
    static func h2loadRate(_ output: String) -> Double? {
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
              let part = line.split(separator: ",").dropFirst().first else { return nil }
        return Double(part.trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
    }

}
