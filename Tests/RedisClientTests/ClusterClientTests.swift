import Foundation
import HiredisCodec
import RedisClient
import Testing
import TestSupport

/// `RedisConnection` against a real Redis Cluster of 3 primaries and 3 replicas on loopback
/// (`RedisClusterServers`), each test its own. Serialized: six nodes per test, and the failover
/// tests' timing, want the machine to themselves.
@Suite(.serialized) struct ClusterClientTests {
    private func text(_ s: String) -> RESPValue { .bulk(Array(s.utf8)) }

    @Test func pipelinesSpanningEveryPrimaryComeBackInOrder() async throws {
        let cluster = try await RedisClusterServers()
        let redis = try cluster.connection()
        defer { redis.close() }
        #expect(try await redis.topology() == .cluster)
        #expect(Set(try await redis.primaries().map(\.port)) == Set(cluster.ports.prefix(3)))

        let keys = try await cluster.keysSpanningPrimaries(prefix: "order:", count: 30)
        let sets = keys.enumerated().map { RedisCommand("SET", $1, "v\($0)") }
        let gets = keys.map { RedisCommand("GET", $0) }
        let replies = try await redis.pipeline(sets + [RedisCommand("PING")] + gets + [RedisCommand("INCR", keys[1])])
        #expect(replies.count == 62)
        #expect(replies[0..<30].allSatisfy { $0 == .status("OK") })
        #expect(replies[30] == .status("PONG"))
        #expect(Array(replies[31..<61]) == keys.indices.map { text("v\($0)") })
        #expect(replies[61].errorMessage?.contains("not an integer") == true)

        // Each key is where the cluster says it belongs, and every primary holds some.
        var holders = Set<Int>()
        for (i, key) in keys.enumerated() {
            let port = try await cluster.primaryPort(forKey: key)
            holders.insert(port)
            #expect(try await cluster.admin(port).pipeline([RedisCommand("GET", key)])[0] == text("v\(i)"))
            #expect(try await redis.node(forKey: key).port == port)
        }
        #expect(holders == Set(cluster.ports.prefix(3)))

        // One pipeline per node, whatever the size: 10,000 commands are three round trips.
        let big = (0..<10_000).map { RedisCommand("SET", "big:\($0)", $0) }
        let trips = redis.stats.roundTrips
        #expect(try await redis.pipeline(big).allSatisfy { $0 == .status("OK") })
        #expect(redis.stats.roundTrips - trips == 3)

        // Many callers at once, each pipeline across the nodes, each with its own replies.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<50 {
                group.addTask {
                    let mine = keys.map { "\($0):\(caller)" }
                    let r = try await redis.pipeline(mine.map { RedisCommand("INCRBY", $0, caller) } + mine.map { RedisCommand("GET", $0) })
                    #expect(r[..<mine.count].allSatisfy { $0 == .integer(Int64(caller)) })
                    #expect(r[mine.count...].allSatisfy { $0 == .bulk(Array(String(caller).utf8)) })
                }
            }
            try await group.waitForAll()
        }

        // A command whose keys span slots is refused before anything is sent.
        let before = redis.stats.commands
        await #expect {
            try await redis.pipeline([RedisCommand("GET", keys[0]), RedisCommand("DEL", keys[0], keys[1])])
        } throws: { ($0 as? RedisError)?.kind == .unroutable && "\($0)".contains("CROSSSLOT") }
        #expect(redis.stats.commands == before)
        await cluster.stop()
    }

    @Test func scriptsFallBackToEvalOnEveryNode() async throws {
        let cluster = try await RedisClusterServers()
        let redis = try cluster.connection()
        defer { redis.close() }
        let script = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        let keys = try await cluster.keysSpanningPrimaries(prefix: "script:", count: 6)
        // No node has the script: every one answers NOSCRIPT, and gets the source.
        let first = try await redis.pipeline(keys.map { .script(script, keys: [$0], args: [2]) })
        #expect(first == Array(repeating: .integer(2), count: keys.count))
        for port in cluster.ports.prefix(3) {
            let exists = try await redis.pipeline([RedisCommand("SCRIPT", "EXISTS", script.sha1)], on: cluster.address(port))[0]
            #expect(exists == .array([.integer(1)]), "node \(port)")
        }
        // One node forgets it (a restart, a flush): only that node's calls fall back again.
        _ = try await redis.pipeline([RedisCommand("SCRIPT", "FLUSH")], on: cluster.address(cluster.ports[1]))
        let second = try await redis.pipeline(keys.map { .script(script, keys: [$0], args: [3]) })
        #expect(second == Array(repeating: .integer(5), count: keys.count))
        await cluster.stop()
    }

    @Test func blockingReadsGoPerSlot() async throws {
        let cluster = try await RedisClusterServers()
        let redis = try cluster.connection()
        defer { redis.close() }
        let streams = try await cluster.keysSpanningPrimaries(prefix: "stream:", count: 3)
        // One XREADGROUP of streams in different slots is a CROSSSLOT command: refused.
        await #expect {
            try await redis.readGroup(group: "g", consumer: "c", count: 10, block: .milliseconds(10), streams: streams.map { ($0, ">") })
        } throws: { ($0 as? RedisError)?.kind == .unroutable }

        let groups = try await redis.keyGroups(streams + ["{\(streams[0])}.other"])
        #expect(groups.count == 3)
        #expect(groups[0].keys == [streams[0], "{\(streams[0])}.other"])
        #expect(Set(groups.map(\.node.port)) == Set(cluster.ports.prefix(3)))
        for group in groups { #expect(group.slot == CommandKeys.slot(Array(group.keys[0].utf8))) }

        for stream in streams + ["{\(streams[0])}.other"] {
            try await redis.ensureGroup(stream: stream, group: "g")
            _ = try await redis.send(RedisCommand("XADD", stream, "*", "from", stream))
        }
        // A reader per group, each its own connection (a blocking read holds its node's), concurrently.
        let reads = try await withThrowingTaskGroup(of: [StreamRead].self) { taskGroup in
            for group in groups {
                taskGroup.addTask {
                    let reader = try cluster.connection()
                    defer { reader.close() }
                    return try await reader.readGroup(group: "g", consumer: "c", count: 10, block: .milliseconds(500), streams: group.keys.map { ($0, ">") })
                }
            }
            var all: [StreamRead] = []
            for try await r in taskGroup { all += r }
            return all
        }
        #expect(Set(reads.map(\.stream)) == Set(streams + ["{\(streams[0])}.other"]))
        #expect(reads.allSatisfy { $0.entries.count == 1 })
        await cluster.stop()
    }

    @Test func followsMovedAfterASlotMigrationAndUpdatesItsMap() async throws {
        let cluster = try await RedisClusterServers()
        let redis = try cluster.connection()
        defer { redis.close() }
        let key = "{moving}key"
        let slot = CommandKeys.slot(Array(key.utf8))
        _ = try await redis.command("SET", key, "before")
        let from = try await cluster.primaryPort(forSlot: slot)
        let to = cluster.ports.prefix(3).first { $0 != from }!
        #expect(try await redis.node(forKey: key).port == from)

        try await cluster.migrateSlot(slot, from: from, to: to)
        // The node the client's map names now answers MOVED …
        let direct = try await cluster.admin(from).pipeline([RedisCommand("GET", key)])[0]
        #expect(direct.errorMessage == "MOVED \(slot) 127.0.0.1:\(to)")
        #expect(try await redis.node(forKey: key).port == from)
        // … which the client follows, and remembers.
        let before = redis.stats.roundTrips
        #expect(try await redis.pipeline([RedisCommand("GET", key), RedisCommand("SET", key, "after"), RedisCommand("GET", key)])
                == [text("before"), .status("OK"), text("after")])
        #expect(try await redis.node(forKey: key).port == to)
        #expect(try await cluster.admin(to).pipeline([RedisCommand("GET", key)])[0] == text("after"))
        // MOVED cost one round trip to the old node and one to the new; from now on, only the new.
        let redirected = redis.stats.roundTrips
        #expect(redirected - before >= 2)
        _ = try await redis.command("GET", key)
        try await Task.sleep(for: .milliseconds(200))  // the refresh MOVED started is done
        let settled = redis.stats.roundTrips
        _ = try await redis.command("GET", key)
        #expect(redis.stats.roundTrips - settled == 1)
        await cluster.stop()
    }

    @Test func answersAskDuringAMigration() async throws {
        let cluster = try await RedisClusterServers()
        let redis = try cluster.connection()
        defer { redis.close() }
        let moved = "{asking}moved", stays = "{asking}stays", new = "{asking}new"
        let slot = CommandKeys.slot(Array(moved.utf8))
        _ = try await redis.pipeline([RedisCommand("SET", moved, 10), RedisCommand("SET", stays, "here")])
        let from = try await cluster.primaryPort(forSlot: slot)
        let to = cluster.ports.prefix(3).first { $0 != from }!

        try await cluster.beginMigration(slot: slot, from: from, to: to)
        #expect(try await cluster.migrateKeys(slot: slot, from: from, to: to, keys: [moved]) == 1)
        // The source sends the client on for a key it no longer has; the target wants ASKING.
        #expect(try await cluster.admin(from).pipeline([RedisCommand("GET", moved)])[0].errorMessage == "ASK \(slot) 127.0.0.1:\(to)")
        #expect(try await cluster.admin(to).pipeline([RedisCommand("GET", moved)])[0].errorMessage?.hasPrefix("MOVED") == true)

        let script = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        let replies = try await redis.pipeline([
            RedisCommand("GET", moved),                   // on the target, via ASKING
            RedisCommand("GET", stays),                   // still on the source
            RedisCommand("SET", new, "fresh"),            // a new key goes to the target, via ASKING
            .script(script, keys: [moved], args: [5]),    // NOSCRIPT on the target: EVAL, still with ASKING
        ])
        #expect(replies == [text("10"), text("here"), .status("OK"), .integer(15)])
        // The new key is on the target; ASK did not change the client's map.
        let onTarget = try await cluster.admin(to).pipeline([RedisCommand("ASKING"), RedisCommand("GET", new)])
        #expect(onTarget[1] == text("fresh"))
        #expect(try await redis.node(forKey: moved).port == from)

        try await cluster.migrateKeys(slot: slot, from: from, to: to)
        try await cluster.finishMigration(slot: slot, from: from, to: to)
        #expect(try await redis.pipeline([RedisCommand("GET", stays), RedisCommand("GET", moved)]) == [text("here"), text("15")])
        #expect(try await redis.node(forKey: moved).port == to)
        await cluster.stop()
    }

    @Test func retriesTryAgainUntilTheMigrationEndsThenGivesTheReply() async throws {
        let cluster = try await RedisClusterServers()
        let patient = try cluster.connection(cluster: .init(retryFor: .seconds(5)))
        let hasty = try cluster.connection(cluster: .init(retryFor: .milliseconds(200)))
        defer { patient.close(); hasty.close() }
        let a = "{split}a", b = "{split}b"
        let slot = CommandKeys.slot(Array(a.utf8))
        _ = try await patient.pipeline([RedisCommand("SET", a, 1), RedisCommand("SET", b, 2)])
        _ = try await hasty.command("PING")
        let from = try await cluster.primaryPort(forSlot: slot)
        let to = cluster.ports.prefix(3).first { $0 != from }!
        // Half the slot's keys moved: a command on both can be served by neither node now.
        try await cluster.beginMigration(slot: slot, from: from, to: to)
        try await cluster.migrateKeys(slot: slot, from: from, to: to, keys: [a])
        #expect(try await cluster.admin(from).pipeline([RedisCommand("EXISTS", a, b)])[0].errorMessage?.hasPrefix("TRYAGAIN") == true)

        // A short retry budget ends with Redis's answer, as an error reply (not thrown).
        let started = ContinuousClock.now
        let gaveUp = try await hasty.pipeline([RedisCommand("EXISTS", a, b), RedisCommand("GET", "elsewhere")])
        #expect(gaveUp[0].errorMessage?.hasPrefix("TRYAGAIN") == true)
        #expect(gaveUp[1] == .null)
        #expect(ContinuousClock.now - started >= .milliseconds(200))

        // A longer one outlasts the migration, and follows the MOVED that ends it.
        async let waited = patient.pipeline([RedisCommand("EXISTS", a, b)])
        try await Task.sleep(for: .milliseconds(400))
        try await cluster.migrateKeys(slot: slot, from: from, to: to)
        try await cluster.finishMigration(slot: slot, from: from, to: to)
        #expect(try await waited == [.integer(2)])
        // Its last retry may have met the slot between the keys' move and its end (an ASK, which
        // leaves the map as it was): the next command meets the MOVED, and the map follows it.
        #expect(try await patient.pipeline([RedisCommand("EXISTS", a)]) == [.integer(1)])
        #expect(try await patient.node(forKey: a).port == to)
        await cluster.stop()
    }

    @Test func recoversFromAFailoverByItself() async throws {
        let cluster = try await RedisClusterServers()
        // One seed, the node about to die: the client must find the cluster through the others.
        let redis = try cluster.connection(seeds: 1)
        defer { redis.close() }
        let keys = try await cluster.keysSpanningPrimaries(prefix: "survive:", count: 30)
        _ = try await redis.pipeline(keys.map { RedisCommand("SET", $0, $0) })
        // Replication is asynchronous: wait until every write reached a replica.
        for port in cluster.ports.prefix(3) {
            let acked = try await redis.pipeline([RedisCommand("WAIT", 1, 1000)], on: cluster.address(port))[0]
            #expect(acked == .integer(1), "replica of \(port)")
        }
        let dead = cluster.ports[0]
        let lost = keys.filter { CommandKeys.slot(Array($0.utf8)) < ClusterSlotMap.slotCount / 3 }
        #expect(!lost.isEmpty)
        #expect(try await redis.node(forKey: lost[0]).port == dead)

        let killed = ContinuousClock.now
        await cluster.kill(port: dead)
        // Nobody tells the client. It keeps failing while the cluster has no primary for a third
        // of its slots (each call retries for 2 s), then recovers by itself.
        var failures: [String] = []
        var replies: [RESPValue] = []
        while ContinuousClock.now - killed < .seconds(20) {
            do {
                replies = try await redis.pipeline(keys.map { RedisCommand("GET", $0) })
                if !replies.contains(where: { $0.errorMessage != nil }) { break }
                failures.append(replies.compactMap(\.errorMessage).first!)
            } catch {
                failures.append("\(error)")
            }
        }
        let recovered = ContinuousClock.now - killed
        #expect(replies == keys.map { text($0) }, "after \(failures.count) failed calls: \(failures.suffix(3))")
        let promoted = try await cluster.waitForPromotion(of: dead)
        #expect(try await cluster.role(of: promoted) == "master")
        #expect(try await redis.node(forKey: lost[0]).port == promoted)
        #expect(try await redis.primaries().contains(cluster.address(dead)) == false)
        // Writes go to the new primary.
        #expect(try await redis.pipeline(lost.map { RedisCommand("APPEND", $0, "!") }).allSatisfy { $0.int != nil })
        #expect(try await cluster.admin(promoted).pipeline([RedisCommand("GET", lost[0])])[0] == text(lost[0] + "!"))
        print("failover: the client recovered \(recovered) after the kill, after \(failures.count) failed calls")
        await cluster.stop()
    }

    @Test func aCommandWhoseFateIsUnknownIsNotSentAgain() async throws {
        let cluster = try await RedisClusterServers()
        let redis = try cluster.connection(commandTimeout: .milliseconds(300))
        defer { redis.close() }
        let key = try await cluster.keysSpanningPrimaries(prefix: "once:", count: 3)[1]
        let port = try await cluster.primaryPort(forKey: key)
        _ = try await redis.command("SET", key, 0)

        // The node stops answering (for less than the cluster's node timeout: no failover).
        cluster.pause(port: port)
        await #expect {
            try await redis.pipeline([RedisCommand("INCR", key)])
        } throws: { ($0 as? RedisError)?.kind == .timeout }
        cluster.resume(port: port)
        // The INCR that timed out was written once; it ran once, and was not sent again.
        try await Task.sleep(for: .milliseconds(100))
        #expect(try await redis.send(RedisCommand("GET", key)) == text("1"))
        await cluster.stop()
    }

    /// Every node with `requirepass` (replicas with `masterauth`): the URL's password reaches
    /// every node connection the client opens (the seeds, the primaries it learns from the map);
    /// a wrong or missing password is refused with a clear `authentication` error, every call,
    /// without hanging on retries.
    @Test func aPasswordProtectedClusterWorksAndAWrongPasswordIsRefused() async throws {
        let cluster = try await RedisClusterServers(password: "s3cret-cluster")
        let redis = try cluster.connection()
        defer { redis.close() }
        let keys = try await cluster.keysSpanningPrimaries(prefix: "auth:", count: 12)
        let replies = try await redis.pipeline(keys.enumerated().map { RedisCommand("SET", $1, "v\($0)") } + keys.map { RedisCommand("GET", $0) })
        #expect(Array(replies[12...]) == keys.indices.map { text("v\($0)") })
        #expect(Set(try await redis.primaries().map(\.port)) == Set(cluster.ports.prefix(3)))

        // A wrong password: the connection is refused (as on a single Redis).
        let wrong = RedisConnection(configuration: RedisConfiguration(url: try RedisURL(cluster.urlString(seeds: 2, password: "wrong")),
                                                                      connectTimeout: .seconds(1), commandTimeout: .seconds(2)))
        defer { wrong.close() }
        for _ in 0..<2 {
            let started = ContinuousClock.now
            await #expect {
                try await wrong.pipeline([RedisCommand("GET", keys[0])])
            } throws: { error in
                (error as? RedisError)?.kind == .authentication && "\(error)".contains("WRONGPASS")
            }
            #expect(ContinuousClock.now - started < .seconds(5), "the refusal took \(ContinuousClock.now - started)")
        }
        // No password: every command answered NOAUTH, which callers read as a refusal of kind
        // `authentication` (as on a single Redis: the worker is then not ready and says why).
        let none = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("redis://" + cluster.ports.prefix(2).map { "127.0.0.1:\($0)" }.joined(separator: ",")),
                                                                     connectTimeout: .seconds(1), commandTimeout: .seconds(2)))
        defer { none.close() }
        let refused = try await none.pipeline([RedisCommand("GET", keys[0]), RedisCommand("SET", keys[1], "x")])
        #expect(refused.allSatisfy { $0.errorMessage.flatMap { RedisRefusal(errorReply: $0) }?.kind == .authentication }, "\(refused)")
        #expect(try await redis.pipeline([RedisCommand("GET", keys[1])])[0] == text("v1"), "a refused write changed nothing")
        await cluster.stop()
    }

    /// A cluster on TLS only (clients, the cluster bus and replication): the client learns each
    /// node's `tls-port` from CLUSTER SHARDS and verifies every node's certificate with the URL's
    /// CA, names checked (127.0.0.1); a pipeline spans every primary; without the CA every node
    /// is refused (certificate not verified), and a failover is followed over TLS too.
    @Test func aTLSClusterIsReachedOverTLSWithEveryNodeVerified() async throws {
        let cert = try TestCertificate()
        defer { cert.directory.remove() }
        let cluster = try await RedisClusterServers(tls: cert)
        let redis = try cluster.connection()
        defer { redis.close() }
        #expect(try await redis.topology() == .cluster)
        #expect(Set(try await redis.primaries().map(\.port)) == Set(cluster.ports.prefix(3)))
        let keys = try await cluster.keysSpanningPrimaries(prefix: "tls:", count: 12)
        let replies = try await redis.pipeline(keys.enumerated().map { RedisCommand("SET", $1, "v\($0)") } + keys.map { RedisCommand("GET", $0) })
        #expect(Array(replies[12...]) == keys.indices.map { text("v\($0)") })

        // The system CAs don't know the certificate: refused, not sent in the clear.
        let untrusting = RedisConnection(configuration: RedisConfiguration(
            url: try RedisURL("rediss://" + cluster.ports.prefix(2).map { "127.0.0.1:\($0)" }.joined(separator: ",")),
            connectTimeout: .seconds(1), commandTimeout: .seconds(2)))
        defer { untrusting.close() }
        await #expect {
            try await untrusting.pipeline([RedisCommand("GET", keys[0])])
        } throws: { error in
            (error as? RedisError)?.kind == .connectionFailed && "\(error)".lowercased().contains("verif")
        }

        // A primary dies: its replica, reached over TLS too, takes over.
        let victim = try await cluster.primaryPort(forKey: keys[0])
        await cluster.kill(port: victim)
        _ = try await cluster.waitForPromotion(of: victim)
        var got: RESPValue?
        #expect(await eventually(timeout: .seconds(20)) {
            got = try? await redis.pipeline([RedisCommand("GET", keys[0])])[0]
            return got == self.text("v0")
        }, "\(String(describing: got))")
        await cluster.stop()
    }

    @Test func aDatabaseOtherThanZeroIsRefusedOnACluster() async throws {
        let cluster = try await RedisClusterServers(replicasPerPrimary: 0)
        let redis = RedisConnection(configuration: RedisConfiguration(url: try RedisURL(cluster.urlString(database: 2))))
        defer { redis.close() }
        for _ in 0..<2 {
            await #expect {
                try await redis.pipeline([RedisCommand("GET", "k")])
            } throws: { error in
                (error as? RedisError)?.kind == .authentication && "\(error)".contains("database 0 only") && "\(error)".contains("/2")
            }
        }
        await cluster.stop()
    }

    @Test func aSingleRedisThroughTheSameType() async throws {
        let server = try await RedisServer()
        let redis = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("redis://127.0.0.1:\(server.port)/3")))
        defer { redis.close() }
        #expect(try await redis.topology() == .standalone)
        #expect(try await redis.slotMap() == nil)
        // Keys in any slots may share a command on a single Redis.
        #expect(try await redis.pipeline([RedisCommand("SET", "a", 1), RedisCommand("SET", "b", 2), RedisCommand("DEL", "a", "b")])
                == [.status("OK"), .status("OK"), .integer(2)])
        _ = try await redis.command("SET", "in-three", "yes")
        let groups = try await redis.keyGroups(["s1", "s2"])
        #expect(groups == [RedisKeyGroup(node: RedisNodeAddress(host: "127.0.0.1", port: server.port), slot: nil, keys: ["s1", "s2"])])
        // The database was selected: database 0 doesn't have the key.
        let zero = server.connection()
        defer { zero.close() }
        #expect(try await zero.send(RedisCommand("GET", "in-three")) == .null)
        // Asking what the server is cost one round trip, once, on the connection then used.
        #expect(zero.stats.roundTrips == 2 && zero.stats.connects == 1)
        _ = try await zero.command("PING")
        #expect(zero.stats.roundTrips == 3)

        // Several seeds for a single Redis is a mistake, said once and for all.
        let seeds = RedisConnection(configuration: RedisConfiguration(url: try RedisURL("redis://127.0.0.1:\(server.port),127.0.0.1:1")))
        defer { seeds.close() }
        await #expect {
            try await seeds.pipeline([RedisCommand("PING")])
        } throws: { "\($0)".contains("not a cluster node") }
    }
}
