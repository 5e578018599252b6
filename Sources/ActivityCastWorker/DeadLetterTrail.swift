import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import ActivityCastSettings
import RedisClient

/// A feed entry dead-lettered before its plan, on its key's trail.
struct DeadLetterTrail {
    let routes: RouteSet
    let keys: RedisKeys
    let settings: Settings

    /// The trail record of a feed entry dead-lettered before it was planned (its key from its
    /// route's key fields, when it has them): `m` `dead-lettered`, why in `w:merge`. An entry
    /// refused at sending is on its trail already (`refused`, by the send path).
    func commands(feed: Settings.Feed, entry: StreamEntry, reason: String) -> [RedisCommand] {
        guard settings.traceMaxRecords > 0, feed.kind != .registrations, let fields = entry.fields else { return [] }
        var raw: [RawField] = []
        var i = 0
        while i + 1 < fields.count { raw.append(RawField(name: fields[i], value: fields[i + 1])); i += 2 }
        func value(_ name: String) -> String? {
            raw.first { $0.name.elementsEqual(name.utf8) }.map { String(decoding: $0.value.prefix(200), as: UTF8.self) }
        }
        guard let type = value("type"), let key = routes.key(feed: feed.kind, type: type, fields: raw) else { return [] }
        var f = ["e": "\(feed.stream)/\(entry.id)", "ty": type, "ev": "none", "m": "dead-lettered", "w:merge": reason]
        if let ts = value("ts") { f["ts"] = ts }
        return Trail.commands(keys, key, [TrailRecord(.event, f)], maxRecords: settings.traceMaxRecords,
                              ttlSeconds: settings.activityTTLSeconds + settings.traceRetentionSeconds)
    }
}
