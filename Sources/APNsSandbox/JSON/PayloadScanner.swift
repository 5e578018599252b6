import ActivityCastCore

/// The parts of a Live Activity payload the sandbox checks and shows. Ranges point into the
/// request body (raw JSON of the value, brackets or quotes included).
struct ScannedPayload: Sendable {
    var event: LiveActivityEvent
    /// `aps.timestamp`, seconds since 1970 (any JSON number).
    var timestamp: Double
    var contentState: Range<Int>?
    var alert: Range<Int>?
    var attributesType: String?
    var attributes: Range<Int>?
    var staleDate: Double?
    var dismissalDate: Double?
    var relevanceScore: Double?
    var inputPushToken: Bool
    var inputPushChannel: String?
}

/// Validates a push body and picks out its `aps` members in one pass, without building a tree.
///
/// Rules (shared/APNS.md): strict JSON whose top level is an object with an `aps` object;
/// `aps.event` is `start`, `update` or `end`; `aps.timestamp` is a number; `start` and `update`
/// carry a `content-state` object (`end` may, and then it must be an object: the app decodes it
/// with a default `JSONDecoder`); `start` also needs `attributes-type` (string), `attributes`
/// (object) and `alert` (object or string); `dismissal-date` only with `end`;
/// `input-push-token`/`input-push-channel` only with `start`; `stale-date`, `dismissal-date` and
/// `relevance-score` are numbers. Other `aps` keys (`sound`, `badge`, …) and other top-level keys
/// are allowed and skipped, but must still be valid JSON. A key given twice: the last one counts.
enum PayloadScanner {
    private enum Key {
        case event, timestamp, contentState, alert, attributesType, attributes, staleDate, dismissalDate
        case relevanceScore, inputPushToken, inputPushChannel
    }

    /// A member as last seen: absent, a value of the right type, or a value of the wrong type.
    /// The whole document is validated either way; a wrong type only fails the payload if no
    /// later duplicate key replaces it (as a parser that keeps the last key would see it).
    private enum Member<Value> {
        case absent, present(Value), wrongType

        var value: Value? { if case .present(let v) = self { v } else { nil } }
        var isWrong: Bool { if case .wrongType = self { true } else { false } }
        var isPresent: Bool { if case .present = self { true } else { false } }
    }

    /// The scanned payload, or nil if the body breaks a rule above (APNs: `BadRequestPayload`).
    static func scan(_ body: [UInt8]) -> ScannedPayload? {
        body.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            reader.skipWhitespace()
            var aps = Member<Fields>.absent
            let ok = reader.forEachMember { reader, key, escaped in
                let isAps = escaped ? reader.string(key, escaped: true) == "aps" : reader.equals(key, "aps")
                guard isAps else { return reader.skipValue() }
                guard !reader.atEnd, reader.current == UInt8(ascii: "{") else {
                    aps = .wrongType
                    return reader.skipValue()
                }
                guard let fields = scanAps(&reader) else { return false }
                aps = .present(fields)
                return true
            }
            guard ok else { return nil }
            reader.skipWhitespace()
            guard reader.atEnd, let fields = aps.value else { return nil }
            return fields.payload()
        }
    }

    private struct Fields {
        var event = Member<LiveActivityEvent>.absent
        var timestamp = Member<Double>.absent
        var contentState = Member<Range<Int>>.absent
        var alert = Member<Range<Int>>.absent
        var attributesType = Member<String>.absent
        var attributes = Member<Range<Int>>.absent
        var staleDate = Member<Double>.absent
        var dismissalDate = Member<Double>.absent
        var relevanceScore = Member<Double>.absent
        var inputPushToken = Member<Bool>.absent
        var inputPushChannel = Member<String>.absent

        func payload() -> ScannedPayload? {
            if event.isWrong || timestamp.isWrong || contentState.isWrong || alert.isWrong || attributesType.isWrong
                || attributes.isWrong || staleDate.isWrong || dismissalDate.isWrong || relevanceScore.isWrong
                || inputPushToken.isWrong || inputPushChannel.isWrong { return nil }
            guard let event = event.value, let timestamp = timestamp.value else { return nil }
            switch event {
            case .start:
                guard contentState.isPresent, attributesType.isPresent, attributes.isPresent, alert.isPresent else { return nil }
            case .update:
                guard contentState.isPresent else { return nil }
            case .end:
                break
            }
            if dismissalDate.isPresent && event != .end { return nil }
            if (inputPushToken.isPresent || inputPushChannel.isPresent) && event != .start { return nil }
            return ScannedPayload(event: event, timestamp: timestamp, contentState: contentState.value, alert: alert.value,
                                  attributesType: attributesType.value, attributes: attributes.value, staleDate: staleDate.value,
                                  dismissalDate: dismissalDate.value, relevanceScore: relevanceScore.value,
                                  inputPushToken: inputPushToken.value ?? false, inputPushChannel: inputPushChannel.value)
        }
    }

    /// Walks the `aps` object; nil only if it isn't valid JSON.
    private static func scanAps(_ reader: inout JSONReader) -> Fields? {
        var f = Fields()
        let ok = reader.forEachMember { reader, keyRange, escaped in
            guard let key = escaped ? keyFromString(reader.string(keyRange, escaped: true)) : lookupKey(reader, keyRange) else {
                return reader.skipValue()
            }
            guard !reader.atEnd else { return false }
            let first = reader.current
            switch key {
            case .event:
                guard first == UInt8(ascii: "\"") else { f.event = .wrongType; return reader.skipValue() }
                guard let (r, esc) = reader.scanString() else { return false }
                let event: LiveActivityEvent?
                if esc {
                    event = LiveActivityEvent(rawValue: reader.string(r, escaped: true))
                } else if reader.equals(r, "update") {
                    event = .update
                } else if reader.equals(r, "end") {
                    event = .end
                } else if reader.equals(r, "start") {
                    event = .start
                } else {
                    event = nil
                }
                f.event = event.map { .present($0) } ?? .wrongType
                return true
            case .timestamp, .staleDate, .dismissalDate, .relevanceScore, .inputPushToken:
                var value = Member<Double>.wrongType
                if first == UInt8(ascii: "-") || isDigit(first) {
                    guard let (r, integer) = reader.scanNumber(), let number = reader.double(r, integer: integer) else { return false }
                    value = .present(number)
                } else {
                    guard reader.skipValue() else { return false }
                }
                switch key {
                case .timestamp: f.timestamp = value
                case .staleDate: f.staleDate = value
                case .dismissalDate: f.dismissalDate = value
                case .relevanceScore: f.relevanceScore = value
                default:
                    if case .present(let n) = value { f.inputPushToken = .present(n != 0) } else { f.inputPushToken = .wrongType }
                }
                return true
            case .contentState, .attributes, .alert:
                let isObject = first == UInt8(ascii: "{")
                let typeOK = isObject || (key == .alert && first == UInt8(ascii: "\""))
                let start = reader.index
                guard reader.skipValue() else { return false }
                let value: Member<Range<Int>> = typeOK ? .present(start..<reader.index) : .wrongType
                switch key {
                case .contentState: f.contentState = value
                case .attributes: f.attributes = value
                default: f.alert = value
                }
                return true
            case .attributesType, .inputPushChannel:
                guard first == UInt8(ascii: "\"") else {
                    if key == .attributesType { f.attributesType = .wrongType } else { f.inputPushChannel = .wrongType }
                    return reader.skipValue()
                }
                guard let (r, esc) = reader.scanString() else { return false }
                let text = reader.string(r, escaped: esc)
                if key == .attributesType { f.attributesType = .present(text) } else { f.inputPushChannel = .present(text) }
                return true
            }
        }
        return ok ? f : nil
    }

    private static func lookupKey(_ reader: JSONReader, _ r: Range<Int>) -> Key? {
        switch r.count {
        case 5:
            if reader.equals(r, "event") { return .event }
            if reader.equals(r, "alert") { return .alert }
        case 9:
            if reader.equals(r, "timestamp") { return .timestamp }
        case 10:
            if reader.equals(r, "stale-date") { return .staleDate }
            if reader.equals(r, "attributes") { return .attributes }
        case 13:
            if reader.equals(r, "content-state") { return .contentState }
        case 14:
            if reader.equals(r, "dismissal-date") { return .dismissalDate }
        case 15:
            if reader.equals(r, "attributes-type") { return .attributesType }
            if reader.equals(r, "relevance-score") { return .relevanceScore }
        case 16:
            if reader.equals(r, "input-push-token") { return .inputPushToken }
        case 18:
            if reader.equals(r, "input-push-channel") { return .inputPushChannel }
        default:
            break
        }
        return nil
    }

    private static func keyFromString(_ s: String) -> Key? {
        switch s {
        case "event": .event
        case "alert": .alert
        case "timestamp": .timestamp
        case "stale-date": .staleDate
        case "attributes": .attributes
        case "content-state": .contentState
        case "dismissal-date": .dismissalDate
        case "attributes-type": .attributesType
        case "relevance-score": .relevanceScore
        case "input-push-token": .inputPushToken
        case "input-push-channel": .inputPushChannel
        default: nil
        }
    }
}
