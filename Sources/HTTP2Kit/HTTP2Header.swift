/// One header field to send. Names should be lowercase ASCII (HTTP/2 requires it; nghttp2
/// lowercases names it copies, and templates lowercase theirs).
public struct HTTP2Header: Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    public init(_ name: String, _ value: String) {
        self.init(name: name, value: value)
    }

    public var description: String { "\(name): \(value)" }
}

/// A received header block, kept as bytes: no `String` is built until a header is asked for.
///
/// A value type (copy-on-write), safe to keep after the delegate call that delivered it.
/// Lookups compare names ASCII-case-insensitively; received names are always lowercase (nghttp2
/// rejects others). Pseudo-headers (`:method`, `:path`, ...) are included on the server side;
/// the client reports `:status` separately and leaves it out.
public struct HTTP2HeaderList: RandomAccessCollection, Sendable, CustomStringConvertible {
    struct Field: Sendable {
        var nameStart: UInt32
        var nameLength: UInt32
        var valueStart: UInt32
        var valueLength: UInt32
    }

    private(set) var bytes: [UInt8] = []
    private(set) var fields: [Field] = []

    public init() {}

    /// A list holding `headers` (for tests and tools; received lists come from the sessions).
    public init(_ headers: [HTTP2Header]) {
        for header in headers {
            var name = header.name
            var value = header.value
            name.withUTF8 { n in value.withUTF8 { v in append(name: n, value: v) } }
        }
    }

    // MARK: Collection

    public var startIndex: Int { 0 }
    public var endIndex: Int { fields.count }

    /// The header at `position`, as Strings (built on demand).
    public subscript(position: Int) -> HTTP2Header {
        let field = fields[position]
        return HTTP2Header(name: string(Int(field.nameStart), Int(field.nameLength)),
                           value: string(Int(field.valueStart), Int(field.valueLength)))
    }

    // MARK: Lookups

    /// The value of the first header called `name`, or nil.
    public func value(for name: String) -> String? {
        guard let index = firstIndex(ofName: name) else { return nil }
        let field = fields[index]
        return string(Int(field.valueStart), Int(field.valueLength))
    }

    /// Every value of the headers called `name`, in order.
    public func values(for name: String) -> [String] {
        var result: [String] = []
        var name = name
        name.withUTF8 { key in
            for field in fields where matches(field, key) {
                result.append(string(Int(field.valueStart), Int(field.valueLength)))
            }
        }
        return result
    }

    /// The raw bytes of the first header called `name`, or nil.
    public func valueBytes(for name: String) -> ArraySlice<UInt8>? {
        guard let index = firstIndex(ofName: name) else { return nil }
        let field = fields[index]
        return bytes[Int(field.valueStart)..<Int(field.valueStart + field.valueLength)]
    }

    /// Whether a header called `name` is present.
    public func contains(name: String) -> Bool { firstIndex(ofName: name) != nil }

    /// The index of the first header called `name`.
    public func firstIndex(ofName name: String) -> Int? {
        var name = name
        return name.withUTF8 { key -> Int? in
            for index in fields.indices where matches(fields[index], key) {
                return index
            }
            return nil
        }
    }

    /// Total bytes of names and values (what the caps on received headers count).
    public var byteCount: Int { bytes.count }

    public var description: String {
        "[" + map(\.description).joined(separator: ", ") + "]"
    }

    // MARK: Building (the sessions)

    mutating func append(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        let nameStart = UInt32(truncatingIfNeeded: bytes.count)
        bytes.append(contentsOf: name)
        let valueStart = UInt32(truncatingIfNeeded: bytes.count)
        bytes.append(contentsOf: value)
        fields.append(Field(nameStart: nameStart, nameLength: UInt32(truncatingIfNeeded: name.count),
                            valueStart: valueStart, valueLength: UInt32(truncatingIfNeeded: value.count)))
    }

    mutating func append(name: UnsafePointer<UInt8>, nameLength: Int, value: UnsafePointer<UInt8>, valueLength: Int) {
        append(name: UnsafeBufferPointer(start: name, count: nameLength),
               value: UnsafeBufferPointer(start: value, count: valueLength))
    }

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        fields.removeAll(keepingCapacity: true)
    }

    // MARK: Helpers

    private func matches(_ field: Field, _ key: UnsafeBufferPointer<UInt8>) -> Bool {
        guard Int(field.nameLength) == key.count else { return false }
        return bytes.withUnsafeBufferPointer { all in
            let start = Int(field.nameStart)
            for i in 0..<key.count {
                var k = key[i]
                if k >= 0x41 && k <= 0x5a { k |= 0x20 }
                if all[start + i] != k { return false }
            }
            return true
        }
    }

    private func string(_ start: Int, _ length: Int) -> String {
        bytes.withUnsafeBufferPointer { all in
            String(decoding: UnsafeBufferPointer(rebasing: all[start..<start + length]), as: UTF8.self)
        }
    }
}
