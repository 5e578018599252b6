import Synchronization

/// The cluster half of `RedisConnection`: one `RedisNodeConnection` per primary, a slot map, and
/// the rules for what a node's answer means.
///
/// A pipeline is cut by slot (`ClusterPipelinePlan`), each node's share sent concurrently as one
/// pipeline, and the replies put back in the caller's order. Then, per command:
/// - `MOVED`: the map is patched, a refresh started in the background, the command sent to the
///   new node (at most `maxRedirects` times);
/// - `ASK`: `ASKING` and the command, in one write, to the node named (the map stays);
/// - `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`: sent again after a short, growing pause, until
///   `retryFor` has passed; then the error reply is the caller's.
/// A node that can't be reached (`connectionFailed`: nothing was written) makes the client read
/// the map again from another node and send that node's commands again, within `retryFor`.
/// A node lost with commands in flight (`connectionLost`, `timeout`) fails the pipeline with that
/// error, as a single connection does: those commands may have run, and only the caller knows
/// whether running them twice is safe. The map is refreshed in the background for the next call.
final class ClusterRouter: Sendable {
    let configuration: RedisConfiguration
    private let state: Mutex<State>

    private struct State {
        var map = ClusterSlotMap(shards: [])
        var refreshedAt = ContinuousClock.now
        var refresh: Task<ClusterSlotMap, Error>?
        var connections: [RedisNodeAddress: RedisNodeConnection] = [:]
        /// Where maps are read: a connection of its own, so a refresh never waits behind a
        /// blocking read on a data connection.
        var control: (address: RedisNodeAddress, connection: RedisNodeConnection)?
        /// Counters of the connections closed so far.
        var retired = RedisConnection.Stats(roundTrips: 0, commands: 0, connects: 0)
        var closed = false
    }

    private init(configuration: RedisConfiguration) {
        self.configuration = configuration
        self.state = Mutex(State())
    }

    /// A router with the cluster's map read from the seeds; throws when no seed answers with one
    /// (the router is closed then).
    static func start(configuration: RedisConfiguration) async throws -> ClusterRouter {
        let router = ClusterRouter(configuration: configuration)
        do {
            try await router.refreshMap()
        } catch {
            router.close()
            throw error
        }
        return router
    }

    var map: ClusterSlotMap { state.withLock { $0.map } }

    var stats: RedisConnection.Stats {
        state.withLock { s in
            var total = s.retired
            for connection in s.connections.values { total += connection.stats }
            if let control = s.control { total += control.connection.stats }
            return total
        }
    }

    var clientNameRefusal: String? {
        state.withLock { s in s.connections.values.lazy.compactMap(\.clientNameRefusal).first ?? s.control?.connection.clientNameRefusal }
    }

    func close() {
        let all = state.withLock { s -> [RedisNodeConnection] in
            s.closed = true
            var all = Array(s.connections.values)
            if let control = s.control { all.append(control.connection) }
            for connection in all { s.retired += connection.stats }
            s.connections = [:]
            s.control = nil
            return all
        }
        for connection in all { connection.close() }
    }

    private var isClosed: Bool { state.withLock { $0.closed } }

    private static let closedError = RedisError(.closed, "the Redis connection was closed")

    // MARK: - Pipelines

    /// `commands` routed by their slots (`target`: every command to that node first, following
    /// redirections from there), with the replies in their order.
    func pipeline(_ commands: [RedisCommand], on target: RedisNodeAddress?, blocking: Duration,
                  limits: RESPDecoder.Limits?) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        let plan = try ClusterPipelinePlan(commands)
        let options = configuration.cluster
        let giveUpAt = ContinuousClock.now + options.retryFor
        var outgoing = commands
        var replies = [RESPValue?](repeating: nil, count: commands.count)
        var pending = Array(commands.indices)
        // Commands to send with ASKING to a node, after `ASK`.
        var asking: [Int: RedisNodeAddress] = [:]
        // Commands that met `MOVED`: routed by the map from then on, even with a target.
        var moved = Set<Int>()
        var redirects: [Int: Int] = [:]
        var round = 0

        while !pending.isEmpty {
            let map = currentMap()
            let anyNode = target ?? map.primaries.first ?? configuration.url.seeds[0]
            let groups = ClusterPipelinePlan.group(pending) { i -> RedisNodeAddress in
                if let node = asking[i] { return node }
                if let target, !moved.contains(i) { return target }
                return plan.slots[i].flatMap(map.primary(forSlot:)) ?? anyNode
            }
            let results = try await send(groups, outgoing, asking: asking, blocking: blocking, limits: limits)

            var next: [Int] = []
            var failure: Error?
            var unreachable: RedisError?
            var wait = false
            var sawMoved = false
            for (group, result) in zip(groups, results) {
                let nodeReplies: [RESPValue]
                switch result {
                case .failure(let error):
                    let e = error as? RedisError
                    if e?.kind == .connectionFailed || (e?.kind == .closed && !isClosed) {
                        // Nothing was written: these commands can go again, to whoever serves them now.
                        unreachable = e
                        next += group.indices
                    } else {
                        if e?.isConnectionProblem == true { refreshSoon() }
                        failure = failure ?? error
                    }
                    continue
                case .success(let r):
                    nodeReplies = r
                }
                let expected = group.indices.count + group.indices.filter { asking[$0] != nil }.count
                guard nodeReplies.count == expected else {
                    throw RedisError(.unexpectedReply, "\(group.node) answered \(nodeReplies.count) replies to \(expected) commands")
                }
                var k = 0
                for i in group.indices {
                    if asking[i] != nil { k += 1 }  // ASKING's +OK
                    let reply = nodeReplies[k]
                    k += 1
                    if let message = reply.errorMessage {
                        if let redirect = ClusterRedirect(errorReply: message, replyingNode: group.node),
                           redirects[i, default: 0] < options.maxRedirects {
                            redirects[i, default: 0] += 1
                            switch redirect {
                            case .moved(let slot, let node):
                                state.withLock { $0.map.assign(slot: slot, to: node) }
                                asking[i] = nil
                                moved.insert(i)
                                sawMoved = true
                            case .ask(_, let node):
                                asking[i] = node
                            }
                            next.append(i)
                            continue
                        }
                        if ClusterRedirect.isTransient(message), ContinuousClock.now < giveUpAt {
                            wait = true
                            next.append(i)
                            continue
                        }
                        if asking[i] != nil, message.hasPrefix("NOSCRIPT"), let eval = outgoing[i].evalFallback {
                            // The node connection's own fallback would send EVAL without ASKING.
                            outgoing[i] = RedisCommand(arguments: eval)
                            next.append(i)
                            continue
                        }
                    }
                    replies[i] = reply
                    asking[i] = nil
                }
            }
            if sawMoved { refreshSoon() }
            if let failure { throw failure }
            if let unreachable {
                guard ContinuousClock.now < giveUpAt else { throw unreachable }
                _ = try? await refreshMap()
                wait = true
            }
            if wait { try? await Task.sleep(for: ClusterRouter.pause(round: round)) }
            round += 1
            pending = next.sorted()
        }
        return replies.map { $0! }
    }

    /// 10 ms, doubled each round, at most 200 ms.
    static func pause(round: Int) -> Duration { .milliseconds(min(10 << min(round, 5), 200)) }

    /// Each group to its node, concurrently; one result per group, in the groups' order.
    private func send(_ groups: [(node: RedisNodeAddress, indices: [Int])], _ commands: [RedisCommand], asking: [Int: RedisNodeAddress],
                      blocking: Duration, limits: RESPDecoder.Limits?) async throws -> [Result<[RESPValue], Error>] {
        var batches: [(RedisNodeConnection, [RedisCommand])] = []
        for group in groups {
            var batch: [RedisCommand] = []
            batch.reserveCapacity(group.indices.count)
            for i in group.indices {
                if asking[i] != nil {
                    batch.append(RedisCommand("ASKING"))
                    var command = commands[i]
                    command.evalFallback = nil
                    batch.append(command)
                } else {
                    batch.append(commands[i])
                }
            }
            batches.append((try connection(to: group.node), batch))
        }
        if batches.count == 1 {
            do { return [.success(try await batches[0].0.pipeline(batches[0].1, blocking: blocking, limits: limits))] }
            catch { return [.failure(error)] }
        }
        // Each node's answer goes straight into its slot. (Child tasks returning `(index,
        // result)` tuples came back paired wrongly in release builds only: node A's replies
        // given to node B's commands, every run of the intake bench on a 3-node cluster, and
        // never with a print added inside the task — a miscompile is suspected, not pinned
        // down. This shape passed every run since; the reply count is checked below regardless.)
        let slots = NodeAnswers(count: batches.count)
        await withTaskGroup(of: Void.self) { taskGroup in
            for index in batches.indices {
                let connection = batches[index].0, batch = batches[index].1
                taskGroup.addTask {
                    let result: Result<[RESPValue], Error>
                    do { result = .success(try await connection.pipeline(batch, blocking: blocking, limits: limits)) }
                    catch { result = .failure(error) }
                    slots.set(index, result)
                }
            }
        }
        return slots.all.map { $0 ?? .failure(ClusterRouter.closedError) }
    }

    /// The data connection to `node`, opened on first use.
    private func connection(to node: RedisNodeAddress) throws(RedisError) -> RedisNodeConnection {
        try state.withLock { s throws(RedisError) -> RedisNodeConnection in
            if s.closed { throw ClusterRouter.closedError }
            if let connection = s.connections[node] { return connection }
            let connection = RedisNodeConnection(configuration: configuration.node(node))
            s.connections[node] = connection
            return connection
        }
    }

    // MARK: - The slot map

    /// The map, starting a refresh in the background when it is older than `refreshInterval`.
    private func currentMap() -> ClusterSlotMap {
        let (map, due) = state.withLock { s in
            (s.map, !s.closed && s.refresh == nil && ContinuousClock.now - s.refreshedAt > configuration.cluster.refreshInterval)
        }
        if due { refreshSoon() }
        return map
    }

    /// Starts a refresh unless one is under way.
    private func refreshSoon() {
        guard state.withLock({ !$0.closed && $0.refresh == nil }) else { return }
        Task { _ = try? await self.refreshMap() }
    }

    /// Reads the map again (joining a refresh under way) and installs it.
    @discardableResult
    func refreshMap() async throws -> ClusterSlotMap {
        let task = try state.withLock { s throws(RedisError) -> Task<ClusterSlotMap, Error> in
            if s.closed { throw ClusterRouter.closedError }
            if let refresh = s.refresh { return refresh }
            let refresh = Task { try await self.fetchMap() }
            s.refresh = refresh
            return refresh
        }
        return try await task.value
    }

    /// Asks the nodes in turn — the last one asked, the map's primaries and replicas, the seeds —
    /// until one answers with a map.
    private func fetchMap() async throws -> ClusterSlotMap {
        defer { state.withLock { $0.refresh = nil } }
        let candidates = state.withLock { s -> [RedisNodeAddress] in
            var seen = Set<RedisNodeAddress>()
            return ([s.control?.address].compactMap { $0 } + s.map.allNodes + configuration.url.seeds).filter { seen.insert($0).inserted }
        }
        var lastError: Error = RedisError(.connectionFailed, "no node to ask for the cluster's slot map")
        for address in candidates {
            let connection = try controlConnection(to: address)
            do {
                let map = try await ClusterRouter.readMap(from: connection, at: address, tls: configuration.url.tls)
                try install(map)
                return map
            } catch let error as RedisError where error.kind == .closed && isClosed {
                throw error
            } catch {
                lastError = error
                dropControl(connection)
            }
        }
        throw lastError
    }

    /// The map `connection` (to `address`) answers: `CLUSTER SHARDS`, or `CLUSTER SLOTS` from a
    /// Redis older than 7.
    static func readMap(from connection: RedisNodeConnection, at address: RedisNodeAddress, tls: Bool) async throws -> ClusterSlotMap {
        let reply = try await connection.pipeline([RedisCommand("CLUSTER", "SHARDS")])[0]
        let map: ClusterSlotMap
        do {
            if let message = reply.errorMessage {
                guard message.lowercased().contains("unknown subcommand") else {
                    throw RedisError(.server, "CLUSTER SHARDS on \(address): \(message)")
                }
                let slots = try await connection.pipeline([RedisCommand("CLUSTER", "SLOTS")])[0].orThrow("CLUSTER SLOTS on \(address)")
                map = try ClusterSlotMap.parse(slots: slots, queried: address)
            } else {
                map = try ClusterSlotMap.parse(shards: reply, queried: address, tls: tls)
            }
        } catch let error as ClusterSlotMap.ParseError {
            throw RedisError(.unexpectedReply, "\(address): \(error)")
        }
        guard !map.primaries.isEmpty else {
            throw RedisError(.server, "\(address) knows no node that serves a slot: the cluster isn't set up yet")
        }
        return map
    }

    /// Makes `map` the one routed by, and closes the connections to nodes that are no longer
    /// primaries (a failed-over primary, one emptied by migration).
    private func install(_ map: ClusterSlotMap) throws(RedisError) {
        let gone = try state.withLock { s throws(RedisError) -> [RedisNodeConnection] in
            if s.closed { throw ClusterRouter.closedError }
            s.map = map
            s.refreshedAt = .now
            let keep = Set(map.primaries)
            var gone: [RedisNodeConnection] = []
            for (address, connection) in s.connections where !keep.contains(address) {
                gone.append(connection)
                s.retired += connection.stats
                s.connections[address] = nil
            }
            return gone
        }
        // A caller whose commands were queued on one of these gets `closed`, and sends them again.
        for connection in gone { connection.close() }
    }

    private func controlConnection(to address: RedisNodeAddress) throws(RedisError) -> RedisNodeConnection {
        let (connection, replaced) = try state.withLock { s throws(RedisError) -> (RedisNodeConnection, RedisNodeConnection?) in
            if s.closed { throw ClusterRouter.closedError }
            if let control = s.control, control.address == address { return (control.connection, nil) }
            let old = s.control?.connection
            if let old { s.retired += old.stats }
            var config = configuration.node(address)
            config.connectTimeout = min(config.connectTimeout, .seconds(1))
            config.commandTimeout = min(config.commandTimeout, .seconds(2))
            let connection = RedisNodeConnection(configuration: config)
            s.control = (address, connection)
            return (connection, old)
        }
        replaced?.close()
        return connection
    }

    private func dropControl(_ connection: RedisNodeConnection) {
        state.withLock { s in
            if let control = s.control, control.connection === connection {
                s.retired += connection.stats
                s.control = nil
            }
        }
        connection.close()
    }
}

extension RedisConnection.Stats {
    static func += (a: inout RedisConnection.Stats, b: RedisConnection.Stats) {
        a.roundTrips += b.roundTrips
        a.commands += b.commands
        a.connects += b.connects
        a.failures += b.failures
    }
}

/// One answer per node pipeline, set by the tasks that send them.
private final class NodeAnswers: Sendable {
    private let answers: Mutex<[Result<[RESPValue], Error>?]>
    init(count: Int) { answers = Mutex(Array(repeating: nil, count: count)) }
    func set(_ index: Int, _ answer: Result<[RESPValue], Error>) { answers.withLock { $0[index] = answer } }
    var all: [Result<[RESPValue], Error>?] { answers.withLock { $0 } }
}
