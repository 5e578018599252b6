import Foundation
import HTTP2Kit
import NetIO
import OpenSSLKit
import TestSupport
import Testing

/// Throughput figures, run by hand (never a timed assertion). Skipped unless
/// `ACTIVITYCAST_H2_BENCH=1`; use a release build:
///
///     ACTIVITYCAST_H2_BENCH=1 swift test -c release --scratch-path .build-h2 --filter HTTP2KitBenchmarks
///
/// Prints `BENCH` lines: requests/s for client + server sessions in one thread (in memory, then
/// TLS over a socketpair), the client session against nghttpd next to h2load against the same
/// nghttpd (same request headers), and h2load against the server session next to h2load against
/// nghttpd. Wall-clock rates and CPU time per request are both reported: on a shared machine the
/// CPU figures are the steadier comparison.
///
/// Measured 2026-11-22 on the 2-core Debian 12 build machine (nghttp2 1.52, OpenSSL 3.0, TLS 1.3,
/// loopback; other builds running, load average 2-5), ~300-byte body, 100 streams in flight,
/// ranges over several runs:
/// - in memory, client + server sessions on one thread: 77-135k req/s (7.4-13 µs CPU per request,
///   both ends together); TLS over a socketpair, same thread: 50-120k req/s (8.3-15.5 µs);
/// - one connection to nghttpd: HTTP2ClientSession 57-121k req/s, 3.7-8.4 µs CPU/request;
///   h2load in the same runs 59-120k req/s, 3.8-7.7 µs (ratio 0.9-1.1 run by run);
/// - h2load against HTTP2ServerSession (thread per connection): 65-114k req/s, 5.1-9.8 µs CPU
///   per request; against nghttpd: 48-116k req/s, 4.7-8.9 µs.
@Suite("HTTP2Kit benchmarks", .serialized)
struct HTTP2KitBenchmarks {
    static let enabled = ProcessInfo.processInfo.environment["ACTIVITYCAST_H2_BENCH"] == "1"
    static let requests = Int(ProcessInfo.processInfo.environment["ACTIVITYCAST_H2_BENCH_REQUESTS"] ?? "") ?? 200_000

    static let template = try! HTTP2RequestTemplate(authority: "api.sandbox.push.apple.com", headers: [
        HTTP2Header("apns-push-type", "liveactivity"),
        HTTP2Header("apns-topic", "com.example.app.push-type.liveactivity"),
        HTTP2Header("apns-priority", "10"),
        HTTP2Header("apns-expiration", "0"),
        HTTP2Header("authorization", "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.eyJpc3MiOiJERUYxMjNHSElKIiwiaWF0IjoxNzAwMDAwMDAwfQ.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlMTIzNA"),
    ])
    /// A typical Live Activity update (~300 bytes).
    static let body = HTTP2Body(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"homeScore":2,"awayScore":1,"clock":"63:12","period":"2nd half","lastEvent":"Goal by #9, assisted by #10"},"stale-date":1700000900,"relevance-score":75,"alert":{"title":"Goal!","body":"Home 2-1 Away"}}}"#)

    /// Times `body`: wall clock and this thread's CPU time (robust against a busy machine, where
    /// wall-clock rates partly measure the other processes).
    static func measure(_ body: () throws -> Void) rethrows -> (wall: Double, cpu: Double) {
        let start = ContinuousClock.now
        let cpuStart = threadCPUSeconds()
        try body()
        return ((ContinuousClock.now - start) / .seconds(1), threadCPUSeconds() - cpuStart)
    }

    static func report(_ label: String, requests: Int, seconds: (wall: Double, cpu: Double)) {
        let wall = Int(Double(requests) / seconds.wall)
        let cpu = Int(Double(requests) / seconds.cpu)
        print("BENCH \(label): \(requests) requests, \(String(format: "%.3f", seconds.wall)) s wall = \(wall) req/s; "
              + "\(String(format: "%.3f", seconds.cpu)) s CPU of this thread = \(cpu) req/s per CPU-second, "
              + "\(String(format: "%.2f", seconds.cpu / Double(requests) * 1e6)) µs/request")
    }

    /// Keeps `concurrency` requests in flight (bounded by the server's limit) until `total`.
    final class Sender {
        let client: HTTP2ClientSession
        let events = CountingClient()
        let total: Int
        let concurrency: Int
        let template: HTTP2RequestTemplate
        let path: String?
        var submitted = 0
        let withApnsID: Bool
        /// Paths and apns-id headers made before the clock starts (a sender has its tokens
        /// ready): 10,000 distinct ones, used in turn.
        let paths: [String]
        let idHeaders: [[HTTP2Header]]
        static let distinct = 10_000

        init(total: Int, concurrency: Int, template: HTTP2RequestTemplate = HTTP2KitBenchmarks.template,
             path: String? = nil, withApnsID: Bool) throws {
            client = try HTTP2ClientSession(delegate: events)
            self.total = total
            self.concurrency = concurrency
            self.template = template
            self.path = path
            self.withApnsID = withApnsID
            paths = (0..<Self.distinct).map { path ?? "/3/device/\(Self.token($0))" }
            idHeaders = (0..<Self.distinct).map { withApnsID ? [HTTP2Header("apns-id", Self.uuid($0))] : [] }
        }

        func fill() throws {
            guard client.hasReceivedSettings else { return }
            let limit = min(concurrency, client.remoteMaxConcurrentStreams)
            while submitted < total && client.activeStreams < limit {
                try client.submitRequest(template, path: paths[submitted % Self.distinct],
                                         headers: idHeaders[submitted % Self.distinct],
                                         body: HTTP2KitBenchmarks.body, context: UInt64(submitted))
                submitted += 1
            }
        }

        var done: Bool { events.closed == total }

        static func token(_ n: Int) -> String {
            let hex = String(n, radix: 16)
            return String(repeating: "a", count: 64 - hex.count) + hex
        }

        static func uuid(_ n: Int) -> String {
            let hex = String(n, radix: 16)
            return "6e3b1c9a-7d2f-4e8b-9a01-" + String(repeating: "0", count: max(0, 12 - hex.count)) + hex
        }
    }

    /// Counts outcomes without keeping them (what a sender does: look at status and apns-id).
    final class CountingClient: HTTP2ClientDelegate {
        var closed = 0
        var ok = 0
        var other = 0
        var idBytes = 0
        func http2(_ session: HTTP2ClientSession, responseHead stream: Int32, context: UInt64, status: Int,
                   headers: HTTP2HeaderList) {
            if status == 200 { ok += 1 } else { other += 1 }
            idBytes += headers.valueBytes(for: "apns-id")?.count ?? 0
        }
        func http2(_ session: HTTP2ClientSession, responseBody stream: Int32, context: UInt64, bytes: UnsafeRawBufferPointer) {}
        func http2(_ session: HTTP2ClientSession, streamClosed stream: Int32, context: UInt64, errorCode: HTTP2ErrorCode) {
            closed += 1
        }
    }

    @Test("client + server sessions in one thread, in memory (no TLS)")
    func memoryPipe() throws {
        guard Self.enabled else { return }
        for withApnsID in [false, true] {
            let sender = try Sender(total: Self.requests, concurrency: 100, withApnsID: withApnsID)
            let serverEvents = ServerRecorder()
            serverEvents.keepRequests = false
            serverEvents.answer = apnsLikeAnswer
            let server = try HTTP2ServerSession(delegate: serverEvents)
            let link = MemoryLink(client: sender.client, server: server)
            let elapsed = try Self.measure {
                try link.run(maxRounds: .max, between: { try sender.fill() }, until: { sender.done })
            }
            #expect(sender.events.ok == Self.requests)
            Self.report("memory pipe, client+server sessions, 1 thread, 100 in flight\(withApnsID ? ", apns-id per request" : "")",
                        requests: Self.requests, seconds: elapsed)
            print("BENCH   bytes client->server \(link.bytesToServer / Self.requests)/request, server->client \(link.bytesToClient / Self.requests)/request")
        }
    }

    @Test("client + server sessions in one thread, TLS over a socketpair")
    func tlsPipe() throws {
        guard Self.enabled else { return }
        let sender = try Sender(total: Self.requests, concurrency: 100, withApnsID: true)
        let serverEvents = ServerRecorder()
        serverEvents.keepRequests = false
        serverEvents.answer = apnsLikeAnswer
        let server = try HTTP2ServerSession(delegate: serverEvents)
        let pair = try TLSPair(client: sender.client, server: server)
        let elapsed = try Self.measure {
            try pair.run(timeout: .seconds(600), between: { try sender.fill() }, until: { sender.done })
        }
        #expect(sender.events.ok == Self.requests)
        Self.report("TLS socketpair, client+server sessions, 1 thread, 100 in flight", requests: Self.requests, seconds: elapsed)
    }

    /// nghttpd serving an empty file at /3/device/abc (200, empty body, like APNs).
    static func startNghttpd(_ certificate: TestCertificate) async throws -> (ChildProcess, Int) {
        let docroot = certificate.directory.path + "/docroot"
        try FileManager.default.createDirectory(atPath: docroot + "/3/device", withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: docroot + "/3/device/abc", contents: Data()) else {
            throw PumpTimeout(description: "cannot create the nghttpd docroot file")
        }
        let port = freeLoopbackPort()
        let nghttpd = try ChildProcess(executable: "/usr/sbin/nghttpd",
                                       arguments: ["-a", "127.0.0.1", "-d", docroot, String(port),
                                                   certificate.keyPath, certificate.certificatePath],
                                       directory: certificate.directory.path, logName: "nghttpd")
        try await InteropTests.waitForListener(nghttpd, port: port)
        return (nghttpd, port)
    }

    /// Runs h2load under bash's `time`; returns its summary lines and its CPU seconds (user + sys).
    static func h2load(_ arguments: [String], certificate: TestCertificate) async throws -> (summary: String, cpu: Double) {
        let command = "TIMEFORMAT='CPU %U %S'; time /usr/bin/h2load " + arguments.map { "'\($0)'" }.joined(separator: " ")
        let child = try ChildProcess(executable: "/bin/bash", arguments: ["-c", command],
                                     directory: certificate.directory.path, logName: "h2load")
        defer { child.kill(signal: SIGKILL); child.removeLogs() }
        _ = await child.waitForExit(timeout: .seconds(300))
        let summary = child.stdout.split(separator: "\n")
            .filter { $0.hasPrefix("finished in") || $0.hasPrefix("requests:") }
            .joined(separator: " | ")
        var cpu = 0.0
        if let line = child.stderr.split(separator: "\n").last(where: { $0.hasPrefix("CPU ") }) {
            cpu = line.split(separator: " ").dropFirst().compactMap { Double($0) }.reduce(0, +)
        }
        return (summary, cpu)
    }

    @Test("client session against nghttpd vs h2load against nghttpd (1 connection, 100 streams)")
    func clientVersusH2load() async throws {
        guard Self.enabled else { return }
        let certificate = try TestCertificate()
        defer { certificate.directory.remove() }
        let (nghttpd, port) = try await Self.startNghttpd(certificate)
        defer { nghttpd.kill(signal: SIGKILL); nghttpd.removeLogs() }
        let bodyPath = certificate.directory.path + "/body.json"
        try Self.body.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: bodyPath)) }

        // The same request headers on both sides (h2load: -H for each template header), so nghttpd
        // does the same work for both clients.
        let headerArguments = Self.template.headers.flatMap { ["-H", "\($0.name): \($0.value)"] }
        for round in 1...3 {
            let h2load = try await Self.h2load(["-n", String(Self.requests), "-c", "1", "-m", "100", "-d", bodyPath]
                                               + headerArguments + ["https://127.0.0.1:\(port)/3/device/abc"],
                                               certificate: certificate)
            print("BENCH h2load -> nghttpd (c1 m100), round \(round): \(h2load.summary) | h2load CPU "
                  + "\(String(format: "%.2f", h2load.cpu)) s = \(String(format: "%.2f", h2load.cpu / Double(Self.requests) * 1e6)) µs/request")

            for withApnsID in [false, true] {
                let socket = try Socket.connectTCP(host: "127.0.0.1", port: port, timeout: .seconds(5))
                defer { socket.close() }
                let context = try TLSContext.client(caFile: certificate.certificatePath, alpn: ["h2"])
                let tls = try TLSSession(context: context, fd: socket.fd, serverName: "127.0.0.1")
                try TLSPump.handshake(tls, fd: socket.fd)
                let template = try HTTP2RequestTemplate(authority: "127.0.0.1:\(port)", headers: Self.template.headers)
                let sender = try Sender(total: Self.requests, concurrency: 100, template: template, path: "/3/device/abc",
                                        withApnsID: withApnsID)
                let pump = TLSPump(fd: socket.fd, tls: tls, session: sender.client)
                let elapsed = try Self.measure {
                    try TLSPump.run([pump], timeout: .seconds(300), between: { try sender.fill() }, until: { sender.done })
                }
                #expect(sender.events.ok == Self.requests)
                Self.report("HTTP2ClientSession -> nghttpd (1 connection, 100 in flight\(withApnsID ? ", apns-id per request" : "")), round \(round)",
                            requests: Self.requests, seconds: elapsed)
            }
        }
    }

    @Test("h2load against the server session vs h2load against nghttpd")
    func serverVersusNghttpd() async throws {
        guard Self.enabled else { return }
        let certificate = try TestCertificate()
        defer { certificate.directory.remove() }
        let bodyPath = certificate.directory.path + "/body.json"
        try Self.body.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: bodyPath)) }
        let (nghttpd, nghttpdPort) = try await Self.startNghttpd(certificate)
        defer { nghttpd.kill(signal: SIGKILL); nghttpd.removeLogs() }
        let context = try TLSContext.server(certificatePEMFile: certificate.certificatePath,
                                            keyPEMFile: certificate.keyPath, alpn: ["h2"])
        let server = try ThreadedTestServer(context: context)
        defer { server.shutdown() }

        for (connections, streams) in [(1, 100), (4, 100), (4, 1)] {
            let n = streams == 1 ? Self.requests / 4 : Self.requests
            let args = ["-n", String(n), "-c", String(connections), "-m", String(streams), "-d", bodyPath]
                + Self.template.headers.flatMap { ["-H", "\($0.name): \($0.value)"] }
            let serverCPU0 = server.cpuMicroseconds.count
            let ours = try await Self.h2load(args + ["https://127.0.0.1:\(server.port)/3/device/abc"], certificate: certificate)
            // Connection threads add their CPU time when they end (h2load has closed by now).
            _ = await eventually(timeout: .seconds(5)) { server.connections.count > 0 && server.cpuMicroseconds.count > serverCPU0 }
            try await Task.sleep(for: .milliseconds(200))
            let ourCPU = Double(server.cpuMicroseconds.count - serverCPU0) / 1e6
            print("BENCH h2load -> HTTP2ServerSession (thread per connection) c\(connections) m\(streams): \(ours.summary) | "
                  + "server CPU \(String(format: "%.2f", ourCPU)) s = \(String(format: "%.2f", ourCPU / Double(n) * 1e6)) µs/request")
            let nghttpdCPU0 = processCPUSeconds(nghttpd.pid)
            let theirs = try await Self.h2load(args + ["https://127.0.0.1:\(nghttpdPort)/3/device/abc"], certificate: certificate)
            let theirCPU = processCPUSeconds(nghttpd.pid) - nghttpdCPU0
            print("BENCH h2load -> nghttpd c\(connections) m\(streams): \(theirs.summary) | "
                  + "nghttpd CPU \(String(format: "%.2f", theirCPU)) s = \(String(format: "%.2f", theirCPU / Double(n) * 1e6)) µs/request")
        }
    }
}
