import ActivityCastCore

/// What a device would show for one device token (or, for a channel, what every subscribed
/// activity would show), and the traffic that reached it.
///
/// Display rules, as iOS applies them: a push whose `aps.timestamp` is older than the one on
/// screen is received but not shown (`timestampRegressionsIgnored`); an equal timestamp is
/// shown. `end` marks the activity ended (it stays on the Lock Screen until `dismissalDate`);
/// updates to an ended activity are received but not shown (`ignoredAfterEnd`). `start` begins
/// a new activity on the token, whatever came before. Priority-10 updates past the tier's hourly
/// budget are still shown (the device throttles them, delivering late rather than never) but
/// counted in `overBudgetThisHour`/`overBudgetTotal` and flagged in the delivery log. A channel
/// is held to the standard tier's budget: its broadcasts reach devices of any tier.
///
/// What a device was sent twice: `repeatedStates` counts updates and starts received while the
/// activity is active that change nothing it shows — the content-state (compared as a JSON
/// value: key order, whitespace and number spelling don't matter), the stale date and the
/// relevance score are those it already showed (an update without a stale date or relevance
/// score keeps the shown ones; a start sets both). An `end` is never counted: it ends the
/// activity. `repeatedAlerts` counts alerts received that the view already received for the
/// same event: the same `aps.timestamp` and the same alert as a JSON value, among the last
/// `recentAlertsKept` alerts it received. Both compare `JSONFingerprint`s (64-bit hashes of the
/// values), so no JSON is parsed under the sandbox's lock.
public struct DeviceView: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable { case device, channel }
    public enum ActivityState: String, Sendable, Equatable { case active, ended }

    public var kind: Kind
    /// The device token (lowercase hex) or the channel id.
    public var id: String
    /// The app the token is bound to (the first push's topic) or that owns the channel.
    public var bundleID: String
    public var state: ActivityState
    /// The displayed `content-state`, as the raw JSON bytes of the push that set it.
    public var contentState: [UInt8]? { contentStateJSONBytes?.bytes }
    var contentStateJSONBytes: RawJSON?
    /// `aps.timestamp` of the displayed push (seconds since 1970).
    public var timestamp: Double?
    public var staleDate: Double?
    public var relevanceScore: Double?
    /// Set by `end` (seconds since 1970).
    public var dismissalDate: Double?
    /// When the `end` was received (ms since 1970).
    public var endedAtMillis: Int64?
    /// The last `aps.alert` received (raw JSON, object or string), shown or not.
    public var lastAlert: [UInt8]? { lastAlertJSONBytes?.bytes }
    var lastAlertJSONBytes: RawJSON?
    public var lastEvent: LiveActivityEvent?
    /// From the last `start`: `attributes-type`, `attributes` (raw JSON), and the iOS 18 options.
    public var attributesType: String?
    public var attributes: [UInt8]? { attributesJSONBytes?.bytes }
    var attributesJSONBytes: RawJSON?
    public var inputPushToken: Bool
    public var inputPushChannel: String?

    public var pushesReceived: Int
    public var pushesDisplayed: Int
    public var timestampRegressionsIgnored: Int
    public var ignoredAfterEnd: Int
    /// Push-to-start pushes received (this token is a push-to-start token).
    public var startsReceived: Int
    /// Updates and starts received that changed nothing the view showed (see above).
    public var repeatedStates: Int
    /// Alerts received again for an event whose alert the view had already received.
    public var repeatedAlerts: Int
    /// `JSONFingerprint` of the displayed content-state.
    var contentStateHash: UInt64?
    /// The last alerts received (oldest first): each one's event time and fingerprint.
    var recentAlerts: [ReceivedAlert] = []
    /// How many `recentAlerts` a view keeps: a re-sent alert arrives within a few pushes of the
    /// first (a retry, a takeover of a batch), not after more events with alerts than this.
    public static let recentAlertsKept = 8

    struct ReceivedAlert: Sendable, Equatable {
        var timestamp: Double
        var hash: UInt64
    }

    /// Budget tier (devices only) and its hourly priority-10 budget.
    public var tier: Tier?
    public var budgetPerHour: Int
    /// The current budget hour began with the first push after the previous one ended.
    public var hourStartMillis: Int64
    public var priority10ThisHour: Int
    public var priority5ThisHour: Int
    /// Broadcasts only.
    public var priority1ThisHour: Int
    public var startsThisHour: Int
    public var overBudgetThisHour: Int
    public var overBudgetTotal: Int
    public var lastPushMillis: Int64?
    /// Channels only: the storage policy (0 or 1), and whether the channel was deleted.
    public var messageStoragePolicy: Int?
    public var deleted: Bool

    init(kind: Kind, id: String, bundleID: String, tier: Tier?, budgetPerHour: Int, nowMillis: Int64) {
        self.kind = kind; self.id = id; self.bundleID = bundleID; self.tier = tier; self.budgetPerHour = budgetPerHour
        state = .active; inputPushToken = false
        pushesReceived = 0; pushesDisplayed = 0; timestampRegressionsIgnored = 0; ignoredAfterEnd = 0; startsReceived = 0
        repeatedStates = 0; repeatedAlerts = 0
        hourStartMillis = nowMillis; priority10ThisHour = 0; priority5ThisHour = 0; priority1ThisHour = 0
        startsThisHour = 0; overBudgetThisHour = 0; overBudgetTotal = 0; deleted = false
    }

    /// `contentState` parsed.
    public var contentStateJSON: JSONValue? { contentState.flatMap(JSONValue.parse) }
    public var lastAlertJSON: JSONValue? { lastAlert.flatMap(JSONValue.parse) }

    /// What one accepted push did to the view.
    struct Effect {
        var displayed: Bool
        var overBudget: Bool
        var repeatedState = false
        var repeatedAlert = false
    }

    /// Applies one accepted push; `body` is the payload the ranges in `p` point into.
    mutating func apply(_ p: ScannedPayload, body: [UInt8], priority: Int, startBudget: Int, nowMillis: Int64) -> Effect {
        let newState = p.contentState.map { RawJSON(source: body, range: $0) }
        if nowMillis - hourStartMillis >= 3_600_000 {
            hourStartMillis = nowMillis
            priority10ThisHour = 0; priority5ThisHour = 0; priority1ThisHour = 0; startsThisHour = 0; overBudgetThisHour = 0
        }
        pushesReceived += 1
        lastPushMillis = nowMillis
        lastEvent = p.event
        let repeatedState = repeatsShownState(p)
        if repeatedState { repeatedStates += 1 }
        var repeatedAlert = false
        if let alert = p.alert {
            lastAlertJSONBytes = RawJSON(source: body, range: alert)
            repeatedAlert = noteAlert(p)
            if repeatedAlert { repeatedAlerts += 1 }
        }
        var overBudget = false
        if p.event == .start {
            // Push-to-start has its own budget, whatever the priority.
            startsReceived += 1
            startsThisHour += 1
            overBudget = startsThisHour > startBudget
        } else {
            switch priority {
            case 10:
                priority10ThisHour += 1
                overBudget = priority10ThisHour > budgetPerHour
            case 5: priority5ThisHour += 1
            default: priority1ThisHour += 1
            }
        }
        if overBudget { overBudgetThisHour += 1; overBudgetTotal += 1 }

        switch p.event {
        case .start:
            state = .active
            contentStateJSONBytes = newState
            timestamp = p.timestamp
            staleDate = p.staleDate
            relevanceScore = p.relevanceScore
            dismissalDate = nil
            endedAtMillis = nil
            attributesType = p.attributesType?.string(in: body)
            attributesJSONBytes = p.attributes.map { RawJSON(source: body, range: $0) }
            inputPushToken = p.inputPushToken
            inputPushChannel = p.inputPushChannel?.string(in: body)
            contentStateHash = p.contentStateHash
            pushesDisplayed += 1
            return Effect(displayed: true, overBudget: overBudget, repeatedState: repeatedState, repeatedAlert: repeatedAlert)
        case .update, .end:
            if state == .ended {
                ignoredAfterEnd += 1
                return Effect(displayed: false, overBudget: overBudget, repeatedState: repeatedState, repeatedAlert: repeatedAlert)
            }
            if let shown = timestamp, p.timestamp < shown {
                timestampRegressionsIgnored += 1
                return Effect(displayed: false, overBudget: overBudget, repeatedState: repeatedState, repeatedAlert: repeatedAlert)
            }
            timestamp = p.timestamp
            if let newState { contentStateJSONBytes = newState; contentStateHash = p.contentStateHash }
            if let stale = p.staleDate { staleDate = stale }
            if let score = p.relevanceScore { relevanceScore = score }
            if p.event == .end {
                state = .ended
                dismissalDate = p.dismissalDate
                endedAtMillis = nowMillis
            }
            pushesDisplayed += 1
            return Effect(displayed: true, overBudget: overBudget, repeatedState: repeatedState, repeatedAlert: repeatedAlert)
        }
    }

    /// Whether `p` (an update or a start) would change nothing the active activity shows.
    private func repeatsShownState(_ p: ScannedPayload) -> Bool {
        guard state == .active, p.event != .end, contentStateJSONBytes != nil, let shown = contentStateHash,
              p.contentStateHash == shown, p.relevanceScore == relevanceScore || (p.event == .update && p.relevanceScore == nil)
        else { return false }
        return p.staleDate == staleDate || (p.event == .update && p.staleDate == nil)
    }

    /// Remembers `p`'s alert; whether the view had already received it for the same event.
    private mutating func noteAlert(_ p: ScannedPayload) -> Bool {
        guard let hash = p.alertHash else { return false }
        if recentAlerts.contains(where: { $0.timestamp == p.timestamp && $0.hash == hash }) { return true }
        if recentAlerts.count >= Self.recentAlertsKept { recentAlerts.removeFirst() }
        recentAlerts.append(ReceivedAlert(timestamp: p.timestamp, hash: hash))
        return false
    }

    /// The view as the admin API shows it.
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "kind": .string(kind.rawValue), "id": .string(id), "bundleID": .string(bundleID), "state": .string(state.rawValue),
            "pushesReceived": .int(Int64(pushesReceived)), "pushesDisplayed": .int(Int64(pushesDisplayed)),
            "timestampRegressionsIgnored": .int(Int64(timestampRegressionsIgnored)),
            "ignoredAfterEnd": .int(Int64(ignoredAfterEnd)), "startsReceived": .int(Int64(startsReceived)),
            "repeatedStates": .int(Int64(repeatedStates)), "repeatedAlerts": .int(Int64(repeatedAlerts)),
            "budgetPerHour": .int(Int64(budgetPerHour)), "hourStartMillis": .int(hourStartMillis),
            "priority10ThisHour": .int(Int64(priority10ThisHour)), "priority5ThisHour": .int(Int64(priority5ThisHour)),
            "priority1ThisHour": .int(Int64(priority1ThisHour)), "startsThisHour": .int(Int64(startsThisHour)),
            "overBudgetThisHour": .int(Int64(overBudgetThisHour)), "overBudgetTotal": .int(Int64(overBudgetTotal)),
            "deleted": .bool(deleted),
        ]
        if let v = contentStateJSON { o["contentState"] = v }
        if let v = timestamp { o["timestamp"] = number(v) }
        if let v = staleDate { o["staleDate"] = number(v) }
        if let v = relevanceScore { o["relevanceScore"] = number(v) }
        if let v = dismissalDate { o["dismissalDate"] = number(v) }
        if let v = endedAtMillis { o["endedAtMillis"] = .int(v) }
        if let v = lastAlertJSON { o["lastAlert"] = v }
        if let v = lastEvent { o["lastEvent"] = .string(v.rawValue) }
        if let v = attributesType { o["attributesType"] = .string(v) }
        if let v = attributes.flatMap(JSONValue.parse) { o["attributes"] = v }
        if inputPushToken { o["inputPushToken"] = .bool(true) }
        if let v = inputPushChannel { o["inputPushChannel"] = .string(v) }
        if let v = tier { o["tier"] = .string(v.rawValue) }
        if let v = lastPushMillis { o["lastPushMillis"] = .int(v) }
        if let v = messageStoragePolicy { o["messageStoragePolicy"] = .int(Int64(v)) }
        return .object(o)
    }
}

/// An integral double as a JSON integer, other values as they are.
func number(_ value: Double) -> JSONValue {
    if value == value.rounded(), abs(value) < 9.0e15 { return .int(Int64(value)) }
    return .double(value)
}

/// A JSON value inside a request body, kept by reference to the body (no copy on the hot path).
struct RawJSON: Sendable, Equatable {
    let source: [UInt8]
    let range: Range<Int>

    var bytes: [UInt8] { Array(source[range]) }

    static func == (a: RawJSON, b: RawJSON) -> Bool { a.source[a.range].elementsEqual(b.source[b.range]) }
}
