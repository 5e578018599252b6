import ActivityCastCore
import APNsCore

/// The smallest payload a route can send, from what the file alone fixes: a route whose
/// constants already exceed Apple's limit could never send anything, and is refused when it is
/// compiled rather than dead-lettering every event.
extension CompiledRoute {
    /// The payload the worker would build (`PushBuilder.payload`) for an event that gives the
    /// route as little as it can: no optional field, the earliest time (0 s), every text at its
    /// shortest alternative without its fields and optional segments. Only the route's own
    /// constants are in the content-state (a key's state only adds to them) and the attributes.
    /// Nil for an event of `none`, which sends nothing.
    var leastPayload: LiveActivityPayload? {
        guard let event else { return nil }
        let alert = alert.map {
            LiveActivityPayload.Alert(title: $0.title.leastText, body: $0.body.leastText, sound: $0.sound?.leastText,
                                      titleLocKey: $0.titleLocKey?.leastText, titleLocArgs: $0.titleLocArgs.map(\.leastText),
                                      locKey: $0.locKey?.leastText, locArgs: $0.locArgs.map(\.leastText))
        }
        return LiveActivityPayload(
            event: event, timestamp: 0, contentState: ValueSpec.constants(of: contentState),
            staleDate: staleAfterSeconds, dismissalDate: event == .end ? dismissAfterSeconds : nil,
            relevanceScore: relevanceScore, alert: alert,
            attributesType: event == .start ? attributesType : nil,
            attributes: event == .start ? ValueSpec.constants(of: attributes) : nil,
            // The shorter of the two a start carries (`input-push-channel` holds a channel id).
            inputPushToken: event == .start)
    }
}

extension ValueSpec {
    /// What the file alone fixes of a value: a constant, or an object's constant members; nil
    /// for a field (absent, it leaves its key out).
    var constantPart: JSONValue? {
        switch self {
        case .constant(let value):
            return value
        case .field:
            return nil
        case .object(let members):
            let fixed = Self.constants(of: members)
            return fixed.isEmpty ? nil : .object(fixed)
        }
    }

    /// The members whose values the file fixes, with those values.
    static func constants(of members: [(key: String, value: ValueSpec)]) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for member in members {
            if let value = member.value.constantPart { out[member.key] = value }
        }
        return out
    }
}

extension Template {
    /// The shortest text the template can render as far as the file tells: the literal parts of
    /// the alternative whose literals are shortest in JSON (its fields and optional segments can
    /// only add to it). Any alternative may be the one an event renders.
    var leastText: String {
        var least: (text: String, size: Int)?
        for alternative in alternatives {
            var text = ""
            for part in alternative.parts {
                if case .literal(let literal) = part { text += literal }
            }
            let size = JSONValue.string(text).encoded().count
            if size < least?.size ?? .max { least = (text, size) }
        }
        return least?.text ?? ""
    }
}
