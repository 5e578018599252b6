import ActivityCastCore
import Yams

/// Compiling values, alerts and texts, and reading scalars with their ranges.
extension RouteFileParser {
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
