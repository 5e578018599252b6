import HTTP2Kit
import Testing

/// Limits and misuse: header caps, stream-ID exhaustion, re-entrant calls.
@Suite("Session limits and misuse")
struct EdgeCaseTests {
    static let template = SessionProtocolTests.template

    @Test("a client runs out of stream IDs after 2^31 - 1 and says so")
    func streamIDExhaustion() throws {
        let s = try SessionProtocolTests.Setup()
        s.serverEvents.answer = { session, request in try session.respond(stream: request.stream, status: 200) }
        try s.link.settle()
        try s.client.setNextStreamID(Int32.max)
        #expect(s.client.nextStreamID == Int64(Int32.max))
        #expect(s.client.canSubmitRequests)
        let last = try s.clientEvents.submit(s.client, Self.template, path: "/3/device/last", context: 1)
        #expect(last == Int32.max)
        #expect(!s.client.canSubmitRequests)
        do {
            _ = try s.client.submitRequest(Self.template, path: "/3/device/one-too-many", context: 2)
            Issue.record("a request was accepted without a stream ID")
        } catch {
            #expect(error.kind == .streamIDsExhausted)
        }
        // The last stream still completes.
        try s.link.settle()
        #expect(s.clientEvents.responses[1]?.status == 200)
        #expect(s.clientEvents.responses[1]?.closed == .noError)
    }

    @Test("a response header block over the client's cap resets the stream with INTERNAL_ERROR")
    func responseHeaderCap() throws {
        let events = ClientRecorder()
        let serverEvents = ServerRecorder()
        let client = try HTTP2ClientSession(delegate: events, maxResponseHeaderBytes: 256)
        let server = try HTTP2ServerSession(delegate: serverEvents)
        let link = MemoryLink(client: client, server: server)
        serverEvents.answer = { session, request in
            let big = String(repeating: "x", count: request.path == "/big" ? 1000 : 10)
            try session.respond(stream: request.stream, status: 200, headers: [HTTP2Header("x-big", big)])
        }
        try events.submit(client, Self.template, path: "/big", context: 1)
        try events.submit(client, Self.template, path: "/small", context: 2)
        try link.settle()
        #expect(events.responses[1]?.heads == 0)
        #expect(events.responses[1]?.closed == .internalError)
        #expect(events.responses[2]?.status == 200)
        #expect(events.responses[2]?.closed == .noError)
        #expect(client.activeStreams == 0)
    }

    @Test("a request header block over the server's cap is reset and never delivered")
    func requestHeaderCap() throws {
        let events = ClientRecorder()
        let serverEvents = ServerRecorder()
        serverEvents.answer = { session, request in try session.respond(stream: request.stream, status: 200) }
        let client = try HTTP2ClientSession(delegate: events)
        let server = try HTTP2ServerSession(delegate: serverEvents, maxRequestHeaderBytes: 1024)
        let link = MemoryLink(client: client, server: server)
        try events.submit(client, Self.template, path: "/3/device/a",
                          headers: [HTTP2Header("x-padding", String(repeating: "p", count: 2000))], context: 1)
        try events.submit(client, Self.template, path: "/3/device/b", context: 2)
        try link.settle()
        #expect(serverEvents.requests.map(\.path) == ["/3/device/b"])
        #expect(events.responses[1]?.closed == .internalError)
        #expect(events.responses[2]?.status == 200)
        #expect(server.activeStreams == 0)
    }

    @Test("header blocks larger than the server's first buffers arrive whole, in order, and one stream's never leaks into the next")
    func largeHeaderBlocks() throws {
        let events = ClientRecorder()
        let serverEvents = ServerRecorder()
        serverEvents.answer = { session, request in try session.respond(stream: request.stream, status: 200) }
        let client = try HTTP2ClientSession(delegate: events)
        let server = try HTTP2ServerSession(delegate: serverEvents)
        let link = MemoryLink(client: client, server: server)
        // 40 fields and ~20 KB (more than the 16 fields and 1 KB the server starts with, and more
        // than one HEADERS frame: CONTINUATION), then a small request, then a large one with a body.
        let many = (0..<40).map { HTTP2Header("x-field-\($0)", String(repeating: Character(UnicodeScalar(97 + $0 % 26)!), count: 500)) }
        try events.submit(client, Self.template, path: "/big", headers: many, context: 1)
        try events.submit(client, Self.template, path: "/small", headers: [HTTP2Header("x-one", "1")], context: 2)
        try events.submit(client, Self.template, path: "/body", headers: Array(many.prefix(20)),
                          body: HTTP2Body(Array("{}".utf8)), context: 3)
        try link.settle()
        let byPath = Dictionary(uniqueKeysWithValues: serverEvents.requests.map { ($0.path ?? "", $0) })
        let big = try #require(byPath["/big"])
        #expect(big.headers.filter { $0.name.hasPrefix("x-field-") } == many)
        let small = try #require(byPath["/small"])
        #expect(small.headers.contains(HTTP2Header("x-one", "1")))
        #expect(!small.headers.contains { $0.name.hasPrefix("x-field-") })
        let body = try #require(byPath["/body"])
        #expect(body.headers.filter { $0.name.hasPrefix("x-field-") } == Array(many.prefix(20)))
        #expect(body.body == Array("{}".utf8))
        #expect((1...3).allSatisfy { events.responses[UInt64($0)]?.status == 200 })
    }

    @Test("a too-large body still arriving when the 413 is out: the server resets the stream with NO_ERROR")
    func earlyResponseResetsStream() throws {
        let events = ClientRecorder()
        let serverEvents = ServerRecorder()
        serverEvents.answer = apnsLikeAnswer
        let client = try HTTP2ClientSession(delegate: events)
        // A small stream window keeps most of the body on the client's side when the 413 goes out.
        let server = try HTTP2ServerSession(delegate: serverEvents, initialWindowSize: 16_384,
                                            connectionWindowSize: 65_535, maxRequestBodySize: 4096)
        let link = MemoryLink(client: client, server: server)
        try link.settle()
        let big = HTTP2Body([UInt8](repeating: 0x7b, count: 200_000))
        try events.submit(client, Self.template, path: "/3/device/big", body: big, context: 1)
        try link.settle()
        #expect(events.responses[1]?.status == 413)
        #expect(events.responses[1]?.closed == .noError)
        #expect(link.bytesToServer < 100_000, "the client stopped sending: \(link.bytesToServer) bytes")
        #expect(serverEvents.closed.map(\.errorCode) == [.noError])
        #expect(server.activeStreams == 0)
        #expect(client.activeStreams == 0)
        // The connection goes on.
        try events.submit(client, Self.template, path: "/3/device/small", body: SessionProtocolTests.body, context: 2)
        try link.settle()
        #expect(events.responses[2]?.status == 200)
    }

    /// A delegate that tries to drive the session from inside a callback.
    final class ReentrantDelegate: HTTP2ClientDelegate {
        var errors: [HTTP2Error] = []
        func http2(_ session: HTTP2ClientSession, responseHead stream: Int32, context: UInt64, status: Int,
                   headers: HTTP2HeaderList) {
            var buffer: [UInt8] = []
            do { _ = try session.produceOutput(into: &buffer, limit: 1024) } catch { errors.append(error) }
            do { try session.receive([0, 0, 0]) } catch { errors.append(error) }
        }
        func http2(_ session: HTTP2ClientSession, responseBody stream: Int32, context: UInt64, bytes: UnsafeRawBufferPointer) {}
        func http2(_ session: HTTP2ClientSession, streamClosed stream: Int32, context: UInt64, errorCode: HTTP2ErrorCode) {}
    }

    @Test("receive and produceOutput refuse to run from inside a delegate callback")
    func reentrancyIsRefused() throws {
        let delegate = ReentrantDelegate()
        let serverEvents = ServerRecorder()
        serverEvents.answer = { session, request in try session.respond(stream: request.stream, status: 200) }
        let client = try HTTP2ClientSession(delegate: delegate)
        let server = try HTTP2ServerSession(delegate: serverEvents)
        let link = MemoryLink(client: client, server: server)
        try client.submitRequest(Self.template, path: "/3/device/a", context: 1)
        try link.settle()
        #expect(delegate.errors.count == 2)
        #expect(delegate.errors.allSatisfy { $0.kind == .invalidArgument })
        #expect(client.activeStreams == 0)
    }

    @Test("the session holds its delegate weakly")
    func weakDelegate() throws {
        var delegate: ClientRecorder? = ClientRecorder()
        weak let observed = delegate
        let client = try HTTP2ClientSession(delegate: delegate)
        delegate = nil
        #expect(observed == nil)
        #expect(client.delegate == nil)
    }
}
