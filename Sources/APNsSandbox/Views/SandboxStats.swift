import ActivityCastCore

/// Counters since the sandbox started. Admin requests are not counted.
public struct SandboxStats: Sendable, Equatable {
    /// APNs requests (device, broadcast, channel management, and unknown paths).
    public var requests = 0
    /// Pushes accepted with 200 (device and broadcast).
    public var delivered = 0
    public var devicePushes = 0
    /// When the newest accepted device push had arrived whole (µs since 1970, the wall clock; 0
    /// before the first): with `devicePushes`, "N pushes received, the last at T" in one cheap
    /// read (bench fanout times a fan-out to its last receipt with it).
    public var lastDevicePushMicros: Int64 = 0
    public var broadcasts = 0
    /// Requests answered with an error reason.
    public var rejected = 0
    /// Error reason (Apple's spelling) → count, faults included.
    public var byReason: [String: Int] = [:]
    /// HTTP status → count. Resets have no status and are counted in `connectionResets` only.
    public var byStatus: [Int: Int] = [:]
    /// Injected per-request faults (429, 500, 503 and resets; slow responses are in `slowResponses`).
    public var faultsInjected = 0
    public var slowResponses = 0
    public var connectionResets = 0
    /// Requests processed whose answer was then lost (`lostAnswerRate`): counted in `byStatus` too.
    public var answersLost = 0
    public var goAways = 0
    public var channelsCreated = 0
    public var channelsDeleted = 0
    /// Accepted pushes a device would not show (timestamp regressions, updates after end).
    public var notDisplayed = 0
    /// Accepted priority-10 updates and starts past their budget.
    public var overBudget = 0
    /// Accepted pushes that a device (or channel) view counted as a repeated state or a
    /// repeated alert (`DeviceView.repeatedStates`, `repeatedAlerts`), summed over every view.
    public var repeatedStates = 0
    public var repeatedAlerts = 0
    /// Distinct provider tokens verified with ECDSA (each is verified once while cached).
    public var tokenVerifications = 0

    public init() {}

    public var json: JSONValue {
        .object([
            "requests": .int(Int64(requests)), "delivered": .int(Int64(delivered)),
            "devicePushes": .int(Int64(devicePushes)), "lastDevicePushMicros": .int(lastDevicePushMicros),
            "broadcasts": .int(Int64(broadcasts)),
            "rejected": .int(Int64(rejected)),
            "byReason": .object(byReason.mapValues { .int(Int64($0)) }),
            "byStatus": .object(Dictionary(uniqueKeysWithValues: byStatus.map { (String($0.key), JSONValue.int(Int64($0.value))) })),
            "faultsInjected": .int(Int64(faultsInjected)), "slowResponses": .int(Int64(slowResponses)),
            "connectionResets": .int(Int64(connectionResets)), "answersLost": .int(Int64(answersLost)), "goAways": .int(Int64(goAways)),
            "channelsCreated": .int(Int64(channelsCreated)), "channelsDeleted": .int(Int64(channelsDeleted)),
            "notDisplayed": .int(Int64(notDisplayed)), "overBudget": .int(Int64(overBudget)),
            "repeatedStates": .int(Int64(repeatedStates)), "repeatedAlerts": .int(Int64(repeatedAlerts)),
            "tokenVerifications": .int(Int64(tokenVerifications)),
        ])
    }
}
