/// A Redis node's address: where a seed, a `MOVED`/`ASK` redirection or the slot map points.
public struct RedisNodeAddress: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port` as Redis writes it in `MOVED`/`ASK` replies and `CLUSTER NODES` (an IPv6
    /// address unbracketed: the last colon splits), or bracketed as in a URL. The host may be
    /// empty (an unknown endpoint: "the node you asked"). Nil when there is no valid port.
    public init?(_ text: Substring) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port) else { return nil }
        var host = text[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        self.host = String(host)
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public static func < (a: RedisNodeAddress, b: RedisNodeAddress) -> Bool { (a.host, a.port) < (b.host, b.port) }
}

/// Which primary serves each of a cluster's 16384 hash slots, read from `CLUSTER SHARDS` (Redis
/// 7) or `CLUSTER SLOTS` (older). A pure value: parsing is tested with plain replies, and the
/// cluster client keeps one, patched by `MOVED` and replaced by each refresh.
public struct ClusterSlotMap: Sendable, Equatable {
    public static let slotCount = 16384

    /// A primary, its replicas and the slots it serves.
    public struct Shard: Sendable, Equatable {
        public var primary: RedisNodeAddress
        public var replicas: [RedisNodeAddress]
        public var slots: [ClosedRange<Int>]
        public init(primary: RedisNodeAddress, replicas: [RedisNodeAddress] = [], slots: [ClosedRange<Int>]) {
            self.primary = primary
            self.replicas = replicas
            self.slots = slots
        }
    }

    public private(set) var shards: [Shard]
    /// Every primary that serves a slot, in the order they were first seen (shard order).
    public private(set) var primaries: [RedisNodeAddress]
    /// Per slot, an index into `primaries`; -1 when no node serves it.
    private var owner: [Int16]

    public init(shards: [Shard]) {
        self.shards = shards
        primaries = []
        owner = Array(repeating: -1, count: ClusterSlotMap.slotCount)
        for shard in shards {
            for range in shard.slots {
                for slot in range.clamped(to: 0...(ClusterSlotMap.slotCount - 1)) { assign(slot: slot, to: shard.primary) }
            }
        }
    }

    /// The primary serving `slot`, or nil when none does (a cluster missing slots).
    public func primary(forSlot slot: Int) -> RedisNodeAddress? {
        guard slot >= 0, slot < ClusterSlotMap.slotCount else { return nil }
        let index = owner[slot]
        return index < 0 ? nil : primaries[Int(index)]
    }

    /// How many slots have a primary: 16384 for a cluster that serves every key.
    public var coveredSlots: Int { owner.reduce(0) { $0 + ($1 >= 0 ? 1 : 0) } }

    /// Every node the map names, primaries first: where to ask for a fresh map.
    public var allNodes: [RedisNodeAddress] {
        var seen = Set(primaries)
        var nodes = primaries
        for replica in shards.flatMap(\.replicas) where seen.insert(replica).inserted { nodes.append(replica) }
        return nodes
    }

    /// `MOVED slot node`: the slot is now `node`'s (until the next refresh says otherwise).
    public mutating func assign(slot: Int, to node: RedisNodeAddress) {
        guard slot >= 0, slot < ClusterSlotMap.slotCount else { return }
        if let index = primaries.firstIndex(of: node) {
            owner[slot] = Int16(index)
        } else {
            primaries.append(node)
            owner[slot] = Int16(primaries.count - 1)
        }
    }

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// The map from a `CLUSTER SHARDS` reply (RESP2: per shard, `slots [start end …] nodes
    /// [[id … port … ip … endpoint … role … health …] …]`). An endpoint of `?` or `""` means the
    /// node's IP, and no IP either means `queried`, the node that answered. `tls`: use each
    /// node's `tls-port`. A shard without a primary that is not failed keeps its failed one, so
    /// the client finds out by connecting and refreshes again.
    public static func parse(shards reply: RESPValue, queried: RedisNodeAddress, tls: Bool = false) throws -> ClusterSlotMap {
        func bad(_ why: String) -> ParseError {
            ParseError(description: "unexpected CLUSTER SHARDS reply (\(why)): \(String(reply.description.prefix(300)))")
        }
        guard let shardValues = reply.array else { throw bad("not an array") }
        var shards: [Shard] = []
        for shardValue in shardValues {
            guard let fields = pairs(shardValue) else { throw bad("a shard is not a list of fields") }
            guard let slotValues = fields["slots"]?.array, slotValues.count % 2 == 0 else { throw bad("no slots list") }
            var slots: [ClosedRange<Int>] = []
            for i in stride(from: 0, to: slotValues.count, by: 2) {
                guard let a = slotValues[i].int, let b = slotValues[i + 1].int, a >= 0, a <= b, b < slotCount else { throw bad("a bad slot range") }
                slots.append(Int(a)...Int(b))
            }
            guard let nodeValues = fields["nodes"]?.array else { throw bad("no nodes list") }
            var primaries: [(RedisNodeAddress, healthy: Bool)] = []
            var replicas: [RedisNodeAddress] = []
            for nodeValue in nodeValues {
                guard let node = pairs(nodeValue) else { throw bad("a node is not a list of fields") }
                let portValue = tls ? (node["tls-port"] ?? node["port"]) : node["port"]
                guard let port = portValue?.int, port > 0, port <= 65535 else { throw bad("a node without a port") }
                let address = RedisNodeAddress(host: host(endpoint: node["endpoint"]?.string, ip: node["ip"]?.string, queried: queried), port: Int(port))
                let healthy = node["health"]?.string.map { $0 != "fail" } ?? true
                switch node["role"]?.string {
                case "master", "primary": primaries.append((address, healthy))
                default: replicas.append(address)
                }
            }
            // A shard that serves no slot routes nothing (a spare, or a primary emptied by migration).
            guard !slots.isEmpty else { continue }
            guard let primary = primaries.first(where: \.healthy)?.0 ?? primaries.first?.0 else { continue }
            shards.append(Shard(primary: primary, replicas: replicas, slots: slots))
        }
        return ClusterSlotMap(shards: shards)
    }

    /// The map from a `CLUSTER SLOTS` reply: per range `[start, end, [ip, port, id, …], replicas…]`.
    /// An empty IP means `queried`'s host. (No TLS ports here: Redis answers with the port clients
    /// use on the connection that asked.)
    public static func parse(slots reply: RESPValue, queried: RedisNodeAddress) throws -> ClusterSlotMap {
        func bad(_ why: String) -> ParseError {
            ParseError(description: "unexpected CLUSTER SLOTS reply (\(why)): \(String(reply.description.prefix(300)))")
        }
        guard let ranges = reply.array else { throw bad("not an array") }
        var byPrimary: [RedisNodeAddress: Int] = [:]
        var shards: [Shard] = []
        for rangeValue in ranges {
            guard let parts = rangeValue.array, parts.count >= 3, let a = parts[0].int, let b = parts[1].int, a >= 0, a <= b, b < slotCount else {
                throw bad("a bad slot range")
            }
            var nodes: [RedisNodeAddress] = []
            for nodeValue in parts[2...] {
                guard let node = nodeValue.array, node.count >= 2, let port = node[1].int, port > 0, port <= 65535 else { throw bad("a bad node") }
                nodes.append(RedisNodeAddress(host: host(endpoint: node[0].string, ip: nil, queried: queried), port: Int(port)))
            }
            let primary = nodes[0]
            if let index = byPrimary[primary] {
                shards[index].slots.append(Int(a)...Int(b))
                for replica in nodes.dropFirst() where !shards[index].replicas.contains(replica) { shards[index].replicas.append(replica) }
            } else {
                byPrimary[primary] = shards.count
                shards.append(Shard(primary: primary, replicas: Array(nodes.dropFirst()), slots: [Int(a)...Int(b)]))
            }
        }
        return ClusterSlotMap(shards: shards)
    }

    /// A flat `[name, value, name, value, …]` array as a dictionary (unknown fields ignored).
    private static func pairs(_ value: RESPValue) -> [String: RESPValue]? {
        guard let items = value.array, items.count % 2 == 0 else { return nil }
        var fields: [String: RESPValue] = [:]
        for i in stride(from: 0, to: items.count, by: 2) {
            guard let name = items[i].string else { return nil }
            fields[name] = items[i + 1]
        }
        return fields
    }

    private static func host(endpoint: String?, ip: String?, queried: RedisNodeAddress) -> String {
        for candidate in [endpoint, ip] {
            if let candidate, !candidate.isEmpty, candidate != "?" { return candidate }
        }
        return queried.host
    }
}
