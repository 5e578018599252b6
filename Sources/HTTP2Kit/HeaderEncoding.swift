internal import CNghttp2

/// nghttp2 nv flags as the `UInt8` that `nghttp2_nv.flags` holds.
enum NVFlags {
    static let none = UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
    /// HPACK "never indexed": used for per-request values (`:path`, `apns-id`, ...) so that they
    /// don't churn the dynamic table that keeps the repeated headers one byte each.
    static let noIndex = UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
    /// nghttp2 references the bytes instead of copying them: templates only, whose bytes live
    /// as long as any stream that uses them (each stream holds its template until it closes).
    static let noCopy = UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue)
}

/// The rules HTTP2Kit checks on header fields it sends (RFC 9113 §8.2): names are non-empty
/// lowercase tokens; values carry no NUL, CR or LF; no connection-specific headers.
enum HeaderRules {
    static func checkName(_ name: String, allowPseudo: Bool) throws(HTTP2Error) {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty else {
            throw HTTP2Error(kind: .invalidArgument, message: "empty header name")
        }
        var start = 0
        if bytes[0] == UInt8(ascii: ":") {
            guard allowPseudo else {
                throw HTTP2Error(kind: .invalidArgument, message: "pseudo-header \(name) not allowed here")
            }
            start = 1
        }
        guard start < bytes.count else {
            throw HTTP2Error(kind: .invalidArgument, message: "empty header name")
        }
        for byte in bytes[start...] where !isLowercaseTokenCharacter(byte) {
            throw HTTP2Error(kind: .invalidArgument,
                             message: "header name \(name) must be lowercase token characters")
        }
        switch name {
        case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host":
            throw HTTP2Error(kind: .invalidArgument, message: "header \(name) is not allowed in HTTP/2")
        default:
            break
        }
    }

    static func checkValue(_ value: String, of name: String) throws(HTTP2Error) {
        for byte in value.utf8 where byte == 0 || byte == 0x0a || byte == 0x0d {
            throw HTTP2Error(kind: .invalidArgument, message: "header \(name): value contains NUL, CR or LF")
        }
    }

    private static func isLowercaseTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
             UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
             UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}

/// A reusable nv array plus the bytes its per-call entries point at: one per session, grown when
/// needed, so building a HEADERS frame allocates nothing on the Swift side. nghttp2 copies the
/// entries (and every name/value not flagged no-copy) inside `nghttp2_submit_*`, so the scratch
/// is free again as soon as that call returns.
final class HeaderScratch {
    // Used on every request by one session on one thread; no access spans a call out of this
    // class: runtime exclusivity checks are off (see HTTP2ClientSession).
    @exclusivity(unchecked) private(set) var entries: UnsafeMutablePointer<nghttp2_nv>
    @exclusivity(unchecked) private var entryCapacity: Int
    @exclusivity(unchecked) private var bytes: UnsafeMutablePointer<UInt8>
    @exclusivity(unchecked) private var byteCapacity: Int
    /// Entries filled since `reset`.
    @exclusivity(unchecked) private(set) var count = 0
    @exclusivity(unchecked) private var byteCount = 0

    init() {
        entryCapacity = 16
        entries = .allocate(capacity: entryCapacity)
        byteCapacity = 1024
        bytes = .allocate(capacity: byteCapacity)
    }

    deinit {
        entries.deallocate()
        bytes.deallocate()
    }

    /// Empties the scratch and makes room for `entryCount` entries and `byteCount` bytes of
    /// copied names/values. Pointers handed out earlier become invalid.
    func reset(entryCount: Int, byteCount needed: Int) {
        count = 0
        byteCount = 0
        if entryCount > entryCapacity {
            entries.deallocate()
            entryCapacity = max(entryCount, entryCapacity * 2)
            entries = .allocate(capacity: entryCapacity)
        }
        if needed > byteCapacity {
            bytes.deallocate()
            byteCapacity = max(needed, byteCapacity * 2)
            bytes = .allocate(capacity: byteCapacity)
        }
    }

    /// Appends an entry as it is (pointing at memory someone else keeps alive).
    @inline(__always)
    func append(_ entry: nghttp2_nv) {
        entries[count] = entry
        count += 1
    }

    /// Appends entries as they are.
    func append(_ source: UnsafePointer<nghttp2_nv>, count n: Int) {
        guard n > 0 else { return }
        (entries + count).update(from: source, count: n)
        count += n
    }

    /// Copies `name` and `value` into the scratch bytes (room reserved by `reset`) and appends an
    /// entry pointing at them.
    func append(name: String, value: String, flags: UInt8) {
        let namePointer = copy(name)
        let valuePointer = copy(value)
        append(nghttp2_nv(name: namePointer.pointer, value: valuePointer.pointer,
                          namelen: namePointer.length, valuelen: valuePointer.length, flags: flags))
    }

    /// Appends an entry whose name is static bytes (`:path`, `:status`) and whose value is copied.
    func append(staticName: StaticString, value: String, flags: UInt8) {
        let valuePointer = copy(value)
        append(nghttp2_nv(name: UnsafeMutablePointer(mutating: staticName.utf8Start), value: valuePointer.pointer,
                          namelen: staticName.utf8CodeUnitCount, valuelen: valuePointer.length, flags: flags))
    }

    /// Appends an entry whose name is static bytes and whose value is `prefix` followed by
    /// `value`, both copied (a request's `:path`: the template's prefix and the request's part).
    func append(staticName: StaticString, prefix: UnsafeBufferPointer<UInt8>, value: String, flags: UInt8) {
        let start = bytes + byteCount
        if let base = prefix.baseAddress, prefix.count > 0 {
            start.update(from: base, count: prefix.count)
        }
        byteCount += prefix.count
        let rest = copy(value)
        append(nghttp2_nv(name: UnsafeMutablePointer(mutating: staticName.utf8Start), value: start,
                          namelen: staticName.utf8CodeUnitCount, valuelen: prefix.count + rest.length, flags: flags))
    }

    /// Appends an entry with a static name and a value given as bytes, copied.
    func append(staticName: StaticString, valueBytes: UnsafeBufferPointer<UInt8>, flags: UInt8) {
        let start = bytes + byteCount
        if let base = valueBytes.baseAddress, valueBytes.count > 0 {
            start.update(from: base, count: valueBytes.count)
        }
        byteCount += valueBytes.count
        append(nghttp2_nv(name: UnsafeMutablePointer(mutating: staticName.utf8Start), value: start,
                          namelen: staticName.utf8CodeUnitCount, valuelen: valueBytes.count, flags: flags))
    }

    private func copy(_ string: String) -> (pointer: UnsafeMutablePointer<UInt8>, length: Int) {
        let start = bytes + byteCount
        let length: Int
        if let copied = string.utf8.withContiguousStorageIfAvailable({ source -> Int in
            if let base = source.baseAddress, source.count > 0 {
                start.update(from: base, count: source.count)
            }
            return source.count
        }) {
            length = copied
        } else {
            var index = 0
            for byte in string.utf8 {
                start[index] = byte
                index += 1
            }
            length = index
        }
        byteCount += length
        return (start, length)
    }
}
