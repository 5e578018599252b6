import ActivityCastCore

/// One accepted push (200), as the recent-deliveries log keeps it.
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

/// A fixed-capacity ring: appending past capacity overwrites the oldest.
struct Ring<Element> {
    private var items: [Element] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(0, capacity)
        items.reserveCapacity(min(self.capacity, 1024))
    }

    /// Appends `item`; returns the element it overwrote, if any (so that the caller can release
    /// it outside a lock).
    @discardableResult
    mutating func append(_ item: consuming Element) -> Element? {
        guard capacity > 0 else { return nil }
        var evicted: Element?
        if items.count < capacity {
            items.append(item)
        } else {
            evicted = items[next]
            items[next] = item
        }
        next = next + 1 == capacity ? 0 : next + 1
        return evicted
    }

    var count: Int { items.count }

    /// The newest `limit` items, oldest first.
    func last(_ limit: Int) -> [Element] {
        let n = min(max(0, limit), items.count)
        guard n > 0 else { return [] }
        if items.count < capacity { return Array(items.suffix(n)) }
        // Full: the oldest item is at `next`.
        var out: [Element] = []
        out.reserveCapacity(n)
        var i = (next - n + capacity) % capacity
        for _ in 0..<n {
            out.append(items[i])
            i = i + 1 == capacity ? 0 : i + 1
        }
        return out
    }
}
