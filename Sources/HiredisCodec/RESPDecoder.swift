import CHiredis

/// Incremental RESP parser on hiredis's reader: feed bytes as they arrive, take replies as they
/// complete. Owns its `redisReader`; use it from one thread at a time.
///
/// `limits` bound what a nested value may cost: a bigger one arrives as `.oversized` (its size,
/// not its contents), so a hostile stream entry of a million fields costs a parse, not gigabytes.
public final class RESPDecoder {
    private let reader: UnsafeMutablePointer<redisReader>
    private let cLimits: UnsafeMutablePointer<chiredis_limits>

    /// Caps on nested values (the top-level reply itself is never capped). nil: no caps.
    public struct Limits: Sendable, Equatable {
        /// An array announcing more elements arrives as `.oversized`.
        public var maxElements: Int
        /// A string longer than this arrives as `.oversized`.
        public var maxStringBytes: Int
        /// An array whose strings add up to more arrives as `.oversized`.
        public var maxArrayBytes: Int

        public init(maxElements: Int, maxStringBytes: Int, maxArrayBytes: Int) {
            self.maxElements = maxElements
            self.maxStringBytes = maxStringBytes
            self.maxArrayBytes = maxArrayBytes
        }
    }

    /// The caps for the replies taken from now on (they apply from the next reply that starts).
    public var limits: Limits? {
        didSet { Self.store(limits, in: cLimits) }
    }

    private static func store(_ limits: Limits?, in c: UnsafeMutablePointer<chiredis_limits>) {
        c.pointee = chiredis_limits(max_elements: Int64(limits?.maxElements ?? 0),
                                    max_string: Int64(limits?.maxStringBytes ?? 0),
                                    max_array_bytes: Int64(limits?.maxArrayBytes ?? 0))
    }

    public struct ProtocolError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public init(limits: Limits? = nil) {
        cLimits = .allocate(capacity: 1)
        cLimits.initialize(to: chiredis_limits(max_elements: 0, max_string: 0, max_array_bytes: 0))
        Self.store(limits, in: cLimits)
        self.limits = limits
        guard let reader = chiredis_reader_create(cLimits) else { fatalError("redisReaderCreate: out of memory") }
        // Keep the read buffer allocated between replies: releasing it after every drain costs
        // an allocation per batch on the hot path. 0 means "never shrink".
        reader.pointee.maxbuf = 0
        self.reader = reader
    }

    deinit {
        redisReaderFree(reader)
        cLimits.deallocate()
    }

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
        defer { chiredis_free_reply(raw) }
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
        case CHIREDIS_REPLY_OVERSIZED:
            return r.integer < 0 ? .oversized(elements: nil, bytes: r.len) : .oversized(elements: Int(r.integer), bytes: r.len)
        default:
            return .error("unsupported reply type \(r.type)")
        }
    }

    private static func bytes(_ str: UnsafeMutablePointer<CChar>?, _ len: Int) -> [UInt8] {
        guard let str, len > 0 else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: str, count: len))
    }
}
