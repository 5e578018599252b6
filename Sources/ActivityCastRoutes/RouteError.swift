/// Why a route file was rejected, or why an event could not be routed: one line, precise.
///
/// A file problem names where it is, as compilers do: `sports.yaml:42:17: match.score: unknown
/// field 'home_scor' for match.score (did you mean home_score?)`. An evaluation problem (an entry
/// whose fields were not validated by the decoder) has no location.
public struct RouteError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A position in a route file; line and column count from 1 (columns in Unicode scalars).
    public struct Location: Equatable, Sendable, CustomStringConvertible {
        public var file: String
        public var line: Int
        public var column: Int
        public init(file: String, line: Int, column: Int) {
            self.file = file; self.line = line; self.column = column
        }
        /// The file name is escaped: it may come from a setting.
        public var description: String { "\(shown(file, limit: 200)):\(line):\(column)" }
    }

    public var location: Location?
    /// What is wrong, without the location.
    public var reason: String

    public init(location: Location?, reason: String) {
        self.location = location
        self.reason = reason
    }

    /// `file:line:column: reason`, or only the reason when there is no location.
    public var description: String {
        location.map { "\($0): \(reason)" } ?? reason
    }
}

/// Text from a route file or an entry, made safe for a one-line reason: controls, line separators
/// and invisible formatting characters escaped, backslashes doubled, cut at `limit` scalars.
func shown(_ text: String, limit: Int = 60) -> String {
    var out = ""
    var count = 0
    for scalar in text.unicodeScalars {
        if count == limit { return out + "…" }
        count += 1
        switch scalar.value {
        case 0x5C: out += "\\\\"
        case 0x0A: out += "\\n"
        case 0x0D: out += "\\r"
        case 0x09: out += "\\t"
        case 0x00...0x1F, 0x7F...0x9F, 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x2069, 0xFEFF:
            out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
        default:
            out.unicodeScalars.append(scalar)
        }
    }
    return out
}

/// Levenshtein distance, for "did you mean" hints on misspelt keys, types and fields.
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a.unicodeScalars), b = Array(b.unicodeScalars)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var row = Array(0...b.count)
    for i in 1...a.count {
        var previous = row[0]
        row[0] = i
        for j in 1...b.count {
            let current = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
            previous = current
        }
    }
    return row[b.count]
}

/// ` (did you mean X?)` when one of `candidates` is close to `name` (one edit per three characters,
/// at most two, so that short words don't draw unrelated hints), else empty.
func suggestion(for name: String, among candidates: [String]) -> String {
    let limit = min(2, max(1, name.count / 3))
    let scored = candidates.map { ($0, editDistance($0, name)) }.filter { $0.1 <= limit }
    guard let best = scored.min(by: { $0.1 < $1.1 }) else { return "" }
    return " (did you mean \(best.0)?)"
}
