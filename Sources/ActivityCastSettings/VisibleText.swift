/// Text that came from outside (Redis values and names, environment variables, settings) made safe
/// to print on a terminal or in a log line: nothing in it can move the cursor, clear the screen,
/// change colours, start a new line or reorder what follows, and it is never longer than asked.
public enum VisibleText {
    /// `text` with every control character shown as an escape — `\n`, `\r`, `\t`, other C0 controls
    /// and DEL as `\x1b`, C1 controls and the invisible formatting characters (zero-width, bidi
    /// overrides and isolates, line and paragraph separators, BOM) as `\u{202E}` — and a backslash
    /// doubled, so an escape in the output always means the character. At most `limit` characters
    /// (Unicode scalars, so no grapheme cluster can stretch it) of the escaped form are kept; a longer
    /// text ends in `… (N bytes)`, N being `totalBytes` (the size of the whole original, when
    /// `text` is already a prefix of it) or else the size of `text`.
    public static func escaped(_ text: String, limit: Int = .max, totalBytes: Int? = nil) -> String {
        var out = ""
        var shown = 0
        for scalar in text.unicodeScalars {
            let piece = escape(scalar)
            let length = piece.unicodeScalars.count
            if shown + length > limit {
                out += "… (\(totalBytes ?? text.utf8.count) bytes)"
                return out
            }
            out += piece
            shown += length
        }
        return out
    }

    /// True for C0 controls, DEL and C1 controls, and the invisible formatting characters that can
    /// make text read differently from its bytes.
    public static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x2069, 0xFEFF: true
        default: false
        }
    }

    private static func escape(_ scalar: Unicode.Scalar) -> String {
        switch scalar {
        case "\\": return "\\\\"
        case "\n": return "\\n"
        case "\r": return "\\r"
        case "\t": return "\\t"
        default:
            guard needsEscape(scalar) else { return String(scalar) }
            if scalar.value < 0x80 { return "\\x" + hex(scalar.value, width: 2) }
            return "\\u{" + hex(scalar.value, width: 1).uppercased() + "}"
        }
    }

    private static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// The first `maxBytes` bytes of `bytes` as text, cut before a character that would not fit
    /// (so the cut never makes a replacement character), and the full size. `package`: inspect
    /// cuts dead letters with it.
    package static func prefix(_ bytes: [UInt8], maxBytes: Int) -> (text: String, bytes: Int) {
        guard bytes.count > maxBytes else { return (String(decoding: bytes, as: UTF8.self), bytes.count) }
        var end = maxBytes
        // Back off over continuation bytes (10xxxxxx) to the start of the cut character.
        while end > 0 && bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return (String(decoding: bytes[..<end], as: UTF8.self), bytes.count)
    }
}
