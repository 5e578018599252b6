import ActivityCastCore

/// Apple's size limits for a push's body: 4096 bytes for a device push (push-to-start, and an
/// update or end sent to an activity token), 5120 for a broadcast (shared/APNS.md).
public enum PayloadLimits {
    public static let device = 4096
    public static let broadcast = 5120
}

/// The JSON body of a Live Activity push: `{"aps": {…}}` with Apple's kebab-case keys
/// (shared/APNS.md). Encoded once per event and shared by every token it goes to.
public struct LiveActivityPayload: Sendable, Equatable {
    public struct Alert: Sendable, Equatable {
        public var title: String
        public var body: String
        public var sound: String?
        /// Localization keys the app resolves on the device (`title-loc-key`, `loc-key`), with
        /// their arguments; iOS shows them instead of `title`/`body` when it finds them.
        public var titleLocKey: String?
        public var titleLocArgs: [String]
        public var locKey: String?
        public var locArgs: [String]

        public init(title: String, body: String, sound: String? = nil, titleLocKey: String? = nil, titleLocArgs: [String] = [],
                    locKey: String? = nil, locArgs: [String] = []) {
            self.title = title; self.body = body; self.sound = sound
            self.titleLocKey = titleLocKey; self.titleLocArgs = titleLocArgs; self.locKey = locKey; self.locArgs = locArgs
        }
    }

    public var event: LiveActivityEvent
    /// Seconds since 1970: the source event's time. The device ignores anything older than
    /// what it shows.
    public var timestamp: Int64
    public var contentState: [String: JSONValue]
    public var staleDate: Int64?
    /// End only: when the ended activity leaves the Lock Screen (past: now; at most 4 h later).
    public var dismissalDate: Int64?
    public var relevanceScore: Double?
    public var alert: Alert?
    /// Start only: the Swift type name of the app's `ActivityAttributes`, and its values.
    public var attributesType: String?
    public var attributes: [String: JSONValue]?
    /// Start only (iOS 18): ask for an update token for the new activity.
    public var inputPushToken: Bool
    /// Start only (iOS 18): subscribe the new activity to a broadcast channel.
    public var inputPushChannel: String?

    public init(event: LiveActivityEvent, timestamp: Int64, contentState: [String: JSONValue], staleDate: Int64? = nil,
                dismissalDate: Int64? = nil, relevanceScore: Double? = nil, alert: Alert? = nil, attributesType: String? = nil,
                attributes: [String: JSONValue]? = nil, inputPushToken: Bool = false, inputPushChannel: String? = nil) {
        self.event = event; self.timestamp = timestamp; self.contentState = contentState; self.staleDate = staleDate
        self.dismissalDate = dismissalDate; self.relevanceScore = relevanceScore; self.alert = alert
        self.attributesType = attributesType; self.attributes = attributes
        self.inputPushToken = inputPushToken; self.inputPushChannel = inputPushChannel
    }

    public var json: JSONValue {
        var aps: [String: JSONValue] = [
            "event": .string(event.rawValue),
            "timestamp": .int(timestamp),
            "content-state": .object(contentState),
        ]
        if let staleDate { aps["stale-date"] = .int(staleDate) }
        if let dismissalDate { aps["dismissal-date"] = .int(dismissalDate) }
        if let relevanceScore { aps["relevance-score"] = .double(relevanceScore) }
        if let alert {
            var a: [String: JSONValue] = ["title": .string(alert.title), "body": .string(alert.body)]
            if let sound = alert.sound { a["sound"] = .string(sound) }
            if let key = alert.titleLocKey {
                a["title-loc-key"] = .string(key)
                if !alert.titleLocArgs.isEmpty { a["title-loc-args"] = .array(alert.titleLocArgs.map(JSONValue.string)) }
            }
            if let key = alert.locKey {
                a["loc-key"] = .string(key)
                if !alert.locArgs.isEmpty { a["loc-args"] = .array(alert.locArgs.map(JSONValue.string)) }
            }
            aps["alert"] = .object(a)
        }
        if let attributesType { aps["attributes-type"] = .string(attributesType) }
        if let attributes { aps["attributes"] = .object(attributes) }
        if inputPushToken { aps["input-push-token"] = .int(1) }
        if let inputPushChannel { aps["input-push-channel"] = .string(inputPushChannel) }
        return .object(["aps": .object(aps)])
    }

    public func encoded() -> [UInt8] { json.encoded() }
}
