/// Redis's memory as `INFO memory` reports it: what the worker exports for Redis sizing alerts
/// (docs/operations.md, "Redis memory") and `inspect` lists per node.
public struct RedisMemory: Sendable, Equatable {
    /// `used_memory`: bytes allocated by Redis for its data (what `maxmemory` is compared with).
    public var used: Int64
    /// `maxmemory`: the limit; 0 when none is set (Redis then grows until the machine refuses).
    public var max: Int64
    /// `maxmemory_policy`: `noeviction` refuses writes at the limit; the others evict keys.
    public var policy: String

    /// From the text of `INFO memory` (`field:value` lines, `\r\n`-separated); nil when it lacks
    /// `used_memory` or `maxmemory`.
    public init?(info: String) {
        var used: Int64?, max: Int64?, policy = ""
        for line in info.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...]
            switch line[..<colon] {
            case "used_memory": used = Int64(value)
            case "maxmemory": max = Int64(value)
            case "maxmemory_policy": policy = String(value)
            default: break
            }
        }
        guard let used, let max else { return nil }
        self.init(used: used, max: max, policy: policy)
    }

    public init(used: Int64, max: Int64, policy: String) {
        self.used = used
        self.max = max
        self.policy = policy
    }

    /// Of a cluster's primaries, the one nearest its limit (the first to refuse writes): the
    /// highest `used / max` among those with a limit, else the most used. nil for none.
    public static func fullest(_ nodes: [RedisMemory]) -> RedisMemory? {
        let limited = nodes.filter { $0.max > 0 }
        if !limited.isEmpty { return limited.max { Double($0.used) / Double($0.max) < Double($1.used) / Double($1.max) } }
        return nodes.max { $0.used < $1.used }
    }
}
