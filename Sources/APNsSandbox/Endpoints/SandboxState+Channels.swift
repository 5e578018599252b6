import ActivityCastCore
import APNsCore
import OpenSSLKit

enum ChannelOperation: Sendable { case create, read, delete, list }

/// A channel-management request after the lock-free checks.
struct ChannelCandidate: Sendable {
    var operation: ChannelOperation
    var duplicate: Bool
    var authorization: ArraySlice<UInt8>?
    var bundle: String?
    var error: APNsReason?
    var channelID = ""
    var storagePolicy = 0
    /// For create: the id to give the new channel.
    var newChannelID = ""
}

extension SandboxState {
    /// Channel management (`/1/apps/<bundle>/channels` and `/all-channels`). Checks, in order: the
    /// bundle isn't one of ours → `TopicDisallowed`; broadcast not enabled for it →
    /// `FeatureNotEnabled`; `apns-request-id` present but not a UUID → `BadRequestParams`. Then:
    /// - create (POST): the body must be exactly `{"message-storage-policy":0|1,"push-type":"LiveActivity"}`
    ///   (key order and whitespace free): no `push-type` → `MissingPushType`, another push type →
    ///   `InvalidPushType`, anything else wrong (empty, not JSON, other keys, other policy) →
    ///   `BadRequestParams`; `maxChannels` live channels for the app already →
    ///   `CannotCreateChannelConfig`. 201 with `apns-channel-id` (base64 of 16 random bytes).
    /// - read (GET) and delete (DELETE): `apns-channel-id` missing → `MissingChannelId`, not
    ///   base64 → `BadChannelId`, unknown, deleted or another app's → `ChannelNotRegistered`.
    ///   Read: 200 `{"message-storage-policy":N,"push-type":"LiveActivity"}`; delete: 204, final.
    /// - list (GET all-channels): 200 `{"channels":[…]}`, live channels in creation order.
    /// Every response carries `apns-request-id` (echoed or new). No `apns-push-type` or
    /// `apns-topic` header is needed: the app is in the path and the push type in the body.
    func handleChannels(_ request: SandboxRequest, _ h: RequestHeaders, bundle: String, operation: ChannelOperation,
                        nowMillis: Int64) -> SandboxResponse {
        let (requestID, badRequestID) = requestID(h)
        var c = ChannelCandidate(operation: operation, duplicate: h.duplicate, authorization: h.authorizationBytes)
        if settings.bundles.contains(bundle) { c.bundle = bundle }
        let error = validateChannelRequest(&c, h, body: request.body, badRequestID: badRequestID)
        c.error = error
        if operation == .create && error == nil { c.newChannelID = Base64.encode(secureRandomBytes(16)) }
        let connection = request.connectionID
        let candidate = c
        let outcome = locked { store, verified in
            store.manageChannel(candidate, settings: settings, connection: connection, verified: verified, nowMillis: nowMillis)
        }
        var response = response(outcome, idName: "apns-request-id", id: requestID, uniqueID: false)
        if outcome.reason == nil && outcome.effects.fault != .reset {
            switch operation {
            case .create:
                response.headers.append(name: "apns-channel-id", value: outcome.channelID ?? "")
            case .read:
                response.body = JSONValue.object(["message-storage-policy": .int(Int64(outcome.storagePolicy ?? 0)),
                                                  "push-type": "LiveActivity"]).encoded()
            case .list:
                response.body = JSONValue.object(["channels": .array((outcome.channelIDs ?? []).map(JSONValue.string))]).encoded()
            case .delete:
                break
            }
        }
        return response
    }

    private func validateChannelRequest(_ c: inout ChannelCandidate, _ h: RequestHeaders, body: [UInt8],
                                        badRequestID: Bool) -> APNsReason? {
        if let e = bundleError(c.bundle) { return e }
        if badRequestID { return .badRequestParams }
        switch c.operation {
        case .create:
            guard case .object(let members)? = JSONValue.parse(body) else { return .badRequestParams }
            guard let pushType = members["push-type"] else { return .missingPushType }
            guard pushType == "LiveActivity" else { return .invalidPushType }
            guard members.count == 2, case .int(let policy)? = members["message-storage-policy"], policy == 0 || policy == 1 else {
                return .badRequestParams
            }
            c.storagePolicy = Int(policy)
        case .read, .delete:
            guard let channel = h.channelID else { return .missingChannelId }
            guard HeaderValue.isBase64(channel) else { return .badChannelId }
            c.channelID = channel
        case .list:
            break
        }
        return nil
    }
}

extension SandboxStore {
    mutating func manageChannel(_ c: ChannelCandidate, settings: SandboxSettings, connection: UInt64, verified: ProviderTokenCheck?,
                                nowMillis now: Int64) -> Locked {
        var effects = Effects()
        switch gate(settings, .channels, connection: connection, duplicate: c.duplicate, authorization: c.authorization,
                    bundle: c.bundle.flatMap { settings.bundleIndex[$0] },
                    verified: verified, nowMillis: now, effects: &effects) {
        case .verify(let authorization): return .verify(authorization)
        case .stop(let o): return finish(o, effects: effects)
        case .pass: break
        }
        if let error = c.error { return finish(Outcome(error), effects: effects) }
        guard let bundle = c.bundle else { return finish(Outcome(.topicDisallowed), effects: effects) }
        switch c.operation {
        case .create:
            guard activeChannels[bundle, default: 0] < settings.configuration.maxChannels, channels[c.newChannelID] == nil else {
                return finish(Outcome(.cannotCreateChannelConfig), effects: effects)
            }
            channelSequence += 1
            // A broadcast reaches subscribers of any tier, so a channel is held to the standard
            // device budget (whether a broadcast at 10 spends each device's budget is undocumented).
            var view = DeviceView(kind: .channel, id: c.newChannelID, bundleID: bundle, tier: nil,
                                  budgetPerHour: settings.configuration.budget(for: .standard), nowMillis: now)
            view.messageStoragePolicy = c.storagePolicy
            channels[c.newChannelID] = ChannelRecord(sequence: channelSequence, view: view)
            activeChannels[bundle, default: 0] += 1
            counters.channelsCreated += 1
            var o = Outcome(status: 201)
            o.channelID = c.newChannelID
            return finish(o, effects: effects)
        case .read, .delete:
            guard let record = channels[c.channelID], !record.view.deleted, record.view.bundleID == bundle else {
                return finish(Outcome(.channelNotRegistered), effects: effects)
            }
            if c.operation == .read {
                var o = Outcome(status: 200)
                o.storagePolicy = record.view.messageStoragePolicy
                return finish(o, effects: effects)
            }
            channels[c.channelID]!.view.deleted = true
            activeChannels[bundle, default: 1] -= 1
            counters.channelsDeleted += 1
            return finish(Outcome(status: 204), effects: effects)
        case .list:
            var o = Outcome(status: 200)
            o.channelIDs = channels.values.filter { !$0.view.deleted && $0.view.bundleID == bundle }
                .sorted { $0.sequence < $1.sequence }.map(\.view.id)
            return finish(o, effects: effects)
        }
    }
}
