import ActivityCastCore

/// How the dates of a content-state are written. A `Date` in an app's `ContentState`, decoded by a
/// default `JSONDecoder` as APNs requires, is seconds since 2001-01-01; an app that decodes its
/// dates as Unix seconds (`.secondsSince1970`), or keeps a plain number, says so.
public enum DateEncoding: String, Sendable, CaseIterable {
    /// Seconds since 2001-01-01 00:00 UTC (a default `JSONDecoder`): Unix seconds − 978307200.
    case since2001 = "since-2001"
    /// Seconds since 1970-01-01 00:00 UTC.
    case unixSeconds = "unix-seconds"

    /// Seconds between 1970-01-01 and 2001-01-01.
    static let referenceDateOffsetSeconds = 978_307_200.0

    var offsetSeconds: Double {
        switch self {
        case .since2001: Self.referenceDateOffsetSeconds
        case .unixSeconds: 0
        }
    }
}

/// One value of a content-state or of the attributes, compiled from `TYPE SOURCE [?? FALLBACK]`
/// (`int home_score`, `string "postponed"`, `string severity ?? "info"`, `date eta`) or from a
/// nested mapping (an object).
indirect enum ValueSpec: Sendable {
    enum Conversion: Sendable {
        case int, double, string, bool
        /// Unix milliseconds → seconds since the epoch given by the offset.
        case date(offsetSeconds: Double)
        /// Unix milliseconds → whole seconds from the event's time, rounded, never negative.
        case secondsUntil
    }

    case constant(JSONValue)
    /// A field's value; absent: the fallback, or nothing (the key is left out).
    case field(slot: Int, Conversion, fallback: JSONValue?)
    /// An object; left out when none of its members has a value.
    case object([(key: String, value: ValueSpec)])

    /// The value, nil when it is left out.
    func evaluate(_ values: FieldValues) -> Result<JSONValue?, RouteError> {
        switch self {
        case .constant(let value):
            return .success(value)
        case let .field(slot, conversion, fallback):
            guard values.present.contains(slot) else { return .success(fallback) }
            switch conversion {
            case .int:
                return values.integer(slot).map { .int($0) }
            case .double:
                return values.double(slot).map { .double($0) }
            case .string:
                return values.text(slot).map { .string($0) }
            case .bool:
                let b = values.bytes(slot)
                if b == Array("true".utf8) || b == [UInt8(ascii: "1")] { return .success(.bool(true)) }
                if b == Array("false".utf8) || b == [UInt8(ascii: "0")] { return .success(.bool(false)) }
                return .failure(values.notA("a boolean", slot))
            case .date(let offset):
                // The same arithmetic as the planner's `etaDate`, so both give the same double.
                return values.integer(slot).map { .double(Double($0) / 1000 - offset) }
            case .secondsUntil:
                return values.integer(slot).map { millis in
                    let remaining = max(0, millis &- values.timestampMillis)
                    return .int((remaining + 500) / 1000)
                }
            }
        case .object(let members):
            var object: [String: JSONValue] = [:]
            for member in members {
                switch member.value.evaluate(values) {
                case .success(let value?): object[member.key] = value
                case .success(nil): continue
                case .failure(let error): return .failure(error)
                }
            }
            return .success(object.isEmpty ? nil : .object(object))
        }
    }

    /// The members of a content-state or attributes mapping, evaluated into a dictionary.
    static func evaluate(_ members: [(key: String, value: ValueSpec)], _ values: FieldValues)
        -> Result<[String: JSONValue], RouteError> {
        var out: [String: JSONValue] = [:]
        out.reserveCapacity(members.count)
        for member in members {
            switch member.value.evaluate(values) {
            case .success(let value?): out[member.key] = value
            case .success(nil): continue
            case .failure(let error): return .failure(error)
            }
        }
        return .success(out)
    }
}

// MARK: - The `TYPE SOURCE [?? FALLBACK]` syntax

extension ValueSpec {
    /// The value types a content-state key can have.
    enum TypeName: String, CaseIterable {
        case int, double, string, bool, date
        case dateSince2001 = "date-since-2001"
        case dateUnixSeconds = "date-unix-seconds"
        case secondsUntil = "seconds-until"
    }

    struct SyntaxError: Error {
        var reason: String
    }

    /// Compiles `TYPE SOURCE [?? FALLBACK]` against the fields of `table`; `dates` is the file's
    /// encoding for `date`.
    static func compile(_ text: String, table: FieldTable, dates: DateEncoding) throws(SyntaxError) -> ValueSpec {
        var scanner = Scanner(text)
        let typeWord = scanner.word()
        guard !typeWord.isEmpty else {
            throw SyntaxError(reason: "empty value; a value is TYPE SOURCE (such as int home_score or string \"ended\") or a mapping")
        }
        guard let type = TypeName(rawValue: typeWord) else {
            let known = TypeName.allCases.map(\.rawValue)
            throw SyntaxError(reason: "unknown value type '\(shown(typeWord))'\(suggestion(for: typeWord, among: known)); "
                + "a value is TYPE SOURCE with TYPE one of \(known.joined(separator: ", ")), or a nested mapping")
        }
        scanner.skipSpaces()
        guard !scanner.atEnd else {
            throw SyntaxError(reason: "'\(type.rawValue)' needs a source: a field of \(table.type.name) or a constant")
        }
        let source = try scanner.operand()
        scanner.skipSpaces()
        var fallbackText: Operand?
        if !scanner.atEnd {
            guard scanner.take("??") else {
                throw SyntaxError(reason: "unexpected '\(shown(scanner.rest))' after the source (only '?? FALLBACK' may follow)")
            }
            scanner.skipSpaces()
            guard !scanner.atEnd else { throw SyntaxError(reason: "'??' needs a constant after it") }
            fallbackText = try scanner.operand()
            scanner.skipSpaces()
            guard scanner.atEnd else { throw SyntaxError(reason: "unexpected '\(shown(scanner.rest))' after the fallback") }
        }

        switch source {
        case .name(let name):
            guard let slot = table.slot(named: name) else {
                // A word that is no field anywhere, after `string`, was most likely meant as text.
                let anyField = EntrySchema.types.contains { $0.field(named: name) != nil }
                if !anyField, suggestion(for: name, among: table.type.fields.map(\.name)).isEmpty {
                    if type == .string {
                        throw SyntaxError(reason: "unknown field '\(shown(name))' for \(table.type.name) "
                            + "(a text constant is quoted: string \"\(shown(name))\")")
                    }
                    if type == .bool {
                        throw SyntaxError(reason: "unknown field '\(shown(name))' for \(table.type.name) "
                            + "(a bool constant is true or false)")
                    }
                }
                throw SyntaxError(reason: table.unknownField(name))
            }
            let conversion = try Self.conversion(type, field: table.type.fields[slot], dates: dates)
            var fallback: JSONValue?
            if let fallbackText {
                guard case .name = fallbackText else {
                    fallback = try constant(fallbackText, as: type, role: "the fallback")
                    return .field(slot: slot, conversion, fallback: fallback)
                }
                throw SyntaxError(reason: "the fallback after '??' must be a constant, not a field")
            }
            return .field(slot: slot, conversion, fallback: fallback)
        default:
            guard fallbackText == nil else { throw SyntaxError(reason: "a constant needs no fallback ('??')") }
            return .constant(try constant(source, as: type, role: "the constant"))
        }
    }

    private static func conversion(_ type: TypeName, field: EntrySchema.FieldInfo, dates: DateEncoding)
        throws(SyntaxError) -> Conversion {
        let kind = field.kind
        func refuse(_ advice: String) -> SyntaxError {
            SyntaxError(reason: "\(type.rawValue) can't hold field '\(field.name)' (\(describe(kind))); \(advice)")
        }
        switch type {
        case .string:
            return .string
        case .int:
            switch kind {
            case .integer, .millis: return .int
            case .decimal: throw refuse("use double")
            default: throw refuse("use string")
            }
        case .double:
            switch kind {
            case .integer, .millis, .decimal: return .double
            default: throw refuse("use string")
            }
        case .bool:
            guard case .bool = kind else { throw refuse("use string") }
            return .bool
        case .date, .dateSince2001, .dateUnixSeconds, .secondsUntil:
            guard case .millis = kind else { throw refuse("\(type.rawValue) needs a time in Unix ms such as ts, kickoff or eta") }
            switch type {
            case .date: return .date(offsetSeconds: dates.offsetSeconds)
            case .dateSince2001: return .date(offsetSeconds: DateEncoding.since2001.offsetSeconds)
            case .dateUnixSeconds: return .date(offsetSeconds: DateEncoding.unixSeconds.offsetSeconds)
            default: return .secondsUntil
            }
        }
    }

    static func describe(_ kind: EntrySchema.ValueKind) -> String {
        switch kind {
        case .identifier: "an identifier"
        case .text: "free text"
        case .integer: "an integer"
        case .millis: "a time in Unix ms"
        case .decimal: "a decimal"
        case .choice(let values): "one of " + values.joined(separator: ", ")
        case .bool: "a boolean"
        case .activityKey: "an activity key"
        case .followTarget: "a follow target"
        case .hexToken: "a token"
        case .typeName: "a type name"
        }
    }

    private static func constant(_ operand: Operand, as type: TypeName, role: String) throws(SyntaxError) -> JSONValue {
        switch (type, operand) {
        case (.string, .quoted(let text)): return .string(text)
        case (.int, .number(let text)):
            guard let value = Int64(text) else { throw SyntaxError(reason: "\(role) of an int must be a whole number, got '\(shown(text))'") }
            return .int(value)
        case (.double, .number(let text)):
            guard let value = Double(text), value.isFinite else {
                throw SyntaxError(reason: "\(role) of a double must be a number, got '\(shown(text))'")
            }
            return .double(value)
        case (.bool, .bool(let value)): return .bool(value)
        case (.date, _), (.dateSince2001, _), (.dateUnixSeconds, _), (.secondsUntil, _):
            throw SyntaxError(reason: "\(type.rawValue) takes a field, not a constant")
        case (.string, _):
            throw SyntaxError(reason: "\(role) of a string must be quoted: \"text\"")
        case (.int, _):
            throw SyntaxError(reason: "\(role) of an int must be a whole number such as 0")
        case (.double, _):
            throw SyntaxError(reason: "\(role) of a double must be a number such as 0.5")
        case (.bool, _):
            throw SyntaxError(reason: "\(role) of a bool must be true or false")
        }
    }

    /// A source or fallback: a field name, a quoted text, a number, or `true`/`false`.
    enum Operand: Equatable {
        case name(String)
        case quoted(String)
        case number(String)
        case bool(Bool)
    }

    /// A tiny scanner over the characters of a value.
    struct Scanner {
        let chars: [Character]
        var i = 0
        init(_ text: String) { chars = Array(text) }

        var atEnd: Bool { i >= chars.count }
        var rest: String { String(chars[i...]) }

        mutating func skipSpaces() { while i < chars.count, chars[i] == " " || chars[i] == "\t" { i += 1 } }

        mutating func word() -> String {
            skipSpaces()
            let start = i
            while i < chars.count, chars[i] != " ", chars[i] != "\t" { i += 1 }
            return String(chars[start..<i])
        }

        mutating func take(_ token: String) -> Bool {
            let t = Array(token)
            guard i + t.count <= chars.count, Array(chars[i..<(i + t.count)]) == t else { return false }
            i += t.count
            return true
        }

        mutating func operand() throws(SyntaxError) -> Operand {
            if chars[i] == "\"" {
                var text = ""
                i += 1
                while i < chars.count {
                    let c = chars[i]
                    if c == "\\" {
                        guard i + 1 < chars.count, chars[i + 1] == "\"" || chars[i + 1] == "\\" else {
                            throw SyntaxError(reason: "in a quoted constant, '\\' may only precede '\"' or '\\'")
                        }
                        text.append(chars[i + 1])
                        i += 2
                    } else if c == "\"" {
                        i += 1
                        return .quoted(text)
                    } else {
                        text.append(c)
                        i += 1
                    }
                }
                throw SyntaxError(reason: "the quoted constant is not closed with '\"'")
            }
            let word = self.word()
            if word == "true" || word == "false" { return .bool(word == "true") }
            if let first = word.unicodeScalars.first, first == "-" || first == "+" || first == "." || ("0"..."9").contains(first) {
                return .number(word)
            }
            return .name(word)
        }
    }
}
