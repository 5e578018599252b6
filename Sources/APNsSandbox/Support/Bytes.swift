#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Byte comparisons for the hot path.
enum Bytes {
    /// Whether `a` and `b` hold the same bytes (one memcmp).
    @inline(__always)
    static func equal(_ a: [UInt8], _ b: ArraySlice<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 }
        }
    }
}

extension Bytes {
    /// Whether `b` holds exactly the bytes of `s`.
    @inline(__always)
    static func equal(_ b: UnsafeBufferPointer<UInt8>, _ s: StaticString) -> Bool {
        b.count == s.utf8CodeUnitCount && (b.count == 0 || memcmp(b.baseAddress!, s.utf8Start, b.count) == 0)
    }

    /// Whether `a` and `b` hold the same bytes.
    @inline(__always)
    static func equal(_ a: [UInt8], _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        return b.count == 0 || a.withUnsafeBytes { memcmp($0.baseAddress!, b.baseAddress!, b.count) == 0 }
    }
}
