import ActivityCastCore
import APNsCore

/// A broadcast after the lock-free checks.
struct BroadcastCandidate: Sendable {
    var duplicate: Bool
    var authorization: ArraySlice<UInt8>?
    var bundle: String?
    /// The first header error (checked before the channel's state).
    var headerError: APNsReason?
    /// The body error (checked after the channel's state).
    var payloadError: APNsReason?
    var channelID = ""
    var priority = 10
    var expiration: Int64 = 0
    var collapseID: String?
    var payload: ScannedPayload?
    var body: [UInt8] = []
}

extension SandboxState {
    /// Broadcast body limit.
    static let maxBroadcastPayload = 5120

    /// `POST /4/broadcasts/apps/<bundle>`. Checks, in order: the bundle isn't one of ours →
    /// `TopicDisallowed`; broadcast not enabled for it → `FeatureNotEnabled`; `apns-push-type`
    /// missing → `MissingPushType`, not `liveactivity` → `InvalidPushType`; `apns-request-id`
    /// present but not a UUID → `BadRequestParams` (Apple names no reason for this);
    /// `apns-channel-id` missing → `MissingChannelId`, not canonical base64 → `BadChannelId`;
    /// `apns-priority` missing or not 10, 5 or 1 → `BadPriority`; `apns-expiration` missing or not
    /// a non-negative integer → `BadExpirationDate`; `apns-collapse-id` over 64 bytes →
    /// `BadCollapseId`. Then the channel: unknown, deleted or another app's →
    /// `ChannelNotRegistered`; storage policy 0 with an expiration other than 0 →
    /// `BadExpirationDate`. Then the body: empty → `PayloadEmpty`, over 5120 bytes → 413, a
    /// `start` event or anything `PayloadScanner` refuses → `BadRequestPayload`.
    ///
    /// Success: 200 with `apns-request-id` (echoed or new) and `apns-unique-id`.
    func handleBroadcast(_ request: SandboxRequest, _ h: RequestHeaders, bundle: String, nowMicros: Int64) -> SandboxResponse {
        let (requestID, badRequestID) = requestID(h)
        var c = BroadcastCandidate(duplicate: h.duplicate, authorization: h.authorizationBytes)
        if settings.bundles.contains(bundle) { c.bundle = bundle }
        let headerError = validateBroadcastHeaders(&c, h, badRequestID: badRequestID)
        c.headerError = headerError
        if headerError == nil {
            let body = request.body
            if body.isEmpty {
                c.payloadError = .payloadEmpty
            } else if body.count > Self.maxBroadcastPayload {
                c.payloadError = .payloadTooLarge
            } else if let payload = payloads.scan(body), payload.event != .start {
                c.payload = payload
                c.body = body
            } else {
                c.payloadError = .badRequestPayload
            }
        }
        let connection = request.connectionID
        let candidate = c
        let outcome = locked { store, verified in
            store.broadcast(candidate, settings: settings, connection: connection, verified: verified, nowMicros: nowMicros,
                            requestID: requestID)
        }
        return response(outcome, idName: "apns-request-id", id: requestID, uniqueID: true)
    }

    /// The request's `apns-request-id` if it is a UUID (either case; echoed as given), else a new
    /// one; and whether a malformed one was given.
    func requestID(_ h: RequestHeaders) -> (MessageID, Bool) {
        if let given = h.requestID {
            return HeaderValue.isUUID(given, lowercase: false) ? (.text(given), false) : (ids.nextID(), true)
        }
        return (ids.nextID(), false)
    }

    /// `TopicDisallowed` or `FeatureNotEnabled` for the app named in a broadcast or channel path.
    func bundleError(_ bundle: String?) -> APNsReason? {
        guard let bundle else { return .topicDisallowed }
        return settings.broadcastBundles.contains(bundle) ? nil : .featureNotEnabled
    }

    private func validateBroadcastHeaders(_ c: inout BroadcastCandidate, _ h: RequestHeaders, badRequestID: Bool) -> APNsReason? {
        if let e = bundleError(c.bundle) { return e }
        guard let pushType = h.pushType else { return .missingPushType }
        guard pushType == "liveactivity" else { return .invalidPushType }
        if badRequestID { return .badRequestParams }
        guard let channel = h.channelID else { return .missingChannelId }
        guard HeaderValue.isBase64(channel) else { return .badChannelId }
        c.channelID = channel
        switch h.priority {
        case "10": c.priority = 10
        case "5": c.priority = 5
        case "1": c.priority = 1
        default: return .badPriority
        }
        guard let e = h.expiration, let expiration = HeaderValue.nonNegativeInteger(e) else { return .badExpirationDate }
        c.expiration = expiration
        if let collapse = h.collapseID {
            guard collapse.utf8.count <= 64 else { return .badCollapseId }
            c.collapseID = collapse
        }
        return nil
    }
}

extension SandboxStore {
    mutating func broadcast(_ c: BroadcastCandidate, settings: SandboxSettings, connection: UInt64, verified: ProviderTokenCheck?,
                            nowMicros: Int64, requestID: MessageID) -> Locked {
        let now = nowMicros / 1000
        var effects = Effects()
        let bundleIndex = c.bundle.flatMap { settings.bundleIndex[$0] }
        switch gate(settings, .broadcast, connection: connection, duplicate: c.duplicate, authorization: c.authorization, bundle: bundleIndex,
                    verified: verified, nowMillis: now, effects: &effects) {
        case .verify(let authorization): return .verify(authorization)
        case .stop(let o): return finish(o, effects: effects)
        case .pass: break
        }
        if let error = c.headerError { return finish(Outcome(error), effects: effects) }
        guard let bundle = c.bundle, let bundleIndex, let record = channels[c.channelID], !record.view.deleted,
              record.view.bundleID == bundle else {
            return finish(Outcome(.channelNotRegistered), effects: effects)
        }
        if !faults.failingChannels.isEmpty, faults.failingChannels.contains(c.channelID) {
            return finish(Outcome(.internalServerError), effects: effects)
        }
        if record.view.messageStoragePolicy == 0 && c.expiration != 0 { return finish(Outcome(.badExpirationDate), effects: effects) }
        if let error = c.payloadError { return finish(Outcome(error), effects: effects) }
        guard let payload = c.payload else { return finish(Outcome(.badRequestPayload), effects: effects) }
        let effect = channels[c.channelID]!.view.apply(payload, body: c.body, priority: c.priority, startBudget: .max, nowMillis: now)
        deliveries.append(DeliveryRecord(timeMillis: now, receivedMicros: nowMicros,
                                         kind: .broadcast, recipient: .channel(c.channelID), bundle: bundleIndex,
                                         priority: c.priority, event: payload.event, timestamp: payload.timestamp, apnsID: requestID,
                                         expiration: c.expiration, collapseID: c.collapseID, displayed: effect.displayed,
                                         overBudget: effect.overBudget, alert: payload.alert != nil,
                                         contentState: payload.contentState.map { RawJSON(source: c.body, range: $0) }))
        counters.delivered += 1
        counters.broadcasts += 1
        if !effect.displayed { counters.notDisplayed += 1 }
        if effect.repeatedState { counters.repeatedStates += 1 }
        if effect.repeatedAlert { counters.repeatedAlerts += 1 }
        return finish(Outcome(status: 200), effects: effects)
    }
}
