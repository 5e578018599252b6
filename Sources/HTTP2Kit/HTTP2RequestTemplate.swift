internal import CNghttp2

/// The headers that many requests share, checked and encoded once: `:method`, `:scheme`,
/// `:authority` and the regular headers that don't change between requests (for APNs:
/// `apns-topic`, `apns-push-type`, `apns-priority`, `authorization`, ...). Each request adds its
/// own `:path` and any per-request headers (`apns-id`, ...). A template can also carry the
/// start of every request's `:path` (`pathPrefix`, e.g. "/3/device/"), so that a request only
/// names what differs (the device token) and no path string is built per request.
///
/// nghttp2 reads the template's bytes in place (no copy per request); every stream keeps its
/// template alive until it closes. Template headers are HPACK-indexed, so after the first
/// request on a connection each costs about one byte on the wire. Make a new template when a
/// value changes (e.g. a refreshed JWT).
///
/// Immutable after `init`, shareable across sessions and threads: `@unchecked Sendable` because
/// it holds raw memory.
public final class HTTP2RequestTemplate: @unchecked Sendable {
    public let method: String
    public let scheme: String
    public let authority: String
    /// The regular headers, names lowercased.
    public let headers: [HTTP2Header]
    /// Prepended to the `path` of every request made from this template ("" by default).
    public let pathPrefix: String

    /// All names and values, back to back.
    private let storage: UnsafeMutablePointer<UInt8>
    /// `:method`, `:scheme`, `:authority`, then the regular headers, pointing into `storage`.
    let entries: UnsafeMutablePointer<nghttp2_nv>
    let entryCount: Int
    /// `pathPrefix`'s bytes (inside `storage`).
    let pathPrefixBytes: UnsafeBufferPointer<UInt8>
    /// How many leading entries are pseudo-headers; a request's `:path` goes right after them
    /// (pseudo-headers must precede regular headers).
    static let pseudoCount = 3

    /// - Parameters:
    ///   - method: `:method`, e.g. "POST".
    ///   - scheme: `:scheme`, "https" for APNs.
    ///   - authority: `:authority`, e.g. "api.push.apple.com".
    ///   - pathPrefix: the start of every request's `:path`; `submitRequest`'s `path` follows it.
    ///   - headers: regular headers (no pseudo-headers, no connection-specific ones); names are
    ///     lowercased.
    public init(method: String = "POST", scheme: String = "https", authority: String, pathPrefix: String = "",
                headers: [HTTP2Header] = []) throws(HTTP2Error) {
        let lowered = headers.map { HTTP2Header(name: $0.name.lowercased(), value: $0.value) }
        for header in lowered {
            try HeaderRules.checkName(header.name, allowPseudo: false)
            try HeaderRules.checkValue(header.value, of: header.name)
        }
        guard !method.isEmpty else { throw HTTP2Error(kind: .invalidArgument, message: "empty :method") }
        try HeaderRules.checkValue(method, of: ":method")
        try HeaderRules.checkValue(scheme, of: ":scheme")
        try HeaderRules.checkValue(authority, of: ":authority")
        try HeaderRules.checkValue(pathPrefix, of: ":path")

        self.method = method
        self.scheme = scheme
        self.authority = authority
        self.headers = lowered
        self.pathPrefix = pathPrefix

        var pairs: [(String, String)] = [(":method", method), (":scheme", scheme), (":authority", authority)]
        pairs += lowered.map { ($0.name, $0.value) }
        let prefixCount = pathPrefix.utf8.count
        let total = pairs.reduce(prefixCount) { $0 + $1.0.utf8.count + $1.1.utf8.count }
        storage = .allocate(capacity: max(total, 1))
        entries = .allocate(capacity: pairs.count)
        entryCount = pairs.count
        var offset = 0
        for (index, (name, value)) in pairs.enumerated() {
            let nameStart = storage + offset
            for byte in name.utf8 { storage[offset] = byte; offset += 1 }
            let valueStart = storage + offset
            for byte in value.utf8 { storage[offset] = byte; offset += 1 }
            (entries + index).initialize(to: nghttp2_nv(
                name: nameStart, value: valueStart, namelen: name.utf8.count, valuelen: value.utf8.count,
                flags: NVFlags.noCopy))
        }
        let prefixStart = storage + offset
        for byte in pathPrefix.utf8 { storage[offset] = byte; offset += 1 }
        pathPrefixBytes = UnsafeBufferPointer(start: prefixStart, count: prefixCount)
    }

    deinit {
        entries.deinitialize(count: entryCount)
        entries.deallocate()
        storage.deallocate()
    }
}
