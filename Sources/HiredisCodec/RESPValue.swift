/// A RESP2 reply, copied out of hiredis so no C memory outlives the decoder call.
///
/// Bulk strings are bytes: Redis values are binary-safe and nothing here assumes UTF-8.
public enum RESPValue: Sendable, Equatable {
    case status(String)
    case error(String)
    case integer(Int64)
    case bulk([UInt8])
    case null
    case array([RESPValue])
    /// A nested value over the decoder's limits, not kept: an array's announced element count
    /// and the bytes of the strings it had, or (elements nil) a string's length.
    case oversized(elements: Int?, bytes: Int)
}

extension RESPValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case .status(let s): return s
        case .error(let e): return "(error) \(e)"
        case .integer(let i): return "(integer) \(i)"
        case .bulk(let b): return "\"\(String(decoding: b, as: UTF8.self))\""
        case .null: return "(nil)"
        case .array(let a): return "[" + a.map(\.description).joined(separator: ", ") + "]"
        case .oversized(let elements?, let bytes): return "(oversized array: \(elements) elements, \(bytes) bytes)"
        case .oversized(nil, let bytes): return "(oversized string: \(bytes) bytes)"
        }
    }
}
