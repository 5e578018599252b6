import ActivityCastCore
import Yams

/// Reads a route file (YAML) into compiled routes, checking everything that can be checked before
/// an event arrives: keys, event types and fields against the decoder's schema, value types,
/// templates, and what APNs requires of each event (docs/routes.md). The first problem found is
/// thrown with its file, line and column.
struct RouteFileParser {
    let file: String
    let feed: StreamKind
    let yaml: String

    static let topKeys = ["feed", "storage-policy", "date-encoding", "defaults", "types"]
    static let defaultsKeys = ["stale-after", "relevance", "dismiss-after"]
    static let routeKeys = ["key", "event", "priority", "content-state", "attributes-type", "attributes", "followers",
                            "alert", "stale-after", "dismiss-after", "relevance", "variant-by", "variants"]
    static let alertKeys = ["title", "body", "title-loc-key", "title-loc-args", "loc-key", "loc-args", "sound"]

    /// An activity is active at most 8 h, so a stale date further out means nothing.
    static let maxStaleAfter: Int64 = 8 * 3600
    /// APNs caps the dismissal date at 4 h after the end.
    static let maxDismissAfter: Int64 = 4 * 3600

    // MARK: Errors

    func fail(_ node: Node?, _ reason: String) -> RouteError {
        fail(at: node?.mark, reason)
    }

    func fail(at mark: Mark?, _ reason: String) -> RouteError {
        fail(line: mark?.line ?? 1, column: mark?.column ?? 1, reason)
    }

    func fail(line: Int, column: Int, _ reason: String) -> RouteError {
        RouteError(location: RouteError.Location(file: file, line: line, column: column), reason: reason)
    }

    // MARK: The file

    func parse() throws(RouteError) -> Routes {
        try checkAliasKeys()
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch let error as YamlError {
            throw yamlError(error)
        } catch {
            throw fail(at: nil, "not valid YAML: \(shown("\(error)", limit: 200))")
        }
        guard let root, root.null == nil else {
            throw fail(at: nil, "the file is empty; a route file needs feed, storage-policy and types")
        }
        try checkExpansion(root)
        guard let top = root.mapping else {
            throw fail(root, "the top level must be a mapping with feed, storage-policy and types")
        }
        let entries = try keyed(top, allowed: Self.topKeys, what: "key")

        guard let feedEntry = entries["feed"] else {
            throw fail(root, "missing 'feed: \(feed.rawValue)' (the feed these routes are for)")
        }
        let feedName = try scalar(feedEntry.value, "feed")
        guard let fileFeed = StreamKind(rawValue: feedName), fileFeed != .registrations else {
            throw fail(feedEntry.value, "feed must be sports or transit, got '\(shown(feedName))'")
        }
        guard fileFeed == feed else {
            throw fail(feedEntry.value, "this file routes the \(fileFeed.rawValue) feed, not \(feed.rawValue)")
        }

        guard let policyEntry = entries["storage-policy"] else {
            throw fail(root, "missing 'storage-policy' (no-storage or latest-message: how the key's broadcast channel "
                + "keeps messages, fixed when it is created)")
        }
        let policy: ChannelStoragePolicy
        switch try scalar(policyEntry.value, "storage-policy") {
        case "no-storage": policy = .noStorage
        case "latest-message": policy = .latestMessage
        case let other:
            throw fail(policyEntry.value, "storage-policy must be no-storage or latest-message, got '\(shown(other))'")
        }

        var dates = DateEncoding.since2001
        if let entry = entries["date-encoding"] {
            let text = try scalar(entry.value, "date-encoding")
            guard let value = DateEncoding(rawValue: text) else {
                throw fail(entry.value, "date-encoding must be since-2001 or unix-seconds, got '\(shown(text))'")
            }
            dates = value
        }

        var defaults = Defaults()
        if let entry = entries["defaults"], entry.value.null == nil {
            guard let mapping = entry.value.mapping else { throw fail(entry.value, "defaults must be a mapping") }
            let values = try keyed(mapping, allowed: Self.defaultsKeys, what: "default")
            if let v = values["stale-after"] { defaults.staleAfter = try staleAfter(v.value, context: "defaults") }
            if let v = values["relevance"] { defaults.relevance = try relevance(v.value, context: "defaults") }
            if let v = values["dismiss-after"] { defaults.dismissAfter = try dismissAfter(v.value, context: "defaults") }
        }

        guard let typesEntry = entries["types"] else {
            throw fail(root, "missing 'types' (the route of each event type)")
        }
        var compiled: [String: CompiledType] = [:]
        if typesEntry.value.null == nil {
            guard let types = typesEntry.value.mapping else {
                throw fail(typesEntry.value, "types must be a mapping from event type to route")
            }
            let known = EntrySchema.types(of: feed)
            for (keyNode, value) in types {
                let name = try scalar(keyNode, "an event type")
                guard let info = known.first(where: { $0.name == name }) else {
                    let names = known.map(\.name)
                    throw fail(keyNode, "unknown event type '\(shown(name))' for the \(feed.rawValue) feed"
                        + "\(suggestion(for: name, among: names)) (known: \(names.joined(separator: ", ")))")
                }
                // `match.clock: ~`: routed to nothing, as if the type were not listed.
                if value.null != nil { continue }
                guard let mapping = value.mapping else {
                    throw fail(value, "\(name): a route must be a mapping (key, event, priority, …) or ~ for nothing")
                }
                compiled[name] = try compileType(mapping, at: keyNode.mark, table: FieldTable(info), defaults: defaults,
                                                 dates: dates)
            }
        }
        return Routes(feed: feed, file: file, storagePolicy: policy, dateEncoding: dates, types: compiled)
    }

    struct Defaults {
        var staleAfter: Int64?
        var relevance: Double?
        var dismissAfter: Int64?
    }

    /// A YAML problem, at the place libyaml found it.
    func yamlError(_ error: YamlError) -> RouteError {
        switch error {
        case let .scanner(context, problem, mark, _), let .parser(context, problem, mark, _),
             let .composer(context, problem, mark, _):
            let while_ = context.map { " (\(shown($0.text)) at line \($0.mark.line), column \($0.mark.column))" } ?? ""
            return fail(at: mark, "not valid YAML: \(shown(problem))\(while_)")
        case let .reader(problem, offset, _, yaml):
            guard let offset else { return fail(at: nil, "not valid YAML: \(shown(problem))") }
            // libyaml counts the offset in bytes of the UTF-8 input.
            let prefix = yaml.utf8.prefix(offset)
            let line = prefix.reduce(1) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
            let lastLine = prefix.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).last ?? []
            let column = String(decoding: lastLine, as: UTF8.self).unicodeScalars.count + 1
            return fail(line: line, column: column, "not valid YAML: \(shown(problem))")
        case let .duplicatedKeysInMapping(duplicates, context):
            let names = duplicates.map { "'\(shown($0))'" }.joined(separator: ", ")
            return fail(at: context.mark, "\(names) appears more than once in the same mapping")
        default:
            return fail(at: nil, "not valid YAML: \(shown("\(error)", limit: 200))")
        }
    }

    // MARK: Types and variants

    func compileType(_ mapping: Node.Mapping, at mark: Mark?, table: FieldTable, defaults: Defaults,
                     dates: DateEncoding) throws(RouteError) -> CompiledType {
        let name = table.type.name
        let draft = try Draft(mapping, at: mark, context: name, parser: self, inVariant: false)
        let route = try compile(draft, table: table, defaults: defaults, dates: dates)

        let by = draft.entries["variant-by"]
        let variantsEntry = draft.entries["variants"]
        guard let by else {
            if let variantsEntry { throw fail(variantsEntry.key, "\(name): variants need 'variant-by: FIELD' (the field whose value picks one)") }
            return CompiledType(table: table, route: route, variantSlot: nil, variants: [])
        }
        let fieldName = try scalar(by.value, "variant-by")
        guard let slot = table.slot(named: fieldName) else {
            throw fail(by.value, "\(name): variant-by: \(table.unknownField(fieldName))")
        }
        guard case .choice(let choices) = table.kinds[slot] else {
            let fixed = table.type.fields.filter { if case .choice = $0.kind { true } else { false } }.map(\.name)
            throw fail(by.value, "\(name): variant-by needs a field with a fixed set of values"
                + (fixed.isEmpty ? ", and \(name) has none" : " (\(fixed.joined(separator: ", ")))")
                + "; '\(fieldName)' is \(ValueSpec.describe(table.kinds[slot]))")
        }
        guard let variantsEntry, variantsEntry.value.null == nil else {
            throw fail(by.key, "\(name): variant-by without variants")
        }
        guard let variantsMapping = variantsEntry.value.mapping else {
            throw fail(variantsEntry.value, "\(name): variants must be a mapping from a value of '\(fieldName)' to what changes")
        }
        var variants: [(value: [UInt8], route: CompiledRoute)] = []
        for (valueNode, body) in variantsMapping {
            let value = try scalar(valueNode, "a value of '\(fieldName)'")
            guard choices.contains(value) else {
                throw fail(valueNode, "\(name): '\(shown(value))' is not a value of '\(fieldName)' (\(choices.joined(separator: ", ")))")
            }
            let context = "\(name) (\(fieldName)=\(value))"
            var merged = draft
            merged.context = context
            merged.mark = valueNode.mark
            if body.null == nil {
                guard let overrides = body.mapping else {
                    throw fail(body, "\(context): a variant must be a mapping of the route keys it changes")
                }
                merged.merge(try Draft(overrides, at: body.mark, context: context, parser: self, inVariant: true))
            }
            variants.append((Array(value.utf8), try compile(merged, table: table, defaults: defaults, dates: dates)))
        }
        return CompiledType(table: table, route: route, variantSlot: slot, variants: variants)
    }

    /// A route's keys before compiling, so that a variant can be laid over its route.
    struct Draft {
        var entries: [String: (key: Node, value: Node)]
        var contentState: [(key: Node, value: Node)] = []
        var attributes: [(key: Node, value: Node)] = []
        /// Where the route (or variant) starts: the place of problems with the whole route.
        var mark: Mark?
        /// `match.moment` or `match.moment (moment=goal)`, the start of every reason.
        var context: String

        init(_ mapping: Node.Mapping, at mark: Mark?, context: String, parser: RouteFileParser, inVariant: Bool)
            throws(RouteError) {
            entries = try parser.keyed(mapping, allowed: RouteFileParser.routeKeys, what: "route key", context: context)
            if inVariant, let nested = entries["variants"] ?? entries["variant-by"] {
                throw parser.fail(nested.key, "\(context): a variant can't have variants of its own")
            }
            self.mark = mark
            self.context = context
            contentState = try Self.members(entries["content-state"], "content-state", context, parser)
            attributes = try Self.members(entries["attributes"], "attributes", context, parser)
        }

        static func members(_ entry: (key: Node, value: Node)?, _ name: String, _ context: String,
                            _ parser: RouteFileParser) throws(RouteError) -> [(key: Node, value: Node)] {
            guard let entry, entry.value.null == nil else { return [] }
            guard let mapping = entry.value.mapping else {
                throw parser.fail(entry.value, "\(context): \(name) must be a mapping from key to value")
            }
            return Array(mapping)
        }

        /// The variant's keys replace the route's; content-state and attributes are merged key by key.
        mutating func merge(_ variant: Draft) {
            for (name, entry) in variant.entries { entries[name] = entry }
            contentState = Self.merged(contentState, variant.contentState)
            attributes = Self.merged(attributes, variant.attributes)
        }

        static func merged(_ base: [(key: Node, value: Node)], _ over: [(key: Node, value: Node)]) -> [(key: Node, value: Node)] {
            var out = base
            for member in over {
                if let i = out.firstIndex(where: { $0.key.string == member.key.string }) {
                    out[i] = member
                } else {
                    out.append(member)
                }
            }
            return out
        }
    }
}
