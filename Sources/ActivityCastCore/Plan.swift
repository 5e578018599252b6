/// The `event` of a Live Activity push (`aps.event`).
public enum LiveActivityEvent: String, Sendable, CaseIterable {
    /// Push-to-start, sent to push-to-start tokens.
    case start
    case update
    case end
}

/// Who a plan's push goes to.
public enum Audience: Equatable, Sendable {
    /// The key's broadcast channel and its per-token subscribers (update and end).
    case activity(ActivityKey)
    /// The push-to-start tokens of the devices following these targets (start).
    case followers([FollowTarget])
    /// Nobody (nothing to send, or a start whose followers aren't known).
    case none
}

/// The alert shown with a push (`aps.alert`): plain text, and optionally localization keys the
/// app resolves on the device (`title-loc-key`/`title-loc-args`, `loc-key`/`loc-args`), which
/// iOS shows instead of the plain text when it finds them.
public struct PlanAlert: Equatable, Sendable {
    public var title: String
    public var body: String
    public var titleLocKey: String?
    public var titleLocArgs: [String]
    public var locKey: String?
    public var locArgs: [String]
    public var sound: String?

    public init(title: String, body: String, titleLocKey: String? = nil, titleLocArgs: [String] = [],
                locKey: String? = nil, locArgs: [String] = [], sound: String? = nil) {
        self.title = title
        self.body = body
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.locKey = locKey
        self.locArgs = locArgs
        self.sound = sound
    }
}

/// How a key's broadcast channel keeps messages (`message-storage-policy`, fixed at creation).
public enum ChannelStoragePolicy: Int, Sendable, Equatable, CaseIterable {
    /// 0: nothing stored; for frequent updates (a match). Broadcasts carry `apns-expiration: 0`.
    case noStorage = 0
    /// 1: the latest message is kept up to 8 h for devices that were offline; infrequent updates.
    case latestMessage = 1
}

/// What a worker would send for one feed event, before budgets and scheduling: the activity it
/// concerns, the Live Activity event, how urgent it is, who gets it and what it says.
public struct Plan: Equatable, Sendable, CustomStringConvertible {
    /// The activity key the event concerns (also the key a start creates).
    public var key: ActivityKey
    /// nil: nothing to send yet (for example `match.scheduled`).
    public var event: LiveActivityEvent?
    /// Critical events may spend priority-10 budget; routine ones go at priority 5.
    public var priority: PriorityClass
    /// The source event's time (`ts`); the push's `timestamp` and the order of updates per key.
    public var timestampMillis: Int64
    public var audience: Audience
    /// `aps.content-state`, camelCase keys as an app's `ContentState` decodes them with a default
    /// `JSONDecoder`. Only what the event says is included.
    public var contentState: [String: JSONValue]
    /// `aps.attributes` for a start (the activity's fixed attributes, such as the teams); empty otherwise.
    public var attributes: [String: JSONValue]
    public var alert: PlanAlert?
    /// Start only: the Swift type name of the app's `ActivityAttributes` (`attributes-type`).
    public var attributesType: String?
    /// `stale-date` as seconds after the event's time; nil: none.
    public var staleAfterSeconds: Int64?
    /// End only: `dismissal-date` as seconds after the event's time (0: at once; Apple caps it at
    /// 4 h); nil: the system default.
    public var dismissAfterSeconds: Int64?
    /// `relevance-score`, which orders several activities on the Lock Screen and Dynamic Island.
    public var relevanceScore: Double?
    /// The storage policy of the key's broadcast channel.
    public var storagePolicy: ChannelStoragePolicy
    /// The entry's free text for people (`FreeText.values`): the content-state strings that may
    /// be trimmed when the key's merged state would be too large for a push (`FreeText.fit`).
    public var freeText: [String] = []
    /// The feed entry's `type` (`match.score`), for the key's trail.
    public var entryType = ""

    public init(key: ActivityKey, event: LiveActivityEvent?, priority: PriorityClass, timestampMillis: Int64,
                audience: Audience, contentState: [String: JSONValue] = [:],
                attributes: [String: JSONValue] = [:], alert: PlanAlert? = nil, attributesType: String? = nil,
                staleAfterSeconds: Int64? = nil, dismissAfterSeconds: Int64? = nil, relevanceScore: Double? = nil,
                storagePolicy: ChannelStoragePolicy = .noStorage) {
        self.key = key
        self.event = event
        self.priority = priority
        self.timestampMillis = timestampMillis
        self.audience = audience
        self.contentState = contentState
        self.attributes = attributes
        self.alert = alert
        self.attributesType = attributesType
        self.staleAfterSeconds = staleAfterSeconds
        self.dismissAfterSeconds = dismissAfterSeconds
        self.relevanceScore = relevanceScore
        self.storagePolicy = storagePolicy
    }

    /// One log line:
    /// `key=match:4711 event=update priority=critical audience=channel+tokens(match:4711) alert=Goal!`
    public var description: String {
        var line = "key=\(key) event=\(event?.rawValue ?? "none") priority=\(priority.rawValue) audience="
        switch audience {
        case .activity(let key): line += "channel+tokens(\(key))"
        case .followers(let targets): line += "followers(" + targets.map(\.description).joined(separator: ",") + ")"
        case .none: line += "none"
        }
        if let alert {
            line += " alert=" + Self.oneLine(alert.title)
        }
        return line
    }

    /// A plan can be built by anyone, so its log line must not trust the title to be one line.
    private static func oneLine(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            if UTF8Scanner.isControl(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029 {
                out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
