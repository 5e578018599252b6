/// Free text for people — competition and player names, stop names, headsigns, vehicle names,
/// reasons and disruption messages — is the least important part of an event and the part a feed
/// most often gets wrong. It is repaired rather than refused, so that a malformed name never
/// costs a score, a clock or an ETA: invalid UTF-8 becomes U+FFFD, control characters (tab
/// excepted) and bidirectional embedding, override and isolate characters are removed, and a value
/// over `maxBytes` is trimmed at a Unicode scalar boundary with an ellipsis. Identifiers, numbers,
/// choices, `clock` and field names stay strict (docs/schema.md). Pure: bytes in, bytes out.
public enum FreeText {
    /// What was wrong with a value (the `reason` label of `activitycast_text_repaired_total`).
    public enum Repair: String, Sendable, CaseIterable, Comparable {
        case invalidUTF8 = "invalid_utf8"
        case control
        case bidi
        case trimmed

        public static func < (a: Repair, b: Repair) -> Bool { a.rawValue < b.rawValue }
    }

    /// One field's repairs.
    public struct Repaired: Equatable, Sendable {
        public var field: String
        public var repairs: [Repair]
        public init(field: String, repairs: [Repair]) { self.field = field; self.repairs = repairs }
    }

    /// The fields repaired (free text for people).
    static let fields: FieldSet = [.competition, .player, .reason, .headsign, .vehicle, .stopName, .message]

    /// Whether `name` is a free-text field.
    public static func isFreeText(_ name: [UInt8]) -> Bool {
        name.withUnsafeBufferPointer(Field.named).map { fields.contains($0) } ?? false
    }

    /// Repairs every free-text field of an entry in place; returns what was repaired (empty, and
    /// no copy made, when nothing was wrong: the common case).
    public static func repair(_ entry: inout [RawField], maxBytes: Int) -> [Repaired] {
        var out: [Repaired] = []
        for i in entry.indices where isFreeText(entry[i].name) {
            guard let (value, repairs) = repaired(entry[i].value, maxBytes: maxBytes) else { continue }
            entry[i].value = value
            out.append(Repaired(field: String(decoding: entry[i].name, as: UTF8.self), repairs: repairs))
        }
        return out
    }

    /// The repaired value and what was repaired, or nil when `bytes` is fine as it is.
    public static func repaired(_ bytes: [UInt8], maxBytes: Int) -> ([UInt8], [Repair])? {
        let problem = bytes.withUnsafeBufferPointer(UTF8Scanner.textProblem)
        if problem == nil, bytes.count <= maxBytes, !mayHoldBidi(bytes) { return nil }
        var repairs: Set<Repair> = []
        let text: String
        if let valid = String(validating: bytes, as: UTF8.self) {
            text = valid
        } else {
            text = String(decoding: bytes, as: UTF8.self)  // each ill-formed sequence becomes U+FFFD
            repairs.insert(.invalidUTF8)
        }
        var scalars = String.UnicodeScalarView()
        for s in text.unicodeScalars {
            if s.value != 0x09, UTF8Scanner.isControl(s.value) {
                repairs.insert(.control)
            } else if isBidiControl(s.value) {
                repairs.insert(.bidi)
            } else {
                scalars.append(s)
            }
        }
        var result = String(scalars)
        if result.utf8.count > maxBytes {
            result = trimmed(result, toBytes: maxBytes)
            repairs.insert(.trimmed)
        }
        guard !repairs.isEmpty else { return nil }
        return (Array(result.utf8), repairs.sorted())
    }

    /// `text` cut at a Unicode scalar boundary to at most `maxBytes` bytes of UTF-8, ending with
    /// an ellipsis (U+2026) when anything was cut; unchanged when it fits.
    public static func trimmed(_ text: String, toBytes maxBytes: Int) -> String {
        guard text.utf8.count > maxBytes else { return text }
        let ellipsis = "\u{2026}"
        let room = maxBytes - ellipsis.utf8.count
        guard room > 0 else { return String(ellipsis.prefix(maxBytes > 0 ? 1 : 0)) }
        var kept = String.UnicodeScalarView()
        var used = 0
        for s in text.unicodeScalars {
            let n = UTF8.width(s)
            if used + n > room { break }
            kept.append(s)
            used += n
        }
        while let last = kept.last, last.properties.isWhitespace { kept.removeLast() }
        return String(kept) + ellipsis
    }

    /// U+202A…U+202E (embeddings, overrides, pop) and U+2066…U+2069 (isolates): what can make
    /// text display in another order than it is stored (CVE-2021-42574).
    @inline(__always)
    static func isBidiControl(_ v: UInt32) -> Bool { (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) }

    /// A quick look for the lead bytes of those characters (E2 80 AA–AE, E2 81 A6–A9).
    @inline(__always)
    static func mayHoldBidi(_ b: [UInt8]) -> Bool {
        var i = 0
        while i + 2 < b.count {
            if b[i] == 0xE2, (b[i + 1] == 0x80 && (0xAA...0xAE).contains(b[i + 2]) || b[i + 1] == 0x81 && (0xA6...0xA9).contains(b[i + 2])) {
                return true
            }
            i += 1
        }
        return false
    }

    /// The free-text values of an entry (after `repair`), as strings: what a content-state's
    /// strings are compared with when a merged state must shed bytes (`fit`).
    public static func values(of entry: [RawField]) -> [String] {
        entry.compactMap { f in isFreeText(f.name) && !f.value.isEmpty ? String(decoding: f.value, as: UTF8.self) : nil }
    }

    /// `state` with its free-text strings (those equal to one of `freeText`, at any depth)
    /// trimmed, the longest first, until at least `excess` bytes are shed; nil when that can't
    /// be done (no free text, or not enough of it).
    public static func fit(_ state: [String: JSONValue], freeText: [String], shedding excess: Int) -> [String: JSONValue]? {
        guard excess > 0 else { return state }
        let candidates = Set(freeText)
        // Each free-text string of the state and how many places it stands in: its encoded
        // length counts once per place.
        var occurrences: [String: Int] = [:]
        func count(_ v: JSONValue) {
            switch v {
            case .string(let s) where candidates.contains(s): occurrences[s, default: 0] += 1
            case .object(let o): o.values.forEach(count)
            case .array(let a): a.forEach(count)
            default: break
            }
        }
        state.values.forEach(count)
        guard !occurrences.isEmpty else { return nil }
        // Shedding from the longest first, each cut to the next one's length (never below a few characters).
        let lengths = Dictionary(uniqueKeysWithValues: occurrences.keys.map { ($0, $0.utf8.count) })
        var target = lengths
        var shed = 0
        let floor = 16
        while shed < excess {
            guard let (longest, n) = target.max(by: { $0.value < $1.value || ($0.value == $1.value && $0.key > $1.key) }), n > floor else { return nil }
            let next = max(floor, target.values.filter { $0 < n }.max() ?? floor)
            let per = occurrences[longest] ?? 1
            let want = (excess - shed + per - 1) / per
            let to = max(next, n - want)
            target[longest] = to
            shed += (n - to) * per
        }
        var replacement: [String: String] = [:]
        for (s, n) in target where n < lengths[s]! { replacement[s] = trimmed(s, toBytes: n) }
        func apply(_ v: JSONValue) -> JSONValue {
            switch v {
            case .string(let s): return replacement[s].map(JSONValue.string) ?? v
            case .object(let o): return .object(o.mapValues(apply))
            case .array(let a): return .array(a.map(apply))
            default: return v
            }
        }
        return state.mapValues(apply)
    }
}
