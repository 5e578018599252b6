import ActivityCastCore
import APNsCore

/// A device push after the lock-free checks. A class: it is handed into the lock by reference
/// instead of copying a dozen fields.
final class DeviceCandidate {
    let duplicate: Bool
    let authorization: ArraySlice<UInt8>?
    /// The app (index in `SandboxSettings.bundleNames`) named by a valid, allowed topic.
    var bundle: Int?
    /// The first header or body error, if any.
    var error: APNsReason?
    var token: TokenKey?
    var priority = 10
    var expiration: Int64?
    var collapseID: String?
    var payload: ScannedPayload?
    /// The request body, which `payload`'s ranges point into.
    var body: [UInt8] = []

    init(duplicate: Bool, authorization: ArraySlice<UInt8>?) {
        self.duplicate = duplicate
        self.authorization = authorization
    }
}

extension SandboxState {
    /// Device push limit (bytes of body).
    static let maxDevicePayload = 4096

    /// `POST /3/device/<token>`. Header checks, in order: `apns-push-type` missing or not
    /// `liveactivity` → `InvalidPushType`; `apns-topic` missing → `MissingTopic`, malformed →
    /// `BadTopic`, not `<allowed bundle>.push-type.liveactivity` → `TopicDisallowed`; `apns-id`
    /// not a lowercase UUID → `BadMessageId`; `apns-priority` other than 10 or 5 (absent: 10) →
    /// `BadPriority`; `apns-expiration` not a non-negative integer → `BadExpirationDate`;
    /// `apns-collapse-id` over 64 bytes → `BadCollapseId`; token empty → `MissingDeviceToken`, not
    /// 32–512 hex digits in pairs → `BadDeviceToken`. Then the body (empty → `PayloadEmpty`,
    /// over 4096 bytes → 413, else `PayloadScanner`'s rules → `BadRequestPayload`; Apple's
    /// device endpoint is vaguer about which reason a malformed payload gets), then the token's
    /// state (410 `Unregistered` with its timestamp, 410 `ExpiredToken`, and
    /// `DeviceTokenNotForTopic` when the token was first used with another app's topic).
    ///
    /// Success: 200, empty body, `apns-id` (the request's, else a new one) and, in development,
    /// `apns-unique-id`. Errors carry `apns-id` too.
    func handleDevice(_ request: SandboxRequest, _ headers: RequestHeaders, token: PathToken, nowMicros: Int64) -> SandboxResponse {
        let apnsID: MessageID
        var badID = false
        if let given = headers.withValue(headers.apnsIDIndex, { $0.flatMap(MessageID.init(lowercaseUUID:)) }) {
            apnsID = given
        } else {
            apnsID = ids.nextID()
            badID = headers.apnsIDIndex != nil
        }
        let candidate = checkDevice(headers, token: token, body: request.body, badID: badID)
        let connection = request.connectionID
        let outcome = locked { store, verified in
            store.devicePush(candidate, settings: settings, connection: connection, verified: verified, nowMicros: nowMicros,
                             apnsID: apnsID)
        }
        return response(outcome, idName: "apns-id", id: apnsID, uniqueID: settings.development)
    }

    private func checkDevice(_ h: RequestHeaders, token: PathToken, body: [UInt8], badID: Bool) -> DeviceCandidate {
        let c = DeviceCandidate(duplicate: h.duplicate, authorization: h.authorizationBytes)
        c.bundle = h.withValue(h.topicIndex) { $0.flatMap(settings.bundle(forTopic:)) }
        c.error = validateDevice(c, h, token: token, body: body, badID: badID)
        return c
    }

    /// Fills `c` in check order; returns the first error.
    private func validateDevice(_ c: DeviceCandidate, _ h: RequestHeaders, token pathToken: PathToken, body: [UInt8],
                                badID: Bool) -> APNsReason? {
        guard h.value(h.pushTypeIndex, is: "liveactivity") else { return .invalidPushType }
        guard h.topicIndex != nil else { return .missingTopic }
        if c.bundle == nil { return HeaderValue.isWellFormedTopic(h.topic ?? "") ? .topicDisallowed : .badTopic }
        if badID { return .badMessageId }
        if h.priorityIndex == nil || h.value(h.priorityIndex, is: "10") {
            c.priority = 10
        } else if h.value(h.priorityIndex, is: "5") {
            c.priority = 5
        } else {
            return .badPriority
        }
        if h.expirationIndex != nil {
            guard let value = h.withValue(h.expirationIndex, { $0.flatMap(HeaderValue.nonNegativeInteger) }) else { return .badExpirationDate }
            c.expiration = value
        }
        if let collapse = h.collapseID {
            guard collapse.utf8.count <= 64 else { return .badCollapseId }
            c.collapseID = collapse
        }
        switch pathToken {
        case .missing: return .missingDeviceToken
        case .invalid: return .badDeviceToken
        case .valid(let token): c.token = token
        }
        if body.isEmpty { return .payloadEmpty }
        if body.count > Self.maxDevicePayload { return .payloadTooLarge }
        guard let payload = payloads.scan(body) else { return .badRequestPayload }
        c.payload = payload
        c.body = body
        return nil
    }
}

extension SandboxStore {
    mutating func devicePush(_ c: DeviceCandidate, settings: SandboxSettings, connection: UInt64, verified: ProviderTokenCheck?,
                             nowMicros: Int64, apnsID: MessageID) -> Locked {
        let now = nowMicros / 1000
        var effects = Effects()
        switch gate(settings, .device, connection: connection, duplicate: c.duplicate, authorization: c.authorization, bundle: c.bundle,
                    verified: verified, nowMillis: now, effects: &effects) {
        case .verify(let authorization): return .verify(authorization)
        case .stop(let o): return finish(o, effects: effects)
        case .pass: break
        }
        if let error = c.error { return finish(Outcome(error), effects: effects) }
        guard let payload = c.payload, let bundle = c.bundle else { return finish(Outcome(.badRequestPayload), effects: effects) }
        guard let token = c.token else { return finish(Outcome(.badDeviceToken), effects: effects) }
        if !unregistered.isEmpty, let since = unregistered[token] { return finish(Outcome(.unregistered, timestamp: since), effects: effects) }
        if !expired.isEmpty, expired.contains(token) { return finish(Outcome(.expiredToken), effects: effects) }
        if !failing.isEmpty, failing.contains(token) { return finish(Outcome(.internalServerError), effects: effects) }
        guard let record = deviceRecord(token, bundle: bundle, settings: settings, nowMillis: now) else {
            return finish(Outcome(.deviceTokenNotForTopic), effects: effects)
        }
        let effect = record.view.apply(payload, body: c.body, priority: c.priority, startBudget: settings.startBudgetPerHour,
                                       nowMillis: now)
        deliveries.append(DeliveryRecord(timeMillis: now, receivedMicros: nowMicros,
                                         kind: .device, recipient: .device(token), bundle: bundle,
                                         priority: c.priority, event: payload.event, timestamp: payload.timestamp, apnsID: apnsID,
                                         expiration: c.expiration, collapseID: c.collapseID, displayed: effect.displayed,
                                         overBudget: effect.overBudget, alert: payload.alert != nil,
                                         contentState: payload.contentState.map { RawJSON(source: c.body, range: $0) }))
        counters.delivered += 1
        counters.devicePushes += 1
        // Receipt times are taken before the lock, so a later push may carry an earlier time.
        if nowMicros > counters.lastDevicePushMicros { counters.lastDevicePushMicros = nowMicros }
        if !effect.displayed { counters.notDisplayed += 1 }
        if effect.repeatedState { counters.repeatedStates += 1 }
        if effect.repeatedAlert { counters.repeatedAlerts += 1 }
        if effect.overBudget { counters.overBudget += 1 }
        return finish(Outcome(status: 200), effects: effects)
    }
}
