import ActivityCastCore
import APNsCore

/// Why an event can't be sent as it is: dead-letter it with this reason.
public struct PushRejection: Error, Equatable, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

public enum PushBuilder {
    /// `aps` for `plan` with the key's whole `contentState`. `inputPushChannel`/`inputPushToken`
    /// only for starts.
    public static func payload(_ plan: Plan, contentState: [String: JSONValue], inputPushChannel: String? = nil) -> LiveActivityPayload {
        let seconds = plan.timestampMillis / 1000
        let event = plan.event ?? .update
        let alert = plan.alert.map {
            LiveActivityPayload.Alert(title: $0.title, body: $0.body, sound: $0.sound, titleLocKey: $0.titleLocKey,
                                      titleLocArgs: $0.titleLocArgs, locKey: $0.locKey, locArgs: $0.locArgs)
        }
        return LiveActivityPayload(
            event: event, timestamp: seconds, contentState: contentState,
            staleDate: plan.staleAfterSeconds.map { seconds + $0 },
            dismissalDate: event == .end ? plan.dismissAfterSeconds.map { seconds + $0 } : nil,
            relevanceScore: plan.relevanceScore, alert: alert,
            attributesType: event == .start ? plan.attributesType : nil,
            attributes: event == .start ? plan.attributes : nil,
            inputPushToken: event == .start && inputPushChannel == nil,
            inputPushChannel: event == .start ? inputPushChannel : nil)
    }

    /// The encoded payload, or why it can't be sent: over `limit` bytes (nothing is truncated).
    public static func encoded(_ payload: LiveActivityPayload, limit: Int, what: String) -> Result<[UInt8], PushRejection> {
        let bytes = payload.encoded()
        guard bytes.count <= limit else {
            return .failure(PushRejection("payload too large for \(what): \(bytes.count) bytes > \(limit) (Apple's limit); nothing was sent"))
        }
        return .success(bytes)
    }

    /// APNs priority for a plan's class (budgets decide more later): critical 10, routine 5.
    public static func priority(_ plan: Plan) -> Int { plan.priority == .critical ? 10 : 5 }
}

/// What to do with one token after APNs answered.
public enum TokenOutcome: Equatable, Sendable {
    case delivered
    /// The token is dead (410 after its registration, BadDeviceToken, DeviceTokenNotForTopic): forget it.
    case forget(reason: String)
    /// Try again after this long (429 with its delay, 5xx and lost connections with back-off).
    case retry(after: Duration, reason: String)
    /// A permanent failure of this token: record it; the others go on.
    case failed(reason: String)

    /// The outcome of `action` for a token registered at `registeredMillis` (nil: unknown).
    /// A 410 that says the token stopped being valid before it was registered (again) is about an
    /// older registration of the same token: the token is kept and the push is not retried.
    public static func of(_ action: APNsAction, reason: APNsReason?, registeredMillis: Int64?, attempt: Int) -> TokenOutcome {
        let name = reason?.rawValue ?? "no answer"
        switch action {
        case .delivered:
            return .delivered
        case .forgetToken(let invalidSince):
            if let invalidSince, let registeredMillis, registeredMillis > invalidSince {
                return .failed(reason: "\(name) for a registration older than this token's (\(invalidSince) < \(registeredMillis)); token kept")
            }
            return .forget(reason: name)
        case .retryAfter(let delay):
            return .retry(after: delay, reason: name)
        case .retryWithBackoff, .refreshProviderToken:
            let ms = min(10_000, 100 << min(attempt, 7))
            return .retry(after: .milliseconds(ms), reason: name)
        case .fail:
            return .failed(reason: name)
        }
    }
}
