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

    func next() -> String {
        let n = counter.wrappingAdd(1, ordering: .relaxed).newValue
        let high = SplitMix64.mix(n &* 0x9E37_79B9_7F4A_7C15 &+ keys.0)
        let low = SplitMix64.mix(n &* 0xD1B5_4A32_D192_ED03 &+ keys.1)
        return Self.format(high: (high & ~0xF000) | 0x4000, low: (low & ~(0xC << 60)) | (0x8 << 60))
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx` from 128 bits.
    static func format(high: UInt64, low: UInt64) -> String {
        String(unsafeUninitializedCapacity: 36) { out in
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
            return 36
        }
    }
}
