import Foundation
import HTTP2Kit
import NetIO
import OpenSSLKit
import TestSupport
import Testing

/// HTTP2Kit against independent HTTP/2 implementations over TLS on loopback: the client session
/// against `nghttpd`, the server session against `h2load` and `nghttp`. Children are stopped by
/// PID (ChildProcess), never by name.
@Suite("Interop with nghttp2's tools", .serialized)
struct InteropTests {
    /// Waits for a child to accept TCP connections on `port`.
    static func waitForListener(_ child: ChildProcess, port: Int) async throws {
        let up = await eventually(timeout: .seconds(10)) { !child.isRunning || loopbackPortAccepts(port) }
        guard up, child.isRunning else {
            throw PumpTimeout(description: "child did not listen on \(port): \(child.stdout) \(child.stderr)")
        }
    }

    @Test("client session against nghttpd: 100 GET/POST requests get 200 or 404 with the right bodies")
    func clientAgainstNghttpd() async throws {
        let certificate = try TestCertificate()
        defer { certificate.directory.remove() }
        let docroot = certificate.directory.path + "/docroot"
        try FileManager.default.createDirectory(atPath: docroot, withIntermediateDirectories: true)
        let page = "hello from nghttpd\n"
        try page.write(toFile: docroot + "/index.html", atomically: true, encoding: .utf8)
        let bigPage = String(repeating: "0123456789abcdef", count: 8192)   // 128 KB: flow control
        try bigPage.write(toFile: docroot + "/big.txt", atomically: true, encoding: .utf8)

        let port = freeLoopbackPort()
        let nghttpd = try ChildProcess(executable: "/usr/sbin/nghttpd",
                                       arguments: ["-a", "127.0.0.1", "-d", docroot, String(port),
                                                   certificate.keyPath, certificate.certificatePath],
                                       directory: certificate.directory.path, logName: "nghttpd")
        defer { nghttpd.kill(signal: SIGKILL) }
        try await Self.waitForListener(nghttpd, port: port)

        let socket = try Socket.connectTCP(host: "127.0.0.1", port: port, timeout: .seconds(5))
        defer { socket.close() }
        let context = try TLSContext.client(caFile: certificate.certificatePath, alpn: ["h2"])
        let tls = try TLSSession(context: context, fd: socket.fd, serverName: "127.0.0.1")
        try TLSPump.handshake(tls, fd: socket.fd)
        #expect(tls.negotiatedProtocol == "h2")

        let events = ClientRecorder()
        let client = try HTTP2ClientSession(delegate: events)
        let pump = TLSPump(fd: socket.fd, tls: tls, session: client)
        let get = try HTTP2RequestTemplate(method: "GET", authority: "127.0.0.1:\(port)")
        let post = try HTTP2RequestTemplate(method: "POST", authority: "127.0.0.1:\(port)", headers: [
            HTTP2Header("content-type", "application/json"),
        ])
        let body = HTTP2Body(#"{"aps":{"event":"update"}}"#)

        // (template, path, expected status, expected body) per request kind.
        let kinds: [(HTTP2RequestTemplate, String, Int, String?)] = [
            (get, "/index.html", 200, page),
            (get, "/missing", 404, nil),
            (post, "/index.html", 200, page),
            (post, "/nothing-here", 404, nil),
            (get, "/big.txt", 200, bigPage),
        ]
        var submitted: UInt64 = 0
        try TLSPump.run([pump], timeout: .seconds(30), between: {
            while client.hasReceivedSettings && submitted < 100
                    && client.activeStreams < client.remoteMaxConcurrentStreams {
                let kind = kinds[Int(submitted) % kinds.count]
                try events.submit(client, kind.0, path: kind.1, body: kind.0 === post ? body : nil, context: submitted)
                submitted += 1
            }
        }, until: { events.closedCount == 100 })

        #expect(events.unknownEvents == 0)
        for context in 0..<UInt64(100) {
            let kind = kinds[Int(context) % kinds.count]
            let response = try #require(events.responses[context])
            #expect(response.status == kind.2, "context \(context) \(kind.1)")
            #expect(response.closed == .noError)
            #expect(response.headers.value(for: "server")?.hasPrefix("nghttpd") == true)
            if let expected = kind.3 {
                let matches = response.body == Array(expected.utf8)
                #expect(matches, "context \(context): body of \(response.body.count) bytes")
                #expect(response.headers.value(for: "content-length") == String(expected.utf8.count))
            }
        }

        // nghttpd answers PING too.
        try client.submitPing(payload: 7)
        try TLSPump.run([pump], timeout: .seconds(10), until: { events.pings == [7] })
        nghttpd.removeLogs()
    }

    @Test("server session against h2load: 2,000 POSTs over 2 connections, 10 streams each, all succeed")
    func serverAgainstH2load() async throws {
        let certificate = try TestCertificate()
        defer { certificate.directory.remove() }
        let context = try TLSContext.server(certificatePEMFile: certificate.certificatePath,
                                            keyPEMFile: certificate.keyPath, alpn: ["h2"])
        let server = try ThreadedTestServer(context: context)
        defer { server.shutdown() }
        let bodyPath = certificate.directory.path + "/body.json"
        try #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#
            .write(toFile: bodyPath, atomically: true, encoding: .utf8)

        let h2load = try ChildProcess(executable: "/usr/bin/h2load",
                                      arguments: ["-n", "2000", "-c", "2", "-m", "10", "-d", bodyPath,
                                                  "https://127.0.0.1:\(server.port)/3/device/abc"],
                                      directory: certificate.directory.path, logName: "h2load")
        defer { h2load.kill(signal: SIGKILL) }
        let status = await h2load.waitForExit(timeout: .seconds(60))
        let output = h2load.stdout
        #expect(status == 0, "h2load: \(output) \(h2load.stderr)")
        #expect(output.contains("2000 succeeded"), "h2load: \(output)")
        #expect(output.contains("status codes: 2000 2xx"), "h2load: \(output)")
        h2load.removeLogs()
        server.shutdown()
        #expect(server.requests.count == 2000)
        #expect(server.connections.count == 2)
        #expect(server.failures.notes.isEmpty, "\(server.failures.notes)")
    }

    @Test("server session against nghttp: headers, apns-id echo and an error body")
    func serverAgainstNghttp() async throws {
        let certificate = try TestCertificate()
        defer { certificate.directory.remove() }
        let context = try TLSContext.server(certificatePEMFile: certificate.certificatePath,
                                            keyPEMFile: certificate.keyPath, alpn: ["h2"])
        let server = try ThreadedTestServer(context: context)
        defer { server.shutdown() }
        let bodyPath = certificate.directory.path + "/body.json"
        try #"{"aps":{"event":"end"}}"#.write(toFile: bodyPath, atomically: true, encoding: .utf8)

        let ok = try ChildProcess(executable: "/usr/bin/nghttp",
                                  arguments: ["-v", "-d", bodyPath,
                                              "-H", "apns-id: 6e3b1c9a-7d2f-4e8b-9a01-23456789abcd",
                                              "-H", "apns-push-type: liveactivity",
                                              "https://127.0.0.1:\(server.port)/3/device/abc"],
                                  directory: certificate.directory.path, logName: "nghttp-ok")
        defer { ok.kill(signal: SIGKILL) }
        #expect(await ok.waitForExit(timeout: .seconds(30)) == 0, "nghttp: \(ok.stdout) \(ok.stderr)")
        #expect(ok.stdout.contains(":status: 200"), "nghttp: \(ok.stdout)")
        #expect(ok.stdout.contains("apns-id: 6e3b1c9a-7d2f-4e8b-9a01-23456789abcd"), "nghttp: \(ok.stdout)")
        ok.removeLogs()

        let bad = try ChildProcess(executable: "/usr/bin/nghttp",
                                   arguments: ["-v", "-d", bodyPath, "https://127.0.0.1:\(server.port)/4/other"],
                                   directory: certificate.directory.path, logName: "nghttp-bad")
        defer { bad.kill(signal: SIGKILL) }
        #expect(await bad.waitForExit(timeout: .seconds(30)) == 0, "nghttp: \(bad.stdout) \(bad.stderr)")
        #expect(bad.stdout.contains(":status: 400"), "nghttp: \(bad.stdout)")
        #expect(bad.stdout.contains(#"{"reason":"BadPath"}"#), "nghttp: \(bad.stdout)")
        bad.removeLogs()
        server.shutdown()
        #expect(server.requests.count == 2)
        #expect(server.failures.notes.isEmpty, "\(server.failures.notes)")
    }
}
