/// The schema's entry types and their fields as public values, for code outside the decoder that
/// must agree with it: route files (ActivityCastRoutes) name fields, and are checked against this
/// table when they load. It is built from the decoder's own tables (`EntryType`, `Field`), so the
/// two can't drift apart.
public enum EntrySchema {
    /// What a field's value is once the decoder has accepted it.
    public enum ValueKind: Equatable, Sendable {
        /// 1–128 of `A–Z a–z 0–9 . _ -` (`match`, `home`, `trip`, `stop`, …).
        case identifier
        /// Free UTF-8 text (`competition`, `player`, `clock`, `message`, …).
        case text
        /// A decimal integer in the range (`home_score`, `delay`); `delay` may be negative.
        case integer(ClosedRange<Int64>)
        /// Unix milliseconds (`ts`, `kickoff`, `eta`).
        case millis
        /// A decimal `-?digits(.digits)?` in the range (`lat`, `lon`).
        case decimal(ClosedRange<Double>)
        /// One of a fixed set of words (`period`, `moment`, `team`, `severity`, `env`, `tier`).
        case choice([String])
        /// `true`/`false`/`1`/`0` (`broadcast`).
        case bool
        /// `match:<id>`, `trip:<id>` or `route:<id>`.
        case activityKey
        /// `team:<id>` or `route:<id>`.
        case followTarget
        /// Hex digits (`token`).
        case hexToken
        /// A Swift type name (`activity_type`).
        case typeName
    }

    public struct FieldInfo: Equatable, Sendable {
        /// The name on the wire (`home_score`).
        public let name: String
        public let kind: ValueKind
        /// Whether every entry of the type has it (the decoder rejects an entry without it).
        public let required: Bool
    }

    public struct TypeInfo: Equatable, Sendable {
        /// The `type` value on the wire (`match.score`).
        public let name: String
        public let stream: StreamKind
        /// Every field the type defines except `type` itself, `ts` first, then in the order of the
        /// schema's tables.
        public let fields: [FieldInfo]

        public func field(named name: String) -> FieldInfo? { fields.first { $0.name == name } }
    }

    /// Every entry type, in the order of docs/schema.md.
    public static let types: [TypeInfo] = EntryType.allCases.map { type in
        let fields = Field.allCases.filter { $0 != .type && type.allowed.contains($0) }.map { field in
            FieldInfo(name: field.name, kind: field.valueKind, required: type.required.contains(field))
        }
        return TypeInfo(name: type.name, stream: type.stream, fields: fields)
    }

    /// The type with this name, or nil.
    public static func type(named name: String) -> TypeInfo? { types.first { $0.name == name } }

    /// The types of one stream.
    public static func types(of stream: StreamKind) -> [TypeInfo] { types.filter { $0.stream == stream } }
}

extension Field {
    /// The syntax `FieldReader` accepts for this field (docs/schema.md).
    var valueKind: EntrySchema.ValueKind {
        switch self {
        case .type, .competition, .clock, .player, .reason, .headsign, .vehicle, .stopName, .message: .text
        case .ts, .kickoff, .eta, .stateTs: .millis
        case .match, .home, .away, .trip, .route, .nextStop, .stop, .device, .activity: .identifier
        case .homeScore, .awayScore: .integer(0...999)
        case .delay: .integer(-FieldReader.maxDelaySeconds...FieldReader.maxDelaySeconds)
        case .lat: .decimal(-90...90)
        case .lon: .decimal(-180...180)
        case .period: .choice(MatchPeriod.allCases.map(\.rawValue))
        case .moment: .choice(MatchMoment.allCases.map(\.rawValue))
        case .team: .choice(Side.allCases.map(\.rawValue))
        case .severity: .choice(Severity.allCases.map(\.rawValue))
        case .env: .choice(APNsEnvironment.allCases.map(\.rawValue))
        case .tier: .choice(Tier.allCases.map(\.rawValue))
        case .broadcast: .bool
        case .key: .activityKey
        case .target: .followTarget
        case .token: .hexToken
        case .activityType: .typeName
        }
    }
}
