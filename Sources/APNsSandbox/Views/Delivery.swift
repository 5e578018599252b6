import ActivityCastCore

/// One accepted push (200), as the recent-deliveries log shows it.
public struct Delivery: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable { case device, broadcast }

    /// When the sandbox accepted it (ms since 1970).
    public var timeMillis: Int64
    public var kind: Kind
    /// Device token (lowercase hex) or channel id.
    public var target: String
    public var bundleID: String
    public var priority: Int
    public var event: LiveActivityEvent
    /// `aps.timestamp`.
    public var timestamp: Double
    /// `apns-id` (device) or `apns-request-id` (broadcast) of the response.
    public var apnsID: String
    public var expiration: Int64?
    public var collapseID: String?
    /// Whether the device (or channel) shows it: false for timestamp regressions and updates
    /// to an ended activity.
    public var displayed: Bool
    /// A priority-10 update (or a start) beyond the hourly budget.
    public var overBudget: Bool

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "timeMillis": .int(timeMillis), "kind": .string(kind.rawValue), "target": .string(target),
            "bundleID": .string(bundleID), "priority": .int(Int64(priority)), "event": .string(event.rawValue),
            "timestamp": number(timestamp), "apnsID": .string(apnsID), "displayed": .bool(displayed),
            "overBudget": .bool(overBudget),
        ]
        if let expiration { o["expiration"] = .int(expiration) }
        if let collapseID { o["collapseID"] = .string(collapseID) }
        return .object(o)
    }
}

/// Who a delivery went to.
enum Recipient: Sendable, Equatable {
    case device(TokenKey)
    case channel(String)
}

/// A delivery as the log keeps it: the token as bytes and the app as an index, so that writing
/// one costs no string building and no shared reference counts; `Delivery` is made on reading.
struct DeliveryRecord: Sendable {
    var timeMillis: Int64
    var kind: Delivery.Kind
    var recipient: Recipient
    /// Index in `SandboxSettings.bundleNames`.
    var bundle: Int
    var priority: Int
    var event: LiveActivityEvent
    var timestamp: Double
    var apnsID: MessageID
    var expiration: Int64?
    var collapseID: String?
    var displayed: Bool
    var overBudget: Bool

    func delivery(bundleNames: [String]) -> Delivery {
        let target = switch recipient {
        case .device(let token): token.hex
        case .channel(let id): id
        }
        return Delivery(timeMillis: timeMillis, kind: kind, target: target, bundleID: bundleNames[bundle], priority: priority,
                        event: event, timestamp: timestamp, apnsID: apnsID.text, expiration: expiration, collapseID: collapseID,
                        displayed: displayed, overBudget: overBudget)
    }
}
