import ActivityCastCore
import HTTP2Kit
import Synchronization

/// Lowercase version-4 UUID strings for `apns-id`, `apns-unique-id` and `apns-request-id`, without
/// a lock or a system call: a shared counter run through two keyed bijections. Distinct calls give
/// distinct ids (the low half is a bijection of the counter, bar the two variant bits), which is
/// all APNs promises; they are not secret.
final class IDGenerator: Sendable {
    private let counter = Atomic<UInt64>(0)
    private let keys: (UInt64, UInt64)

    init() {
        var seed = SplitMix64()
        keys = (seed.next(), seed.next())
    }

    func next() -> String { nextID().text }

    /// A new id, not yet formatted.
    func nextID() -> MessageID {
        let n = counter.wrappingAdd(1, ordering: .relaxed).newValue
        let high = SplitMix64.mix(n &* 0x9E37_79B9_7F4A_7C15 &+ keys.0)
        let low = SplitMix64.mix(n &* 0xD1B5_4A32_D192_ED03 &+ keys.1)
        return .uuid(high: (high & ~0xF000) | 0x4000, low: (low & ~(0xC << 60)) | (0x8 << 60))
    }

    /// `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx` from 128 bits.
    static func format(high: UInt64, low: UInt64) -> String {
        String(unsafeUninitializedCapacity: 36) { out in
            write(high: high, low: low, into: out)
            return 36
        }
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Writes the 36 bytes of the UUID text.
    static func write(high: UInt64, low: UInt64, into out: UnsafeMutableBufferPointer<UInt8>) {
        digits.withUnsafeBufferPointer { digits in
            var o = 0
            func put(_ value: UInt64, nibbles: Int, from shift: Int) {
                var s = shift
                for _ in 0..<nibbles {
                    out[o] = digits[Int((value >> UInt64(s)) & 0xF)]
                    o += 1
                    s -= 4
                }
            }
            put(high, nibbles: 8, from: 60); out[o] = UInt8(ascii: "-"); o += 1
            put(high, nibbles: 4, from: 28); out[o] = UInt8(ascii: "-"); o += 1
            put(high, nibbles: 4, from: 12); out[o] = UInt8(ascii: "-"); o += 1
            put(low, nibbles: 4, from: 60); out[o] = UInt8(ascii: "-"); o += 1
            put(low, nibbles: 12, from: 44)
        }
    }
}

/// An `apns-id`, `apns-unique-id` or `apns-request-id`. A UUID is kept as its 128 bits and
/// formatted (lowercase) only when written, so the hot path builds no String for it; text a
/// client gave that isn't a lowercase UUID (request ids may be uppercase) is kept as given.
enum MessageID: Sendable, Equatable {
    case uuid(high: UInt64, low: UInt64)
    case text(String)

    /// A lowercase `8-4-4-4-12` UUID, or nil.
    init?(lowercaseUUID b: UnsafeBufferPointer<UInt8>) {
        guard b.count == 36 else { return nil }
        var high: UInt64 = 0, low: UInt64 = 0
        var nibbles = 0
        for i in 0..<36 {
            let c = b[i]
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                continue
            }
            let v: UInt64
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = UInt64(c &- 48)
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = UInt64(c &- 87)
            default: return nil
            }
            if nibbles < 16 { high = high << 4 | v } else { low = low << 4 | v }
            nibbles += 1
        }
        self = .uuid(high: high, low: low)
    }

    var text: String {
        switch self {
        case .uuid(let high, let low): IDGenerator.format(high: high, low: low)
        case .text(let text): text
        }
    }

    /// Appends the id as the header `name`.
    func append(to list: inout HTTP2HeaderList, name: StaticString) {
        switch self {
        case .uuid(let high, let low):
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { buffer in
                IDGenerator.write(high: high, low: low, into: buffer)
                list.append(name: name, value: UnsafeBufferPointer(buffer))
            }
        case .text(var text):
            text.withUTF8 { list.append(name: name, value: $0) }
        }
    }
}
