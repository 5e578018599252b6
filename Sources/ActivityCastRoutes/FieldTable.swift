import ActivityCastCore

/// The fields one entry type defines, each given a slot (0, 1, …) that compiled routes refer to,
/// so that evaluation finds a field's value by index rather than by name.
struct FieldTable: Sendable {
    let type: EntrySchema.TypeInfo
    /// Slot → the field's name as bytes, to match raw field names without making strings.
    let names: [[UInt8]]
    let kinds: [EntrySchema.ValueKind]
    /// The slots of the fields every entry of the type has.
    let required: SlotSet

    init(_ type: EntrySchema.TypeInfo) {
        precondition(type.fields.count <= 64, "SlotSet is a 64-bit mask")
        self.type = type
        names = type.fields.map { Array($0.name.utf8) }
        kinds = type.fields.map(\.kind)
        var required = SlotSet()
        for (slot, field) in type.fields.enumerated() where field.required { required.insert(slot) }
        self.required = required
    }

    var count: Int { names.count }

    func slot(named name: String) -> Int? { type.fields.firstIndex { $0.name == name } }

    func name(_ slot: Int) -> String { type.fields[slot].name }

    /// The slot of a raw field name, or nil (`x-…` fields, `type`, names of other types).
    @inline(__always)
    func slot(of name: [UInt8]) -> Int? {
        for slot in names.indices where names[slot].count == name.count && names[slot] == name { return slot }
        return nil
    }

    /// The names of these slots' fields, for messages.
    func names(of slots: SlotSet) -> [String] { slots.map(name) }

    /// `unknown field 'x' for match.score`, with the closest name or else the type's fields.
    func unknownField(_ name: String) -> String {
        let names = type.fields.map(\.name)
        let hint = suggestion(for: name, among: names)
        return "unknown field '\(shown(name))' for \(type.name)"
            + (hint.isEmpty ? " (its fields: \(names.joined(separator: ", ")))" : hint)
    }
}

/// A set of slots as a bit mask: "are all the fields this text needs present" is one AND.
struct SlotSet: Equatable, Sendable, Sequence {
    var bits: UInt64 = 0

    @inline(__always) func contains(_ slot: Int) -> Bool { bits & (1 &<< UInt64(slot)) != 0 }
    @inline(__always) mutating func insert(_ slot: Int) { bits |= 1 &<< UInt64(slot) }
    @inline(__always) func isSubset(of other: SlotSet) -> Bool { bits & ~other.bits == 0 }
    @inline(__always) func subtracting(_ other: SlotSet) -> SlotSet { SlotSet(bits: bits & ~other.bits) }
    @inline(__always) func union(_ other: SlotSet) -> SlotSet { SlotSet(bits: bits | other.bits) }
    var isEmpty: Bool { bits == 0 }

    struct Iterator: IteratorProtocol {
        var bits: UInt64
        mutating func next() -> Int? {
            guard bits != 0 else { return nil }
            let slot = bits.trailingZeroBitCount
            bits &= bits &- 1
            return slot
        }
    }
    func makeIterator() -> Iterator { Iterator(bits: bits) }
}

/// The values of one entry by slot, for the duration of one evaluation: where each field is in the
/// raw entry, and which are present (an empty value counts as absent, as in the decoder).
struct FieldValues {
    let fields: [RawField]
    /// Slot → index in `fields`, or -1.
    let index: UnsafeMutableBufferPointer<Int>
    let present: SlotSet
    let table: FieldTable
    /// The entry's `ts` (ms), for values relative to the event's time.
    let timestampMillis: Int64

    init(fields: [RawField], table: FieldTable, index: UnsafeMutableBufferPointer<Int>, timestampMillis: Int64) {
        index.initialize(repeating: -1)
        var present = SlotSet()
        for i in fields.indices {
            guard let slot = table.slot(of: fields[i].name), index[slot] < 0 else { continue }
            index[slot] = i
            if !fields[i].value.isEmpty { present.insert(slot) }
        }
        self.fields = fields
        self.index = index
        self.present = present
        self.table = table
        self.timestampMillis = timestampMillis
    }

    @inline(__always)
    func bytes(_ slot: Int) -> [UInt8] { fields[index[slot]].value }

    /// The value as text: the field's own text, except that integers are shown in their canonical
    /// form (`007` → `7`), as a decoded value would print.
    func text(_ slot: Int) -> Result<String, RouteError> {
        switch table.kinds[slot] {
        case .integer, .millis:
            return integer(slot).map { String($0) }
        default:
            return .success(String(decoding: bytes(slot), as: UTF8.self))
        }
    }

    /// A decimal integer with an optional leading `-` (fields of kind integer or millis).
    func integer(_ slot: Int) -> Result<Int64, RouteError> {
        let b = bytes(slot)
        var i = 0
        let negative = b.first == UInt8(ascii: "-")
        if negative { i = 1 }
        guard i < b.count else { return .failure(notA("an integer", slot)) }
        var value: Int64 = 0
        while i < b.count {
            let digit = b[i] &- 0x30
            guard digit < 10 else { return .failure(notA("an integer", slot)) }
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(Int64(digit))
            guard !o1 && !o2 else { return .failure(notA("an integer", slot)) }
            value = sum
            i += 1
        }
        return .success(negative ? -value : value)
    }

    /// A decimal `-?digits(.digits)?` (kind decimal) or an integer. The standard library's parser
    /// is correctly rounded, like the decoder's, so both read a value as the same double.
    func double(_ slot: Int) -> Result<Double, RouteError> {
        if case .decimal = table.kinds[slot] {
            let b = bytes(slot)
            let syntax = !b.isEmpty && b.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }
            guard syntax, let value = Double(String(decoding: b, as: UTF8.self)), value.isFinite else {
                return .failure(notA("a decimal", slot))
            }
            return .success(value)
        }
        return integer(slot).map(Double.init)
    }

    func notA(_ what: String, _ slot: Int) -> RouteError {
        RouteError(location: nil, reason: "\(table.type.name): field '\(table.name(slot))' is not \(what): "
            + "'\(shown(String(decoding: bytes(slot), as: UTF8.self)))'")
    }
}
