import ActivityCastCore
import RedisClient

/// A feed spread over several streams (`streams.shards`), so that on a Redis Cluster its entries
/// and their reading are spread over several nodes. Every entry of one activity key goes to one
/// shard, so the key's events keep their order (they are read in stream order, by one worker at
/// a time per entry, as from an unsharded feed). Pure: publishers in any language follow the same
/// two rules (docs/schema.md, "Sharded feeds").
public enum FeedShards {
    /// The stream of shard `index` of the feed configured as `feed`: `<feed>:{<index>}`. The hash
    /// tag is the shard's number, so the shards sit in different slots (`CLUSTER KEYSLOT` shows
    /// which), and shard `i` of every feed shares one slot: one worker read takes them together.
    public static func stream(_ feed: String, shard index: Int) -> String { "\(feed):{\(index)}" }

    /// The shard of an entry of activity key `key` (`match:4711`): its Redis Cluster hash slot
    /// (`CLUSTER KEYSLOT match:4711`, CRC16-XMODEM of the key modulo 16384) modulo `count`.
    public static func shard(ofKey key: String, count: Int) -> Int {
        precondition(count >= 1)
        return CommandKeys.slot(Array(key.utf8)) % count
    }

    /// The key an entry is sharded by, from its fields: `match:<match>` on a sports feed;
    /// `trip:<trip>` on a transit feed, or `route:<route>` for a disruption that names only its
    /// route. nil when the fields name none (the entry is malformed: any shard will dead-letter it).
    public static func key(kind: StreamKind, fields: [(String, String)]) -> String? {
        key(kind: kind) { name in fields.first { $0.0 == name }?.1 }
    }

    /// The same from a lookup of one field's value by name (an empty value counts as none).
    public static func key(kind: StreamKind, field: (String) -> String?) -> String? {
        func value(_ name: String) -> String? { field(name).flatMap { $0.isEmpty ? nil : $0 } }
        switch kind {
        case .sports: return value("match").map { "match:\($0)" }
        case .transit: return value("trip").map { "trip:\($0)" } ?? value("route").map { "route:\($0)" }
        case .registrations: return nil
        }
    }
}

extension Settings {
    /// The stream an entry of `kind` with `fields` is published to: the first configured feed of
    /// that kind, and when it is sharded, the shard of the entry's key (shard 0 for an entry
    /// without one). nil when no feed of that kind is configured.
    public func feedStream(_ kind: StreamKind, fields: [(String, String)]) -> String? {
        guard let first = feeds.first(where: { $0.kind == kind }) else { return nil }
        guard let shard = first.shard else { return first.stream }
        let index = FeedShards.key(kind: kind, fields: fields).map { FeedShards.shard(ofKey: $0, count: shard.count) } ?? 0
        return FeedShards.stream(shard.feed, shard: index)
    }
}
