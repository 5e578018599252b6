import ActivityCastCore
import APNsCore
import Yams

/// Compiling one route (or variant): what each event may and must have, keys and audiences.
extension RouteFileParser {
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
        if event == .update, contentState.isEmpty, e["alert"] == nil {
            // Neither a state of its own nor an alert: it could only send the key's state again,
            // which the device already shows.
            throw fail(at: e["content-state"]?.key.mark ?? draft.mark, "\(context): an update needs a content-state "
                + "with at least one key (or an alert): without either it has nothing to send")
        }

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

        let route = CompiledRoute(keys: keys, event: event, priority: priority, contentState: contentState,
                                  attributes: attributes, attributesType: attributesType, followers: followers, alert: alert,
                                  staleAfterSeconds: staleAfterSeconds, dismissAfterSeconds: dismissAfterSeconds,
                                  relevanceScore: relevanceScore)
        if let least = route.leastPayload {
            let size = least.encoded().count
            if size > PayloadLimits.device {
                let push = event == .start ? "a push-to-start" : "an \(eventName) to an activity token (the same payload goes to the channel)"
                throw fail(at: draft.mark, "\(context): its constants alone (content-state and attributes constants, "
                    + "alert texts, attributes-type, dates) make every \(eventName) at least \(size) bytes, and APNs takes "
                    + "at most \(PayloadLimits.device) in \(push): it could never be sent")
            }
        }
        return route
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
}
