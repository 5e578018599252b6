import OpenSSLKit

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, seedable. Drives fault decisions, where a
/// seed must make a run repeatable; not for anything secret.
struct SplitMix64 {
    private(set) var state: UInt64

    init(seed: UInt64) { state = seed }

    /// Seeded from the system CSPRNG.
    init() {
        let bytes = secureRandomBytes(8)
        state = bytes.reduce(0) { $0 << 8 | UInt64($1) }
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return Self.mix(state)
    }

    /// Uniform in [0, 1) with 53 bits.
    mutating func nextUnit() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }

    /// SplitMix64's finalizer: a bijection on UInt64.
    @inline(__always) static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

