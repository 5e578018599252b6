import ActivityCastCore

/// A JSON string inside the body: the raw contents' range and whether they contain escapes.
struct StringRef: Sendable {
    var range: Range<Int>
    var escaped: Bool

    /// The decoded text (`body` is the document the range points into).
    func string(in body: [UInt8]) -> String {
        body.withUnsafeBufferPointer { JSONReader($0).string(range, escaped: escaped) }
    }
}

/// The parts of a Live Activity payload the sandbox checks and shows. Ranges point into the
/// request body (raw JSON of the value, brackets or quotes included). Plain values only, so
/// copies cost no reference counting; the two start-only strings are decoded when applied.
struct ScannedPayload: Sendable {
    var event: LiveActivityEvent
    /// `aps.timestamp`, seconds since 1970 (any JSON number).
    var timestamp: Double
    var contentState: Range<Int>?
    var alert: Range<Int>?
    var attributesType: StringRef?
    var attributes: Range<Int>?
    var staleDate: Double?
    var dismissalDate: Double?
    var relevanceScore: Double?
    var inputPushToken: Bool
    var inputPushChannel: StringRef?
    /// `JSONFingerprint`s of `content-state` and `alert` (what they mean, not how they are
    /// spelled): how a device view tells a repeated state or alert.
    var contentStateHash: UInt64?
    var alertHash: UInt64?
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
    private enum Key: UInt16 {
        case event = 1, timestamp = 2, contentState = 4, alert = 8, attributesType = 16, attributes = 32, staleDate = 64
        case dismissalDate = 128, relevanceScore = 256, inputPushToken = 512, inputPushChannel = 1024
    }

    /// The scanned payload, or nil if the body breaks a rule above (APNs: `BadRequestPayload`).
    static func scan(_ body: [UInt8]) -> ScannedPayload? {
        body.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            reader.skipWhitespace()
            // The last `aps` wins: nil until one is seen, and a non-object one counts as invalid.
            var aps: Fields?
            var apsIsObject = false
            guard var more = reader.enterObject() else { return nil }
            while more {
                guard let (key, escaped) = reader.memberKey() else { return nil }
                let isAps = escaped ? reader.string(key, escaped: true) == "aps" : reader.equals(key, "aps")
                if isAps, !reader.atEnd, reader.current == UInt8(ascii: "{") {
                    guard let fields = scanAps(&reader) else { return nil }
                    aps = fields
                    apsIsObject = true
                } else {
                    guard reader.skipValue() else { return nil }
                    if isAps { apsIsObject = false }
                }
                guard let next = reader.nextMember() else { return nil }
                more = next
            }
            reader.skipWhitespace()
            guard reader.atEnd, apsIsObject, let aps, var payload = aps.payload() else { return nil }
            payload.contentStateHash = payload.contentState.flatMap { JSONFingerprint.of(buffer, $0) }
            payload.alertHash = payload.alert.flatMap { JSONFingerprint.of(buffer, $0) }
            return payload
        }
    }

    /// The `aps` members as last seen. A member whose last occurrence had the wrong type is in
    /// `wrongType` (the whole document is still validated; a later duplicate of the right type
    /// clears it, as a parser keeping the last key would see it).
    private struct Fields {
        var present: UInt16 = 0
        var wrongType: UInt16 = 0
        var event: LiveActivityEvent = .update
        var timestamp: Double = 0
        var contentState: Range<Int> = 0..<0
        var alert: Range<Int> = 0..<0
        var attributesType = StringRef(range: 0..<0, escaped: false)
        var attributes: Range<Int> = 0..<0
        var staleDate: Double = 0
        var dismissalDate: Double = 0
        var relevanceScore: Double = 0
        var inputPushToken = false
        var inputPushChannel = StringRef(range: 0..<0, escaped: false)

        @inline(__always) func has(_ key: Key) -> Bool { present & key.rawValue != 0 }

        @inline(__always) mutating func mark(_ key: Key, valid: Bool) {
            if valid {
                present |= key.rawValue
                wrongType &= ~key.rawValue
            } else {
                present &= ~key.rawValue
                wrongType |= key.rawValue
            }
        }

        func payload() -> ScannedPayload? {
            guard wrongType == 0, has(.event), has(.timestamp) else { return nil }
            switch event {
            case .start:
                guard has(.contentState), has(.attributesType), has(.attributes), has(.alert) else { return nil }
            case .update:
                guard has(.contentState) else { return nil }
            case .end:
                break
            }
            if has(.dismissalDate) && event != .end { return nil }
            if (has(.inputPushToken) || has(.inputPushChannel)) && event != .start { return nil }
            return ScannedPayload(
                event: event, timestamp: timestamp, contentState: has(.contentState) ? contentState : nil,
                alert: has(.alert) ? alert : nil,
                attributesType: has(.attributesType) ? attributesType : nil,
                attributes: has(.attributes) ? attributes : nil, staleDate: has(.staleDate) ? staleDate : nil,
                dismissalDate: has(.dismissalDate) ? dismissalDate : nil, relevanceScore: has(.relevanceScore) ? relevanceScore : nil,
                inputPushToken: has(.inputPushToken) && inputPushToken,
                inputPushChannel: has(.inputPushChannel) ? inputPushChannel : nil)
        }
    }

    /// Walks the `aps` object (`reader` at its `{`); nil only if it isn't valid JSON.
    private static func scanAps(_ reader: inout JSONReader) -> Fields? {
        var f = Fields()
        guard var more = reader.enterObject() else { return nil }
        while more {
            guard let (keyRange, escaped) = reader.memberKey() else { return nil }
            let key = escaped ? keyFromString(reader.string(keyRange, escaped: true)) : lookupKey(reader, keyRange)
            if let key {
                guard !reader.atEnd, scanMember(key, &reader, &f) else { return nil }
            } else {
                guard reader.skipValue() else { return nil }
            }
            guard let next = reader.nextMember() else { return nil }
            more = next
        }
        return f
    }

    /// Reads one known `aps` member's value into `f`; false only if it isn't valid JSON.
    @inline(__always)
    private static func scanMember(_ key: Key, _ reader: inout JSONReader, _ f: inout Fields) -> Bool {
        let first = reader.current
        switch key {
        case .event:
            guard first == UInt8(ascii: "\"") else { f.mark(.event, valid: false); return reader.skipValue() }
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
            if let event { f.event = event }
            f.mark(.event, valid: event != nil)
            return true
        case .timestamp, .staleDate, .dismissalDate, .relevanceScore, .inputPushToken:
            guard first == UInt8(ascii: "-") || isDigit(first) else { f.mark(key, valid: false); return reader.skipValue() }
            guard let (r, integer) = reader.scanNumber(), let value = reader.double(r, integer: integer) else { return false }
            switch key {
            case .timestamp: f.timestamp = value
            case .staleDate: f.staleDate = value
            case .dismissalDate: f.dismissalDate = value
            case .relevanceScore: f.relevanceScore = value
            default: f.inputPushToken = value != 0
            }
            f.mark(key, valid: true)
            return true
        case .contentState, .attributes, .alert:
            let typeOK = first == UInt8(ascii: "{") || (key == .alert && first == UInt8(ascii: "\""))
            let start = reader.index
            guard reader.skipValue() else { return false }
            switch key {
            case .contentState: f.contentState = start..<reader.index
            case .attributes: f.attributes = start..<reader.index
            default: f.alert = start..<reader.index
            }
            f.mark(key, valid: typeOK)
            return true
        case .attributesType, .inputPushChannel:
            guard first == UInt8(ascii: "\"") else { f.mark(key, valid: false); return reader.skipValue() }
            guard let (range, escaped) = reader.scanString() else { return false }
            let string = StringRef(range: range, escaped: escaped)
            if key == .attributesType { f.attributesType = string } else { f.inputPushChannel = string }
            f.mark(key, valid: true)
            return true
        }
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
