/// Parsers for the schema's value syntaxes, on raw bytes. Each returns nil when the bytes don't
/// follow the syntax exactly: no signs unless allowed, no spaces, no exponents, no hex.
enum ValueParsing {
    /// A decimal integer without sign, `0...max`. Leading zeros are fine; it stops as soon as the
    /// value passes `max`, so a thousand digits neither overflow nor take long.
    @inline(__always)
    static func unsigned(_ b: UnsafeBufferPointer<UInt8>, max: UInt64) -> UInt64? {
        guard !b.isEmpty else { return nil }
        var value: UInt64 = 0
        for c in b {
            let digit = c &- 0x30
            guard digit < 10 else { return nil }
            value = value &* 10 &+ UInt64(digit)
            guard value <= max else { return nil }
        }
        return value
    }

    /// A decimal integer with an optional leading `-` (no `+`), `min...max`.
    @inline(__always)
    static func signed(_ b: UnsafeBufferPointer<UInt8>, min: Int64, max: Int64) -> Int64? {
        guard let first = b.first else { return nil }
        if first == UInt8(ascii: "-") {
            guard let magnitude = unsigned(UnsafeBufferPointer(rebasing: b.dropFirst()), max: min.magnitude) else {
                return nil
            }
            let value = 0 &- Int64(bitPattern: magnitude)
            return value >= min && value <= max ? value : nil
        }
        guard max >= 0, let value = unsigned(b, max: UInt64(max)) else { return nil }
        return Int64(value) >= min ? Int64(value) : nil
    }

    private static let powersOfTen: [Double] = (0...22).map { exponent in
        var p = 1.0
        for _ in 0..<exponent { p *= 10 }
        return p
    }

    /// A decimal `-?digits(.digits)?`. No exponent, no `+`, no bare `.5` or `5.`, no `inf`/`nan`.
    static func decimal(_ b: UnsafeBufferPointer<UInt8>) -> Double? {
        var i = 0
        let n = b.count
        let negative = n > 0 && b[0] == UInt8(ascii: "-")
        if negative { i = 1 }
        var mantissa: UInt64 = 0
        var fractionDigits = 0
        var integerDigits = 0
        while i < n, b[i] &- 0x30 < 10 {
            mantissa = mantissa &* 10 &+ UInt64(b[i] &- 0x30)
            integerDigits &+= 1
            i &+= 1
        }
        guard integerDigits > 0 else { return nil }
        if i < n {
            guard b[i] == UInt8(ascii: ".") else { return nil }
            i &+= 1
            while i < n, b[i] &- 0x30 < 10 {
                mantissa = mantissa &* 10 &+ UInt64(b[i] &- 0x30)
                fractionDigits &+= 1
                i &+= 1
            }
            guard fractionDigits > 0, i == n else { return nil }
        }
        let digits = integerDigits &+ fractionDigits
        let magnitude: Double
        if digits <= 15 {
            // Both operands are exact doubles, so one division is correctly rounded (Clinger's fast path).
            magnitude = Double(mantissa) / powersOfTen[fractionDigits]
        } else {
            // Rare: too many digits for the fast path. The syntax is already checked, so the standard
            // library's correctly rounded parser sees nothing but digits and a dot.
            let start = negative ? 1 : 0
            guard let parsed = Double(String(decoding: UnsafeBufferPointer(rebasing: b[start...]), as: UTF8.self)) else {
                return nil
            }
            magnitude = parsed
        }
        return negative ? -magnitude : magnitude
    }

    /// `true`/`false`/`1`/`0`.
    @inline(__always)
    static func bool(_ b: UnsafeBufferPointer<UInt8>) -> Bool? {
        switch b.count {
        case 1:
            if b[0] == UInt8(ascii: "1") { return true }
            if b[0] == UInt8(ascii: "0") { return false }
            return nil
        case 4:
            return b.elementsEqual("true".utf8) ? true : nil
        case 5:
            return b.elementsEqual("false".utf8) ? false : nil
        default:
            return nil
        }
    }

    static let identifierMaxBytes = 128

    /// 1–128 bytes of `A–Z a–z 0–9 . _ -`: safe inside a Redis key and a hash tag.
    @inline(__always)
    static func isIdentifier(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard !b.isEmpty, b.count <= identifierMaxBytes else { return false }
        for c in b where !isIdentifierByte(c) { return false }
        return true
    }

    @inline(__always)
    static func isIdentifierByte(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }

    /// 1–128 bytes of `A–Z a–z 0–9 _ .`, the characters of a (possibly qualified) Swift type name.
    static func isSwiftTypeName(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard !b.isEmpty, b.count <= identifierMaxBytes else { return false }
        for c in b where c == UInt8(ascii: "-") || !isIdentifierByte(c) { return false }
        return true
    }

    /// Hex digits, returned lowercase; nil if any byte is not a hex digit.
    static func lowercaseHex(_ b: UnsafeBufferPointer<UInt8>) -> String? {
        for c in b {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
                 UInt8(ascii: "A")...UInt8(ascii: "F"):
                continue
            default:
                return nil
            }
        }
        return String(unsafeUninitializedCapacity: b.count) { out in
            for (i, c) in b.enumerated() {
                // ASCII upper to lower case is setting bit 5; digits already have it set.
                out[i] = c | 0x20
            }
            return b.count
        }
    }
}
