/// What a cluster node's error reply tells the client to do instead of giving the reply to the
/// caller. Pure: parsed from the reply's text.
public enum ClusterRedirect: Sendable, Equatable {
    /// `MOVED slot host:port`: the slot is served by that node now; update the map, send there.
    case moved(slot: Int, to: RedisNodeAddress)
    /// `ASK slot host:port`: the slot is migrating and this key is (or will be) on that node: send
    /// `ASKING` and the command there, once; the map stays as it is.
    case ask(slot: Int, to: RedisNodeAddress)

    /// Parses `MOVED 3999 127.0.0.1:6381` and `ASK 3999 127.0.0.1:6381`. An empty host (Redis
    /// with `cluster-preferred-endpoint-type unknown-endpoint`) means the node that replied:
    /// `replyingNode`'s host is used.
    public init?(errorReply message: String, replyingNode: RedisNodeAddress? = nil) {
        let parts = message.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count >= 3, let slot = Int(parts[1]), slot >= 0, slot < ClusterSlotMap.slotCount,
              var node = RedisNodeAddress(parts[2]) else { return nil }
        if node.host.isEmpty {
            guard let replyingNode else { return nil }
            node.host = replyingNode.host
        }
        switch parts[0] {
        case "MOVED": self = .moved(slot: slot, to: node)
        case "ASK": self = .ask(slot: slot, to: node)
        default: return nil
        }
    }

    /// Error replies after which the same command can be sent again a little later, to the same
    /// slot: it did not run. `TRYAGAIN` (a multi-key command during a migration), `CLUSTERDOWN`
    /// (the cluster can't serve the slot now, e.g. during a failover), `LOADING` (a node that
    /// restarted is loading its data).
    public static func isTransient(_ message: String) -> Bool {
        message.hasPrefix("TRYAGAIN") || message.hasPrefix("CLUSTERDOWN") || message.hasPrefix("LOADING")
    }
}
