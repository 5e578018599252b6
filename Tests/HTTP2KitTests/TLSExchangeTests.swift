import HTTP2Kit
import OpenSSLKit
import Testing

/// Client and server sessions over real TLS (OpenSSLKit) on a non-blocking AF_UNIX socketpair,
/// both pumped on the test thread.
@Suite("Client and server sessions over TLS")
struct TLSExchangeTests {
    @Test("1,000 requests with bodies: every response matches its stream and context")
    func thousandRequests() throws {
        let clientEvents = ClientRecorder()
        clientEvents.keepLog = false
        let serverEvents = ServerRecorder()
        // The server echoes what it got: the request's apns-id, the path as a header, and a body
        // built from the request body, so every response can be checked against its request.
        serverEvents.answer = { session, request in
            let status = request.path?.hasSuffix("7") == true ? 400 : 200
            try session.respond(stream: request.stream, status: status, headers: [
                HTTP2Header("apns-id", request.headers.value(for: "apns-id") ?? "missing"),
                HTTP2Header("x-path", request.path ?? "missing"),
            ], body: Array("echo:".utf8) + request.body)
        }
        let client = try HTTP2ClientSession(delegate: clientEvents)
        let server = try HTTP2ServerSession(delegate: serverEvents, maxConcurrentStreams: 64)
        let pair = try TLSPair(client: client, server: server)

        let template = try HTTP2RequestTemplate(authority: "localhost", headers: [
            HTTP2Header("apns-push-type", "liveactivity"),
            HTTP2Header("apns-topic", "com.example.app.push-type.liveactivity"),
        ])
        // Three shared payloads, as a sender fans one payload out to many tokens.
        let bodies = (0..<3).map { n in
            HTTP2Body(#"{"aps":{"event":"update","content-state":{"n":\#(n)}},"pad":""#
                      + String(repeating: "p", count: 500 * (n + 1)) + #""}"#)
        }
        let total: UInt64 = 1000
        var submitted: UInt64 = 0
        var streamOf: [UInt64: Int32] = [:]
        try pair.run(between: {
            // Wait for the server's SETTINGS: before them nghttp2 assumes 100 concurrent streams,
            // and a server that allows fewer refuses the excess (REFUSED_STREAM).
            while client.hasReceivedSettings && submitted < total
                    && client.activeStreams < client.remoteMaxConcurrentStreams {
                let context = submitted
                let stream = try clientEvents.submit(client, template, path: "/3/device/token\(context)",
                                                     headers: [HTTP2Header("apns-id", "id-\(context)")],
                                                     body: bodies[Int(context % 3)], context: context)
                streamOf[context] = stream
                submitted += 1
            }
        }, until: { clientEvents.closedCount == Int(total) })

        #expect(clientEvents.unknownEvents == 0)
        #expect(serverEvents.requests.count == Int(total))
        #expect(serverEvents.maxActiveStreams <= 64)
        #expect(Set(streamOf.values).count == Int(total))
        for context in 0..<total {
            guard let response = clientEvents.responses[context] else {
                Issue.record("no response for context \(context)")
                continue
            }
            #expect(response.stream == streamOf[context])
            #expect(response.status == (String(context).hasSuffix("7") ? 400 : 200))
            #expect(response.heads == 1)
            #expect(response.headers.value(for: "apns-id") == "id-\(context)")
            #expect(response.headers.value(for: "x-path") == "/3/device/token\(context)")
            let bodyMatches = response.body == Array("echo:".utf8) + bodies[Int(context % 3)].bytes
            #expect(bodyMatches, "context \(context): body of \(response.body.count) bytes")
            #expect(response.closed == .noError)
            #expect(response.closes == 1)
        }
        #expect(client.activeStreams == 0)
        #expect(server.activeStreams == 0)

        // Graceful close, APNs style: the server sends GOAWAY with a reason; the client learns
        // the last stream processed, and with nothing in flight both ends are done (nghttp2 stops
        // reading once GOAWAY went either way and no stream is open).
        try server.submitGoAway(debugData: Array(#"{"reason":"Shutdown"}"#.utf8))
        try pair.run(until: { clientEvents.goAways.count == 1 })
        try pair.run(until: { !pair.client.isActive && !pair.server.isActive })
        #expect(clientEvents.goAways.first?.lastStreamID == 1999)
        #expect(clientEvents.goAways.first?.debugData == Array(#"{"reason":"Shutdown"}"#.utf8))
    }
}
