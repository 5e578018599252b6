import Foundation
import RedisClient

/// A real Redis Cluster on loopback: `primaries` primaries (slots split evenly, in order) and
/// `replicasPerPrimary` replicas each, every node a `redis-server` child on a free port (and its
/// cluster bus on port + 10000), nothing persisted. Every process is stopped by its PID: by
/// `stop()`, or SIGKILL in `deinit` when a test fails first.
///
/// The cluster is made by hand (`CLUSTER ADDSLOTSRANGE`, `SET-CONFIG-EPOCH`, `MEET`,
/// `REPLICATE`) rather than by `redis-cli --cluster create`: the roles are then known (node i is
/// the primary of the i-th slot range, node primaries + i its replica), it needs no redis-cli,
/// and it is ready in about a second instead of redis-cli's polling seconds.
///
/// Helpers make what a cluster client must survive: a primary SIGKILLed (`kill(port:)`, then
/// `waitForPromotion`), a node paused (`pause`/`resume`), and a slot migrated in steps
/// (`beginMigration`, `migrateKeys`, `finishMigration`) so a test sees `ASK` during the
/// migration and `MOVED` after it.
public final class RedisClusterServers: @unchecked Sendable {
    /// Every node's port: the primaries first, then the replicas (replica i of primary p at
    /// `primaries + p * replicasPerPrimary + i`). Roles change after a failover; ask `role(of:)`.
    public let ports: [Int]
    public let primaryCount: Int
    public let nodeTimeout: Duration
    /// Every node's `requirepass` (and its replicas' `masterauth`); nil: none.
    public let password: String?
    /// TLS only (`--port 0 --tls-port`, the cluster bus and replication over TLS too) with this
    /// certificate (valid for 127.0.0.1); nil: plain TCP.
    public let tls: TestCertificate?
    private let directory: TemporaryDirectory
    private let lock = NSLock()
    // Guarded by `lock`.
    private var processes: [Int: ChildProcess] = [:]
    private var admins: [Int: RedisNodeConnection] = [:]
    private var ids: [Int: String] = [:]
    private var killedSlots: [Int: [ClosedRange<Int>]] = [:]

    public init(primaries: Int = 3, replicasPerPrimary: Int = 1, nodeTimeout: Duration = .milliseconds(1000), password: String? = nil,
                tls: TestCertificate? = nil) async throws {
        precondition(primaries >= 1 && primaries <= 16 && replicasPerPrimary >= 0)
        self.primaryCount = primaries
        self.nodeTimeout = nodeTimeout
        self.password = password
        self.tls = tls
        directory = try TemporaryDirectory()
        let count = primaries * (1 + replicasPerPrimary)
        var started: [Int: ChildProcess] = [:]
        do {
            var used = Set<Int>()
            for _ in 0..<count {
                let (child, port) = try await RedisClusterServers.startNode(directory: directory.path, nodeTimeout: nodeTimeout, password: password,
                                                                            tls: tls, avoiding: used)
                started[port] = child
                used.insert(port)
            }
        } catch {
            for child in started.values { child.kill(signal: SIGKILL); _ = await child.waitForExit(timeout: .seconds(5)); child.removeLogs() }
            directory.remove()
            throw error
        }
        // Primaries in ascending port order: easier to read in logs.
        let sorted = started.keys.sorted()
        ports = sorted
        processes = started
        do {
            try await create(replicasPerPrimary: replicasPerPrimary)
        } catch {
            killEverything()
            throw error
        }
    }

    deinit { killEverything() }

    private func killEverything() {
        let (all, connections) = lock.withLock { () -> ([ChildProcess], [RedisNodeConnection]) in
            defer { processes = [:]; admins = [:] }
            return (Array(processes.values), Array(admins.values))
        }
        for connection in connections { connection.close() }
        for child in all {
            child.kill(signal: SIGCONT)  // a paused node dies as well
            child.kill(signal: SIGKILL)
        }
        // ChildProcess's deinit reaps each by PID.
        for child in all { child.removeLogs() }
        directory.remove()
    }

    /// Stops every node by PID (SIGKILL: nothing is persisted) and removes their files.
    public func stop() async {
        let (all, connections) = lock.withLock { () -> ([ChildProcess], [RedisNodeConnection]) in
            defer { processes = [:]; admins = [:] }
            return (Array(processes.values), Array(admins.values))
        }
        for connection in connections { connection.close() }
        for child in all {
            child.kill(signal: SIGCONT)
            child.kill(signal: SIGKILL)
        }
        for child in all {
            _ = await child.waitForExit(timeout: .seconds(5))
            child.removeLogs()
        }
        directory.remove()
    }

    // MARK: - Addresses and connections

    public func address(_ port: Int) -> RedisNodeAddress { RedisNodeAddress(host: "127.0.0.1", port: port) }

    /// `redis://127.0.0.1:P1,127.0.0.1:P2,…` with the first `seeds` nodes (`/database` if not 0;
    /// `:<password>@` first when the nodes have one, or `password` given).
    public func urlString(seeds: Int = 1, database: Int = 0, password: String? = nil) -> String {
        let auth = (password ?? self.password).map { ":\($0)@" } ?? ""
        return (tls == nil ? "redis://" : "rediss://") + auth + ports.prefix(seeds).map { "127.0.0.1:\($0)" }.joined(separator: ",")
            + (database == 0 ? "" : "/\(database)") + (tls.map { "?ca=\($0.certificatePath)" } ?? "")
    }

    /// A cluster-routing connection through the first `seeds` nodes.
    public func connection(seeds: Int = 1, commandTimeout: Duration = .seconds(5), cluster: RedisConfiguration.ClusterOptions = .init()) throws -> RedisConnection {
        RedisConnection(configuration: RedisConfiguration(url: try RedisURL(urlString(seeds: seeds)), connectTimeout: .seconds(2),
                                                          commandTimeout: commandTimeout, cluster: cluster))
    }

    /// A plain connection to one node (no routing: `MOVED` and `ASK` come back as replies).
    public func admin(_ port: Int) -> RedisNodeConnection {
        lock.withLock {
            if let connection = admins[port] { return connection }
            let connection = RedisNodeConnection(configuration: RedisConfiguration(
                url: RedisURL(tls: tls != nil, host: "127.0.0.1", port: port, password: password, caFile: tls?.certificatePath),
                connectTimeout: .seconds(1), commandTimeout: .seconds(5),
                backoff: .init(initial: .milliseconds(10), maximum: .milliseconds(100)), topology: .standalone))
            admins[port] = connection
            return connection
        }
    }

    /// Sends `commands` to the node on `port`; an error reply throws.
    @discardableResult
    public func on(_ port: Int, _ commands: RedisCommand...) async throws -> [RESPValue] {
        let replies = try await admin(port).pipeline(commands)
        for (command, reply) in zip(commands, replies) { _ = try reply.orThrow("\(command.name) on \(port)") }
        return replies
    }

    public func pid(_ port: Int) -> pid_t? { lock.withLock { processes[port]?.pid } }

    public func nodeID(_ port: Int) -> String { lock.withLock { ids[port]! } }

    public func isRunning(_ port: Int) -> Bool { lock.withLock { processes[port] }?.isRunning ?? false }

    // MARK: - Topology

    /// Each shard's primary port and its slot ranges, as the node on `asking` (default: any live
    /// node) sees the cluster now.
    public func shards(asking: Int? = nil) async throws -> [(primary: Int, replicas: [Int], slots: [ClosedRange<Int>])] {
        let port = asking ?? ports.first { isRunning($0) }!
        let reply = try await on(port, RedisCommand("CLUSTER", "SHARDS"))[0]
        let map = try ClusterSlotMap.parse(shards: reply, queried: address(port), tls: tls != nil)
        return map.shards.map { ($0.primary.port, $0.replicas.map(\.port), $0.slots) }
    }

    /// The port of the primary serving `slot` (as the node on `asking` sees it).
    public func primaryPort(forSlot slot: Int, asking: Int? = nil) async throws -> Int {
        let port = asking ?? ports.first { isRunning($0) }!
        let reply = try await on(port, RedisCommand("CLUSTER", "SHARDS"))[0]
        guard let primary = try ClusterSlotMap.parse(shards: reply, queried: address(port), tls: tls != nil).primary(forSlot: slot) else {
            throw RedisServerError(description: "no node serves slot \(slot)")
        }
        return primary.port
    }

    public func primaryPort(forKey key: String) async throws -> Int {
        try await primaryPort(forSlot: CommandKeys.slot(Array(key.utf8)))
    }

    /// `master` or `slave`, as the node itself says (`ROLE`).
    public func role(of port: Int) async throws -> String {
        let reply = try await on(port, RedisCommand("ROLE"))[0]
        return reply.array?.first?.string ?? "?"
    }

    /// Keys, one on each of the first primaries' slots in turn, so that a pipeline of them spans
    /// every primary: `prefix` + a number, hashed as they are (no tag).
    public func keysSpanningPrimaries(prefix: String, count: Int) async throws -> [String] {
        let shards = try await shards()
        var byPrimary: [[String]] = Array(repeating: [], count: shards.count)
        var n = 0
        while byPrimary.contains(where: { $0.count < (count + shards.count - 1) / shards.count }) {
            let key = "\(prefix)\(n)"
            n += 1
            let slot = CommandKeys.slot(Array(key.utf8))
            if let index = shards.firstIndex(where: { $0.slots.contains { $0.contains(slot) } }) { byPrimary[index].append(key) }
        }
        // Interleaved: a, b, c, a, b, c, …
        var keys: [String] = []
        for i in 0..<byPrimary.map(\.count).max()! { for list in byPrimary where i < list.count { keys.append(list[i]) } }
        return Array(keys.prefix(count))
    }

    // MARK: - Failures

    /// SIGKILLs the node on `port` by its PID, as a crash would, and waits until it is gone.
    public func kill(port: Int) async {
        if let survivor = ports.first(where: { $0 != port && isRunning($0) }), let shards = try? await shards(asking: survivor) {
            let slots = shards.first { $0.primary == port }?.slots ?? []
            lock.withLock { killedSlots[port] = slots }
        }
        let child = lock.withLock { processes[port] }
        child?.kill(signal: SIGKILL)
        _ = await child?.waitForExit(timeout: .seconds(5))
        lock.withLock { admins.removeValue(forKey: port) }?.close()
    }

    /// SIGSTOP: the node holds its connections but answers nothing until `resume`.
    public func pause(port: Int) { lock.withLock { processes[port] }?.kill(signal: SIGSTOP) }

    public func resume(port: Int) { lock.withLock { processes[port] }?.kill(signal: SIGCONT) }

    /// Waits until a replica of the dead primary on `deadPort` has taken its slots and every live
    /// node says `cluster_state:ok`; returns the new primary's port.
    @discardableResult
    public func waitForPromotion(of deadPort: Int, timeout: Duration = .seconds(15)) async throws -> Int {
        guard let slot = lock.withLock({ killedSlots[deadPort] })?.first?.lowerBound else {
            throw RedisServerError(description: "127.0.0.1:\(deadPort) was not a primary serving slots when it was killed")
        }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let port = try? await primaryPort(forSlot: slot), port != deadPort, (try? await role(of: port)) == "master",
               await everyLiveNodeIsOK() {
                return port
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw RedisServerError(description: "no replica of 127.0.0.1:\(deadPort) took over within \(timeout)")
    }

    // MARK: - Slot migration, in steps

    /// Step 1: `to` imports `slot`, `from` migrates it. Keys still on `from` are served there;
    /// for the others `from` answers `ASK … to`.
    public func beginMigration(slot: Int, from: Int, to: Int) async throws {
        try await on(to, RedisCommand("CLUSTER", "SETSLOT", slot, "IMPORTING", nodeID(from)))
        try await on(from, RedisCommand("CLUSTER", "SETSLOT", slot, "MIGRATING", nodeID(to)))
    }

    /// Step 2: moves `keys` (default: every key of the slot still on `from`) with `MIGRATE`;
    /// returns how many moved.
    @discardableResult
    public func migrateKeys(slot: Int, from: Int, to: Int, keys: [String]? = nil) async throws -> Int {
        let names: [String]
        if let keys {
            names = keys
        } else {
            let reply = try await on(from, RedisCommand("CLUSTER", "GETKEYSINSLOT", slot, 100_000))[0]
            names = (reply.array ?? []).compactMap(\.string)
        }
        guard !names.isEmpty else { return 0 }
        let args: [any RedisArgument] = ["127.0.0.1", to, "", 0, 5000, "REPLACE", "KEYS"] + names.map { $0 as any RedisArgument }
        let reply = try await on(from, RedisCommand("MIGRATE", args))[0]
        return reply == .status("NOKEY") ? 0 : names.count
    }

    /// Step 3: `slot` is `to`'s, told to both ends and to every other live primary; then `from`
    /// answers `MOVED … to`.
    public func finishMigration(slot: Int, from: Int, to: Int) async throws {
        let id = nodeID(to)
        try await on(to, RedisCommand("CLUSTER", "SETSLOT", slot, "NODE", id))
        try await on(from, RedisCommand("CLUSTER", "SETSLOT", slot, "NODE", id))
        for port in ports where port != to && port != from && isRunning(port) {
            guard (try? await role(of: port)) == "master" else { continue }
            try await on(port, RedisCommand("CLUSTER", "SETSLOT", slot, "NODE", id))
        }
    }

    /// All three steps.
    public func migrateSlot(_ slot: Int, from: Int, to: Int) async throws {
        try await beginMigration(slot: slot, from: from, to: to)
        try await migrateKeys(slot: slot, from: from, to: to)
        try await finishMigration(slot: slot, from: from, to: to)
    }

    // MARK: - Making the cluster

    private var slotRanges: [ClosedRange<Int>] {
        (0..<primaryCount).map { i in
            (i * ClusterSlotMap.slotCount / primaryCount)...((i + 1) * ClusterSlotMap.slotCount / primaryCount - 1)
        }
    }

    private func create(replicasPerPrimary: Int) async throws {
        for port in ports {
            let id = try await on(port, RedisCommand("CLUSTER", "MYID"))[0].string ?? ""
            lock.withLock { ids[port] = id }
        }
        // Distinct config epochs, as redis-cli gives them: no epoch collision to resolve.
        for (i, port) in ports.enumerated() { try await on(port, RedisCommand("CLUSTER", "SET-CONFIG-EPOCH", i + 1)) }
        for (i, range) in slotRanges.enumerated() {
            try await on(ports[i], RedisCommand("CLUSTER", "ADDSLOTSRANGE", range.lowerBound, range.upperBound))
        }
        for port in ports.dropFirst() { try await on(port, RedisCommand("CLUSTER", "MEET", "127.0.0.1", ports[0])) }
        // A replica can only follow a primary it knows.
        try await waitUntil("every node knows every other") {
            for port in self.ports {
                let nodes = try await self.on(port, RedisCommand("CLUSTER", "NODES"))[0].string ?? ""
                let known = nodes.split(separator: "\n").filter { !$0.contains("handshake") && !$0.contains("noaddr") }
                if known.count < self.ports.count { return false }
            }
            return true
        }
        for p in 0..<primaryCount {
            for r in 0..<replicasPerPrimary {
                let replica = ports[primaryCount + p * replicasPerPrimary + r]
                try await on(replica, RedisCommand("CLUSTER", "REPLICATE", nodeID(ports[p])))
            }
        }
        try await waitUntil("the cluster is ready (cluster_state:ok, replicas in sync, every node agrees on the slots)") {
            guard await self.everyLiveNodeIsOK() else { return false }
            for port in self.ports {
                let shards = try await self.shards(asking: port)
                if shards.count != self.primaryCount || shards.contains(where: { $0.replicas.count != replicasPerPrimary }) { return false }
                if replicasPerPrimary > 0, port >= self.ports[self.primaryCount] {
                    let info = try await self.on(port, RedisCommand("INFO", "replication"))[0].string ?? ""
                    if !info.contains("master_link_status:up") { return false }
                }
            }
            return true
        }
    }

    private func everyLiveNodeIsOK() async -> Bool {
        for port in ports where isRunning(port) {
            guard let info = try? await on(port, RedisCommand("CLUSTER", "INFO"))[0].string, info.contains("cluster_state:ok") else { return false }
        }
        return true
    }

    private func waitUntil(_ what: String, timeout: Duration = .seconds(20), _ condition: @escaping @Sendable () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        var lastError: Error?
        while ContinuousClock.now < deadline {
            do {
                if try await condition() { return }
            } catch {
                lastError = error
            }
            try await Task.sleep(for: .milliseconds(25))
        }
        throw RedisServerError(description: "cluster on \(ports): not within \(timeout): \(what)\(lastError.map { " (last error: \($0))" } ?? "")")
    }

    /// One node on a free loopback port whose bus port (port + 10000) is free too.
    private static func startNode(directory: String, nodeTimeout: Duration, password: String?, tls: TestCertificate?,
                                  avoiding used: Set<Int>) async throws -> (ChildProcess, Int) {
        var lastError = ""
        for _ in 0..<20 {
            let port = freeLoopbackPort()
            guard port < 55536, !used.contains(port), !used.contains(port + 10000), !used.contains(port - 10000),
                  portIsFree(port + 10000) else { continue }
            let args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
                        "--logfile", "", "--dir", directory, "--cluster-enabled", "yes",
                        "--cluster-config-file", "\(directory)/nodes-\(port).conf",
                        "--cluster-node-timeout", String(nodeTimeout.components.seconds * 1000 + nodeTimeout.components.attoseconds / 1_000_000_000_000_000),
                        // A replica may always take over, however long since it last heard its primary.
                        "--cluster-replica-validity-factor", "0",
                        // A replica's first sync starts at once (the default waits 5 s for more replicas).
                        "--repl-diskless-sync-delay", "0"]
                + (password.map { ["--requirepass", $0, "--masterauth", $0] } ?? [])
                + (tls.map { ["--port", "0", "--tls-port", String(port), "--tls-cert-file", $0.certificatePath, "--tls-key-file", $0.keyPath,
                              "--tls-ca-cert-file", $0.certificatePath, "--tls-auth-clients", "no", "--tls-cluster", "yes",
                              "--tls-replication", "yes"] } ?? [])
            let child = try ChildProcess(executable: try RedisServer.redisServerPath(), arguments: args, directory: directory, logName: "cluster-\(port)")
            let probe = RedisNodeConnection(configuration: RedisConfiguration(
                url: RedisURL(tls: tls != nil, host: "127.0.0.1", port: port, password: password, caFile: tls?.certificatePath),
                connectTimeout: .milliseconds(500), commandTimeout: .seconds(2),
                backoff: .init(initial: .milliseconds(5), maximum: .milliseconds(20)), topology: .standalone))
            defer { probe.close() }
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline, child.isRunning {
                // Ours only if the answering process is our child (the port may have been taken).
                if let info = try? await probe.pipeline([RedisCommand("INFO", "server")])[0].string {
                    if info.contains("process_id:\(child.pid)\r") { return (child, port) }
                    break
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            lastError = child.stdout + child.stderr
            child.kill(signal: SIGKILL)
            _ = await child.waitForExit(timeout: .seconds(5))
            child.removeLogs()
        }
        throw RedisServerError(description: "a cluster node did not start: \(lastError.suffix(500))")
    }

    private static func portIsFree(_ port: Int) -> Bool { withLoopbackSocket(port, bind) }
}
