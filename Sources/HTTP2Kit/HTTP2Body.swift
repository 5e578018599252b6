/// A request body shared by any number of requests, sessions and threads.
///
/// The bytes are copied once, into memory this object owns, when it is made; every request that
/// carries it is then streamed by nghttp2's data-provider callback straight from that memory
/// into the DATA frame (no per-request copy on the Swift side). A session keeps the body alive
/// until the stream that sends it has closed.
///
/// Immutable after `init`, so it can be shared across threads: `@unchecked Sendable` because it
/// holds a raw pointer.
public final class HTTP2Body: @unchecked Sendable {
    /// The bytes: allocated in `init` (at least 1 byte, so never nil), never written again,
    /// freed in `deinit`.
    let base: UnsafeMutableRawPointer
    /// The number of bytes.
    public let count: Int

    /// A body holding a copy of `bytes`.
    public init(_ bytes: some Sequence<UInt8>) {
        let array = Array(bytes)
        // Never allocate 0 bytes: keeps `baseAddress` non-nil.
        let base = UnsafeMutableRawPointer.allocate(byteCount: max(array.count, 1), alignment: 16)
        array.withUnsafeBytes { source in
            if let from = source.baseAddress, source.count > 0 {
                base.copyMemory(from: from, byteCount: source.count)
            }
        }
        self.base = base
        self.count = array.count
    }

    /// A body holding the UTF-8 bytes of `string`.
    public convenience init(_ string: String) {
        self.init(Array(string.utf8))
    }

    deinit {
        base.deallocate()
    }

    /// Calls `body` with the bytes.
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// A copy of the bytes.
    public var bytes: [UInt8] { Array(UnsafeRawBufferPointer(start: base, count: count)) }
}
