import CHiredis

/// Incremental RESP parser on hiredis's reader: feed bytes as they arrive, take replies as they
/// complete. Owns its `redisReader`; use it from one thread at a time.
public final class RESPDecoder {
    private let reader: UnsafeMutablePointer<redisReader>

    public struct ProtocolError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public init() {
        guard let reader = redisReaderCreate() else { fatalError("redisReaderCreate: out of memory") }
        // Keep the read buffer allocated between replies: releasing it after every drain costs
        // an allocation per batch on the hot path. 0 means "never shrink".
        reader.pointee.maxbuf = 0
        self.reader = reader
    }

    deinit { redisReaderFree(reader) }

    /// Hands received bytes to the parser. hiredis copies them.
    public func feed(_ bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count > 0, let base = bytes.baseAddress else { return }
        if redisReaderFeed(reader, base.assumingMemoryBound(to: CChar.self), bytes.count) != REDIS_OK {
            throw ProtocolError(description: errorText())
        }
    }

    public func feed(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try feed($0) }
    }

    /// The next complete reply, or nil when more bytes are needed.
    public func next() throws -> RESPValue? {
        var raw: UnsafeMutableRawPointer?
        if redisReaderGetReply(reader, &raw) != REDIS_OK {
            throw ProtocolError(description: errorText())
        }
        guard let raw else { return nil }
        defer { freeReplyObject(raw) }
        return Self.convert(raw.assumingMemoryBound(to: redisReply.self))
    }

    private func errorText() -> String {
        guard let text = chiredis_reader_error(reader) else { return "protocol error" }
        return "RESP protocol error: " + String(cString: text)
    }

    private static func convert(_ reply: UnsafeMutablePointer<redisReply>) -> RESPValue {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STRING:
            return .bulk(bytes(r.str, r.len))
        case REDIS_REPLY_STATUS:
            return .status(String(decoding: bytes(r.str, r.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: bytes(r.str, r.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            return .integer(Int64(r.integer))
        case REDIS_REPLY_NIL:
            return .null
        case REDIS_REPLY_ARRAY:
            var items: [RESPValue] = []
            items.reserveCapacity(r.elements)
            for i in 0..<r.elements {
                if let element = r.element[i] { items.append(convert(element)) } else { items.append(.null) }
            }
            return .array(items)
        default:
            return .error("unsupported reply type \(r.type)")
        }
    }

    private static func bytes(_ str: UnsafeMutablePointer<CChar>?, _ len: Int) -> [UInt8] {
        guard let str, len > 0 else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: str, count: len))
    }
}
