/// Turns the raw fields of a stream entry into a `DecodedEntry`, or into the one-line reason that
/// becomes its dead letter. Implements every rule of docs/schema.md; never traps on any input.
///
/// When an entry breaks several rules, the first of these checks that fails is reported:
/// 1. limits: field count, then entry size, then each value's size (before anything else is read);
/// 2. `type`: missing, repeated, empty, unknown for the stream;
/// 3. names, in entry order: a name the type doesn't define (`x-…` aside), a repeated name;
/// 4. text: each known field's value is UTF-8 without control characters (tab excepted);
/// 5. presence: a required field is missing or empty, in the order of the schema's tables;
/// 6. values, in the order of the schema's tables (`ts` first), then rules spanning fields.
///
/// It works on the entry's bytes: no dictionaries, no regular expressions and no `String` until a
/// value is known to be valid, because it runs for every entry a worker reads.
public struct EntryDecoder: Sendable {
    public var limits: DecodeLimits

    public init(limits: DecodeLimits = .init()) {
        self.limits = limits
    }

    /// Decodes one entry read from a stream of the given kind.
    public func decode(kind: StreamKind, fields: [RawField]) -> Result<DecodedEntry, DecodeError> {
        do {
            return .success(try decodeEntry(kind: kind, fields: fields))
        } catch {
            return .failure(error)
        }
    }

    private func decodeEntry(kind: StreamKind, fields: [RawField]) throws(DecodeError) -> DecodedEntry {
        try checkLimits(fields)

        // Where each known field is; on the stack, as this runs for every entry.
        return try withUnsafeTemporaryAllocation(of: Int.self, capacity: Field.allCases.count) {
            (slots) throws(DecodeError) -> DecodedEntry in
            slots.initialize(repeating: -1)
            return try decodeFields(kind: kind, fields: fields, slots: slots)
        }
    }

    private func decodeFields(kind: StreamKind, fields: [RawField], slots: UnsafeMutableBufferPointer<Int>)
        throws(DecodeError) -> DecodedEntry {
        // Each known field's position, its first repeat, and the first name that no type defines.
        var present = FieldSet()
        var firstDuplicate = Int.max
        var firstUnknown = Int.max
        var typeRepeated = false
        var hasExtensions = false
        for i in fields.indices {
            if let field = fields[i].name.withUnsafeBufferPointer(Field.named) {
                let s = Int(field.rawValue)
                if slots[s] < 0 {
                    slots[s] = i
                    present.insert(field)
                } else {
                    firstDuplicate = min(firstDuplicate, i)
                    if field == .type { typeRepeated = true }
                }
            } else if Self.isExtension(fields[i].name) {
                hasExtensions = true
            } else {
                firstUnknown = min(firstUnknown, i)
            }
        }

        let type = try entryType(kind: kind, fields: fields, slot: slots[Int(Field.type.rawValue)],
                                 repeated: typeRepeated)

        // Known names this type doesn't define are unknown too; report whichever problem comes first.
        for field in present.subtracting(type.allowed) {
            firstUnknown = min(firstUnknown, slots[Int(field.rawValue)])
        }
        if hasExtensions {
            firstDuplicate = min(firstDuplicate, Self.firstRepeatedExtension(fields))
        }
        if firstUnknown < firstDuplicate {
            throw .unknownField(name: fields[firstUnknown].name, for: type)
        }
        if firstDuplicate < Int.max {
            throw .duplicate(name: fields[firstDuplicate].name)
        }

        // `type` matched a known type byte for byte, so it is valid text already.
        for field in present where field != .type {
            let problem = fields[slots[Int(field.rawValue)]].value.withUnsafeBufferPointer(UTF8Scanner.textProblem)
            if let problem { throw .text(problem, in: field) }
        }

        for field in type.required {
            let slot = slots[Int(field.rawValue)]
            if slot < 0 { throw .missing(field, for: type) }
            if fields[slot].value.isEmpty { throw .empty(field) }
        }

        let reader = FieldReader(fields: fields, slots: UnsafeBufferPointer(slots), type: type)
        let ts = try reader.millis(.ts)
        let body: EventBody
        switch type.stream {
        case .sports: body = .sports(try reader.sportsEvent())
        case .transit: body = .transit(try reader.transitEvent())
        case .registrations: body = .registration(try reader.registration())
        }
        return DecodedEntry(type: type.name, timestampMillis: ts, body: body)
    }

    /// Count first (free), then total size, then each value; nothing else has been read yet.
    private func checkLimits(_ fields: [RawField]) throws(DecodeError) {
        if fields.count > limits.maxFields {
            throw .tooManyFields(fields.count, max: limits.maxFields)
        }
        // Indexing rather than `for field in fields`, which would copy (retain) both arrays of each field.
        var total = 0
        for i in fields.indices { total &+= fields[i].name.count &+ fields[i].value.count }
        if total > limits.maxEntryBytes {
            throw .entryTooLarge(total, max: limits.maxEntryBytes)
        }
        for i in fields.indices where fields[i].value.count > limits.maxValueBytes {
            throw .tooLong(name: fields[i].name, fields[i].value.count, max: limits.maxValueBytes)
        }
    }

    private func entryType(kind: StreamKind, fields: [RawField], slot: Int, repeated: Bool) throws(DecodeError)
        -> EntryType {
        guard slot >= 0 else { throw .missingType }
        if repeated { throw .duplicate(name: Array("type".utf8)) }
        if fields[slot].value.isEmpty { throw .emptyType }
        // A type of another stream gets the same reason as a made-up one: for this stream it is unknown.
        guard let type = fields[slot].value.withUnsafeBufferPointer(EntryType.named), type.stream == kind else {
            throw .unknownType(fields[slot].value, kind: kind)
        }
        return type
    }

    /// Names starting with `x-` are carried along and ignored (trace ids and the like).
    @inline(__always)
    private static func isExtension(_ name: [UInt8]) -> Bool {
        name.count >= 2 && name[0] == UInt8(ascii: "x") && name[1] == UInt8(ascii: "-")
    }

    /// The index of the first `x-` field whose name appeared before, or `Int.max`. Quadratic, but only
    /// over the few `x-` fields, and the field count is bounded by the limits.
    private static func firstRepeatedExtension(_ fields: [RawField]) -> Int {
        for i in fields.indices where isExtension(fields[i].name) {
            for j in 0..<i where fields[j].name == fields[i].name { return i }
        }
        return Int.max
    }
}
