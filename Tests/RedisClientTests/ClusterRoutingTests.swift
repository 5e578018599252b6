import HiredisCodec
import RedisClient
import Testing

/// The cluster client's pure parts, with plain values: slot maps from `CLUSTER SHARDS` and
/// `CLUSTER SLOTS` replies, `MOVED`/`ASK` replies, a pipeline cut by slot and put back in order.
private func bulkText(_ s: String) -> RESPValue { RESPValue.bulk(Array(s.utf8)) }

@Suite struct ClusterRoutingTests {
    private func node(_ fields: [(String, RESPValue)]) -> RESPValue {
        .array(fields.flatMap { [bulkText($0.0), $0.1] })
    }

    private func shard(slots: [Int64], nodes: [RESPValue]) -> RESPValue {
        .array([bulkText("slots"), .array(slots.map { .integer($0) }), bulkText("nodes"), .array(nodes)])
    }

    private func shardNode(port: Int64, role: String, health: String = "online", endpoint: String = "127.0.0.1", tlsPort: Int64? = nil) -> RESPValue {
        var fields: [(String, RESPValue)] = [("id", bulkText("id\(port)")), ("port", .integer(port))]
        if let tlsPort { fields.append(("tls-port", .integer(tlsPort))) }
        fields += [("ip", bulkText("127.0.0.1")), ("endpoint", bulkText(endpoint)), ("role", bulkText(role)),
                   ("replication-offset", .integer(42)), ("health", bulkText(health))]
        return node(fields)
    }

    private let queried = RedisNodeAddress(host: "10.0.0.9", port: 7000)

    @Test func slotMapFromClusterShards() throws {
        // As Redis 7.0 answers (RESP2): two slot ranges on the first shard, a replica each.
        let reply: RESPValue = .array([
            shard(slots: [0, 5460, 16000, 16383], nodes: [shardNode(port: 7000, role: "master"), shardNode(port: 7003, role: "replica")]),
            shard(slots: [5461, 10922], nodes: [shardNode(port: 7004, role: "replica"), shardNode(port: 7001, role: "master")]),
            shard(slots: [10923, 15999], nodes: [shardNode(port: 7002, role: "master", endpoint: "?"), shardNode(port: 7005, role: "replica", endpoint: "")]),
        ])
        let map = try ClusterSlotMap.parse(shards: reply, queried: queried)
        let a = RedisNodeAddress(host: "127.0.0.1", port: 7000), b = RedisNodeAddress(host: "127.0.0.1", port: 7001)
        let c = RedisNodeAddress(host: "127.0.0.1", port: 7002)
        #expect(map.primaries == [a, b, c])
        #expect(map.primary(forSlot: 0) == a && map.primary(forSlot: 5460) == a && map.primary(forSlot: 16383) == a)
        #expect(map.primary(forSlot: 5461) == b && map.primary(forSlot: 10922) == b)
        #expect(map.primary(forSlot: 10923) == c && map.primary(forSlot: 15999) == c)
        #expect(map.coveredSlots == 16384)
        #expect(map.shards[1].replicas == [RedisNodeAddress(host: "127.0.0.1", port: 7004)])
        // "?" and "" endpoints fall back to the IP.
        #expect(map.shards[2].replicas == [RedisNodeAddress(host: "127.0.0.1", port: 7005)])
        #expect(map.allNodes.count == 6)
        #expect(map.primary(forSlot: -1) == nil && map.primary(forSlot: 16384) == nil)
    }

    @Test func shardsAfterAFailoverAndOverTLS() throws {
        // The old primary, failed, is listed as a replica; a shard with no slots routes nothing.
        let reply: RESPValue = .array([
            shard(slots: [0, 16383], nodes: [shardNode(port: 7000, role: "replica", health: "fail", tlsPort: 8000),
                                             shardNode(port: 7003, role: "master", tlsPort: 8003)]),
            shard(slots: [], nodes: [shardNode(port: 7009, role: "master", tlsPort: 8009)]),
        ])
        let plain = try ClusterSlotMap.parse(shards: reply, queried: queried)
        #expect(plain.primaries == [RedisNodeAddress(host: "127.0.0.1", port: 7003)])
        let tls = try ClusterSlotMap.parse(shards: reply, queried: queried, tls: true)
        #expect(tls.primaries == [RedisNodeAddress(host: "127.0.0.1", port: 8003)])
        #expect(tls.shards[0].replicas == [RedisNodeAddress(host: "127.0.0.1", port: 8000)])
        // A primary marked failed before its replica took over is kept: connecting tells.
        let notYet: RESPValue = .array([shard(slots: [0, 16383], nodes: [shardNode(port: 7000, role: "master", health: "fail"),
                                                                          shardNode(port: 7003, role: "replica")])])
        #expect(try ClusterSlotMap.parse(shards: notYet, queried: queried).primaries == [RedisNodeAddress(host: "127.0.0.1", port: 7000)])
    }

    @Test func slotMapFromClusterSlots() throws {
        func slotNode(_ ip: String, _ port: Int64) -> RESPValue { .array([bulkText(ip), .integer(port), bulkText("id\(port)"), .array([])]) }
        let reply: RESPValue = .array([
            .array([.integer(0), .integer(5460), slotNode("127.0.0.1", 7000), slotNode("127.0.0.1", 7003)]),
            .array([.integer(5461), .integer(16383), slotNode("", 7001)]),
            .array([.integer(100), .integer(200), slotNode("127.0.0.1", 7000)]),
        ])
        let map = try ClusterSlotMap.parse(slots: reply, queried: queried)
        #expect(map.primaries == [RedisNodeAddress(host: "127.0.0.1", port: 7000), RedisNodeAddress(host: "10.0.0.9", port: 7001)])
        #expect(map.shards.count == 2 && map.shards[0].slots == [0...5460, 100...200])
        // The later range wins where ranges overlap (they don't in a real reply).
        #expect(map.primary(forSlot: 150) == RedisNodeAddress(host: "127.0.0.1", port: 7000))
        #expect(map.primary(forSlot: 9000) == RedisNodeAddress(host: "10.0.0.9", port: 7001))
    }

    @Test(arguments: [
        RESPValue.status("OK"),
        .array([.array([bulkText("slots"), .array([.integer(0)]), bulkText("nodes"), .array([])])]),
        .array([.array([bulkText("slots"), .array([.integer(5), .integer(1)]), bulkText("nodes"), .array([])])]),
        .array([.array([bulkText("slots"), .array([.integer(0), .integer(16384)]), bulkText("nodes"), .array([])])]),
        .array([.array([bulkText("nodes"), .array([])])]),
    ])
    func malformedShardsAreRefused(reply: RESPValue) {
        #expect(throws: ClusterSlotMap.ParseError.self) { try ClusterSlotMap.parse(shards: reply, queried: queried) }
    }

    @Test func movedAndAskReplies() {
        #expect(ClusterRedirect(errorReply: "MOVED 3999 127.0.0.1:6381") == .moved(slot: 3999, to: RedisNodeAddress(host: "127.0.0.1", port: 6381)))
        #expect(ClusterRedirect(errorReply: "ASK 12182 10.1.2.3:7002") == .ask(slot: 12182, to: RedisNodeAddress(host: "10.1.2.3", port: 7002)))
        // IPv6, as Redis writes it (unbracketed), and bracketed.
        #expect(ClusterRedirect(errorReply: "MOVED 1 ::1:7000") == .moved(slot: 1, to: RedisNodeAddress(host: "::1", port: 7000)))
        #expect(ClusterRedirect(errorReply: "MOVED 1 [fe80::1]:7000") == .moved(slot: 1, to: RedisNodeAddress(host: "fe80::1", port: 7000)))
        // An unknown endpoint: the node that replied.
        let replying = RedisNodeAddress(host: "cache-2", port: 7001)
        #expect(ClusterRedirect(errorReply: "MOVED 5 :7004", replyingNode: replying) == .moved(slot: 5, to: RedisNodeAddress(host: "cache-2", port: 7004)))
        #expect(ClusterRedirect(errorReply: "MOVED 5 :7004") == nil)
        for other in ["MOVED", "MOVED x 1.2.3.4:5", "MOVED 16384 h:1", "MOVED 1 h", "MOVED 1 h:0", "ERR MOVED 1 h:1", "WRONGTYPE Operation",
                      "CROSSSLOT Keys in request don't hash to the same slot"] {
            #expect(ClusterRedirect(errorReply: other) == nil, "\(other)")
        }
        #expect(ClusterRedirect.isTransient("TRYAGAIN Multiple keys request during rehashing of slot"))
        #expect(ClusterRedirect.isTransient("CLUSTERDOWN The cluster is down"))
        #expect(ClusterRedirect.isTransient("LOADING Redis is loading the dataset in memory"))
        #expect(!ClusterRedirect.isTransient("NOSCRIPT No matching script") && !ClusterRedirect.isTransient("MOVED 1 h:1"))
    }

    @Test func aPipelineIsCutBySlotAndPutBackInOrder() throws {
        let commands = [
            RedisCommand("PING"),                               // before any key: goes with the first keyed command
            RedisCommand("SET", "{a}x", 1),
            RedisCommand("GET", "{b}y"),
            RedisCommand("WAIT", 1, 100),                       // follows the write before it
            RedisCommand("HSET", "{a}h", "f", "v"),
            RedisCommand("DEL", "{b}y", "{b}z"),                // several keys, one slot
            .script(RedisScript("return 1"), keys: ["{c}k", "{c}l"], args: []),
        ]
        let plan = try ClusterPipelinePlan(commands)
        let a = CommandKeys.slot(Array("a".utf8)), b = CommandKeys.slot(Array("b".utf8)), c = CommandKeys.slot(Array("c".utf8))
        #expect(plan.slots == [a, a, b, b, a, b, c])

        // Nodes: slot a on node 1, b and c on node 2.
        let groups = ClusterPipelinePlan.group(Array(commands.indices)) { plan.slots[$0] == a ? "n1" : "n2" }
        #expect(groups.map(\.node) == ["n1", "n2"])
        #expect(groups.map(\.indices) == [[0, 1, 4], [2, 3, 5, 6]])

        var replies = [RESPValue?](repeating: nil, count: commands.count)
        ClusterPipelinePlan.merge([.status("PONG"), .status("OK"), .integer(1)], at: groups[0].indices, into: &replies)
        ClusterPipelinePlan.merge([.null, .integer(0), .integer(1), .integer(1)], at: groups[1].indices, into: &replies)
        #expect(replies.map { $0! } == [.status("PONG"), .status("OK"), .null, .integer(0), .integer(1), .integer(1), .integer(1)])
    }

    @Test func keylessPipelinesAndTransactions() throws {
        #expect(try ClusterPipelinePlan([RedisCommand("PING"), RedisCommand("INFO", "cluster")]).slots == [nil, nil])
        let k = CommandKeys.slot(Array("{k}".utf8))
        let tx = try ClusterPipelinePlan([RedisCommand("GET", "other"), RedisCommand("MULTI"), RedisCommand("INCR", "{k}1"),
                                          RedisCommand("INCR", "{k}2"), RedisCommand("EXEC")])
        #expect(tx.slots == [CommandKeys.slot(Array("other".utf8)), k, k, k, k])
        #expect {
            try ClusterPipelinePlan([RedisCommand("MULTI"), RedisCommand("INCR", "a"), RedisCommand("INCR", "b"), RedisCommand("EXEC")])
        } throws: { ($0 as? RedisError)?.kind == .unroutable && "\($0)".contains("transaction") }
    }

    @Test func crossSlotAndUnknownCommandsAreRefusedBeforeSending() {
        #expect {
            try ClusterPipelinePlan([RedisCommand("GET", "ok"), RedisCommand("DEL", "a", "b")])
        } throws: { ($0 as? RedisError)?.kind == .unroutable && "\($0)".contains("CROSSSLOT") && "\($0)".contains("DEL") }
        #expect {
            try ClusterPipelinePlan([.xreadgroup(group: "g", consumer: "c", count: 1, block: nil, streams: [("s1", ">"), ("s2", ">")])])
        } throws: { ($0 as? RedisError)?.kind == .unroutable }
        #expect {
            try ClusterPipelinePlan([RedisCommand("NOSUCHCOMMAND", "a")])
        } throws: { ($0 as? RedisError)?.kind == .unroutable && "\($0)".contains("CommandKeys") }
    }

    @Test func migrateNamesItsKeys() {
        #expect(RedisCommand("MIGRATE", "h", 1, "k", 0, 100).keys == [Array("k".utf8)])
        #expect(RedisCommand("MIGRATE", "h", 1, "", 0, 100, "REPLACE", "KEYS", "a", "b").keys == [Array("a".utf8), Array("b".utf8)])
    }

    @Test func urlsWithSeveralSeeds() throws {
        let url = try RedisURL("redis://u:pw@10.0.0.1:7000,10.0.0.2,[::1]:7002")
        #expect(url.host == "10.0.0.1" && url.port == 7000 && url.username == "u" && url.password == "pw")
        #expect(url.seeds == [RedisNodeAddress(host: "10.0.0.1", port: 7000), RedisNodeAddress(host: "10.0.0.2", port: 6379),
                              RedisNodeAddress(host: "::1", port: 7002)])
        #expect(url.description == "redis://u:***@10.0.0.1:7000,10.0.0.2:6379,[::1]:7002")
        #expect(try RedisURL(url.description.replacingOccurrences(of: "***", with: "pw")) == url)
        // One host: exactly as before.
        let single = try RedisURL("rediss://h:1/2?verify=false")
        #expect(single.seeds == [RedisNodeAddress(host: "h", port: 1)] && single.additionalSeeds.isEmpty && single.description == "rediss://h:1/2?verify=false")
        for bad in ["redis://h:1,", "redis://,h", "redis://h:1,h2:0", "redis://h:1,[::1"] {
            #expect(throws: RedisURL.ParseError.self, "\(bad)") { try RedisURL(bad) }
        }
    }
}
