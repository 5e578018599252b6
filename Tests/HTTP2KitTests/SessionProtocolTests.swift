import HTTP2Kit
import Testing

/// Client and server sessions connected in memory (bytes copied between them, no socket): the
/// protocol behaviour the APNs connection layer relies on.
@Suite("Client and server sessions in memory")
struct SessionProtocolTests {
    static let template = try! HTTP2RequestTemplate(authority: "api.sandbox.push.apple.com", headers: [
        HTTP2Header("apns-push-type", "liveactivity"),
        HTTP2Header("apns-topic", "com.example.app.push-type.liveactivity"),
        HTTP2Header("apns-priority", "10"),
        HTTP2Header("authorization", "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.e30.sig"),
    ])
    static let body = HTTP2Body(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":1}}}"#)

    struct Setup {
        let clientEvents = ClientRecorder()
        let serverEvents = ServerRecorder()
        let client: HTTP2ClientSession
        let server: HTTP2ServerSession
        let link: MemoryLink

        init(maxConcurrentStreams: Int = 100, maxRequestBodySize: Int = 64 << 10) throws {
            client = try HTTP2ClientSession(delegate: clientEvents)
            server = try HTTP2ServerSession(delegate: serverEvents, maxConcurrentStreams: maxConcurrentStreams,
                                            maxRequestBodySize: maxRequestBodySize)
            link = MemoryLink(client: client, server: server)
        }
    }

    @Test("a request reaches the server with every header and the body; the response comes back matched")
    func roundTrip() throws {
        let s = try Setup()
        s.serverEvents.answer = { session, request in
            try session.respond(stream: request.stream, status: 200,
                                headers: [HTTP2Header("apns-id", request.headers.value(for: "apns-id") ?? "?"),
                                          HTTP2Header("apns-unique-id", "u-1")])
        }
        let stream = try s.clientEvents.submit(s.client, Self.template, path: "/3/device/abcdef",
                                               headers: [HTTP2Header("apns-id", "0b7c6f2e-1111-4222-8333-444455556666")],
                                               body: Self.body, context: 42)
        #expect(stream == 1)
        #expect(s.client.activeStreams == 1)
        try s.link.settle()

        let request = try #require(s.serverEvents.requests.first)
        #expect(request.method == "POST")
        #expect(request.path == "/3/device/abcdef")
        #expect(request.authority == "api.sandbox.push.apple.com")
        #expect(request.headers.value(for: ":scheme") == "https")
        #expect(request.headers.value(for: "apns-topic") == "com.example.app.push-type.liveactivity")
        #expect(request.headers.value(for: "authorization")?.hasPrefix("bearer ") == true)
        #expect(request.headers.value(for: "apns-id") == "0b7c6f2e-1111-4222-8333-444455556666")
        #expect(request.body == Self.body.bytes)
        #expect(!request.bodyTooLarge)
        // Pseudo-headers come first, in template order, with :path after :authority.
        #expect(Array(request.headers.map(\.name).prefix(4)) == [":method", ":scheme", ":authority", ":path"])

        let response = try #require(s.clientEvents.responses[42])
        #expect(response.stream == 1)
        #expect(response.status == 200)
        #expect(response.heads == 1)
        #expect(response.headers.value(for: "apns-id") == "0b7c6f2e-1111-4222-8333-444455556666")
        #expect(response.headers.value(for: "apns-unique-id") == "u-1")
        #expect(!response.headers.contains(name: ":status"))
        #expect(response.body.isEmpty)
        #expect(response.closed == .noError)
        #expect(response.closes == 1)
        #expect(s.client.activeStreams == 0)
        #expect(s.server.activeStreams == 0)
        #expect(s.clientEvents.unknownEvents == 0)
    }

    @Test("repeated template headers are HPACK-indexed: later requests are much smaller on the wire")
    func templateHeadersAreIndexed() throws {
        let s = try Setup()
        s.serverEvents.answer = { session, request in try session.respond(stream: request.stream, status: 200) }
        try s.link.settle()
        let afterPreface = s.link.bytesToServer
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/aaaa", context: 1)
        try s.link.settle()
        let first = s.link.bytesToServer - afterPreface
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/bbbb", context: 2)
        try s.link.settle()
        let second = s.link.bytesToServer - afterPreface - first
        #expect(second < first / 2, "first request \(first) bytes, second \(second) bytes")
        #expect(s.serverEvents.requests.map(\.path) == ["/3/device/aaaa", "/3/device/bbbb"])
    }

    @Test("error responses deliver status, headers and a JSON body")
    func errorResponseBody() throws {
        let s = try Setup()
        s.serverEvents.answer = { session, request in
            try session.respond(stream: request.stream, status: 410, headers: [HTTP2Header("apns-id", "x")],
                                body: Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8))
        }
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/gone", body: Self.body, context: 7)
        try s.link.settle()
        let response = try #require(s.clientEvents.responses[7])
        #expect(response.status == 410)
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        #expect(response.closed == .noError)
    }

    @Test("the client reports the server's SETTINGS_MAX_CONCURRENT_STREAMS, and a change mid-connection")
    func maxConcurrentStreams() throws {
        let s = try Setup(maxConcurrentStreams: 5)
        #expect(s.client.remoteMaxConcurrentStreams == 100)   // the hint, until SETTINGS arrive
        #expect(!s.client.hasReceivedSettings)
        try s.link.settle()
        #expect(s.client.hasReceivedSettings)
        #expect(s.client.remoteMaxConcurrentStreams == 5)
        #expect(s.clientEvents.settings == [5])

        // A caller that respects the limit: never more than `remoteMaxConcurrentStreams` in flight.
        // The server answers one request per round, so streams pile up to the limit.
        var submitted: UInt64 = 0
        var peakClientActive = 0
        try s.link.run(between: {
            while submitted < 40 && s.client.activeStreams < s.client.remoteMaxConcurrentStreams {
                submitted += 1
                try s.clientEvents.submit(s.client, Self.template, path: "/3/device/\(submitted)", body: Self.body,
                                          context: submitted)
            }
            peakClientActive = max(peakClientActive, s.client.activeStreams)
            if !s.serverEvents.pending.isEmpty {
                let request = s.serverEvents.pending.removeFirst()
                try s.server.respond(stream: request.stream, status: 200)
            }
        }, until: { s.clientEvents.closedCount == 40 })
        #expect(peakClientActive == 5)
        #expect(s.serverEvents.maxActiveStreams == 5)
        #expect(s.clientEvents.responses.values.allSatisfy { $0.status == 200 && $0.closed == .noError })

        // The server lowers the limit while idle; the client sees the new value.
        try s.server.updateMaxConcurrentStreams(2)
        try s.link.settle()
        #expect(s.client.remoteMaxConcurrentStreams == 2)
        #expect(s.clientEvents.settings == [5, 2])

        s.serverEvents.maxActiveStreams = 0
        try s.link.run(between: {
            while submitted < 60 && s.client.activeStreams < s.client.remoteMaxConcurrentStreams {
                submitted += 1
                try s.clientEvents.submit(s.client, Self.template, path: "/3/device/\(submitted)", body: Self.body,
                                          context: submitted)
            }
            if !s.serverEvents.pending.isEmpty {
                let request = s.serverEvents.pending.removeFirst()
                try s.server.respond(stream: request.stream, status: 200)
            }
        }, until: { s.clientEvents.closedCount == 60 })
        #expect(s.serverEvents.maxActiveStreams == 2)
    }

    @Test("requests beyond the server's limit are held back by nghttp2, never sent early")
    func overSubmissionIsHeldBack() throws {
        let s = try Setup(maxConcurrentStreams: 5)
        try s.link.settle()
        for i in 1...30 {
            try s.clientEvents.submit(s.client, Self.template, path: "/3/device/\(i)", body: Self.body, context: UInt64(i))
        }
        #expect(s.client.activeStreams == 30)
        try s.link.run(between: {
            if !s.serverEvents.pending.isEmpty {
                let request = s.serverEvents.pending.removeFirst()
                try s.server.respond(stream: request.stream, status: 200)
            }
        }, until: { s.clientEvents.closedCount == 30 })
        #expect(s.serverEvents.maxActiveStreams == 5)
        #expect(s.serverEvents.requests.count == 30)
        #expect(s.clientEvents.responses.values.allSatisfy { $0.status == 200 && $0.closed == .noError })
        // No stream was refused: nghttp2 respected the limit instead of letting the server refuse.
        #expect(!s.serverEvents.closed.contains { $0.errorCode != .noError })
    }

    @Test("GOAWAY: the client gets last-stream-ID and debug data; streams above it close with REFUSED_STREAM")
    func goAway() throws {
        let s = try Setup()
        try s.link.settle()
        var streams: [Int32] = []
        for i in 1...10 {
            streams.append(try s.clientEvents.submit(s.client, Self.template, path: "/3/device/\(i)", body: Self.body,
                                                     context: UInt64(i)))
        }
        #expect(streams == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19])
        try s.link.settle()
        #expect(s.serverEvents.pending.count == 10)

        let debugData = Array(#"{"reason":"Shutdown"}"#.utf8)
        try s.server.submitGoAway(lastStreamID: 9, errorCode: .noError, debugData: debugData)
        for request in s.serverEvents.pending where request.stream <= 9 {
            try s.server.respond(stream: request.stream, status: 200, headers: [HTTP2Header("apns-id", "id-\(request.stream)")])
        }
        try s.link.settle()

        #expect(s.clientEvents.goAways.count == 1)
        let goAway = try #require(s.clientEvents.goAways.first)
        #expect(goAway.lastStreamID == 9)
        #expect(goAway.errorCode == .noError)
        #expect(goAway.debugData == debugData)
        for i in 1...10 {
            let response = try #require(s.clientEvents.responses[UInt64(i)])
            if response.stream <= 9 {
                #expect(response.status == 200)
                #expect(response.headers.value(for: "apns-id") == "id-\(response.stream)")
                #expect(response.closed == .noError)
            } else {
                #expect(response.heads == 0)
                #expect(response.closed == .refusedStream)
            }
            #expect(response.closes == 1)
        }
        // The GOAWAY is reported before the refused streams close.
        let goAwayIndex = try #require(s.clientEvents.log.firstIndex(of: "goaway 9"))
        let firstRefused = try #require(s.clientEvents.log.firstIndex { $0.hasSuffix("REFUSED_STREAM") })
        #expect(goAwayIndex < firstRefused)
        // Streams above the last ID are gone on the server side too.
        #expect(s.server.respondFails(stream: 11))

        // No new requests on this connection; both ends are done with it.
        #expect(!s.client.canSubmitRequests)
        do {
            _ = try s.client.submitRequest(Self.template, path: "/3/device/late", context: 99)
            Issue.record("a request was accepted after GOAWAY")
        } catch {
            #expect(error.kind == .sessionClosing)
        }
        #expect(s.client.activeStreams == 0)
        #expect(!s.client.wantsRead && !s.client.wantsWrite)
        #expect(!s.server.wantsRead && !s.server.wantsWrite)
    }

    @Test("GOAWAY: requests nghttp2 was holding back are reported refused at once")
    func goAwayRefusesHeldBackRequests() throws {
        let s = try Setup(maxConcurrentStreams: 2)
        try s.link.settle()
        for i in 1...6 {
            try s.clientEvents.submit(s.client, Self.template, path: "/3/device/\(i)", context: UInt64(i))
        }
        try s.link.settle()
        #expect(s.serverEvents.pending.map(\.stream) == [1, 3])
        #expect(s.client.activeStreams == 6)
        #expect(s.client.unfinishedRequests().count == 6)
        try s.server.submitGoAway(errorCode: .noError, debugData: Array(#"{"reason":"Shutdown"}"#.utf8))
        try s.link.settle()
        #expect(s.clientEvents.goAways.first?.lastStreamID == 3)
        for i in 3...6 {
            #expect(s.clientEvents.responses[UInt64(i)]?.closed == .refusedStream, "context \(i)")
        }
        #expect(s.clientEvents.log.suffix(4) == ["close 5 REFUSED_STREAM", "close 7 REFUSED_STREAM",
                                                 "close 9 REFUSED_STREAM", "close 11 REFUSED_STREAM"])
        #expect(s.client.activeStreams == 2)
        #expect(s.client.unfinishedRequests().map(\.stream) == [1, 3])
        // The two open streams can still be answered.
        for request in s.serverEvents.pending { try s.server.respond(stream: request.stream, status: 200) }
        try s.link.settle()
        #expect(s.clientEvents.responses[1]?.status == 200)
        #expect(s.clientEvents.responses[2]?.status == 200)
        #expect(s.clientEvents.closedCount == 6)
        #expect(s.clientEvents.responses.values.allSatisfy { $0.closes == 1 })
        #expect(s.client.unfinishedRequests().isEmpty)
        #expect(s.client.activeStreams == 0)
    }

    @Test("RST_STREAM from the server closes the client's stream with its error code")
    func serverReset() throws {
        let s = try Setup()
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/a", body: Self.body, context: 1)
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/b", body: Self.body, context: 2)
        try s.link.settle()
        #expect(s.serverEvents.pending.count == 2)
        try s.server.resetStream(1, errorCode: .internalError)
        try s.server.resetStream(3, errorCode: .refusedStream)
        try s.link.settle()
        #expect(s.clientEvents.responses[1]?.closed == .internalError)
        #expect(s.clientEvents.responses[1]?.heads == 0)
        #expect(s.clientEvents.responses[2]?.closed == .refusedStream)
        #expect(s.client.activeStreams == 0)
        #expect(s.server.activeStreams == 0)
        #expect(s.server.respondFails(stream: 1))
        // The connection is still fine.
        s.serverEvents.answer = { session, request in try session.respond(stream: request.stream, status: 200) }
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/c", context: 3)
        try s.link.settle()
        #expect(s.clientEvents.responses[3]?.status == 200)
    }

    @Test("a client cancel reaches the server as RST_STREAM(CANCEL)")
    func clientCancel() throws {
        let s = try Setup()
        let stream = try s.clientEvents.submit(s.client, Self.template, path: "/3/device/a", body: Self.body, context: 1)
        try s.link.settle()
        try s.client.cancel(stream: stream)
        try s.link.settle()
        #expect(s.clientEvents.responses[1]?.closed == .cancel)
        #expect(s.serverEvents.closed.map(\.errorCode) == [.cancel])
    }

    @Test("PING round trips in both directions with the payload")
    func ping() throws {
        let s = try Setup()
        try s.client.submitPing(payload: 0x0123_4567_89ab_cdef)
        try s.server.submitPing(payload: 42)
        try s.link.settle()
        #expect(s.clientEvents.pings == [0x0123_4567_89ab_cdef])
        #expect(s.serverEvents.pings == [42])
    }

    @Test("a body over the server's cap is handed over early, answered 413, and the stream is closed cleanly")
    func oversizedBody() throws {
        let s = try Setup(maxRequestBodySize: 4096)
        s.serverEvents.answer = apnsLikeAnswer
        let big = HTTP2Body([UInt8](repeating: UInt8(ascii: "x"), count: 100_000))
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/big", body: big, context: 1)
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/small", body: Self.body, context: 2)
        try s.link.settle()
        #expect(s.serverEvents.requests.count == 2)
        let tooLarge = try #require(s.serverEvents.requests.first { $0.path == "/3/device/big" })
        #expect(tooLarge.bodyTooLarge)
        #expect(tooLarge.body.isEmpty)
        #expect(s.clientEvents.responses[1]?.status == 413)
        #expect(String(decoding: s.clientEvents.responses[1]?.body ?? [], as: UTF8.self) == #"{"reason":"PayloadTooLarge"}"#)
        #expect(s.clientEvents.responses[1]?.closed == .noError)
        #expect(s.clientEvents.responses[2]?.status == 200)
        #expect(s.client.activeStreams == 0)
        #expect(s.server.activeStreams == 0)
        #expect(s.serverEvents.answerErrors.isEmpty)
    }

    @Test("respond refuses unknown streams and second answers")
    func respondMisuse() throws {
        let s = try Setup()
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/a", context: 1)
        try s.link.settle()
        #expect(s.server.respondFails(stream: 5))
        try s.server.respond(stream: 1, status: 200)
        #expect(s.server.respondFails(stream: 1))
        #expect(s.server.respondFails(stream: 1, status: 42))
        try s.link.settle()
        #expect(s.clientEvents.responses[1]?.status == 200)
    }

    @Test("terminate: GOAWAY goes out, the server is done, the client's open request stays unfinished")
    func terminate() throws {
        let s = try Setup()
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/a", context: 1)
        try s.link.settle()
        s.server.terminate(errorCode: .internalError)
        try s.link.settle()
        #expect(s.clientEvents.goAways.first?.errorCode == .internalError)
        #expect(s.clientEvents.goAways.first?.lastStreamID == 1)
        #expect(!s.server.wantsRead && !s.server.wantsWrite)
        #expect(!s.client.canSubmitRequests)
        // Stream 1 was processed as far as the server admits, and will never be answered: nothing
        // closes it but the connection. The caller learns about it from unfinishedRequests().
        #expect(s.clientEvents.responses[1]?.closed == nil)
        #expect(s.client.wantsRead)
        #expect(s.client.unfinishedRequests().map(\.context) == [1])
    }

    @Test("a peer that sends garbage gets a protocol error")
    func garbageIn() throws {
        let server = try HTTP2ServerSession(delegate: ServerRecorder())
        do {
            try server.receive(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            Issue.record("an HTTP/1.1 request was accepted")
        } catch {
            #expect(error.kind == .protocolError)
        }
    }

    @Test("unfinished requests are listed for a connection that died")
    func unfinishedRequests() throws {
        let s = try Setup()
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/a", context: 10)
        try s.clientEvents.submit(s.client, Self.template, path: "/3/device/b", context: 11)
        try s.link.settle()
        try s.server.respond(stream: 1, status: 200)
        try s.link.settle()
        let unfinished = s.client.unfinishedRequests()
        #expect(unfinished.count == 1)
        #expect(unfinished.first?.stream == 3)
        #expect(unfinished.first?.context == 11)
    }
}

extension HTTP2ServerSession {
    /// Whether `respond` throws `.invalidArgument` for this stream.
    func respondFails(stream: Int32, status: Int = 200) -> Bool {
        do {
            try respond(stream: stream, status: status)
            return false
        } catch {
            return error.kind == .invalidArgument
        }
    }
}
