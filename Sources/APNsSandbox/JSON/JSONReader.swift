import ActivityCastCore

/// A strict RFC 8259 reader over UTF-8 bytes: validates as it goes (string escapes, surrogate
/// pairs, UTF-8 sequences, number grammar, nesting depth) and never allocates unless asked to
/// build a value. The payload scanner drives it directly on the hot path; `JSONValue.parse` uses
/// it for the admin API and views.
///
/// Every `scan…`/`skip…` method expects `index` at the first byte of the thing it reads and leaves
/// it just past that thing; `false`/`nil` means the document is not valid JSON.
struct JSONReader {
    let bytes: UnsafeBufferPointer<UInt8>
    /// `bytes`' start and length, read into locals by the hot loops.
    private let base: UnsafePointer<UInt8>
    private let count: Int
    var index = 0
    var depth = 0

    /// Deeper documents are refused. Apple's payloads are shallow; the limit only keeps the
    /// recursion bounded.
    static let maxDepth = 64

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        count = bytes.count
        // An empty buffer may have no address; it is never dereferenced (every read checks `count`).
        base = bytes.baseAddress ?? UnsafePointer(bitPattern: 1)!
    }

    var atEnd: Bool { index >= count }

    @inline(__always) var current: UInt8 { base[index] }

    @inline(__always) mutating func skipWhitespace() {
        var i = index
        while i < count {
            switch base[i] {
            case 0x20, 0x0A, 0x0D, 0x09: i += 1
            default: index = i; return
            }
        }
        index = i
    }

    /// Consumes `byte` (after whitespace) if it is next.
    @inline(__always) mutating func consume(_ byte: UInt8) -> Bool {
        skipWhitespace()
        if index < count, base[index] == byte { index += 1; return true }
        return false
    }

    /// A string token: `index` at the opening quote. Returns the range of its raw contents (without
    /// quotes) and whether it contains escapes.
    @inline(__always) mutating func scanString() -> (range: Range<Int>, escaped: Bool)? {
        var i = index
        guard i < count, base[i] == UInt8(ascii: "\"") else { return nil }
        i += 1
        let start = i
        var escaped = false
        while i < count {
            let c = base[i]
            // Printable ASCII other than the quote and the backslash: by far the common case.
            if c >= 0x20 && c < 0x80 && c != UInt8(ascii: "\"") && c != UInt8(ascii: "\\") {
                i += 1
                continue
            }
            if c == UInt8(ascii: "\"") {
                index = i + 1
                return (start..<i, escaped)
            }
            if c < 0x20 { return nil }
            index = i
            if c == UInt8(ascii: "\\") {
                escaped = true
                guard scanEscape() else { return nil }
            } else {
                guard scanUTF8Sequence(lead: c) else { return nil }
            }
            i = index
        }
        return nil
    }

    /// After a backslash. Unpaired surrogates are refused, as Foundation's decoders do.
    private mutating func scanEscape() -> Bool {
        index += 1
        guard index < bytes.count else { return false }
        switch bytes[index] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
             UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            index += 1
            return true
        case UInt8(ascii: "u"):
            index += 1
            guard let unit = hex4() else { return false }
            if unit >= 0xDC00 && unit <= 0xDFFF { return false }
            if unit >= 0xD800 && unit <= 0xDBFF {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { return false }
                index += 2
                guard let low = hex4(), low >= 0xDC00 && low <= 0xDFFF else { return false }
            }
            return true
        default:
            return false
        }
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let d = hexValue(bytes[index]) else { return nil }
            value = value << 4 | UInt32(d)
            index += 1
        }
        return value
    }

    /// One multi-byte UTF-8 sequence starting with `lead` (≥ 0x80): no overlongs, no surrogates,
    /// nothing above U+10FFFF (the Unicode standard's table 3-7).
    private mutating func scanUTF8Sequence(lead c: UInt8) -> Bool {
        var low: UInt8 = 0x80, high: UInt8 = 0xBF
        let continuation: Int
        switch c {
        case 0xC2...0xDF: continuation = 1
        case 0xE0: continuation = 2; low = 0xA0
        case 0xE1...0xEC, 0xEE, 0xEF: continuation = 2
        case 0xED: continuation = 2; high = 0x9F
        case 0xF0: continuation = 3; low = 0x90
        case 0xF1...0xF3: continuation = 3
        case 0xF4: continuation = 3; high = 0x8F
        default: return false
        }
        guard index + continuation < bytes.count else { return false }
        let second = bytes[index + 1]
        guard second >= low && second <= high else { return false }
        var k = 2
        while k <= continuation {
            let b = bytes[index + k]
            guard b >= 0x80 && b <= 0xBF else { return false }
            k += 1
        }
        index += continuation + 1
        return true
    }

    /// A number token; returns its range and whether it is a plain integer (no fraction or
    /// exponent).
    @inline(__always) mutating func scanNumber() -> (range: Range<Int>, integer: Bool)? {
        let start = index
        var i = index
        let n = count
        if i < n, base[i] == UInt8(ascii: "-") { i += 1 }
        guard i < n else { return nil }
        if base[i] == UInt8(ascii: "0") {
            i += 1
        } else if isDigit(base[i]) {
            while i < n, isDigit(base[i]) { i += 1 }
        } else {
            return nil
        }
        var integer = true
        if i < n, base[i] == UInt8(ascii: ".") {
            integer = false
            i += 1
            guard i < n, isDigit(base[i]) else { return nil }
            while i < n, isDigit(base[i]) { i += 1 }
        }
        if i < n, base[i] == UInt8(ascii: "e") || base[i] == UInt8(ascii: "E") {
            integer = false
            i += 1
            if i < n, base[i] == UInt8(ascii: "+") || base[i] == UInt8(ascii: "-") { i += 1 }
            guard i < n, isDigit(base[i]) else { return nil }
            while i < n, isDigit(base[i]) { i += 1 }
        }
        index = i
        return (start..<i, integer)
    }

    private mutating func literal(_ text: StaticString) -> Bool {
        let n = text.utf8CodeUnitCount
        guard index + n <= count else { return false }
        let p = text.utf8Start
        for k in 0..<n where base[index + k] != p[k] { return false }
        index += n
        return true
    }

    /// Skips any value (after whitespace), validating it.
    mutating func skipValue() -> Bool {
        skipWhitespace()
        guard index < count else { return false }
        switch base[index] {
        case UInt8(ascii: "\""): return scanString() != nil
        case UInt8(ascii: "{"): return skipObject()
        case UInt8(ascii: "["): return skipArray()
        case UInt8(ascii: "t"): return literal("true")
        case UInt8(ascii: "f"): return literal("false")
        case UInt8(ascii: "n"): return literal("null")
        default: return scanNumber() != nil
        }
    }

    // Objects and arrays are walked with a cursor rather than closures, so the hot loops keep
    // their state in registers:
    //
    //     guard var more = reader.enterObject() else { invalid }
    //     while more {
    //         guard let (key, escaped) = reader.memberKey() else { invalid }
    //         … consume the value …
    //         guard let next = reader.nextMember() else { invalid }
    //         more = next
    //     }
    //
    // Duplicate keys are all visited, in order (the last one wins for a caller that overwrites).

    /// At `{`: enters the object. True if a member follows, false if it was empty (and is
    /// consumed); nil if invalid or too deep.
    @inline(__always) mutating func enterObject() -> Bool? {
        enter(UInt8(ascii: "{"), UInt8(ascii: "}"))
    }

    /// A member's key and the colon; leaves `index` at the value.
    @inline(__always) mutating func memberKey() -> (range: Range<Int>, escaped: Bool)? {
        skipWhitespace()
        guard let key = scanString(), consume(UInt8(ascii: ":")) else { return nil }
        skipWhitespace()
        return key
    }

    /// After a member's value: true if another follows, false at the end of the object (consumed).
    @inline(__always) mutating func nextMember() -> Bool? {
        next(UInt8(ascii: "}"))
    }

    /// At `[`: enters the array; true if an element follows (at `index`, after whitespace).
    @inline(__always) mutating func enterArray() -> Bool? {
        enter(UInt8(ascii: "["), UInt8(ascii: "]"))
    }

    @inline(__always) mutating func nextElement() -> Bool? {
        next(UInt8(ascii: "]"))
    }

    @inline(__always) private mutating func enter(_ open: UInt8, _ close: UInt8) -> Bool? {
        guard index < count, base[index] == open else { return nil }
        depth += 1
        guard depth <= Self.maxDepth else { return nil }
        index += 1
        skipWhitespace()
        if index < count, base[index] == close {
            index += 1
            depth -= 1
            return false
        }
        return true
    }

    @inline(__always) private mutating func next(_ close: UInt8) -> Bool? {
        skipWhitespace()
        guard index < count else { return nil }
        let c = base[index]
        index += 1
        if c == UInt8(ascii: ",") {
            skipWhitespace()
            return true
        }
        if c == close {
            depth -= 1
            return false
        }
        return nil
    }

    /// Skips an object; `index` at `{`.
    mutating func skipObject() -> Bool {
        guard var more = enterObject() else { return false }
        while more {
            guard memberKey() != nil, skipValue(), let next = nextMember() else { return false }
            more = next
        }
        return true
    }

    /// Skips an array; `index` at `[`.
    mutating func skipArray() -> Bool {
        guard var more = enterArray() else { return false }
        while more {
            guard skipValue(), let next = nextElement() else { return false }
            more = next
        }
        return true
    }

    /// Whether the raw (unescaped) bytes in `range` equal `text`.
    @inline(__always) func equals(_ range: Range<Int>, _ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard range.count == count else { return false }
        let p = text.utf8Start
        var k = 0
        while k < count {
            if bytes[range.lowerBound + k] != p[k] { return false }
            k += 1
        }
        return true
    }

    /// The decoded text of a string token's raw contents (validated by `scanString`).
    func string(_ range: Range<Int>, escaped: Bool) -> String {
        let slice = UnsafeBufferPointer(rebasing: bytes[range])
        if !escaped { return String(decoding: slice, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(slice.count)
        var i = 0
        func hex4(_ at: Int) -> UInt32 {
            var v: UInt32 = 0
            for k in 0..<4 { v = v << 4 | UInt32(hexValue(slice[at + k]) ?? 0) }
            return v
        }
        while i < slice.count {
            let c = slice[i]
            guard c == UInt8(ascii: "\\") else { out.append(c); i += 1; continue }
            let e = slice[i + 1]
            i += 2
            switch e {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(i)
                i += 4
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    let low = hex4(i + 2)
                    i += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                if let s = Unicode.Scalar(scalar) { UTF8.encode(s) { out.append($0) } }
            default: out.append(e)  // " \ /
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The value of a number token as a Double.
    func double(_ range: Range<Int>, integer: Bool) -> Double? {
        if integer, range.count <= 16 {
            var value: Int64 = 0
            var k = range.lowerBound
            let negative = bytes[k] == UInt8(ascii: "-")
            if negative { k += 1 }
            while k < range.upperBound { value = value * 10 + Int64(bytes[k] &- 0x30); k += 1 }
            return Double(negative ? -value : value)
        }
        return Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self))
    }

    /// Builds the value at `index` (after whitespace).
    mutating func readValue() -> JSONValue? {
        skipWhitespace()
        guard index < count else { return nil }
        switch base[index] {
        case UInt8(ascii: "\""):
            guard let (range, escaped) = scanString() else { return nil }
            return .string(string(range, escaped: escaped))
        case UInt8(ascii: "{"):
            var members: [String: JSONValue] = [:]
            guard var more = enterObject() else { return nil }
            while more {
                guard let (key, escaped) = memberKey(), let value = readValue(), let next = nextMember() else { return nil }
                members[string(key, escaped: escaped)] = value
                more = next
            }
            return .object(members)
        case UInt8(ascii: "["):
            var items: [JSONValue] = []
            guard var more = enterArray() else { return nil }
            while more {
                guard let value = readValue(), let next = nextElement() else { return nil }
                items.append(value)
                more = next
            }
            return .array(items)
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        default:
            guard let (range, integer) = scanNumber() else { return nil }
            if integer, let i = Int64(String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)) {
                return .int(i)
            }
            guard let d = double(range, integer: false) else { return nil }
            return .double(d)
        }
    }
}

@inline(__always) func isDigit(_ c: UInt8) -> Bool { c &- 0x30 < 10 }

@inline(__always) func hexValue(_ c: UInt8) -> UInt8? {
    switch c {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): c - 0x30
    case UInt8(ascii: "a")...UInt8(ascii: "f"): c - 0x57
    case UInt8(ascii: "A")...UInt8(ascii: "F"): c - 0x37
    default: nil
    }
}

extension JSONValue {
    /// Parses a complete JSON document (strict RFC 8259; nothing but whitespace after the value).
    /// Integers that fit in Int64 become `.int`, other numbers `.double`.
    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            guard let value = reader.readValue() else { return nil }
            reader.skipWhitespace()
            return reader.atEnd ? value : nil
        }
    }
}
