import RedisClient
import Testing

/// Which error replies say Redis refuses work now (not the command's data at fault), also when a
/// caller quotes the reply inside its own message.
@Suite struct RedisRefusalTests {
    static let oom = "OOM command not allowed when used memory > 'maxmemory'."

    @Test func errorRepliesAreClassified() {
        #expect(RedisRefusal(errorReply: Self.oom)?.kind == .outOfMemory)
        // A script's write refused: Redis 7 keeps the code and adds where.
        let script = Self.oom + " script: 8b570d3e, on @user_script:41."
        #expect(RedisRefusal(errorReply: script)?.kind == .outOfMemory)
        #expect(RedisRefusal(errorReply: script)?.message == script)
        #expect(RedisRefusal(errorReply: "NOPERM User ac has no permissions to run the 'xadd' command")?.kind == .permission)
        #expect(RedisRefusal(errorReply: "READONLY You can't write against a read only replica.")?.kind == .notWritable)
        #expect(RedisRefusal(errorReply: "LOADING Redis is loading the dataset in memory")?.kind == .unavailable)
        #expect(RedisRefusal(errorReply: "ERR max number of clients reached")?.kind == .unavailable)
        // The command's own fault.
        for own in ["WRONGTYPE Operation against a key holding the wrong kind of value", "ERR syntax error", "NOSCRIPT No matching script",
                    "ERR user_script:1: Script attempted to access nonexistent global variable 'x'"] {
            #expect(RedisRefusal(errorReply: own) == nil, "\(own)")
        }
    }

    /// The send path quotes replies it didn't expect (`fan-out create: unexpected reply OOM …`):
    /// that is still Redis refusing, not the entry's failure (which would use up its attempts).
    @Test func aRefusalQuotedInAnotherMessageIsFound() {
        #expect(RedisRefusal(quotedIn: "fan-out create: unexpected reply \(Self.oom) script: 8b57, on @user_script:41.")?.kind == .outOfMemory)
        #expect(RedisRefusal(quotedIn: "slice step: unexpected reply \(Self.oom)")?.kind == .outOfMemory)
        #expect(RedisRefusal(quotedIn: "XREADGROUP: NOPERM this user has no permissions")?.kind == .permission)
        #expect(RedisRefusal(quotedIn: "key state merge: \(Self.oom)")?.message == Self.oom)
        #expect(RedisRefusal(quotedIn: Self.oom)?.kind == .outOfMemory)
        for own in ["fan-out create: unexpected reply ", "key state merge: unexpected reply", "route: field 'OOM' unknown",
                    "sending failed: APNs answered 500", "HINCRBY ac:errors: WRONGTYPE Operation against a key", "the OOM killer"] {
            #expect(RedisRefusal(quotedIn: own) == nil, "\(own)")
        }
        #expect(RedisError(.server, "fan-out create: unexpected reply \(Self.oom)").refusal?.kind == .outOfMemory)
        #expect(RedisError(.timeout, Self.oom).refusal == nil)  // not a reply at all
    }
}
