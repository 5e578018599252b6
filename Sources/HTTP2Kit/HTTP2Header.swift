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

    init(bytes: [UInt8], fields: [Field]) {
        self.bytes = bytes
        self.fields = fields
    }

    /// A list holding `headers` (for tests and tools; received lists come from the sessions).
    public init(_ headers: [HTTP2Header]) {
        for header in headers { append(name: header.name, value: header.value) }
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

    /// The value bytes of the field at `index` (sharing the list's storage, no copy).
    public func valueBytes(at index: Int) -> ArraySlice<UInt8> {
        let field = fields[index]
        return bytes[Int(field.valueStart)..<Int(field.valueStart + field.valueLength)]
    }

    /// The value of the field at `index`, as a String.
    public func value(at index: Int) -> String {
        let field = fields[index]
        return string(Int(field.valueStart), Int(field.valueLength))
    }

    /// Calls `body` with each field's position, name bytes and value bytes, in order, without
    /// building Strings. The buffers are valid only during the call.
    public func forEachField(_ body: (_ index: Int, _ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>) -> Void) {
        bytes.withUnsafeBufferPointer { all in
            guard let base = all.baseAddress else {
                // No bytes: every field is empty.
                for index in fields.indices { body(index, UnsafeBufferPointer(start: nil, count: 0), UnsafeBufferPointer(start: nil, count: 0)) }
                return
            }
            for index in fields.indices {
                let f = fields[index]
                body(index, UnsafeBufferPointer(start: base + Int(f.nameStart), count: Int(f.nameLength)),
                     UnsafeBufferPointer(start: base + Int(f.valueStart), count: Int(f.valueLength)))
            }
        }
    }

    /// Calls `body` with the value bytes of the field at `index`, without copying or retaining.
    @inline(__always)
    public func withValueBytes<R>(at index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let f = fields[index]
        return bytes.withUnsafeBufferPointer { all in
            body(UnsafeBufferPointer(rebasing: all[Int(f.valueStart)..<Int(f.valueStart + f.valueLength)]))
        }
    }

    /// Total bytes of names and values (what the caps on received headers count).
    public var byteCount: Int { bytes.count }

    public var description: String {
        "[" + map(\.description).joined(separator: ", ") + "]"
    }

    // MARK: Building

    /// Room for `fields` more fields and `bytes` more bytes of names and values.
    public mutating func reserveCapacity(fields count: Int, bytes byteCount: Int) {
        fields.reserveCapacity(fields.count + count)
        bytes.reserveCapacity(bytes.count + byteCount)
    }

    /// Appends a field (for responses built without a String per value).
    public mutating func append(name: String, value: String) {
        var name = name
        var value = value
        name.withUTF8 { n in value.withUTF8 { v in append(name: n, value: v) } }
    }

    /// Appends a field with a static name and a value given as bytes.
    public mutating func append(name: StaticString, value: UnsafeBufferPointer<UInt8>) {
        append(name: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), value: value)
    }

    /// Appends a field from raw name and value bytes.
    public mutating func append(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
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
