import Foundation
import HiredisCodec
import RedisClient
import Testing
import TestSupport

/// Reply limits: nested values over them arrive as their size only, so a hostile stream entry
/// costs a parse, not memory in proportion to its size.
@Suite struct ReplyLimitsTests {
    func resp(_ value: RESPValue) -> [UInt8] {
        switch value {
        case .bulk(let b): return Array("$\(b.count)\r\n".utf8) + b + Array("\r\n".utf8)
        case .integer(let i): return Array(":\(i)\r\n".utf8)
        case .null: return Array("$-1\r\n".utf8)
        case .status(let s): return Array("+\(s)\r\n".utf8)
        case .error(let e): return Array("-\(e)\r\n".utf8)
        case .array(let a): return Array("*\(a.count)\r\n".utf8) + a.flatMap(resp)
        case .oversized: return []
        }
    }

    func bulk(_ s: String) -> RESPValue { .bulk(Array(s.utf8)) }

    func decode(_ bytes: [UInt8], limits: RESPDecoder.Limits?, chunk: Int = 7) throws -> [RESPValue] {
        let decoder = RESPDecoder(limits: limits)
        var out: [RESPValue] = []
        var i = 0
        while i < bytes.count {
            try decoder.feed(Array(bytes[i..<min(bytes.count, i + chunk)]))
            while let v = try decoder.next() { out.append(v) }
            i += chunk
        }
        return out
    }

    @Test func nestedValuesOverTheLimitsArriveAsTheirSize() throws {
        let limits = RESPDecoder.Limits(maxElements: 4, maxStringBytes: 5, maxArrayBytes: 12)
        let reply: RESPValue = .array([
            .array([bulk("a"), bulk("b")]),                                // kept
            .array((0..<5).map { bulk("\($0)") }),                        // 5 elements > 4
            .array([bulk("name"), bulk("toolong")]),                      // a 7-byte string > 5
            .array([bulk("abcd"), bulk("efgh"), bulk("ijkl"), bulk("m")]), // 13 bytes > 12
            .array([.array([bulk("x")]), .integer(3), .null]),            // nested, kept
            .array((0..<6).map { _ in .array([bulk("deep"), .array([bulk("deeper")])]) }), // skipped whole
        ])
        let values = try decode(resp(reply), limits: limits)
        #expect(values.count == 1)
        let items = try #require(values.first?.array)
        #expect(items[0] == .array([bulk("a"), bulk("b")]))
        #expect(items[1] == .oversized(elements: 5, bytes: 5))
        #expect(items[2] == .array([bulk("name"), .oversized(elements: nil, bytes: 7)]))
        #expect(items[3] == .oversized(elements: 4, bytes: 13))
        #expect(items[4] == .array([.array([bulk("x")]), .integer(3), .null]))
        #expect(items[5] == .oversized(elements: 6, bytes: 0))
    }

    @Test func theTopLevelReplyIsNeverCappedAndTheNextReplyParsesWhole() throws {
        let limits = RESPDecoder.Limits(maxElements: 2, maxStringBytes: 3, maxArrayBytes: 4)
        let big: RESPValue = .array((0..<10).map { bulk("value-\($0)") })
        let after: RESPValue = .array([.array([bulk("ok")]), .status("PONG")])
        let values = try decode(resp(.bulk(Array(repeating: 120, count: 1000))) + resp(big) + resp(after), limits: limits)
        #expect(values.count == 3)
        #expect(values[0] == .bulk(Array(repeating: 120, count: 1000)))
        // Top level: kept; its strings are nested, so they are capped.
        #expect(values[1].array?.count == 10)
        #expect(values[1].array?.first == .oversized(elements: nil, bytes: 7))
        #expect(values[2] == after)
    }

    @Test func withoutLimitsEverythingIsKept() throws {
        let reply: RESPValue = .array([.array((0..<1000).map { bulk("field-\($0)") }), .error("ERR x"), .integer(-5)])
        #expect(try decode(resp(reply), limits: nil, chunk: 100) == [reply])
    }

    /// A million-field entry read with the limits a worker uses costs a few KB, not hundreds of MB.
    @Test func aMillionFieldEntryIsReadAsItsSize() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        // One entry of 1,000,000 fields, then a normal one after it.
        var args: [any RedisArgument] = ["s", "1-1"]
        for i in 0..<1_000_000 { args.append("x-\(i)"); args.append("v") }
        _ = try await redis.send(RedisCommand("XADD", args))
        _ = try await redis.send(RedisCommand("XADD", "s", "2-1", "type", "ok"))
        let limits = RESPDecoder.Limits(maxElements: 256, maxStringBytes: 1024, maxArrayBytes: 8192)
        let reply = try await redis.pipeline([RedisCommand("XRANGE", "s", "-", "+")], limits: limits)[0]
        let entries = try #require(reply.array).map(StreamReplies.entry)
        #expect(entries.count == 2)
        #expect(entries[0].id == "1-1")
        #expect(entries[0].fields == [])
        let big = try #require(entries[0].oversize)
        #expect(big.fields == 1_000_000)
        #expect(big.bytes == (0..<1_000_000).reduce(0) { $0 + "x-\($1)".utf8.count + 1 })
        #expect(entries[1] == StreamEntry(id: "2-1", fields: [Array("type".utf8), Array("ok".utf8)]))
        // The same connection, without limits, still reads whole replies.
        let whole = try await redis.pipeline([RedisCommand("XRANGE", "s", "2-1", "2-1")])[0]
        #expect(try StreamReplies.entry(try #require(whole.array?.first)).fields?.count == 2)
    }

    @Test func aLongValueNamesItsField() throws {
        let entry: RESPValue = .array([bulk("1-1"), .array([bulk("type"), bulk("match.score"), bulk("note"), .bulk(Array(repeating: 65, count: 50))])])
        let limits = RESPDecoder.Limits(maxElements: 100, maxStringBytes: 20, maxArrayBytes: 1000)
        let decoded = try StreamReplies.entry(try #require(try decode(resp(.array([entry])), limits: limits).first?.array?.first))
        #expect(decoded.fields == [])
        #expect(decoded.oversize?.fields == 2)
        #expect(decoded.oversize?.longValue?.name == Array("note".utf8))
        #expect(decoded.oversize?.longValue?.bytes == 50)
        #expect(decoded.oversize?.bytes == 4 + 11 + 4 + 50)
    }
}
