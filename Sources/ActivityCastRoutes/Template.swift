/// A text with placeholders, compiled once: `{player} scores for the {team} team[ ({home_score}-{away_score})]`.
///
/// - `{field}` is the field's value; `{?field}` shows nothing but needs the field, so that an
///   alternative (a `loc-key`, say) can depend on a field without showing it.
/// - `[ … ]` is an optional segment: it is left out when a field named inside it is absent.
/// - `{{`, `}}`, `[[`, `]]` are the literal characters.
///
/// A text may have alternatives (a YAML list); the first whose placeholders outside optional
/// segments are all present is used. The loader checks that the last one can always be rendered.
struct Template: Sendable {
    enum Piece: Sendable {
        case literal(String)
        case field(Int)
    }

    enum Part: Sendable {
        case literal(String)
        case field(Int)
        /// Rendered only when every slot in `needs` is present.
        case optional([Piece], needs: SlotSet)
    }

    struct Alternative: Sendable {
        var parts: [Part]
        /// Slots of the placeholders outside optional segments.
        var needs: SlotSet
        /// The text as written, for messages.
        var source: String
    }

    var alternatives: [Alternative]

    /// The rendered text; nil when no alternative has its fields (the loader rules that out for
    /// texts of a route, but not for entries whose fields were never validated).
    func render(_ values: FieldValues) -> Result<String?, RouteError> {
        guard let alternative = alternatives.first(where: { $0.needs.isSubset(of: values.present) }) else {
            return .success(nil)
        }
        var out = ""
        for part in alternative.parts {
            switch part {
            case .literal(let text):
                out += text
            case .field(let slot):
                switch values.text(slot) {
                case .success(let text): out += text
                case .failure(let error): return .failure(error)
                }
            case .optional(let pieces, let needs):
                guard needs.isSubset(of: values.present) else { continue }
                for piece in pieces {
                    switch piece {
                    case .literal(let text): out += text
                    case .field(let slot):
                        switch values.text(slot) {
                        case .success(let text): out += text
                        case .failure(let error): return .failure(error)
                        }
                    }
                }
            }
        }
        return .success(out)
    }

    /// Why `source` is not a template (the message names the problem and its place in the text).
    struct SyntaxError: Error {
        var reason: String
    }

    /// Compiles one alternative. `slot(name)` resolves a placeholder to a field slot, or throws
    /// the reason it can't (an unknown field).
    static func compile(_ source: String, slot: (String) throws(SyntaxError) -> Int) throws(SyntaxError) -> Alternative {
        var parts: [Part] = []
        var needs = SlotSet()
        var literal = ""
        // Inside `[ … ]`: the pieces so far, and their fields.
        var segment: (pieces: [Piece], needs: SlotSet)?
        var segmentLiteral = ""

        func flushLiteral() {
            if segment != nil {
                if !segmentLiteral.isEmpty { segment!.pieces.append(.literal(segmentLiteral)); segmentLiteral = "" }
            } else if !literal.isEmpty {
                parts.append(.literal(literal)); literal = ""
            }
        }
        func appendText(_ c: Character) {
            if segment != nil { segmentLiteral.append(c) } else { literal.append(c) }
        }

        let chars = Array(source)
        var i = 0
        while i < chars.count {
            let c = chars[i]
            let next: Character? = i + 1 < chars.count ? chars[i + 1] : nil
            switch c {
            case "{" where next == "{", "}" where next == "}", "[" where next == "[", "]" where next == "]":
                appendText(c)
                i += 2
                continue
            case "{":
                guard let close = chars[(i + 1)...].firstIndex(of: "}") else {
                    throw SyntaxError(reason: "'{' at character \(i + 1) is not closed (write '{{' for a literal brace)")
                }
                var name = String(chars[(i + 1)..<close])
                let presenceOnly = name.hasPrefix("?")
                if presenceOnly { name.removeFirst() }
                guard !name.isEmpty else {
                    throw SyntaxError(reason: "empty placeholder '{\(presenceOnly ? "?" : "")}' at character \(i + 1)")
                }
                guard !name.contains("{") else {
                    throw SyntaxError(reason: "'{' at character \(i + 1) is not closed before the next '{'")
                }
                let fieldSlot = try slot(name)
                flushLiteral()
                if segment != nil {
                    if !presenceOnly { segment!.pieces.append(.field(fieldSlot)) }
                    segment!.needs.insert(fieldSlot)
                } else {
                    if !presenceOnly { parts.append(.field(fieldSlot)) }
                    needs.insert(fieldSlot)
                }
                i = close + 1
                continue
            case "}":
                throw SyntaxError(reason: "'}' at character \(i + 1) has no '{' (write '}}' for a literal brace)")
            case "[":
                guard segment == nil else {
                    throw SyntaxError(reason: "'[' at character \(i + 1) is inside another optional segment (they don't nest; "
                        + "write '[[' for a literal bracket)")
                }
                flushLiteral()
                segment = ([], SlotSet())
            case "]":
                guard segment != nil else {
                    throw SyntaxError(reason: "']' at character \(i + 1) has no '[' (write ']]' for a literal bracket)")
                }
                flushLiteral()
                let open = segment!
                guard !open.needs.isEmpty else {
                    throw SyntaxError(reason: "the optional segment ending at character \(i + 1) has no placeholder, "
                        + "so it would always be shown (write '[[' and ']]' for literal brackets)")
                }
                parts.append(.optional(open.pieces, needs: open.needs))
                segment = nil
            default:
                appendText(c)
            }
            i += 1
        }
        guard segment == nil else { throw SyntaxError(reason: "'[' is not closed (write '[[' for a literal bracket)") }
        flushLiteral()
        return Alternative(parts: parts, needs: needs, source: source)
    }
}
