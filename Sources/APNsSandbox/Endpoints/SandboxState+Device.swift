import ActivityCastCore
import APNsCore

/// A device push after the lock-free checks.
struct DeviceCandidate: Sendable {
    var duplicate: Bool
    var authorization: String?
    /// The app named by a valid, allowed topic.
    var bundle: String?
    /// The first header or body error, if any.
    var error: APNsReason?
    var token = ""
    var priority = 10
    var expiration: Int64?
    var collapseID: String?
    var payload: ScannedPayload?
    var contentState: [UInt8]?
    var alert: [UInt8]?
    var attributes: [UInt8]?
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
    func handleDevice(_ request: SandboxRequest, token: Substring, nowMillis: Int64) -> SandboxResponse {
        let headers = RequestHeaders(request.headers)
        var apnsID: String
        var badID = false
        if let given = headers.apnsID, HeaderValue.isUUID(given, lowercase: true) {
            apnsID = given
        } else {
            apnsID = ids.next()
            badID = headers.apnsID != nil
        }
        let candidate = checkDevice(headers, token: token, body: request.body, badID: badID)
        let connection = request.connectionID
        let outcome = locked { store, verified in
            store.devicePush(candidate, settings: settings, connection: connection, verified: verified, nowMillis: nowMillis,
                             apnsID: apnsID)
        }
        return response(outcome, id: ("apns-id", apnsID), uniqueID: settings.configuration.environment == .development)
    }

    private func checkDevice(_ h: RequestHeaders, token rawToken: Substring, body: [UInt8], badID: Bool) -> DeviceCandidate {
        var c = DeviceCandidate(duplicate: h.duplicate, authorization: h.authorization)
        if let topic = h.topic { c.bundle = settings.allowedTopics[topic] }
        let error = validateDevice(&c, h, token: rawToken, body: body, badID: badID)
        c.error = error
        return c
    }

    /// Fills `c` in check order; returns the first error.
    private func validateDevice(_ c: inout DeviceCandidate, _ h: RequestHeaders, token rawToken: Substring, body: [UInt8],
                                badID: Bool) -> APNsReason? {
        guard h.pushType == "liveactivity" else { return .invalidPushType }
        guard let topic = h.topic else { return .missingTopic }
        if c.bundle == nil { return HeaderValue.isWellFormedTopic(topic) ? .topicDisallowed : .badTopic }
        if badID { return .badMessageId }
        switch h.priority {
        case nil, "10": c.priority = 10
        case "5": c.priority = 5
        default: return .badPriority
        }
        if let e = h.expiration {
            guard let value = HeaderValue.nonNegativeInteger(e) else { return .badExpirationDate }
            c.expiration = value
        }
        if let collapse = h.collapseID {
            guard collapse.utf8.count <= 64 else { return .badCollapseId }
            c.collapseID = collapse
        }
        if rawToken.isEmpty { return .missingDeviceToken }
        guard let token = DeviceToken.normalize(rawToken) else { return .badDeviceToken }
        c.token = token
        if body.isEmpty { return .payloadEmpty }
        if body.count > Self.maxDevicePayload { return .payloadTooLarge }
        guard let payload = PayloadScanner.scan(body) else { return .badRequestPayload }
        c.payload = payload
        c.contentState = payload.contentState.map { Array(body[$0]) }
        c.alert = payload.alert.map { Array(body[$0]) }
        c.attributes = payload.attributes.map { Array(body[$0]) }
        return nil
    }
}

extension SandboxStore {
    mutating func devicePush(_ c: DeviceCandidate, settings: SandboxSettings, connection: UInt64, verified: ProviderTokenCheck?,
                             nowMillis now: Int64, apnsID: String) -> Locked {
        var effects = Effects()
        switch gate(settings, connection: connection, duplicate: c.duplicate, authorization: c.authorization, bundle: c.bundle,
                    verified: verified, nowMillis: now, effects: &effects) {
        case .verify(let authorization): return .verify(authorization)
        case .stop(let o): return finish(o, effects: effects)
        case .pass: break
        }
        if let error = c.error { return finish(Outcome(error), effects: effects) }
        guard let payload = c.payload, let bundle = c.bundle else { return finish(Outcome(.badRequestPayload), effects: effects) }
        if !faults.unregisteredTokens.isEmpty, let since = faults.unregisteredTokens[c.token] {
            return finish(Outcome(.unregistered, timestamp: since), effects: effects)
        }
        if !faults.expiredTokens.isEmpty, faults.expiredTokens.contains(c.token) { return finish(Outcome(.expiredToken), effects: effects) }
        guard bindDevice(c.token, bundle: bundle, settings: settings, nowMillis: now) else {
            return finish(Outcome(.deviceTokenNotForTopic), effects: effects)
        }
        let effect = devices[c.token]!.apply(payload, priority: c.priority, contentState: c.contentState, alert: c.alert,
                                             attributes: c.attributes, startBudget: settings.configuration.startBudgetPerHour,
                                             nowMillis: now)
        deliveries.append(Delivery(timeMillis: now, kind: .device, target: c.token, bundleID: bundle, priority: c.priority,
                                   event: payload.event, timestamp: payload.timestamp, apnsID: apnsID, expiration: c.expiration,
                                   collapseID: c.collapseID, displayed: effect.displayed, overBudget: effect.overBudget))
        stats.delivered += 1
        stats.devicePushes += 1
        if !effect.displayed { stats.notDisplayed += 1 }
        if effect.overBudget { stats.overBudget += 1 }
        return finish(Outcome(status: 200), effects: effects)
    }
}
