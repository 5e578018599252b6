/// Typed access to the fields of one entry whose names, presence and text have already been checked
/// by `EntryDecoder`. Each accessor parses one value and throws the schema's reason if it is invalid.
struct FieldReader {
    let fields: [RawField]
    /// For each `Field` (by raw value), the index of its field in `fields`, or -1.
    let slots: UnsafeBufferPointer<Int>
    let type: EntryType

    static let maxMillis: UInt64 = 1 << 53
    static let millisExpectation = "an integer 1-9007199254740992 (Unix ms)"
    static let identifierExpectation = "an identifier (1-128 of A-Z a-z 0-9 . _ -)"
    static let clockMaxBytes = 16
    static let maxDelaySeconds: Int64 = 86_400

    /// Runs `body` on the bytes of `field` where they are (no copy, no reference counting); nil if
    /// the field is absent or empty, since an empty optional field counts as not given.
    @inline(__always)
    func withBytes<R>(_ field: Field, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        let slot = slots[Int(field.rawValue)]
        guard slot >= 0 else { return nil }
        return fields[slot].value.withUnsafeBufferPointer { $0.isEmpty ? nil : body($0) }
    }

    /// A copy of the value of `field`, for quoting it in a reason.
    func value(_ field: Field) -> [UInt8] {
        let slot = slots[Int(field.rawValue)]
        return slot >= 0 ? fields[slot].value : []
    }

    /// Parses an optional field with `parse`; nil if absent, the reason `must be <expectation>` if
    /// `parse` rejects it.
    @inline(__always)
    func optional<T>(_ field: Field, _ expectation: @autoclosure () -> String,
                     _ parse: (UnsafeBufferPointer<UInt8>) -> T?) throws(DecodeError) -> T? {
        switch withBytes(field, parse) {
        case nil: return nil
        case .some(nil): throw .invalid(field, mustBe: expectation(), got: value(field))
        case .some(let parsed?): return parsed
        }
    }

    /// Parses a required field. Presence and non-emptiness were checked before any value was parsed,
    /// so "missing" here only means a type's `required` set forgot the field.
    @inline(__always)
    func required<T>(_ field: Field, _ expectation: @autoclosure () -> String,
                     _ parse: (UnsafeBufferPointer<UInt8>) -> T?) throws(DecodeError) -> T {
        guard let parsed = withBytes(field, parse) else { throw .missing(field, for: type) }
        guard let parsed else { throw .invalid(field, mustBe: expectation(), got: value(field)) }
        return parsed
    }

    // MARK: Text and identifiers

    private static func string(_ b: UnsafeBufferPointer<UInt8>) -> String { String(decoding: b, as: UTF8.self) }

    private static func identifier(_ b: UnsafeBufferPointer<UInt8>) -> String? {
        ValueParsing.isIdentifier(b) ? string(b) : nil
    }

    func identifier(_ field: Field) throws(DecodeError) -> String {
        try required(field, Self.identifierExpectation, Self.identifier)
    }

    func optionalIdentifier(_ field: Field) throws(DecodeError) -> String? {
        try optional(field, Self.identifierExpectation, Self.identifier)
    }

    /// Free text; the text rule (UTF-8, no control characters) was checked for every field already.
    func text(_ field: Field) throws(DecodeError) -> String {
        guard let text = optionalText(field) else { throw .missing(field, for: type) }
        return text
    }

    func optionalText(_ field: Field) -> String? {
        withBytes(field, Self.string)
    }

    /// Free text up to 16 bytes (`67'`, `45+2'`).
    func optionalClock() throws(DecodeError) -> String? {
        guard let clock = optionalText(.clock) else { return nil }
        guard clock.utf8.count <= Self.clockMaxBytes else {
            throw .tooLong(.clock, clock.utf8.count, max: Self.clockMaxBytes)
        }
        return clock
    }

    func requiredClock() throws(DecodeError) -> String {
        guard let clock = try optionalClock() else { throw .missing(.clock, for: type) }
        return clock
    }

    // MARK: Numbers

    private static func millis(_ b: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard let value = ValueParsing.unsigned(b, max: maxMillis), value >= 1 else { return nil }
        return Int64(value)
    }

    /// Values that are plainly Unix *seconds* (2001-09-09 … 5138): as milliseconds they would fall
    /// between 1970-01-12 and 1973-03-03, which no real event has. Accepting them would not fail
    /// loudly: every such entry would be ordered before everything else and ignored as stale.
    /// Smaller values stay valid (they sort before every real time, and tests use them).
    static let secondsLookalike: ClosedRange<Int64> = 1_000_000_000...99_999_999_999

    /// A Unix time in milliseconds, 1…2^53 (`ts`, `kickoff`, `eta`), not one that looks like seconds.
    func millis(_ field: Field) throws(DecodeError) -> Int64 {
        try notSeconds(field, try required(field, Self.millisExpectation, Self.millis))
    }

    func optionalMillis(_ field: Field) throws(DecodeError) -> Int64? {
        guard let value = try optional(field, Self.millisExpectation, Self.millis) else { return nil }
        return try notSeconds(field, value)
    }

    @inline(__always)
    private func notSeconds(_ field: Field, _ value: Int64) throws(DecodeError) -> Int64 {
        guard !Self.secondsLookalike.contains(value) else {
            throw .looksLikeSeconds(field, got: self.value(field), asMillis: value * 1000)
        }
        return value
    }

    private static func scoreValue(_ b: UnsafeBufferPointer<UInt8>) -> Int? {
        ValueParsing.unsigned(b, max: 999).map { Int($0) }
    }

    func score() throws(DecodeError) -> Score {
        Score(home: try required(.homeScore, "an integer 0-999", Self.scoreValue),
              away: try required(.awayScore, "an integer 0-999", Self.scoreValue))
    }

    /// `home_score` and `away_score` where both are optional: both or neither.
    func optionalScore() throws(DecodeError) -> Score? {
        let home = try optional(.homeScore, "an integer 0-999", Self.scoreValue)
        let away = try optional(.awayScore, "an integer 0-999", Self.scoreValue)
        switch (home, away) {
        case let (home?, away?): return Score(home: home, away: away)
        case (nil, nil): return nil
        case (_?, nil): throw .missing(.awayScore, for: type, " with 'home_score'")
        case (nil, _?): throw .missing(.homeScore, for: type, " with 'away_score'")
        }
    }

    func optionalDelaySeconds() throws(DecodeError) -> Int? {
        let max = Self.maxDelaySeconds
        return try optional(.delay, "an integer from -\(max) to \(max) (seconds)") { b in
            ValueParsing.signed(b, min: -max, max: max).map { Int($0) }
        }
    }

    /// A decimal in `-limit...limit` (`lat`, `lon`).
    func coordinate(_ field: Field, limit: Double) throws(DecodeError) -> Double {
        try required(field, "a decimal from -\(Int(limit)) to \(Int(limit))") { b in
            guard let value = ValueParsing.decimal(b), value >= -limit, value <= limit else { return nil }
            return value
        }
    }

    func optionalBool(_ field: Field) throws(DecodeError) -> Bool? {
        try optional(field, "true, false, 1 or 0", ValueParsing.bool)
    }

    // MARK: Choices

    /// Every raw value of the schema's choices fits a small (inline, unallocated) `String`, so
    /// matching through `init(rawValue:)` costs no allocation; longer values can't match anyway.
    /// Only ASCII is tried because `String` equality is canonical equivalence, under which some
    /// non-ASCII characters equal ASCII ones (U+212A KELVIN SIGN is "K"); the match must be byte-exact.
    private static func choice<E: RawRepresentable & CaseIterable>(_: E.Type) -> (UnsafeBufferPointer<UInt8>) -> E?
    where E.RawValue == String {
        { b in b.count <= 15 && b.allSatisfy({ $0 < 0x80 }) ? E(rawValue: string(b)) : nil }
    }

    private static func choices<E: RawRepresentable & CaseIterable>(_: E.Type) -> String where E.RawValue == String {
        "one of " + E.allCases.map(\.rawValue).joined(separator: ", ")
    }

    func choice<E: RawRepresentable & CaseIterable>(_ field: Field, _ type: E.Type) throws(DecodeError) -> E
    where E.RawValue == String {
        try required(field, Self.choices(E.self), Self.choice(E.self))
    }

    func optionalChoice<E: RawRepresentable & CaseIterable>(_ field: Field, _ type: E.Type) throws(DecodeError) -> E?
    where E.RawValue == String {
        try optional(field, Self.choices(E.self), Self.choice(E.self))
    }

    // MARK: Registration values

    static let tokenMinDigits = 32
    static let tokenMaxDigits = 512

    /// A push token: hex, an even number of digits, 32–512 of them; returned lowercase.
    func token() throws(DecodeError) -> String {
        guard let (hex, count) = withBytes(.token, { (ValueParsing.lowercaseHex($0), $0.count) }) else {
            throw .missing(.token, for: type)
        }
        guard let hex else { throw .invalid(.token, mustBe: "hex digits", got: value(.token)) }
        guard count >= Self.tokenMinDigits, count <= Self.tokenMaxDigits else {
            throw .invalid(.token, mustBe: "\(Self.tokenMinDigits)-\(Self.tokenMaxDigits) hex digits", gotCount: count)
        }
        guard count % 2 == 0 else {
            throw .invalid(.token, mustBe: "an even number of hex digits", gotCount: count)
        }
        return hex
    }

    /// `<kind>:<id>` where the kind is one of `Kind`'s cases and the id an identifier.
    private static func prefixed<Kind: RawRepresentable & CaseIterable>(_ b: UnsafeBufferPointer<UInt8>, _: Kind.Type)
        -> (Kind, String)? where Kind.RawValue == String {
        guard let colon = b.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let kindBytes = UnsafeBufferPointer(rebasing: b[..<colon])
        let idBytes = UnsafeBufferPointer(rebasing: b[(colon + 1)...])
        guard let kind = choice(Kind.self)(kindBytes), let id = identifier(idBytes) else { return nil }
        return (kind, id)
    }

    private static let keyExpectation =
        "match:<id>, trip:<id> or route:<id> (id: 1-128 of A-Z a-z 0-9 . _ -)"

    private static func activityKey(_ b: UnsafeBufferPointer<UInt8>) -> ActivityKey? {
        prefixed(b, ActivityKey.Kind.self).map { ActivityKey(kind: $0.0, id: $0.1) }
    }

    func activityKey() throws(DecodeError) -> ActivityKey {
        try required(.key, Self.keyExpectation, Self.activityKey)
    }

    func optionalActivityKey() throws(DecodeError) -> ActivityKey? {
        try optional(.key, Self.keyExpectation, Self.activityKey)
    }

    func followTarget() throws(DecodeError) -> FollowTarget {
        try required(.target, "team:<id> or route:<id> (id: 1-128 of A-Z a-z 0-9 . _ -)") { b in
            Self.prefixed(b, FollowTarget.Kind.self).map { FollowTarget(kind: $0.0, id: $0.1) }
        }
    }

    func activityType() throws(DecodeError) -> String {
        try required(.activityType, "a Swift type name (1-128 of A-Z a-z 0-9 _ .)") { b in
            ValueParsing.isSwiftTypeName(b) ? Self.string(b) : nil
        }
    }

    func settings() throws(DecodeError) -> DeviceSettings {
        DeviceSettings(env: try optionalChoice(.env, APNsEnvironment.self),
                       tier: try optionalChoice(.tier, Tier.self),
                       broadcast: try optionalBool(.broadcast))
    }
}
