/// Byte-level UTF-8 decoding and the schema's text rule ("valid UTF-8 without control characters,
/// tab excepted"), written against raw bytes so the hot path never builds a `String` to check one.
enum UTF8Scanner {
    /// Decodes the scalar starting at `i`, or returns nil if the bytes there are not well-formed
    /// UTF-8 (overlong forms, surrogates, values above U+10FFFF and truncated sequences included).
    @inline(__always)
    static func scalar(at i: Int, in b: UnsafeBufferPointer<UInt8>) -> (value: UInt32, length: Int)? {
        let n = b.count
        let c0 = b[i]
        if c0 < 0x80 { return (UInt32(c0), 1) }
        @inline(__always) func cont(_ j: Int, _ low: UInt8 = 0x80, _ high: UInt8 = 0xBF) -> UInt32? {
            guard j < n, b[j] >= low, b[j] <= high else { return nil }
            return UInt32(b[j] & 0x3F)
        }
        switch c0 {
        case 0xC2...0xDF:
            guard let c1 = cont(i &+ 1) else { return nil }
            return (UInt32(c0 & 0x1F) << 6 | c1, 2)
        case 0xE0...0xEF:
            // E0 needs A0… (no overlongs); ED needs …9F (no surrogates).
            let low: UInt8 = c0 == 0xE0 ? 0xA0 : 0x80
            let high: UInt8 = c0 == 0xED ? 0x9F : 0xBF
            guard let c1 = cont(i &+ 1, low, high), let c2 = cont(i &+ 2) else { return nil }
            return (UInt32(c0 & 0x0F) << 12 | c1 << 6 | c2, 3)
        case 0xF0...0xF4:
            // F0 needs 90… (no overlongs); F4 needs …8F (nothing above U+10FFFF).
            let low: UInt8 = c0 == 0xF0 ? 0x90 : 0x80
            let high: UInt8 = c0 == 0xF4 ? 0x8F : 0xBF
            guard let c1 = cont(i &+ 1, low, high), let c2 = cont(i &+ 2), let c3 = cont(i &+ 3) else { return nil }
            return (UInt32(c0 & 0x07) << 18 | c1 << 12 | c2 << 6 | c3, 4)
        default:
            return nil
        }
    }

    /// A C0 or C1 control character, or DEL (Unicode general category Cc).
    @inline(__always)
    static func isControl(_ scalar: UInt32) -> Bool {
        scalar < 0x20 || (scalar >= 0x7F && scalar <= 0x9F)
    }

    enum TextProblem: Equatable {
        case invalidUTF8
        case control(UInt32)
    }

    /// The first problem in `bytes` under the schema's text rule, or nil if it is acceptable text.
    @inline(__always)
    static func textProblem(_ b: UnsafeBufferPointer<UInt8>) -> TextProblem? {
        var i = 0
        let n = b.count
        // Printable ASCII is by far the common case: check it eight bytes at a time, and step byte
        // by byte only from a word that has anything else (tab, controls, DEL, non-ASCII) in it.
        if let base = b.baseAddress {
            while i &+ 8 <= n {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self))
                guard isPrintableASCII(word) else { break }
                i &+= 8
            }
        }
        while i < n {
            let c = b[i]
            // Printable ASCII is by far the common case.
            if c >= 0x20 && c < 0x7F { i &+= 1; continue }
            if c == 0x09 { i &+= 1; continue }
            if c < 0x80 { return .control(UInt32(c)) }
            guard let (value, length) = scalar(at: i, in: b) else { return .invalidUTF8 }
            if isControl(value) { return .control(value) }
            i &+= length
        }
        return nil
    }

    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// Whether all eight bytes are 0x20…0x7E, without looking at them one by one.
    @inline(__always)
    static func isPrintableASCII(_ w: UInt64) -> Bool {
        // A byte < 0x20 (for bytes < 0x80) borrows past its high bit when 0x20 is subtracted; a byte
        // equal to 0x7F becomes zero when XORed with 0x7F, and a zero byte does the same with 0x01.
        let nonASCII = w & highBits
        let below20 = (w &- ones &* 0x20) & ~w & highBits
        let x = w ^ (ones &* 0x7F)
        let isDEL = (x &- ones) & ~x & highBits
        return nonASCII | below20 | isDEL == 0
    }

    static func textProblem(_ bytes: [UInt8]) -> TextProblem? {
        bytes.withUnsafeBufferPointer { textProblem($0) }
    }
}
