import ActivityCastCore
import Foundation
import RedisClient

/// What an app's backend needs to hear, on `<prefix>:outcomes` (docs/schema.md, "Outcomes"):
/// a capped stream it reads with `XREAD` or a consumer group of its own. Each entry has `type`,
/// `at` (ms) and the fields of its kind; tokens are whole (the backend's own data).
enum Outcome: Sendable {
    /// An activity token APNs said is dead (410, BadDeviceToken, …), forgotten here.
    case tokenForgotten(key: ActivityKey, device: String, activity: String, token: String, reason: String, invalidSince: Int64?, env: String)
    /// A push-to-start token APNs said is dead, forgotten here.
    case startTokenForgotten(device: String, activityType: String, token: String, reason: String, invalidSince: Int64?)
    /// A push-to-start APNs accepted.
    case startDelivered(key: ActivityKey, device: String, activityType: String)
    /// A push-to-start that got no answer: it may have started the activity; not sent again.
    case startUnknown(key: ActivityKey, device: String, activityType: String)
    /// A push given up: a permanent failure, or still failing after `fanout.token_attempts`.
    case tokenFailed(key: ActivityKey, kind: String, token: String, reason: String)
    /// The key's end went out: its devices' activities are over.
    case keyEnded(key: ActivityKey, endedMillis: Int64)

    var fields: [(String, String)] {
        switch self {
        case let .tokenForgotten(key, device, activity, token, reason, since, env):
            [("type", "token.forgotten"), ("key", key.description), ("device", device), ("activity", activity), ("token", token),
             ("env", env), ("reason", reason)] + (since.map { [("invalid_since", String($0))] } ?? [])
        case let .startTokenForgotten(device, type, token, reason, since):
            [("type", "start_token.forgotten"), ("device", device), ("activity_type", type), ("token", token), ("reason", reason)]
                + (since.map { [("invalid_since", String($0))] } ?? [])
        case let .startDelivered(key, device, type):
            [("type", "start.delivered"), ("key", key.description), ("device", device), ("activity_type", type)]
        case let .startUnknown(key, device, type):
            [("type", "start.unknown"), ("key", key.description), ("device", device), ("activity_type", type)]
        case let .tokenFailed(key, kind, token, reason):
            [("type", "token.failed"), ("key", key.description), ("kind", kind), ("token", token), ("reason", reason)]
        case let .keyEnded(key, ms):
            [("type", "key.ended"), ("key", key.description), ("ts", String(ms))]
        }
    }

    /// Its `XADD` (capped at about `maxLength`), or nil when the stream is off (0).
    func command(_ keys: RedisKeys, maxLength: Int) -> RedisCommand? {
        guard maxLength > 0 else { return nil }
        var args: [any RedisArgument] = [keys.outcomes, "MAXLEN", "~", maxLength, "*"]
        for (name, value) in fields { args += [name, value] }
        args += ["at", Int64(Date().timeIntervalSince1970 * 1000)]
        return RedisCommand("XADD", args)
    }
}
