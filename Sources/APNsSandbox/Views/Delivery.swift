import ActivityCastCore

/// One accepted push (200), as the recent-deliveries log shows it.
public struct Delivery: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable { case device, broadcast }

    /// Its place in the log: 1 for the sandbox's first delivery, then 2, 3, … (never reused), for
    /// paging with `GET /sandbox/deliveries?since=`.
    public var sequence: Int
    /// When the sandbox accepted it (ms since 1970).
    public var timeMillis: Int64
    /// When the sandbox had received the whole request (µs since 1970, the wall clock): with the
    /// sender's clock on the same machine, the push's latency (bench broadcast).
    public var receivedMicros: Int64
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
    /// The push had an `aps.alert`.
    public var alert: Bool = false
    /// The push's `aps.content-state` (raw JSON), if it had one.
    public var contentState: [UInt8]?

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "sequence": .int(Int64(sequence)), "timeMillis": .int(timeMillis), "receivedMicros": .int(receivedMicros),
            "kind": .string(kind.rawValue), "target": .string(target),
            "bundleID": .string(bundleID), "priority": .int(Int64(priority)), "event": .string(event.rawValue),
            "timestamp": number(timestamp), "apnsID": .string(apnsID), "displayed": .bool(displayed),
            "overBudget": .bool(overBudget), "alert": .bool(alert),
        ]
        if let expiration { o["expiration"] = .int(expiration) }
        if let collapseID { o["collapseID"] = .string(collapseID) }
        if let contentState, let value = JSONValue.parse(contentState) { o["contentState"] = value }
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
///
/// Per delivery, under the sandbox's lock: the receipt time in µs (one more integer) and the
/// content-state as a range of the request body, which the log keeps alive by reference (one
/// retain; the device view holds the same body anyway) instead of copying it.
struct DeliveryRecord: Sendable {
    var timeMillis: Int64
    var receivedMicros: Int64
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
    var alert: Bool
    var contentState: RawJSON?

    func delivery(sequence: Int, bundleNames: [String]) -> Delivery {
        let target = switch recipient {
        case .device(let token): token.hex
        case .channel(let id): id
        }
        return Delivery(sequence: sequence, timeMillis: timeMillis, receivedMicros: receivedMicros, kind: kind, target: target, bundleID: bundleNames[bundle], priority: priority,
                        event: event, timestamp: timestamp, apnsID: apnsID.text, expiration: expiration, collapseID: collapseID,
                        displayed: displayed, overBudget: overBudget, alert: alert, contentState: contentState?.bytes)
    }
}
