import RedisClient
import Testing

/// Every command says its keys (what a cluster client routes by), and a key's hash slot is Redis
/// Cluster's.
@Suite struct CommandKeysTests {
    func names(_ command: RedisCommand) -> [String]? { command.keys?.map { String(decoding: $0, as: UTF8.self) } }

    @Test func keysByCommandShape() {
        #expect(names(RedisCommand("HSET", "ac:{match:1}:state", "f", "v")) == ["ac:{match:1}:state"])
        #expect(names(RedisCommand("XGROUP", "CREATE", "ac:feed:sports", "g", "0", "MKSTREAM")) == ["ac:feed:sports"])
        #expect(names(RedisCommand("XINFO", "HELP")) == [])
        #expect(names(RedisCommand("UNLINK", "a", "b", "c")) == ["a", "b", "c"])
        #expect(names(RedisCommand("PING")) == [])
        #expect(names(.script(RedisScript("return 1"), keys: ["ac:{k}:a", "ac:{k}:b"], args: ["x", 1])) == ["ac:{k}:a", "ac:{k}:b"])
        #expect(names(.script(RedisScript("return 1"), keys: [], args: ["x"])) == [])
        #expect(names(.xreadgroup(group: "g", consumer: "c", count: 10, block: .seconds(1), streams: [("s1", ">"), ("s2", ">")])) == ["s1", "s2"])
        #expect(names(RedisCommand("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s1")) == nil, "a stream without its id")
        #expect(names(RedisCommand("FROBNICATE", "k")) == nil, "an unknown command has no keys to route by")
    }

    /// Redis Cluster's specification: CRC16/XMODEM of the key or of its non-empty hash tag, mod 16384.
    @Test func slotsAreClusterSlots() {
        func slot(_ s: String) -> Int { CommandKeys.slot(Array(s.utf8)) }
        #expect(slot("123456789") == 0x31C3 % 16384)  // the CRC16/XMODEM check value
        #expect(slot("foo") == 12182)
        #expect(slot("bar") == 5061)
        #expect(slot("{user1000}.following") == slot("{user1000}.followers"))
        #expect(slot("{user1000}.following") == slot("user1000"))
        #expect(slot("foo{}{bar}") != slot("bar"), "an empty tag: the whole key is hashed")
        #expect(slot("foo{{bar}}zap") == slot("{bar"))
        #expect(slot("ac:{match:4711}:state") == slot("ac:{match:4711}:tokens"))
    }
}
