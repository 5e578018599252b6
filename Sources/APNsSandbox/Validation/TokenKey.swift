/// A device token as the sandbox stores it: its bytes, the first 32 (all of an Apple token) held
/// inline, so that looking a token up allocates nothing and compares four words.
struct TokenKey: Hashable, Sendable {
    private var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0
    /// Bytes in the token (16–256).
    private var count: Int
    /// Bytes past the first 32, for longer tokens.
    private var rest: [UInt8]?

    /// Parses 32–512 hex digits (either case, an even number of them); nil for anything else.
    init?(hex b: UnsafeBufferPointer<UInt8>) {
        let digits = b.count
        guard digits >= DeviceToken.minDigits, digits <= DeviceToken.maxDigits, digits & 1 == 0 else { return nil }
        count = digits / 2
        var words = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        var i = 0
        while i < min(digits, 64) {
            guard let hi = Self.nibble(b[i]), let lo = Self.nibble(b[i + 1]) else { return nil }
            let byte = UInt64(hi << 4 | lo)
            let index = i / 2
            let shift = UInt64(56 - (index % 8) * 8)
            switch index / 8 {
            case 0: words.0 |= byte << shift
            case 1: words.1 |= byte << shift
            case 2: words.2 |= byte << shift
            default: words.3 |= byte << shift
            }
            i += 2
        }
        (w0, w1, w2, w3) = words
        if digits > 64 {
            var extra: [UInt8] = []
            extra.reserveCapacity((digits - 64) / 2)
            while i < digits {
                guard let hi = Self.nibble(b[i]), let lo = Self.nibble(b[i + 1]) else { return nil }
                extra.append(hi << 4 | lo)
                i += 2
            }
            rest = extra
        }
    }

    init?(hex text: String) {
        var copy = text
        guard let key = copy.withUTF8({ TokenKey(hex: $0) }) else { return nil }
        self = key
    }

    @inline(__always) private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c &- 0x30
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c &- 0x57
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c &- 0x37
        default: nil
        }
    }

    /// The token as lowercase hex.
    var hex: String {
        String(unsafeUninitializedCapacity: count * 2) { out in
            @inline(__always) func digit(_ v: UInt8) -> UInt8 { v < 10 ? v &+ 0x30 : v &+ 0x57 }
            for index in 0..<count {
                let byte: UInt8
                if index < 32 {
                    let word: UInt64
                    switch index / 8 {
                    case 0: word = w0
                    case 1: word = w1
                    case 2: word = w2
                    default: word = w3
                    }
                    byte = UInt8(truncatingIfNeeded: word >> UInt64(56 - (index % 8) * 8))
                } else {
                    byte = rest![index - 32]
                }
                out[2 * index] = digit(byte >> 4)
                out[2 * index + 1] = digit(byte & 0xF)
            }
            return count * 2
        }
    }

    // Words rather than bytes: a quarter of the hashing work, and every byte still counts
    // (synthetic tokens in tests and benchmarks often share long prefixes).
    func hash(into hasher: inout Hasher) {
        hasher.combine(w0)
        hasher.combine(w1)
        hasher.combine(w2)
        hasher.combine(w3)
        hasher.combine(count)
        if let rest { rest.withUnsafeBytes { hasher.combine(bytes: $0) } }
    }
}
