/// Device tokens: hex, an even number of digits, 32–512 of them (docs/schema.md), kept
/// lowercase. Apple's tokens are 64 digits today; the schema allows longer ones.
enum DeviceToken {
    static let minDigits = 32
    static let maxDigits = 512

    /// The token in lowercase, or nil if it isn't one.
    static func normalize(_ text: Substring) -> String? {
        var copy = String(text)
        return copy.withUTF8 { normalize($0) }
    }

    /// The token in lowercase, or nil if it isn't one: one pass that checks and copies.
    static func normalize(_ b: UnsafeBufferPointer<UInt8>) -> String? {
        let count = b.count
        guard count >= minDigits, count <= maxDigits, count & 1 == 0 else { return nil }
        var valid = true
        let token = String(unsafeUninitializedCapacity: count) { out in
            for i in 0..<count {
                let c = b[i]
                let lower = c | 0x20
                // Digits, or a–f in either case (setting bit 5 lowercases ASCII letters).
                guard (c >= 0x30 && c <= 0x39) || (lower >= 0x61 && lower <= 0x66) else {
                    valid = false
                    return 0
                }
                out[i] = lower
            }
            return count
        }
        return valid ? token : nil
    }
}

enum HeaderValue {
    /// `8-4-4-4-12` hex digits, lowercase only when `lowercase` (apns-id must be lowercase).
    static func isUUID(_ text: String, lowercase: Bool) -> Bool {
        if let result = text.utf8.withContiguousStorageIfAvailable({ isUUID($0, lowercase: lowercase) }) { return result }
        return Array(text.utf8).withUnsafeBufferPointer { isUUID($0, lowercase: lowercase) }
    }

    private static func isUUID(_ b: UnsafeBufferPointer<UInt8>, lowercase: Bool) -> Bool {
        guard b.count == 36 else { return false }
        for i in 0..<36 {
            let c = b[i]
            if i == 8 || i == 13 || i == 18 || i == 23 {
                if c != UInt8(ascii: "-") { return false }
                continue
            }
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
            case UInt8(ascii: "A")...UInt8(ascii: "F") where !lowercase: continue
            default: return false
            }
        }
        return true
    }

    /// A non-negative decimal integer without sign or spaces (`apns-expiration`).
    static func nonNegativeInteger(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { nonNegativeInteger($0) }
    }

    /// `nonNegativeInteger` on bytes.
    static func nonNegativeInteger(_ b: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard !b.isEmpty, b.count <= 19 else { return nil }
        var value: Int64 = 0
        for c in b {
            guard c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") else { return nil }
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) = times10.addingReportingOverflow(Int64(c &- UInt8(ascii: "0")))
            if o1 || o2 { return nil }
            value = next
        }
        return value
    }

    /// Whether `topic` has a shape a topic could have: 1–255 bytes of `A–Z a–z 0–9 - _ .`, no
    /// empty dot-separated part. A well-formed topic that isn't one of ours is
    /// `TopicDisallowed`; anything else is `BadTopic`.
    static func isWellFormedTopic(_ topic: String) -> Bool {
        let utf8 = topic.utf8
        guard !utf8.isEmpty, utf8.count <= 255 else { return false }
        var previous = UInt8(ascii: ".")
        for c in utf8 {
            switch c {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"):
                break
            case UInt8(ascii: "."):
                if previous == UInt8(ascii: ".") { return false }
            default:
                return false
            }
            previous = c
        }
        return previous != UInt8(ascii: ".")
    }

    /// Canonical standard base64 (RFC 4648 §4, `=` padding, no whitespace), at least one byte:
    /// the shape of Apple's channel ids. A header that isn't is `BadChannelId`.
    static func isBase64(_ text: String) -> Bool {
        let b = Array(text.utf8)
        guard !b.isEmpty, b.count % 4 == 0 else { return false }
        var padding = 0
        for (i, c) in b.enumerated() {
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding > 0 { return false }
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 || i < b.count - 2 { return false }
            default:
                return false
            }
        }
        return true
    }
}

enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Standard base64 with `=` padding.
    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = UInt32(bytes[i])
            let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
            let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
            let v = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(v >> 18 & 0x3F)])
            out.append(alphabet[Int(v >> 12 & 0x3F)])
            out.append(i + 1 < bytes.count ? alphabet[Int(v >> 6 & 0x3F)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(v & 0x3F)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
