import ActivityCastCore

/// `decoder`: fuzzer bytes → a stream kind, limits and fields → `EntryDecoder.decode(kind:fields:)`.
///
/// Input layout, chosen so that byte-level mutations reach every shape of entry:
///
///     byte 0   bits 0-1  stream kind: 0 sports, 1 transit, 2 registrations, 3 all three in turn
///              bits 2-3  limits: 0 or 1 the defaults workers run with, 2 tight, 3 loose
///              bits 4-7  r: the field list is repeated 2^r times (at most `maxRepeatedFields`
///                        fields in all), so a few bytes can make a huge field count
///     byte 1   the separator
///     rest     name SEP value SEP name SEP value …; a trailing name gets an empty value
///
/// Names and values may hold any byte but the separator (each input picks its own), so empty
/// values, NULs, newlines, invalid UTF-8 and control characters are all one mutation away.
/// `Fuzz/corpus/decoder/` has valid entries of every type in this layout with `\n` as separator.
enum DecoderTarget {
    static let maxRepeatedFields = 100_000

    static func run(_ input: UnsafeBufferPointer<UInt8>) {
        guard input.count >= 2 else { return }
        let mode = input[0]
        let separator = input[1]
        let limits = Self.limits(preset: (mode >> 2) & 3)
        var fields = split(UnsafeBufferPointer(rebasing: input[2...]), on: separator)
        let repeats = 1 << Int(mode >> 4)
        if repeats > 1, !fields.isEmpty {
            let copies = min(repeats, maxRepeatedFields / fields.count)
            if copies > 1 {
                let once = fields
                fields.reserveCapacity(once.count * copies)
                for _ in 1..<copies { fields.append(contentsOf: once) }
            }
        }
        let kinds: [StreamKind] = switch mode & 3 {
        case 0: [.sports]
        case 1: [.transit]
        case 2: [.registrations]
        default: StreamKind.allCases
        }
        for kind in kinds {
            decodeAndCheck(kind: kind, fields: fields, limits: limits)
        }
    }

    static func limits(preset: UInt8) -> DecodeLimits {
        switch preset {
        case 2: DecodeLimits(maxFields: 8, maxValueBytes: 32, maxEntryBytes: 128)
        // Loose but still finite: what an operator might configure for unusually large entries.
        case 3: DecodeLimits(maxFields: 4096, maxValueBytes: 1 << 20, maxEntryBytes: 1 << 22)
        default: DecodeLimits()
        }
    }

    static func split(_ bytes: UnsafeBufferPointer<UInt8>, on separator: UInt8) -> [RawField] {
        var parts: [[UInt8]] = []
        var start = 0
        for i in bytes.indices where bytes[i] == separator {
            parts.append(Array(bytes[start..<i]))
            start = i + 1
        }
        parts.append(Array(bytes[start...]))
        if parts.count % 2 == 1 { parts.append([]) }
        return stride(from: 0, to: parts.count, by: 2).map { RawField(name: parts[$0], value: parts[$0 + 1]) }
    }

    /// Decodes and checks what docs/schema.md and `EntryDecoder`'s documentation promise for any input.
    /// Also used by the `resp` target on the entries the stream reply parsers return.
    static func decodeAndCheck(kind: StreamKind, fields: [RawField], limits: DecodeLimits = .init()) {
        let decoder = EntryDecoder(limits: limits)
        let result = decoder.decode(kind: kind, fields: fields)
        // Pure: the same entry always gets the same outcome.
        check(decoder.decode(kind: kind, fields: fields) == result, "decoding the same entry twice differed")

        let total = fields.reduce(0) { $0 + $1.name.count + $1.value.count }
        switch result {
        case .success(let entry):
            checkDecoded(entry, kind: kind, fields: fields, limits: limits, total: total)
        case .failure(let error):
            checkReason(error.reason)
            // Limits come before every other rule, in this order.
            if fields.count > limits.maxFields {
                check(error.reason.hasPrefix("too many fields: "), "over maxFields but rejected for: \(error.reason)")
            } else if total > limits.maxEntryBytes {
                check(error.reason.hasPrefix("entry too large: "), "over maxEntryBytes but rejected for: \(error.reason)")
            }
        }
    }

    private static func checkDecoded(_ entry: DecodedEntry, kind: StreamKind, fields: [RawField],
                                     limits: DecodeLimits, total: Int) {
        check(fields.count <= limits.maxFields, "decoded \(fields.count) fields > maxFields")
        check(total <= limits.maxEntryBytes, "decoded \(total) bytes > maxEntryBytes")
        check(fields.allSatisfy { $0.value.count <= limits.maxValueBytes }, "decoded a value > maxValueBytes")
        // Exactly one `type`, and the decoded type is its value.
        let types = fields.filter { $0.name == Array("type".utf8) }
        check(types.count == 1, "decoded with \(types.count) type fields")
        check(!entry.type.isEmpty && Array(entry.type.utf8) == types.first?.value,
              "decoded type \(entry.type) is not the entry's type field")
        // Every name at most once.
        var names = Set<[UInt8]>()
        check(fields.allSatisfy { names.insert($0.name).inserted }, "decoded an entry with a repeated name")
        check((1...(Int64(1) << 53)).contains(entry.timestampMillis), "decoded ts \(entry.timestampMillis) out of range")
        // The body belongs to the stream the entry came from.
        switch (kind, entry.body) {
        case (.sports, .sports), (.transit, .transit), (.registrations, .registration): break
        default: check(false, "a \(kind.rawValue) entry decoded to \(entry.body)")
        }
    }

    /// A dead letter's reason: one short line that logs and displays as what it says.
    static func checkReason(_ reason: String) {
        check(!reason.isEmpty, "empty reason")
        // Templates are short and a quoted input shows at most 40 bytes, each escaped to at most 8.
        check(reason.utf8.count <= 512, "reason of \(reason.utf8.count) bytes")
        for scalar in reason.unicodeScalars {
            let v = scalar.value
            let unsafe = v < 0x20 || (0x7F...0x9F).contains(v) || (0x200B...0x200F).contains(v)
                || (0x2028...0x202E).contains(v) || (0x2060...0x2069).contains(v) || v == 0xFEFF
            check(!unsafe, "reason contains U+\(String(v, radix: 16, uppercase: true)): \(reason.debugDescription)")
        }
    }
}
