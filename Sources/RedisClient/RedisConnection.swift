import Synchronization

/// Redis, as callers see it: pipelines of commands in, one reply per command out — from a single
/// Redis or a Redis Cluster, found out on first use (`RedisConfiguration.topology`).
///
/// On a single Redis this is one `RedisNodeConnection` (one I/O thread; see there for
/// pipelining, reconnects and what a lost connection means). On a cluster it keeps one
/// `RedisNodeConnection` per primary and routes each command by its keys' hash slot
/// (`CommandKeys`): a pipeline's commands for different nodes are sent concurrently, and the
/// replies come back in the caller's order. Redirections, failovers and slot migrations are
/// followed (`ClusterRouter`); a command whose keys span slots throws `unroutable`.
///
/// What differs on a cluster: commands on different nodes run in no particular order relative to
/// each other (within a slot the order holds); a command without keys goes with its neighbours in
/// the pipeline, or to any primary (`pipeline(_:on:)` chooses one); a multi-key command needs its
/// keys in one slot, so blocking reads of several streams are split per slot by the caller
/// (`keyGroups`); database 0 only.
public final class RedisConnection: Sendable {
    public let configuration: RedisConfiguration
    private let state: Mutex<State>

    /// Counters for benchmarks and metrics, summed over a cluster's node connections.
    public struct Stats: Sendable, Equatable {
        public init(roundTrips: Int, commands: Int, connects: Int, failures: Int = 0) {
            self.roundTrips = roundTrips; self.commands = commands; self.connects = connects; self.failures = failures
        }
        /// Write-then-read cycles: what pipelining saves.
        public var roundTrips: Int
        public var commands: Int
        public var connects: Int
        /// Round trips that failed without replies: no connection, a timeout, a lost connection.
        public var failures: Int
    }

    private enum Mode {
        /// Not asked yet: `probe` asks the first seed (database 0); `single` is the connection a
        /// single Redis would be used through (the probe itself for database 0).
        case undecided(probe: RedisNodeConnection, single: RedisNodeConnection)
        case standalone(RedisNodeConnection)
        case cluster(ClusterRouter)
        /// The configuration can't work with what answered (a database on a cluster, several
        /// seeds of a single Redis): every call throws this.
        case refused(RedisError)
    }

    private enum Route {
        case standalone(RedisNodeConnection)
        case cluster(ClusterRouter)
    }

    private struct State {
        var mode: Mode
        var detection: Task<Route, Error>?
        var closed = false
    }

    public init(configuration: RedisConfiguration) {
        self.configuration = configuration
        let url = configuration.url
        let mode: Mode
        switch configuration.topology {
        case .standalone:
            mode = .standalone(RedisNodeConnection(configuration: configuration))
        case .automatic, .cluster:
            // The probe needs database 0: a cluster node refuses SELECT, so a connection that
            // selects another database couldn't even ask.
            let probe = RedisNodeConnection(configuration: configuration.node(url.seeds[0]))
            let single = url.database == 0 ? probe : RedisNodeConnection(configuration: configuration)
            mode = .undecided(probe: probe, single: single)
        }
        state = Mutex(State(mode: mode))
    }

    public var stats: Stats {
        switch state.withLock({ $0.mode }) {
        case .undecided(let probe, let single):
            if probe === single { return probe.stats }
            var total = probe.stats
            total += single.stats
            return total
        case .standalone(let connection): return connection.stats
        case .cluster(let router): return router.stats
        case .refused: return Stats(roundTrips: 0, commands: 0, connects: 0)
        }
    }

    /// Sends `commands` as one pipeline (on a cluster: one per node, concurrently) and returns one
    /// reply per command, in order, error replies included as `.error` values. `EVALSHA` commands
    /// that meet `NOSCRIPT` are resent as `EVAL`. `blocking` extends the reply timeout for a
    /// blocking command's BLOCK time. `limits` caps what nested values of these replies may cost
    /// (bigger ones arrive as `.oversized`).
    public func pipeline(_ commands: [RedisCommand], blocking: Duration = .zero, limits: RESPDecoder.Limits? = nil) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        switch try await route() {
        case .standalone(let connection): return try await connection.pipeline(commands, blocking: blocking, limits: limits)
        case .cluster(let router): return try await router.pipeline(commands, on: nil, blocking: blocking, limits: limits)
        }
    }

    /// `commands` to one node of a cluster (`primaries()`, `keyGroups`): what a command without
    /// keys is for (`INFO`, `SCAN`, `WAIT`, `SCRIPT FLUSH`). A keyed command the node doesn't
    /// serve is redirected as usual. On a single Redis, the same as `pipeline(_:)`.
    public func pipeline(_ commands: [RedisCommand], on node: RedisNodeAddress, blocking: Duration = .zero,
                         limits: RESPDecoder.Limits? = nil) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        switch try await route() {
        case .standalone(let connection): return try await connection.pipeline(commands, blocking: blocking, limits: limits)
        case .cluster(let router): return try await router.pipeline(commands, on: node, blocking: blocking, limits: limits)
        }
    }

    /// Sends one command; an error reply throws `RedisError(.server)`.
    @discardableResult
    public func send(_ command: RedisCommand, blocking: Duration = .zero) async throws -> RESPValue {
        try await pipeline([command], blocking: blocking)[0].orThrow(command.name)
    }

    /// Convenience: `send(RedisCommand(name, args...))`.
    @discardableResult
    public func command(_ name: String, _ args: any RedisArgument...) async throws -> RESPValue {
        try await send(RedisCommand(name, args))
    }

    /// Why Redis refused this connection's `CLIENT SETNAME` (the connection works without the
    /// name), or nil.
    public var clientNameRefusal: String? {
        switch state.withLock({ $0.mode }) {
        case .undecided(let probe, let single): return single.clientNameRefusal ?? probe.clientNameRefusal
        case .standalone(let connection): return connection.clientNameRefusal
        case .cluster(let router): return router.clientNameRefusal
        case .refused: return nil
        }
    }

    /// Stops the I/O threads; queued and later commands fail with `closed`.
    public func close() {
        let mode = state.withLock { s in
            s.closed = true
            return s.mode
        }
        RedisConnection.close(mode)
    }

    private static func close(_ mode: Mode) {
        switch mode {
        case .undecided(let probe, let single):
            probe.close()
            single.close()
        case .standalone(let connection): connection.close()
        case .cluster(let router): router.close()
        case .refused: break
        }
    }

    // MARK: - Topology

    /// A single Redis or a cluster (asking on first use).
    public func topology() async throws -> RedisConfiguration.Topology {
        switch try await route() {
        case .standalone: return .standalone
        case .cluster: return .cluster
        }
    }

    /// The primaries serving slots (one node on a single Redis).
    public func primaries() async throws -> [RedisNodeAddress] {
        switch try await route() {
        case .standalone: return [configuration.url.seeds[0]]
        case .cluster(let router): return router.map.primaries
        }
    }

    /// The slot map routed by now; nil on a single Redis.
    public func slotMap() async throws -> ClusterSlotMap? {
        switch try await route() {
        case .standalone: return nil
        case .cluster(let router): return router.map
        }
    }

    /// Reads a cluster's slot map again now (nothing on a single Redis).
    public func refreshSlotMap() async throws {
        if case .cluster(let router) = try await route() { try await router.refreshMap() }
    }

    /// The node `key` is served by, as the map says now.
    public func node(forKey key: String) async throws -> RedisNodeAddress {
        try await keyGroups([key])[0].node
    }

    /// `keys` grouped so that each group can share one multi-key command (an `XREADGROUP` of
    /// several streams): on a cluster, by hash slot, with the node serving it (a command's keys
    /// must share a slot, not only a node); on a single Redis, one group. Groups come in the
    /// order of their first key; each group keeps its keys' order.
    public func keyGroups(_ keys: [String]) async throws -> [RedisKeyGroup] {
        switch try await route() {
        case .standalone:
            return keys.isEmpty ? [] : [RedisKeyGroup(node: configuration.url.seeds[0], slot: nil, keys: keys)]
        case .cluster(let router):
            let map = router.map
            let fallback = map.primaries.first ?? configuration.url.seeds[0]
            return ClusterPipelinePlan.group(Array(keys.indices)) { CommandKeys.slot(Array(keys[$0].utf8)) }.map { group in
                RedisKeyGroup(node: map.primary(forSlot: group.node) ?? fallback, slot: group.node, keys: group.indices.map { keys[$0] })
            }
        }
    }

    // MARK: - Deciding

    private enum Step {
        case ready(Route)
        case wait(Task<Route, Error>)
        case fail(RedisError)
    }

    private func route() async throws -> Route {
        let step = state.withLock { s -> Step in
            if s.closed { return .fail(RedisError(.closed, "the Redis connection was closed")) }
            switch s.mode {
            case .standalone(let connection): return .ready(.standalone(connection))
            case .cluster(let router): return .ready(.cluster(router))
            case .refused(let error): return .fail(error)
            case .undecided(let probe, let single):
                if let detection = s.detection { return .wait(detection) }
                let detection = Task { try await self.decide(probe: probe, single: single) }
                s.detection = detection
                return .wait(detection)
            }
        }
        switch step {
        case .ready(let route): return route
        case .fail(let error): throw error
        case .wait(let detection): return try await detection.value
        }
    }

    /// What the seeds are. Connection failures and the like are thrown and asked again on the
    /// next call; a decision is kept.
    private func decide(probe: RedisNodeConnection, single: RedisNodeConnection) async throws -> Route {
        let outcome: Outcome
        do {
            outcome = try await detect(probe: probe, single: single)
        } catch {
            state.withLock { $0.detection = nil }
            throw error
        }
        let (route, closed) = state.withLock { s -> (Route?, Bool) in
            s.detection = nil
            switch outcome {
            case .standalone:
                s.mode = .standalone(single)
                return (.standalone(single), s.closed)
            case .standaloneThisOnce:
                return (.standalone(single), s.closed)
            case .cluster(let router):
                s.mode = .cluster(router)
                return (.cluster(router), s.closed)
            case .refused(let error):
                s.mode = .refused(error)
                return (nil, s.closed)
            }
        }
        switch outcome {
        case .standalone where probe !== single: probe.close()
        case .cluster, .refused:
            probe.close()
            single.close()
        default: break
        }
        if closed, let route {
            // Closed while deciding: what the decision opened goes too.
            if case .cluster(let router) = route { router.close() } else { single.close() }
        }
        if case .refused(let error) = outcome { throw error }
        return route!
    }

    private enum Outcome {
        case standalone
        /// Busy or loading: this call goes to the single connection, the next asks again.
        case standaloneThisOnce
        case cluster(ClusterRouter)
        case refused(RedisError)
    }

    private func detect(probe: RedisNodeConnection, single: RedisNodeConnection) async throws -> Outcome {
        let url = configuration.url
        if configuration.topology == .cluster { return try await startCluster() }
        var lastError: Error?
        for (index, seed) in url.seeds.enumerated() {
            let asking = index == 0 ? probe : RedisNodeConnection(configuration: configuration.node(seed))
            defer { if index > 0 { asking.close() } }
            let reply: RESPValue
            do {
                reply = try await asking.pipeline([RedisCommand("INFO", "cluster")])[0]
            } catch let error as RedisError where error.isConnectionProblem && index < url.seeds.count - 1 {
                lastError = error
                continue
            }
            if let info = reply.string {
                if info.contains("cluster_enabled:1") { return try await startCluster() }
                if !url.additionalSeeds.isEmpty {
                    return .refused(RedisError(.authentication, "\(url.seeds.count) seeds are given (\(url)), but \(seed) is not a cluster node (cluster_enabled:0): give a single Redis one host"))
                }
                return .standalone
            }
            // `INFO` refused: LOADING or BUSY will pass; anything else (an ACL without INFO) is a
            // Redis that doesn't say, used as a single one.
            let message = reply.errorMessage ?? ""
            if message.hasPrefix("LOADING") || message.hasPrefix("BUSY") { return .standaloneThisOnce }
            return .standalone
        }
        throw lastError ?? RedisError(.connectionFailed, "no Redis seed answered (\(url))")
    }

    private func startCluster() async throws -> Outcome {
        let url = configuration.url
        if url.database != 0 {
            return .refused(RedisError(.authentication, "\(url) is a Redis Cluster, which has database 0 only: remove /\(url.database) from the URL (keys are told apart by their prefix)"))
        }
        return .cluster(try await ClusterRouter.start(configuration: configuration))
    }
}

/// Keys that may share one multi-key command, and the node that serves them.
public struct RedisKeyGroup: Sendable, Equatable {
    public var node: RedisNodeAddress
    /// Their hash slot on a cluster; nil on a single Redis (any keys may go together).
    public var slot: Int?
    public var keys: [String]

    public init(node: RedisNodeAddress, slot: Int?, keys: [String]) {
        self.node = node
        self.slot = slot
        self.keys = keys
    }
}
