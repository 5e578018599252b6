/// Why an entry did not decode: one line, precise, safe to log and to store as a dead letter's
/// `reason` (see docs/schema.md, "Dead letters").
public struct DecodeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// For example `unknown field 'scroe' for match.score`.
    public var reason: String

    public init(reason: String) { self.reason = reason }

    public var description: String { reason }
}

// The reasons, in one place so that their wording stays consistent. Anything taken from the entry
// goes through `quoted`, so a hostile entry can't make a reason long or multi-line.
extension DecodeError {
    static func tooManyFields(_ count: Int, max: Int) -> DecodeError {
        DecodeError(reason: "too many fields: \(count) > \(max)")
    }

    static func entryTooLarge(_ bytes: Int, max: Int) -> DecodeError {
        DecodeError(reason: "entry too large: \(bytes) bytes > \(max)")
    }

    static func tooLong(name: [UInt8], _ bytes: Int, max: Int) -> DecodeError {
        DecodeError(reason: "field '\(quoted(name))' too long: \(bytes) bytes > \(max)")
    }

    static func duplicate(name: [UInt8]) -> DecodeError {
        DecodeError(reason: "duplicate field '\(quoted(name))'")
    }

    static func unknownField(name: [UInt8], for type: EntryType) -> DecodeError {
        DecodeError(reason: "unknown field '\(quoted(name))' for \(type.name)")
    }

    static let missingType = DecodeError(reason: "missing field 'type'")
    static let emptyType = DecodeError(reason: "field 'type' is empty")

    static func unknownType(_ value: [UInt8], kind: StreamKind) -> DecodeError {
        DecodeError(reason: "unknown type '\(quoted(value))' for a \(kind.rawValue) stream")
    }

    static func missing(_ field: Field, for type: EntryType, _ condition: String = "") -> DecodeError {
        DecodeError(reason: "missing field '\(field.name)' for \(type.name)\(condition)")
    }

    static func empty(_ field: Field) -> DecodeError {
        DecodeError(reason: "field '\(field.name)' is empty")
    }

    static func text(_ problem: UTF8Scanner.TextProblem, in field: Field) -> DecodeError {
        switch problem {
        case .invalidUTF8:
            DecodeError(reason: "field '\(field.name)' is not valid UTF-8")
        case .control(let scalar):
            DecodeError(reason: "field '\(field.name)' contains a control character (\(unicodeName(scalar)))")
        }
    }

    /// `field 'home_score' must be an integer 0-999, got 'x'`
    static func invalid(_ field: Field, mustBe expectation: String, got value: [UInt8]) -> DecodeError {
        DecodeError(reason: "field '\(field.name)' must be \(expectation), got '\(quoted(value))'")
    }

    /// For rules about a length rather than the text, for example the number of hex digits in a token.
    static func invalid(_ field: Field, mustBe expectation: String, gotCount count: Int) -> DecodeError {
        DecodeError(reason: "field '\(field.name)' must be \(expectation), got \(count)")
    }

    /// `field 'ts' must be Unix milliseconds, got '1732435200', which looks like Unix seconds (1732435200000 in ms)`
    static func looksLikeSeconds(_ field: Field, got value: [UInt8], asMillis: Int64) -> DecodeError {
        DecodeError(reason: "field '\(field.name)' must be Unix milliseconds, got '\(quoted(value))', "
            + "which looks like Unix seconds (\(asMillis) in ms)")
    }

    static func tooLong(_ field: Field, _ bytes: Int, max: Int) -> DecodeError {
        DecodeError(reason: "field '\(field.name)' too long: \(bytes) bytes > \(max)")
    }
}

// MARK: - Quoting entry bytes inside a reason

extension DecodeError {
    /// How many bytes of an entry's name or value a reason shows before cutting it with "…".
    static let quotedByteLimit = 40

    /// `bytes` made safe for a one-line reason: at most `quotedByteLimit` bytes of input (cut at a
    /// character boundary, then "…"), with backslash and quote escaped, control and invisible
    /// formatting characters as `\u{…}`, and bytes that aren't UTF-8 as `\xNN`.
    static func quoted(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBufferPointer { b in
            var out = ""
            var i = 0
            while i < b.count {
                guard let (scalar, length) = UTF8Scanner.scalar(at: i, in: b) else {
                    if i &+ 1 > quotedByteLimit { out += "…"; return out }
                    out += "\\x" + hex(UInt32(b[i]), width: 2)
                    i &+= 1
                    continue
                }
                if i &+ length > quotedByteLimit { out += "…"; return out }
                switch scalar {
                case 0x5C: out += "\\\\"
                case 0x27: out += "\\'"
                case 0x09: out += "\\t"
                case 0x0A: out += "\\n"
                case 0x0D: out += "\\r"
                default:
                    if needsEscape(scalar) {
                        out += "\\u{" + hex(scalar, width: 4) + "}"
                    } else {
                        out.unicodeScalars.append(Unicode.Scalar(scalar)!)
                    }
                }
                i &+= length
            }
            return out
        }
    }

    /// Controls, line and paragraph separators, and the invisible formatting characters (zero-width,
    /// bidi overrides and isolates, BOM) that could make a logged reason read differently from its bytes.
    private static func needsEscape(_ s: UInt32) -> Bool {
        UTF8Scanner.isControl(s)
            || (0x200B...0x200F).contains(s) || (0x2028...0x202E).contains(s)
            || (0x2060...0x2069).contains(s) || s == 0xFEFF
    }

    /// `U+000A`
    static func unicodeName(_ scalar: UInt32) -> String { "U+" + hex(scalar, width: 4) }

    private static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
