/// Base64url (RFC 4648 §5) without padding, as JWTs use it. Pure Swift.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xff, count: 256)
        for (index, symbol) in alphabet.enumerated() {
            table[Int(symbol)] = UInt8(index)
        }
        return table
    }()

    /// Encodes without `=` padding.
    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(alphabet[Int(value >> 18 & 0x3f)])
            out.append(alphabet[Int(value >> 12 & 0x3f)])
            out.append(alphabet[Int(value >> 6 & 0x3f)])
            out.append(alphabet[Int(value & 0x3f)])
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let value = UInt32(bytes[index]) << 16
            out.append(alphabet[Int(value >> 18 & 0x3f)])
            out.append(alphabet[Int(value >> 12 & 0x3f)])
        case 2:
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out.append(alphabet[Int(value >> 18 & 0x3f)])
            out.append(alphabet[Int(value >> 12 & 0x3f)])
            out.append(alphabet[Int(value >> 6 & 0x3f)])
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Encodes the string's UTF-8 bytes.
    public static func encode(_ string: String) -> String {
        encode(Array(string.utf8))
    }

    /// Strict decoding: only the URL-safe alphabet, no padding, no whitespace, no impossible
    /// length (4k+1), and unused trailing bits must be zero (one canonical encoding per value).
    /// Returns nil for anything else.
    public static func decode(_ string: String) -> [UInt8]? {
        let input = Array(string.utf8)
        if input.count % 4 == 1 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for symbol in input {
            let value = decodeTable[Int(symbol)]
            if value == 0xff { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // Leftover bits (2 or 4) are padding inside the last symbol: must be zero.
        if accumulator != 0 { return nil }
        return out
    }
}
