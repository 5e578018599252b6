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

    // MARK: One route

    func compile(_ draft: Draft, table: FieldTable, defaults: Defaults, dates: DateEncoding) throws(RouteError) -> CompiledRoute {
        let context = draft.context
        let e = draft.entries

        guard let eventEntry = e["event"] else {
            throw fail(at: draft.mark, "\(context): missing 'event' (start, update, end or none)")
        }
        let event: LiveActivityEvent?
        switch try scalar(eventEntry.value, "event") {
        case "none": event = nil
        case let text:
            guard let value = LiveActivityEvent(rawValue: text) else {
                throw fail(eventEntry.value, "\(context): event must be start, update, end or none, got '\(shown(text))'")
            }
            event = value
        }
        let eventName = event?.rawValue ?? "none"

        /// A key that this event can't have.
        func refuse(_ key: String, _ why: String) throws(RouteError) {
            if let entry = e[key] { throw fail(entry.key, "\(context): \(key) \(why)") }
        }

        guard let keyEntry = e["key"] else {
            throw fail(at: draft.mark, "\(context): missing 'key' (the activity key, such as \"match:{match}\")")
        }
        let keys = try activityKeys(keyEntry.value, table: table, context: context)

        var priority = PriorityClass.routine
        if let entry = e["priority"] {
            let text = try scalar(entry.value, "priority")
            guard let value = PriorityClass(rawValue: text) else {
                throw fail(entry.value, "\(context): priority must be critical or routine, got '\(shown(text))'")
            }
            priority = value
        } else if event != nil {
            throw fail(at: draft.mark, "\(context): missing 'priority' (critical or routine)")
        }

        var contentState: [(key: String, value: ValueSpec)] = []
        if event == nil, !draft.contentState.isEmpty {
            try refuse("content-state", "is sent only with start, update or end, and this event is none")
        }
        contentState = try members(draft.contentState, table: table, dates: dates, context: "\(context): content-state")

        if event == .update || event == .end {
            try refuse("attributes", "are sent only with a start (and kept on an event of none), not with \(eventName)")
        }
        let attributes = try members(draft.attributes, table: table, dates: dates, context: "\(context): attributes")

        var attributesType: String?
        var followers: [(kind: FollowTarget.Kind, slot: Int)] = []
        if event == .start {
            guard let entry = e["attributes-type"] else {
                throw fail(at: draft.mark, "\(context): a start needs 'attributes-type' (the Swift type name of the app's "
                    + "ActivityAttributes, such as MatchActivityAttributes)")
            }
            let name = try scalar(entry.value, "attributes-type")
            guard Self.isSwiftTypeName(name) else {
                throw fail(entry.value, "\(context): attributes-type must be a Swift type name (1-128 of A-Z a-z 0-9 _ .), "
                    + "as apps register it in start.token, got '\(shown(name))'")
            }
            attributesType = name
            guard let followersEntry = e["followers"] else {
                throw fail(at: draft.mark, "\(context): a start needs 'followers' (the targets whose followers get it, "
                    + "such as [\"team:{home}\", \"team:{away}\"])")
            }
            followers = try targets(followersEntry.value, table: table, context: context)
            if e["alert"] == nil {
                throw fail(at: draft.mark, "\(context): a start needs an 'alert' (APNs requires one on a start)")
            }
        } else {
            try refuse("attributes-type", "is sent only with a start, not with \(eventName)")
            try refuse("followers", "are the audience of a start; an \(eventName) goes to the key's activities")
        }

        var alert: CompiledAlert?
        if let entry = e["alert"] {
            if event == nil { try refuse("alert", "is sent only with start, update or end, and this event is none") }
            alert = try compileAlert(entry.value, table: table, context: "\(context): alert")
        }

        var staleAfterSeconds: Int64?
        var dismissAfterSeconds: Int64?
        var relevanceScore: Double?
        switch event {
        case .start, .update:
            try refuse("dismiss-after", "applies only to an end")
            staleAfterSeconds = try e["stale-after"].map { entry throws(RouteError) in try staleAfter(entry.value, context: context) }
                ?? defaults.staleAfter
        case .end:
            try refuse("stale-after", "has no meaning on an end (use dismiss-after)")
            dismissAfterSeconds = try e["dismiss-after"].map { entry throws(RouteError) in try dismissAfter(entry.value, context: context) }
                ?? defaults.dismissAfter
        case nil:
            try refuse("stale-after", "needs an event that is sent, and this event is none")
            try refuse("dismiss-after", "applies only to an end")
            try refuse("relevance", "needs an event that is sent, and this event is none")
        }
        if event != nil {
            relevanceScore = try e["relevance"].map { entry throws(RouteError) in try relevance(entry.value, context: context) }
                ?? defaults.relevance
        }

        return CompiledRoute(keys: keys, event: event, priority: priority, contentState: contentState, attributes: attributes,
                             attributesType: attributesType, followers: followers, alert: alert,
                             staleAfterSeconds: staleAfterSeconds, dismissAfterSeconds: dismissAfterSeconds,
                             relevanceScore: relevanceScore)
    }

    // MARK: Keys and audiences

    /// `"match:{match}"`, or a list of alternatives: `["trip:{trip}", "route:{route}"]`.
    func activityKeys(_ node: Node, table: FieldTable, context: String) throws(RouteError) -> [(kind: ActivityKey.Kind, slot: Int)] {
        var out: [(kind: ActivityKey.Kind, slot: Int)] = []
        for item in try alternatives(node, "key", context: context) {
            let (kindName, slot) = try placeholderReference(item, table: table, context: "\(context): key", example: "match:{match}")
            guard let kind = ActivityKey.Kind(rawValue: kindName) else {
                throw fail(item, "\(context): key kind must be match, trip or route, got '\(shown(kindName))'")
            }
            out.append((kind, slot))
        }
        return out
    }

    /// `["team:{home}", "team:{away}"]`: each target's field must be an identifier.
    func targets(_ node: Node, table: FieldTable, context: String) throws(RouteError) -> [(kind: FollowTarget.Kind, slot: Int)] {
        var out: [(kind: FollowTarget.Kind, slot: Int)] = []
        for item in try alternatives(node, "followers", context: context) {
            let (kindName, slot) = try placeholderReference(item, table: table, context: "\(context): followers", example: "team:{home}")
            guard let kind = FollowTarget.Kind(rawValue: kindName) else {
                throw fail(item, "\(context): a follow target's kind must be team or route, got '\(shown(kindName))'")
            }
            out.append((kind, slot))
        }
        return out
    }

    /// `kind:{field}` with an identifier field (the id becomes part of Redis keys).
    func placeholderReference(_ node: Node, table: FieldTable, context: String, example: String) throws(RouteError)
        -> (kind: String, slot: Int) {
        let text = try scalar(node, "a key")
        guard let colon = text.firstIndex(of: ":"), text.hasSuffix("}"),
              text[text.index(after: colon)...].hasPrefix("{") else {
            throw fail(node, "\(context): must be kind:{field} such as \(example), got '\(shown(text))'")
        }
        let kind = String(text[..<colon])
        let name = String(text[text.index(colon, offsetBy: 2)..<text.index(before: text.endIndex)])
        guard let slot = table.slot(named: name) else {
            throw fail(node, "\(context): \(table.unknownField(name))")
        }
        guard table.kinds[slot] == .identifier else {
            throw fail(node, "\(context): field '\(name)' is \(ValueSpec.describe(table.kinds[slot])), but an id must be "
                + "an identifier field (\(table.type.fields.filter { $0.kind == .identifier }.map(\.name).joined(separator: ", ")))")
        }
        return (kind, slot)
    }

    // MARK: Values

    func members(_ pairs: [(key: Node, value: Node)], table: FieldTable, dates: DateEncoding, context: String)
        throws(RouteError) -> [(key: String, value: ValueSpec)] {
        var out: [(key: String, value: ValueSpec)] = []
        for (keyNode, valueNode) in pairs {
            let key = try scalar(keyNode, "a key")
            guard !key.isEmpty else { throw fail(keyNode, "\(context): a key must not be empty") }
            out.append((key, try value(valueNode, table: table, dates: dates, context: "\(context) '\(shown(key))'")))
        }
        return out
    }

    func value(_ node: Node, table: FieldTable, dates: DateEncoding, context: String) throws(RouteError) -> ValueSpec {
        if let mapping = node.mapping {
            let members = try members(Array(mapping), table: table, dates: dates, context: context)
            guard !members.isEmpty else { throw fail(node, "\(context): an object needs at least one member") }
            return .object(members)
        }
        guard node.null == nil, let text = node.scalar?.string else {
            throw fail(node, "\(context): a value is TYPE SOURCE (such as int home_score or string \"ended\") or a mapping")
        }
        do {
            return try ValueSpec.compile(text, table: table, dates: dates)
        } catch {
            throw fail(node, "\(context): \(error.reason)")
        }
    }

    // MARK: Alerts and templates

    func compileAlert(_ node: Node, table: FieldTable, context: String) throws(RouteError) -> CompiledAlert {
        guard let mapping = node.mapping else { throw fail(node, "\(context) must be a mapping (title, body, …)") }
        let e = try keyed(mapping, allowed: Self.alertKeys, what: "alert key", context: context)
        func required(_ key: String) throws(RouteError) -> Template {
            guard let entry = e[key] else { throw fail(node, "\(context): missing '\(key)' (plain text is always needed)") }
            return try text(entry.value, table: table, context: "\(context) \(key)")
        }
        func optional(_ key: String) throws(RouteError) -> Template? {
            guard let entry = e[key] else { return nil }
            return try text(entry.value, table: table, context: "\(context) \(key)")
        }
        func list(_ key: String) throws(RouteError) -> [Template] {
            guard let entry = e[key], entry.value.null == nil else { return [] }
            guard let sequence = entry.value.sequence else {
                throw fail(entry.value, "\(context) \(key) must be a list of texts")
            }
            var out: [Template] = []
            for (i, item) in sequence.enumerated() {
                out.append(try text(item, table: table, context: "\(context) \(key)[\(i)]"))
            }
            return out
        }
        let title = try required("title"), body = try required("body")
        let titleLocKey = try optional("title-loc-key"), locKey = try optional("loc-key")
        let titleLocArgs = try list("title-loc-args"), locArgs = try list("loc-args")
        if titleLocKey == nil, let entry = e["title-loc-args"] {
            throw fail(entry.key, "\(context): title-loc-args without title-loc-key")
        }
        if locKey == nil, let entry = e["loc-args"] { throw fail(entry.key, "\(context): loc-args without loc-key") }
        return CompiledAlert(title: title, body: body, titleLocKey: titleLocKey, titleLocArgs: titleLocArgs, locKey: locKey,
                             locArgs: locArgs, sound: try optional("sound"))
    }

    /// A text: one template, or a list of alternatives. The last alternative must render for every
    /// entry of the type, so the alert is never missing a part.
    func text(_ node: Node, table: FieldTable, context: String) throws(RouteError) -> Template {
        var compiled: [Template.Alternative] = []
        let items = try alternatives(node, "a text", context: context)
        for item in items {
            let source = try scalar(item, "a text")
            do {
                compiled.append(try Template.compile(source) { name throws(Template.SyntaxError) in
                    guard let slot = table.slot(named: name) else {
                        throw Template.SyntaxError(reason: table.unknownField(name))
                    }
                    return slot
                })
            } catch {
                throw fail(item, "\(context): \(error.reason) in '\(shown(source))'")
            }
        }
        let last = compiled[compiled.count - 1]
        let unsure = last.needs.subtracting(table.required)
        if !unsure.isEmpty {
            let names = table.names(of: unsure).map { "{\($0)}" }.joined(separator: ", ")
            let advice = items.count == 1
                ? "put that part in [brackets], or give a list of alternatives ending with one that always renders"
                : "end the list with an alternative that always renders"
            throw fail(items[items.count - 1], "\(context): '\(shown(last.source))' uses \(names), which \(table.type.name) "
                + "may lack; \(advice)")
        }
        return Template(alternatives: compiled)
    }

    // MARK: Scalars

    /// A node that is one value or a non-empty list of values.
    func alternatives(_ node: Node, _ what: String, context: String) throws(RouteError) -> [Node] {
        if let sequence = node.sequence {
            guard !sequence.isEmpty else { throw fail(node, "\(context): \(what) must not be an empty list") }
            return Array(sequence)
        }
        return [node]
    }

    func scalar(_ node: Node, _ what: String) throws(RouteError) -> String {
        guard let scalar = node.scalar, node.null == nil || scalar.style != .plain else {
            throw fail(node, "\(what) must be a single value")
        }
        return scalar.string
    }

    func staleAfter(_ node: Node, context: String) throws(RouteError) -> Int64 {
        try seconds(node, "stale-after", 1...Self.maxStaleAfter, context: context, why: "an activity is active at most 8 h")
    }

    func dismissAfter(_ node: Node, context: String) throws(RouteError) -> Int64 {
        try seconds(node, "dismiss-after", 0...Self.maxDismissAfter, context: context,
                    why: "APNs removes an ended activity at most 4 h after its end")
    }

    func seconds(_ node: Node, _ name: String, _ range: ClosedRange<Int64>, context: String, why: String) throws(RouteError) -> Int64 {
        let text = try scalar(node, name)
        guard let value = Int64(text) else {
            throw fail(node, "\(context): \(name) must be whole seconds, got '\(shown(text))'")
        }
        guard range.contains(value) else {
            throw fail(node, "\(context): \(name) must be \(range.lowerBound)...\(range.upperBound) seconds (\(why)), got \(value)")
        }
        return value
    }

    func relevance(_ node: Node, context: String) throws(RouteError) -> Double {
        let text = try scalar(node, "relevance")
        guard let value = Double(text), value.isFinite, value >= 0 else {
            throw fail(node, "\(context): relevance must be a number ≥ 0 (higher ranks first), got '\(shown(text))'")
        }
        return value
    }

    /// The entries of a mapping by key, rejecting keys not in `allowed` (with a hint).
    func keyed(_ mapping: Node.Mapping, allowed: [String], what: String, context: String? = nil) throws(RouteError)
        -> [String: (key: Node, value: Node)] {
        var out: [String: (key: Node, value: Node)] = [:]
        for (key, value) in mapping {
            let name = try scalar(key, "a key")
            guard allowed.contains(name) else {
                let prefix = context.map { "\($0): " } ?? ""
                throw fail(key, "\(prefix)unknown \(what) '\(shown(name))'\(suggestion(for: name, among: allowed)) "
                    + "(known: \(allowed.joined(separator: ", ")))")
            }
            out[name] = (key, value)
        }
        return out
    }

    /// 1–128 of `A–Z a–z 0–9 _ .`: what a `start.token` registration's `activity_type` may be, so
    /// every type a route starts can have push-to-start tokens.
    static func isSwiftTypeName(_ name: String) -> Bool {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= 128 else { return false }
        return bytes.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F
        }
    }
}
