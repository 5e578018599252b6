import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastWorker
import APNs
import APNsCore
import ArgumentParser
import Foundation
import Logging

struct APNsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns",
        abstract: "Our HTTP/2 client against h2load: the same requests, headers, payload, connections and streams, to the same server.",
        discussion: "Point it at a running sandbox (the default settings use the local one); scripts/bench-apns.sh starts one.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Requests per run, for each sender.") var requests = 200_000
    @Option(help: "Connections.") var connections = 4
    @Option(help: "Concurrent streams per connection.") var streams = 100
    @Option(help: "Runs (alternating client and h2load); medians are reported.") var runs = 3
    @Option(help: "Tokens per batch handed to the client.") var batch = 5000
    @Option(help: "The h2load binary.") var h2load = "/usr/bin/h2load"
    @Option(help: "PID of the server (the sandbox) under test: its CPU time per request and its busiest thread's load are reported, and a saturated server is flagged.")
    var serverPid: Int32?
    @Flag(help: "Only the h2load runs: measures the server alone (compare server builds with scripts/bench-sandbox.sh).")
    var h2loadOnly = false

    func run() async throws {
        let (settings, logger) = try benchSetup(common)
        var base = try makeAPNsClient(settings, logger: logger).configuration
        base.connections = connections
        base.maxConcurrentStreams = streams
        let signer = try ProviderTokenSigner.load(pemFile: settings.apns.keyFile, pem: settings.apns.keyPEM,
                                                  identity: try ProviderIdentity(keyID: settings.apns.keyID, teamID: settings.apns.teamID))
        let tokens = LocalProviderTokens(signer: signer)
        let jwt = try await tokens.currentToken()
        let deviceToken = String(repeating: "5a", count: 32)
        let payload = LiveActivityPayload(event: .update, timestamp: Int64(Date().timeIntervalSince1970),
                                          contentState: ["homeScore": 2, "awayScore": 1, "clock": "67'", "period": "second_half"]).encoded()
        let payloadFile = FileManager.default.temporaryDirectory.appendingPathComponent("bench-payload-\(getpid()).json").path
        try Data(payload).write(to: URL(fileURLWithPath: payloadFile))
        defer { try? FileManager.default.removeItem(atPath: payloadFile) }
        let topic = "\(settings.apns.bundleID).push-type.liveactivity"
        print("target https://\(base.endpoint), \(requests) requests per run, \(connections) connections x \(streams) streams, payload \(payload.count) bytes")

        var ours: [(rate: Double, cpu: Double)] = []
        var theirs: [(rate: Double, cpu: Double)] = []
        var serverLoads: [ServerLoad] = []
        var steals: [Double] = []
        for run in 1...runs {
            let steal = StealProbe()
            var ourServerLoad: ServerLoad?
            if !h2loadOnly {
                // Our client: a fresh pool per run, so both senders start from new connections.
                let client = try APNsClient(configuration: base, tokens: tokens, logger: logger)
                let server = ServerProbe(pid: serverPid)
                let cpu0 = cpuSeconds(RUSAGE_SELF)
                let t0 = ContinuousClock.now
                let delivered = await withTaskGroup(of: Int.self) { group in
                    let perTask = (requests + connections * 2 - 1) / (connections * 2)
                    for k in 0..<(connections * 2) {
                        let n = max(0, min(perTask, requests - k * perTask))
                        group.addTask {
                            var ok = 0
                            var left = n
                            while left > 0 {
                                let size = min(batch, left)
                                let results = await client.sendLiveActivity(payload: payload, to: Array(repeating: deviceToken, count: size),
                                                                            bundleID: settings.apns.bundleID)
                                ok += results.filter { $0.action == .delivered }.count
                                left -= size
                            }
                            return ok
                        }
                    }
                    return await group.reduce(0, +)
                }
                let seconds = (ContinuousClock.now - t0).seconds
                let cpu = cpuSeconds(RUSAGE_SELF) - cpu0
                ourServerLoad = server.finish(requests: requests, seconds: seconds)
                client.shutdown()
                guard delivered == requests else { throw CommandFailure("run \(run): only \(delivered) of \(requests) delivered by our client") }
                ours.append((Double(requests) / seconds, cpu / Double(requests) * 1e6))
            }

            // h2load with the same headers, payload, connections and streams.
            let c0 = cpuSeconds(RUSAGE_CHILDREN)
            let server = ServerProbe(pid: serverPid)
            let h0 = ContinuousClock.now
            let output = try runCapturingOutput(h2load, [
                "-n", String(requests), "-c", String(connections), "-m", String(streams), "-t", "1",
                "-H", "apns-push-type: liveactivity", "-H", "apns-topic: \(topic)", "-H", "apns-priority: 10",
                "-H", "authorization: bearer \(jwt.value)", "-d", payloadFile,
                "https://\(base.endpoint.host):\(base.endpoint.port)/3/device/\(deviceToken)"])
            let hcpu = cpuSeconds(RUSAGE_CHILDREN) - c0
            let theirServerLoad = server.finish(requests: requests, seconds: (ContinuousClock.now - h0).seconds)
            guard let rate = h2loadRate(output), output.contains("\(requests) succeeded"), output.contains("\(requests) 2xx") else {
                throw CommandFailure("h2load did not deliver every request:\n\(output.suffix(800))")
            }
            theirs.append((rate, hcpu / Double(requests) * 1e6))
            if let mine = ours.last, !h2loadOnly {
                print(String(format: "run %d: client %.0f req/s (%.2f µs CPU/req), h2load %.0f req/s (%.2f µs CPU/req), ratio %.2f",
                             run, mine.rate, mine.cpu, rate, theirs.last!.cpu, mine.rate / rate))
            } else {
                print(String(format: "run %d: h2load %.0f req/s (%.2f µs CPU/req)", run, rate, theirs.last!.cpu))
            }
            if let stolen = steal.finish() {
                steals.append(stolen)
                print(String(format: "       host steal: %.0f%% of this VM's CPU time went to other guests during this run", stolen * 100))
            }
            let cores = ProcessInfo.processInfo.activeProcessorCount
            for (who, load, sender) in [("client", ourServerLoad, ours.last), ("h2load", theirServerLoad, theirs.last)] {
                guard let load, let sender else { continue }
                serverLoads.append(load)
                // Both processes' CPU over the run's wall time: how much of the machine they used.
                let busy = (sender.cpu + load.cpuPerRequest) * sender.rate / 1e6
                print(String(format: "       server during %@ run: %.2f µs CPU/req, busiest thread %.0f%% busy; sender + server used %.1f of %d cores%@",
                             who, load.cpuPerRequest, load.busiestThread * 100, busy, cores,
                             load.saturated ? " (SATURATED: this rate measures the server, not the sender)" : ""))
            }
        }
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        let ratios = zip(ours, theirs).map { $0.rate / $1.rate }
        if h2loadOnly {
            print(String(format: "median: h2load %.0f req/s (%.2f µs CPU/req)", median(theirs.map(\.rate)), median(theirs.map(\.cpu))))
        } else {
            print(String(format: "median: client %.0f req/s (%.2f µs CPU/req), h2load %.0f req/s (%.2f µs CPU/req), ratio %.2f (goal ≥ 0.80)",
                     median(ours.map(\.rate)), median(ours.map(\.cpu)), median(theirs.map(\.rate)), median(theirs.map(\.cpu)), median(ratios)))
        }
        if let worst = steals.max() {
            print(String(format: "host steal: %.0f%% at most (runs with much steal measure the host, not the code)", worst * 100))
        }
        if !serverLoads.isEmpty {
            let saturated = serverLoads.filter(\.saturated).count
            print(String(format: "server: median %.2f µs CPU/req, busiest thread at most %.0f%% busy; saturated in %d of %d sender runs",
                         median(serverLoads.map(\.cpuPerRequest)), (serverLoads.map(\.busiestThread).max() ?? 0) * 100, saturated, serverLoads.count))
        }
    }


    /// "finished in 1.23s, 162601.22 req/s, …"
    private func h2loadRate(_ output: String) -> Double? {
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
              let part = line.split(separator: ",").dropFirst().first else { return nil }
        return Double(part.trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
    }
}

func cpuSeconds(_ who: __rusage_who) -> Double {
    let who = __rusage_who_t(who.rawValue)
    var usage = rusage()
    getrusage(who, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// What a server process spent while one sender ran: CPU time per request and how busy its
/// busiest thread was (a thread near 100% means the server, not the sender, set the rate).
struct ServerLoad {
    var cpuPerRequest: Double
    var busiestThread: Double
    /// Above this share of one core, a thread is taken as the limit.
    static let saturation = 0.9
    var saturated: Bool { busiestThread >= Self.saturation }
}

/// Samples a process's threads from /proc at the start and the end of a run.
struct ServerProbe {
    let pid: Int32?
    let start: [Int32: Double]

    init(pid: Int32?) {
        self.pid = pid
        start = pid.map(Self.threadCPU) ?? [:]
    }

    func finish(requests: Int, seconds: Double) -> ServerLoad? {
        guard let pid, seconds > 0, requests > 0 else { return nil }
        let end = Self.threadCPU(pid)
        var total = 0.0, busiest = 0.0
        for (tid, cpu) in end {
            let used = cpu - (start[tid] ?? 0)
            total += used
            busiest = max(busiest, used / seconds)
        }
        return ServerLoad(cpuPerRequest: total / Double(requests) * 1e6, busiestThread: busiest)
    }

    /// CPU seconds (user + system) of each thread of `pid`.
    static func threadCPU(_ pid: Int32) -> [Int32: Double] {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        var result: [Int32: Double] = [:]
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for task in tasks {
            guard let tid = Int32(task), let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // After "pid (comm)": state is field 3, utime 14 and stime 15.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { continue }
            result[tid] = (user + system) / ticks
        }
        return result
    }
}

/// The share of CPU time the hypervisor gave to other guests (the "steal" column of /proc/stat)
/// between creation and `finish()`: on a shared VM, a run with much steal is slow for reasons
/// outside the code.
struct StealProbe {
    let start: (steal: Double, total: Double)?

    init() { start = Self.sample() }

    func finish() -> Double? {
        guard let start, let end = Self.sample(), end.total > start.total else { return nil }
        return (end.steal - start.steal) / (end.total - start.total)
    }

    /// "cpu  user nice system idle iowait irq softirq steal ...": steal and the sum of all.
    static func sample() -> (steal: Double, total: Double)? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n").first, line.hasPrefix("cpu ") else { return nil }
        let values = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard values.count >= 8 else { return nil }
        return (values[7], values.reduce(0, +))
    }
}
