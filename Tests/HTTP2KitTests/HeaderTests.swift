import HTTP2Kit
import Testing

@Suite("Headers, templates and bodies")
struct HeaderTests {
    @Test("HTTP2HeaderList finds values case-insensitively and builds strings on demand")
    func headerListLookups() {
        let list = HTTP2HeaderList([
            HTTP2Header(":status-like", "x"),
            HTTP2Header("apns-id", "ABC"),
            HTTP2Header("retry-after", "10"),
            HTTP2Header("apns-id", "second"),
        ])
        #expect(list.count == 4)
        #expect(list.value(for: "apns-id") == "ABC")
        #expect(list.value(for: "APNS-ID") == "ABC")
        #expect(list.values(for: "apns-id") == ["ABC", "second"])
        #expect(list.value(for: "apns-unique-id") == nil)
        #expect(list.contains(name: "retry-after"))
        #expect(!list.contains(name: "retry"))
        #expect(list.valueBytes(for: "retry-after").map(Array.init) == Array("10".utf8))
        #expect(list[2] == HTTP2Header("retry-after", "10"))
        #expect(list.map(\.name) == [":status-like", "apns-id", "retry-after", "apns-id"])
        #expect(list.byteCount == ":status-like".utf8.count + 1 + 7 + 3 + 11 + 2 + 7 + 6)
    }

    @Test("templates lowercase names and refuse pseudo, connection-specific and malformed headers")
    func templateValidation() throws {
        let template = try HTTP2RequestTemplate(authority: "api.push.apple.com", headers: [
            HTTP2Header("APNS-Topic", "com.example.app.push-type.liveactivity"),
            HTTP2Header("apns-push-type", "liveactivity"),
        ])
        #expect(template.headers.map(\.name) == ["apns-topic", "apns-push-type"])
        #expect(template.method == "POST")
        #expect(template.scheme == "https")

        #expect(throws: HTTP2Error.self) {
            try HTTP2RequestTemplate(authority: "a", headers: [HTTP2Header(":path", "/x")])
        }
        #expect(throws: HTTP2Error.self) {
            try HTTP2RequestTemplate(authority: "a", headers: [HTTP2Header("connection", "keep-alive")])
        }
        #expect(throws: HTTP2Error.self) {
            try HTTP2RequestTemplate(authority: "a", headers: [HTTP2Header("bad name", "v")])
        }
        #expect(throws: HTTP2Error.self) {
            try HTTP2RequestTemplate(authority: "a", headers: [HTTP2Header("x-ok", "line\r\nbreak")])
        }
        do {
            _ = try HTTP2RequestTemplate(authority: "a", headers: [HTTP2Header("", "v")])
            Issue.record("an empty header name was accepted")
        } catch {
            #expect(error.kind == .invalidArgument)
        }
    }

    @Test("HTTP2Body keeps its own copy of the bytes")
    func bodyCopies() {
        var source: [UInt8] = Array("{\"aps\":{}}".utf8)
        let body = HTTP2Body(source)
        source[0] = 0
        #expect(body.count == 10)
        #expect(body.bytes == Array("{\"aps\":{}}".utf8))
        #expect(HTTP2Body([UInt8]()).count == 0)
        #expect(HTTP2Body("é").bytes == [0xc3, 0xa9])
    }

    @Test("error codes print their RFC names")
    func errorCodeNames() {
        #expect(HTTP2ErrorCode.refusedStream.description == "REFUSED_STREAM")
        #expect(HTTP2ErrorCode(0x7) == .refusedStream)
        #expect(HTTP2ErrorCode(0xff).description == "0xff")
        #expect(nghttp2LibraryVersion.hasPrefix("1."))
    }
}
