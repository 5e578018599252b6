import ActivityCastCore

/// The compiled routes of one feed: what each of its event types sends (docs/routes.md).
///
/// Built once from a route file's YAML (`init(yaml:file:feed:)`, which checks everything it can);
/// `plan(entry:fields:)` then runs per feed event without YAML, regular expressions or name lookups
/// beyond a few byte comparisons.
public struct Routes: Sendable {
    /// The feed these routes are for.
    public let feed: StreamKind
    /// The file name errors are reported against (`sports.yaml`, `<built-in sports>`).
    public let file: String
    /// The storage policy of every key's broadcast channel (`storage-policy`).
    public let storagePolicy: ChannelStoragePolicy
    /// How `date` values are written (`date-encoding`).
    public let dateEncoding: DateEncoding
    let types: [String: CompiledType]

    init(feed: StreamKind, file: String, storagePolicy: ChannelStoragePolicy, dateEncoding: DateEncoding,
         types: [String: CompiledType]) {
        self.feed = feed
        self.file = file
        self.storagePolicy = storagePolicy
        self.dateEncoding = dateEncoding
        self.types = types
    }

    /// Compiles a route file; throws its first problem as `file:line:column: reason`.
    public init(yaml: String, file: String, feed: StreamKind) throws(RouteError) {
        guard feed != .registrations else {
            throw RouteError(location: nil, reason: "registrations have no routes; a route file is for sports or transit")
        }
        self = try RouteFileParser(file: file, feed: feed, yaml: yaml).parse()
    }

    /// The event types that have a route, sorted; any other type of the feed is routed to nothing.
    public var routedTypes: [String] { types.keys.sorted() }

    /// What the event sends: nil for a type routed to nothing (and for registrations and other
    /// feeds' types); an error only when the fields are not what the decoder would have accepted
    /// (a value that doesn't parse, or no field for the activity key).
    ///
    /// - Parameters:
    ///   - entry: the decoded entry (its type and `ts`).
    ///   - fields: the same entry's raw fields, as validated by the decoder; `x-…` and unknown
    ///     names are ignored, an empty value counts as absent.
    public func plan(entry: DecodedEntry, fields: [RawField]) -> Result<Plan?, RouteError> {
        guard let type = types[entry.type] else { return .success(nil) }
        return withUnsafeTemporaryAllocation(of: Int.self, capacity: max(type.table.count, 1)) { index in
            let values = FieldValues(fields: fields, table: type.table, index: index, timestampMillis: entry.timestampMillis)
            return type.select(values).plan(values, storagePolicy: storagePolicy)
        }
    }
}

extension Routes {
    /// The activity key an entry of `type` with `fields` would have, from its route's key
    /// alternatives alone (nothing else of the entry need be valid): where a dead-lettered
    /// entry is put on its key's trail. nil for a type routed to nothing or without the field.
    public func key(type: String, fields: [RawField]) -> ActivityKey? {
        guard let compiled = types[type] else { return nil }
        return withUnsafeTemporaryAllocation(of: Int.self, capacity: max(compiled.table.count, 1)) { index in
            let values = FieldValues(fields: fields, table: compiled.table, index: index, timestampMillis: 0)
            return compiled.select(values).keys.first { values.present.contains($0.slot) }.map {
                ActivityKey(kind: $0.kind, id: String(decoding: values.bytes($0.slot), as: UTF8.self))
            }
        }
    }
}

/// The routes of both feeds, as a worker holds them.
public struct RouteSet: Sendable {
    public var sports: Routes
    public var transit: Routes

    public init(sports: Routes, transit: Routes) {
        precondition(sports.feed == .sports && transit.feed == .transit, "routes for the wrong feed")
        self.sports = sports
        self.transit = transit
    }

    /// The routes built into the binary (`ShippedRoutes`), which reproduce the planner's plans.
    public static let shipped = RouteSet(sports: ShippedRoutes.compiled(.sports), transit: ShippedRoutes.compiled(.transit))

    /// The routes of a feed; nil for registrations.
    public func routes(for feed: StreamKind) -> Routes? {
        switch feed {
        case .sports: sports
        case .transit: transit
        case .registrations: nil
        }
    }

    /// The key of a feed's entry by its type and raw fields (`Routes.key(type:fields:)`).
    public func key(feed: StreamKind, type: String, fields: [RawField]) -> ActivityKey? {
        routes(for: feed)?.key(type: type, fields: fields)
    }

    /// The plan for a decoded feed event (see `Routes.plan(entry:fields:)`); nil for registrations.
    public func plan(entry: DecodedEntry, fields: [RawField]) -> Result<Plan?, RouteError> {
        switch entry.body {
        case .sports: sports.plan(entry: entry, fields: fields)
        case .transit: transit.plan(entry: entry, fields: fields)
        case .registration: .success(nil)
        }
    }
}
