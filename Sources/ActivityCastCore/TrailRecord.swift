/// One record of an activity key's trail, `<prefix>:{key}:trail` (a capped stream, docs/schema.md,
/// "Trails"): what the workers decided and sent for the key, written as it happens — what is about
/// to go is written before it goes, so a push whose answer never came shows as sent with its fate
/// unknown. A record is a kind (`k`) and a few short fields; the stream entry's id is when it was
/// written, and orders the key's records across workers.
public struct TrailRecord: Equatable, Sendable {
    public enum Kind: String, Sendable, CaseIterable {
        /// A feed entry of the key: what the merge did, each audience's decision, what goes.
        case event = "ev"
        /// One broadcast attempt's answer.
        case broadcast = "bc"
        /// A fan-out created: its audience's priorities.
        case fanout = "fo"
        /// A slice of a fan-out ended: what its tokens got.
        case slice = "sl"
        /// Tokens whose outcome differed from their audience's: retried, forgotten, failed, sent quietly.
        case tokens = "tk"
        /// A registration that changed the key's audience.
        case registration = "rg"
        /// Push-to-start: sent, skipped, over budget.
        case start = "st"
        /// A coalesced state flushed (or not).
        case flush = "fl"
        /// Newly registered tokens sent the key's current state.
        case catchUp = "cu"
    }

    public var kind: Kind
    public var fields: [String: String]

    /// The longest value kept (bytes of UTF-8, cut at a character), and the most fields: a record
    /// stays small whatever an event carries.
    public static let valueLimit = 400
    public static let fieldLimit = 24

    public init(_ kind: Kind, _ fields: [String: String]) {
        self.kind = kind
        self.fields = fields
    }

    /// As stream fields: `k`, then the fields (at most `fieldLimit`), each value cut to `valueLimit`.
    public var streamFields: [String] {
        var out = ["k", kind.rawValue]
        out.reserveCapacity(2 + 2 * min(fields.count, Self.fieldLimit))
        for (name, value) in fields.prefix(Self.fieldLimit) {
            out.append(name)
            out.append(value.utf8.count > Self.valueLimit ? Self.cut(value) : value)
        }
        return out
    }

    /// From a stream entry's fields; nil when it has no known kind.
    public init?(streamFields: [(String, String)]) {
        var map: [String: String] = [:]
        for (name, value) in streamFields { map[name] = value }
        guard let k = map.removeValue(forKey: "k"), let kind = Kind(rawValue: k) else { return nil }
        self.init(kind, map)
    }

    public static func cut(_ value: String) -> String {
        guard value.utf8.count > valueLimit else { return value }
        var out = ""
        for c in value {
            if out.utf8.count + c.utf8.count > valueLimit - 3 { break }
            out.append(c)
        }
        return out + "…"
    }

    /// A list of names in one field, at most `limit` of them, with how many were left out:
    /// `a1 a2 a3 +17`.
    public static func list(_ names: [String], limit: Int = 40) -> String {
        let shown = names.prefix(limit).joined(separator: " ")
        return names.count > limit ? "\(shown) +\(names.count - limit)" : shown
    }

    /// The names of a `list` field, and how many it left out.
    public static func names(_ field: String?) -> (names: [String], more: Int) {
        guard let field, !field.isEmpty else { return ([], 0) }
        var parts = field.split(separator: " ").map(String.init)
        var more = 0
        if let last = parts.last, last.hasPrefix("+"), let n = Int(last.dropFirst()) {
            more = n
            parts.removeLast()
        }
        return (parts, more)
    }
}
