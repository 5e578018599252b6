import ActivityCastCore
import ActivityCastSend
import RedisClient

/// The Redis commands an entry causes, in up to two dependent pipelines: `first` always, then
/// `second(firstReplies)` for writes that must only happen if a first-phase script accepted the
/// registration as newest (index sets, follower sets). Error replies in either phase fail the
/// entry, which then stays pending and is retried.
struct EntryEffects: Sendable {
    var first: [RedisCommand] = []
    var second: (@Sendable ([RESPValue]) -> [RedisCommand])? = nil
    /// Registrations ignored as older than what is stored; counted for `inspect`, not errors.
    var staleIfZero: Int? = nil
    /// Once both phases succeeded: written in the entry's acknowledgement, before its `XACK`.
    var done: [RedisCommand] = []
    /// An activity token to catch up with its key's state once its registration was accepted:
    /// an activity new to the key (`first[0]` answered 1), or one that says which state it shows
    /// (`state_ts`; answered 2: a token rotated or registered again, whose activity was kept
    /// current through its earlier token, is not caught up without it).
    var catchUp: CatchUp? = nil
}

/// Turns registrations into Redis writes following docs/schema.md's layout.
struct Registrar: Sendable {
    let keys: RedisKeys
    let activityTTLSeconds: Int
    let deviceTTLSeconds: Int
    /// The key's trail (`trace.*`): a registration that changed a key's audience is on it.
    var trailMaxRecords = 0
    var trailRetentionSeconds = 86_400

    /// The trail record of a registration applied to `key`.
    func trail(_ key: ActivityKey, _ fields: [String: String]) -> [RedisCommand] {
        Trail.commands(keys, key, [TrailRecord(.registration, fields)], maxRecords: trailMaxRecords,
                       ttlSeconds: activityTTLSeconds + trailRetentionSeconds)
    }

    func effects(of registration: Registration, timestampMillis ts: Int64) -> EntryEffects {
        switch registration {
        case let .activityToken(device, key, activity, token, settings, stateMillis):
            let catchUp = CatchUp(key: key, activity: activity, stateMillis: stateMillis)
            let meta = RegistrationMeta.written(device: device, settings)
            var first: [RedisCommand] = [
                .script(RegistrationScripts.activityToken, keys: [keys.tokens(key), keys.meta(key), keys.tokenOwners(key), keys.direct(key)],
                        args: [activity, token, ts, meta, activityTTLSeconds]),
                activityField(device, ts, key, activity, live: true),
                RedisCommand("ZADD", keys.keysIndex, "GT", ts, key.description),
            ]
            first += settingsCommand(device, ts, settings)
            var fields = ["what": "token", "device": device, "activity": activity, "token": String(token.prefix(8)) + "…", "ts": String(ts)]
            if let env = settings.env { fields["env"] = env.rawValue }
            if let tier = settings.tier { fields["tier"] = tier.rawValue }
            if let b = settings.broadcast { fields["broadcast"] = b ? "1" : "0" }
            let trailNew = self.trail(key, fields)
            fields["what"] = "token again"
            let trailAgain = self.trail(key, fields)
            // A device on broadcast: the key's next event makes its channel (none before: a key
            // nobody follows has no channel).
            let channels = keys.channels(key), ttl = activityTTLSeconds, broadcast = settings.broadcast == true
            return EntryEffects(first: first, second: { replies in
                guard let applied = replies[0].int, applied >= 1 else { return [] }
                // The trail says whether the activity is new to the key (1) or registered again (2).
                return (broadcast ? [RedisCommand("HSET", channels, "want", 1), RedisCommand("EXPIRE", channels, ttl)] : []) + (applied == 1 ? trailNew : trailAgain)
            }, staleIfZero: 0, catchUp: catchUp)

        case let .startToken(device, activityType, token, settings):
            var first = [deviceField(device, ts, field: "start:\(activityType)", value: token)]
            first += settingsCommand(device, ts, settings)
            let membership = startTokenMembership(device, activityType, ts, add: true)
            let types = keys.activityTypes
            return EntryEffects(first: first, second: { replies in
                replies[0] == .integer(1) ? [membership, RedisCommand("SADD", types, activityType)] : []
            }, staleIfZero: 0)

        case let .follow(device, target), let .unfollow(device, target):
            let following: Bool
            if case .follow = registration { following = true } else { following = false }
            let membership = followMembership(device, target, ts, follow: following)
            let targets = keys.targets
            return EntryEffects(first: [deviceField(device, ts, field: "follow:\(target)", value: following ? "1" : "0")], second: { replies in
                guard replies[0] == .integer(1) else { return [] }
                return following ? [membership, RedisCommand("SADD", targets, target.description)] : [membership]
            }, staleIfZero: 0)

        case let .device(device, settings):
            return EntryEffects(first: settingsCommand(device, ts, settings), staleIfZero: 0)

        case let .unregisterActivity(device, key, activity):
            let trail = self.trail(key, ["what": "unregister", "device": device, "activity": activity, "ts": String(ts)])
            return EntryEffects(first: [
                .script(RegistrationScripts.forgetActivity, keys: [keys.tokens(key), keys.meta(key), keys.tokenOwners(key), keys.direct(key)], args: [activity, ts, activityTTLSeconds]),
                activityField(device, ts, key, activity, live: false),
            ], second: { replies in (replies[0].int ?? 0) >= 1 ? trail : [] }, staleIfZero: 0)

        case let .unregisterDevice(device):
            let keys = self.keys
            let ttl = activityTTLSeconds
            let registrar = self
            return EntryEffects(first: [
                .script(RegistrationScripts.forgetDevice, keys: [keys.device(device)], args: [ts, deviceTTLSeconds]),
            ], second: { replies in
                guard let fields = replies[0].array else { return [] }
                var cleanup: [RedisCommand] = []
                for field in fields.compactMap(\.string) {
                    if field.hasPrefix("follow:"), let target = FollowTarget(parsing: String(field.dropFirst(7))) {
                        cleanup.append(registrar.followMembership(device, target, ts, follow: false))
                    } else if field.hasPrefix("start:") {
                        cleanup.append(registrar.startTokenMembership(device, String(field.dropFirst(6)), ts, add: false))
                    } else if field.hasPrefix("act:") {
                        let parts = field.dropFirst(4).split(separator: " ", maxSplits: 1)
                        if parts.count == 2, let key = ActivityKey(parsing: String(parts[0])) {
                            cleanup.append(.script(RegistrationScripts.forgetActivity, keys: [keys.tokens(key), keys.meta(key), keys.tokenOwners(key), keys.direct(key)],
                                                   args: [String(parts[1]), ts, ttl]))
                        }
                    }
                }
                return cleanup
            }, done: [RedisCommand("HDEL", keys.device(device), "cleanup:\(ts)")])
        }
    }

    func followMembership(_ device: String, _ target: FollowTarget, _ ts: Int64, follow: Bool) -> RedisCommand {
        .script(RegistrationScripts.membership, keys: [keys.followers(target), keys.followerTimes(target)], args: [device, ts, follow ? "1" : "0"])
    }

    func startTokenMembership(_ device: String, _ activityType: String, _ ts: Int64, add: Bool) -> RedisCommand {
        .script(RegistrationScripts.membership, keys: [keys.startTokens(activityType: activityType), keys.startTokenTimes(activityType: activityType)],
                args: [device, ts, add ? "1" : "0"])
    }

    private func deviceField(_ device: String, _ ts: Int64, field: String, value: String) -> RedisCommand {
        .script(RegistrationScripts.deviceField, keys: [keys.device(device)], args: [ts, deviceTTLSeconds, field, value])
    }

    /// The device's `act:` field for an activity; writing it drops the device's `act:` fields
    /// older than the activity TTL (RegistrationScripts.deviceField).
    private func activityField(_ device: String, _ ts: Int64, _ key: ActivityKey, _ activity: String, live: Bool) -> RedisCommand {
        .script(RegistrationScripts.deviceField, keys: [keys.device(device)],
                args: [ts, deviceTTLSeconds, "act:\(key) \(activity)", live ? "1" : "0", ts - Int64(activityTTLSeconds) * 1000])
    }

    private func settingsCommand(_ device: String, _ ts: Int64, _ settings: DeviceSettings) -> [RedisCommand] {
        var pairs: [any RedisArgument] = []
        if let env = settings.env { pairs += ["env", env.rawValue] }
        if let tier = settings.tier { pairs += ["tier", tier.rawValue] }
        if let broadcast = settings.broadcast { pairs += ["broadcast", broadcast ? "1" : "0"] }
        if pairs.isEmpty { return [] }
        return [.script(RegistrationScripts.deviceSettings, keys: [keys.device(device)], args: [ts, deviceTTLSeconds] + pairs)]
    }
}

