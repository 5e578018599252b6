import Foundation
import HiredisCodec
import Testing

/// An array header costs memory for the elements that arrive, not for the count it announces.
/// The resp fuzz target found `*1254775807\r\n` making the decoder allocate 10 GB up front (the
/// top-level reply is never capped, and nothing is capped without limits).
@Suite struct RESPDecoderMemoryTests {
    /// The process's virtual size: an up-front allocation shows here even before it is touched.
    static func virtualBytes() throws -> Int {
        let statm = try String(contentsOfFile: "/proc/self/statm", encoding: .utf8)
        let pages = try #require(Int(statm.split(separator: " ")[0]))
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    @Test(arguments: [nil, RESPDecoder.Limits(maxElements: 512, maxStringBytes: 1024, maxArrayBytes: 8192)])
    func aHugeArrayHeaderCostsWhatArrives(limits: RESPDecoder.Limits?) throws {
        let decoder = RESPDecoder(limits: limits)
        let before = try Self.virtualBytes()
        // Two billion elements announced at the top and one level down, then two of them.
        try decoder.feed(Array("*2000000000\r\n*2000000000\r\n:1\r\n:2\r\n".utf8))
        #expect(try decoder.next() == nil)
        let grown = try Self.virtualBytes() - before
        #expect(grown < 1 << 30, "the decoder grew by \(grown >> 20) MB for 4 elements")
    }

    @Test func arraysLargerThanTheFirstAllocationStillDecodeWhole() throws {
        let decoder = RESPDecoder()
        let counts = [1023, 1024, 1025, 5000]
        var bytes = Array("*\(counts.count)\r\n".utf8)
        for count in counts {
            bytes += Array("*\(count)\r\n".utf8)
            for i in 0..<count { bytes += Array(":\(i)\r\n".utf8) }
        }
        var replies: [RESPValue] = []
        for start in stride(from: 0, to: bytes.count, by: 4096) {
            try decoder.feed(Array(bytes[start..<min(bytes.count, start + 4096)]))
            while let reply = try decoder.next() { replies.append(reply) }
        }
        #expect(replies == [.array(counts.map { count in .array((0..<count).map { .integer(Int64($0)) }) })])
    }

    @Test func aPartlyReadHugeArrayIsFreedWithTheDecoder() throws {
        // Elements arrived into a grown array, the rest never did: dropping the decoder frees
        // what it holds (run under the address sanitizer by the fuzz target, too).
        var decoder: RESPDecoder? = RESPDecoder()
        var bytes = Array("*2000000000\r\n".utf8)
        for i in 0..<3000 { bytes += Array("$1\r\n\(i % 10)\r\n".utf8) }
        try decoder?.feed(bytes)
        #expect(try decoder?.next() == nil)
        decoder = nil
    }
}
