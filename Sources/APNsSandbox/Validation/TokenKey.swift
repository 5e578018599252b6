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
        // Up to four big-endian words of 16 digits; a short last word is aligned to the top.
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let inline = min(digits, 64)
        var i = 0
        var w = 0
        while i < inline {
            let end = min(i + 16, inline)
            var value: UInt64 = 0
            while i < end {
                guard let n = Self.nibble(b[i]) else { return nil }
                value = value << 4 | UInt64(n)
                i += 1
            }
            value <<= UInt64(16 - (end - (w * 16))) * 4
            switch w {
            case 0: words.0 = value
            case 1: words.1 = value
            case 2: words.2 = value
            default: words.3 = value
            }
            w += 1
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

    /// A hex digit's value: two subtractions and compares, no table.
    @inline(__always) private static func nibble(_ c: UInt8) -> UInt8? {
        let digit = c &- 0x30
        if digit < 10 { return digit }
        let letter = (c | 0x20) &- 0x61
        if letter < 6 { return letter &+ 10 }
        return nil
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
