/// A JSON value for Live Activity payloads (`content-state`, `attributes`), with an encoder that is
/// compact and deterministic: object keys sorted by their UTF-8 bytes, so one event always encodes to
/// the same bytes and one encoding can be shared by every token it goes to.
public indirect enum JSONValue: Equatable, Sendable {
    case string(String)
    case int(Int64)
    /// Encoded in the shortest form that reads back as the same double; NaN and infinities, which
    /// JSON can't express, encode as `null`.
    case double(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])
    /// A value already encoded as compact JSON by `encoded()` (kept in Redis, say), written out
    /// as it is: no parse and no second encoding on the hot path.
    case encoded([UInt8])

    /// The value as compact JSON (RFC 8259) in UTF-8.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        encode(into: &out)
        return out
    }

    /// Appends the value as compact JSON, for building a larger payload without copies.
    public func encode(into out: inout [UInt8]) {
        switch self {
        case .string(let s):
            Self.encodeString(s, into: &out)
        case .int(let i):
            Self.encodeInteger(i, into: &out)
        case .double(let d):
            if d.isFinite {
                // Swift's description is the shortest round-tripping form and always JSON number
                // syntax for finite values ("1.0", "0.1", "1e-05", "1e+16", "-0.0").
                out.append(contentsOf: d.description.utf8)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .bool(let b):
            out.append(contentsOf: (b ? "true" : "false").utf8)
        case .null:
            out.append(contentsOf: "null".utf8)
        case .encoded(let bytes):
            out.append(contentsOf: bytes)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.encode(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            // Sorting by bytes (= by code points) doesn't depend on locale or Unicode normalization.
            let keys = members.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            for (i, key) in keys.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.encodeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                members[key]!.encode(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func encodeInteger(_ value: Int64, into out: inout [UInt8]) {
        out.append(contentsOf: String(value).utf8)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Quotes and escapes per RFC 8259: `"` and `\`, control characters (short forms where JSON has
    /// them, `\u00XX` otherwise), and U+2028/U+2029, which are valid JSON but end a line in JavaScript.
    /// Everything else is copied as UTF-8.
    private static func encodeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escaping at all: copy their bytes in one go.
        let plain = s.utf8.allSatisfy { $0 >= 0x20 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") && $0 != 0xE2 }
        if plain {
            out.append(contentsOf: s.utf8)
        } else {
            for scalar in s.unicodeScalars {
                switch scalar.value {
                case 0x22: out.append(contentsOf: "\\\"".utf8)
                case 0x5C: out.append(contentsOf: "\\\\".utf8)
                case 0x0A: out.append(contentsOf: "\\n".utf8)
                case 0x0D: out.append(contentsOf: "\\r".utf8)
                case 0x09: out.append(contentsOf: "\\t".utf8)
                case 0x08: out.append(contentsOf: "\\b".utf8)
                case 0x0C: out.append(contentsOf: "\\f".utf8)
                case 0x00..<0x20, 0x2028, 0x2029:
                    out.append(contentsOf: "\\u".utf8)
                    for shift in stride(from: 12, through: 0, by: -4) {
                        out.append(hexDigits[Int((scalar.value >> UInt32(shift)) & 0xF)])
                    }
                default:
                    UTF8.encode(scalar) { out.append($0) }
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

// Literals, so payloads and tests read like the JSON they stand for.
extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}
