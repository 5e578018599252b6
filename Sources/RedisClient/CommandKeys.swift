/// Which arguments of a command are keys — what a Redis Cluster client routes a command by (as
/// Redis's own key specs, and valkey-swift's commands, say it). Every command this codebase
/// sends is in `CommandKeys.table`; in debug builds the connection checks that (an unknown
/// command fails the test that sends it) and that a script's keys share one hash slot.
public enum CommandKeys {
    public enum Spec: Sendable, Equatable {
        /// No key: the node's (`PING`, `INFO`, `TIME`, `SCAN`, …).
        case none
        /// The argument at this index (the name is 0).
        case at(Int)
        /// Every argument from this index on (`DEL`, `UNLINK`, `EXISTS`).
        case all(from: Int)
        /// `EVAL`/`EVALSHA`: the count at index 2, the keys after it.
        case script
        /// `XREADGROUP`/`XREAD`: the first half of the arguments after `STREAMS`.
        case streams
        /// `MIGRATE host port key|"" db timeout … [KEYS k …]`: the key at index 3, or, when that is
        /// empty, every argument after `KEYS`.
        case migrate
    }

    public static let table: [String: Spec] = {
        var t: [String: Spec] = [:]
        for name in ["PING", "INFO", "TIME", "DBSIZE", "AUTH", "SELECT", "CLIENT", "SCRIPT", "SCAN", "HELLO", "ASKING", "CLUSTER",
                     "READONLY", "COMMAND", "CONFIG", "FLUSHALL", "DEBUG", "ACL", "SAVE", "BGSAVE", "SHUTDOWN", "REPLICAOF", "ROLE",
                     "FAILOVER", "WAIT", "MULTI", "EXEC", "QUIT",
                     // A pattern, not a key: every node's keys (tests and ops only).
                     "KEYS"] { t[name] = Spec.none }
        for name in ["GET", "SET", "APPEND", "STRLEN", "TYPE", "RPUSH", "LPUSH", "LRANGE", "LLEN", "EXPIRE", "PEXPIRE", "TTL", "PTTL", "PERSIST", "INCR", "INCRBY",
                     "HGET", "HSET", "HMGET", "HDEL", "HINCRBY", "HGETALL", "HVALS", "HKEYS", "HLEN", "HEXISTS", "HSCAN", "HSETNX",
                     "SADD", "SREM", "SCARD", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SRANDMEMBER", "SSCAN",
                     "ZADD", "ZREM", "ZCARD", "ZRANGE", "ZSCAN", "ZRANGEBYSCORE", "ZREMRANGEBYSCORE", "ZCOUNT", "ZSCORE", "ZINCRBY",
                     "XADD", "XLEN", "XRANGE", "XREVRANGE", "XDEL", "XACK", "XPENDING", "XAUTOCLAIM", "XCLAIM", "XTRIM", "XSETID"] {
            t[name] = .at(1)
        }
        // Subcommand, then the key: `XGROUP CREATE <key> …`, `XINFO GROUPS <key>`, `MEMORY USAGE <key>`, `OBJECT ENCODING <key>`.
        for name in ["XGROUP", "XINFO", "MEMORY", "OBJECT"] { t[name] = .at(2) }
        for name in ["DEL", "UNLINK", "EXISTS", "TOUCH"] { t[name] = .all(from: 1) }
        for name in ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO"] { t[name] = .script }
        for name in ["XREADGROUP", "XREAD"] { t[name] = .streams }
        t["MIGRATE"] = .migrate
        return t
    }()

    /// The key arguments of `arguments` (a command's), or nil when the command isn't in the table.
    public static func keys(_ arguments: [[UInt8]]) -> [[UInt8]]? {
        guard let first = arguments.first, let spec = table[String(decoding: first, as: UTF8.self).uppercased()] else { return nil }
        switch spec {
        case .none:
            return []
        case .at(let i):
            // `XINFO HELP`, `MEMORY STATS`: a subcommand without a key.
            return arguments.count > i ? [arguments[i]] : []
        case .all(let from):
            return arguments.count > from ? Array(arguments[from...]) : []
        case .script:
            guard arguments.count > 2, let n = Int(String(decoding: arguments[2], as: UTF8.self)), n >= 0, arguments.count >= 3 + n else { return nil }
            return Array(arguments[3..<(3 + n)])
        case .streams:
            guard let s = arguments.firstIndex(where: { String(decoding: $0, as: UTF8.self).uppercased() == "STREAMS" }) else { return nil }
            let rest = arguments.count - s - 1
            guard rest > 0, rest % 2 == 0 else { return nil }
            return Array(arguments[(s + 1)..<(s + 1 + rest / 2)])
        case .migrate:
            guard arguments.count > 5 else { return nil }
            if !arguments[3].isEmpty { return [arguments[3]] }
            guard let k = arguments[6...].firstIndex(where: { String(decoding: $0, as: UTF8.self).uppercased() == "KEYS" }) else { return nil }
            return Array(arguments[(k + 1)...])
        }
    }

    /// A key's hash slot in a Redis Cluster: CRC16 (XMODEM) of the key, or of its hash tag (the
    /// bytes between the first `{` and the next `}`, when not empty), modulo 16384.
    public static func slot(_ key: [UInt8]) -> Int {
        var bytes = key[...]
        if let open = key.firstIndex(of: UInt8(ascii: "{")), let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1 {
            bytes = key[(open + 1)..<close]
        }
        var crc: UInt16 = 0
        for b in bytes {
            crc ^= UInt16(b) << 8
            for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        }
        return Int(crc) & 16383
    }
}

extension RedisCommand {
    /// Its key arguments (`CommandKeys`); nil for a command the table doesn't know.
    public var keys: [[UInt8]]? { CommandKeys.keys(arguments) }

    /// Debug builds: a command must say its keys, and a script's keys must share one slot
    /// (what a cluster requires, and what `{key}` hash tags are for).
    func checkKeys() {
        #if DEBUG
        guard let keys else { preconditionFailure("\(name): not in CommandKeys.table, so nothing knows its keys") }
        if name == "EVALSHA" || name == "EVAL", let first = keys.first {
            let slot = CommandKeys.slot(first)
            precondition(keys.allSatisfy { CommandKeys.slot($0) == slot },
                         "a script's keys in more than one hash slot: \(keys.map { String(decoding: $0, as: UTF8.self) })")
        }
        #endif
    }
}
