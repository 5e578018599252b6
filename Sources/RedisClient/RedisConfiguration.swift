/// How a connection behaves: where it goes, how long it waits, how it backs off.
public struct RedisConfiguration: Sendable {
    public var url: RedisURL
    /// TCP connect + TLS handshake + AUTH/SELECT must finish within this.
    public var connectTimeout: Duration
    /// A reply must arrive within this (plus the BLOCK time of a blocking command).
    public var commandTimeout: Duration
    /// Reconnect back-off: the first delay, doubled per failure up to `maximum`, with full jitter
    /// between half and all of it so a fleet doesn't reconnect in lockstep after a restart.
    public var backoff: Backoff
    /// Sent as `CLIENT SETNAME` so `CLIENT LIST` shows which worker a connection belongs to.
    public var clientName: String?
    /// A single Redis or a cluster: found out on first use (`automatic`), or stated.
    public var topology: Topology
    /// How a connection to a cluster routes, retries and refreshes its slot map.
    public var cluster: ClusterOptions

    public enum Topology: Sendable, Equatable {
        /// Asks the first seed that answers (`INFO cluster`): `cluster_enabled:1` is a cluster.
        case automatic
        /// One Redis: no question asked, every command to the URL's node.
        case standalone
        /// A Redis Cluster: the slot map is read from the seeds without asking first.
        case cluster
    }

    public struct ClusterOptions: Sendable {
        /// How long a pipeline keeps retrying what a cluster refuses for now (`TRYAGAIN`,
        /// `CLUSTERDOWN`, `LOADING`, a node that can't be reached while its replica takes over)
        /// before it gives the error reply (or throws `connectionFailed`) to the caller.
        public var retryFor: Duration
        /// The slot map is read again when it is older than this (and at once after `MOVED` or a
        /// lost node).
        public var refreshInterval: Duration
        /// `MOVED`/`ASK` redirections followed per command before its error reply is returned.
        public var maxRedirects: Int

        public init(retryFor: Duration = .seconds(2), refreshInterval: Duration = .seconds(15), maxRedirects: Int = 5) {
            self.retryFor = retryFor
            self.refreshInterval = refreshInterval
            self.maxRedirects = maxRedirects
        }
    }

    public struct Backoff: Sendable {
        public var initial: Duration
        public var maximum: Duration
        public init(initial: Duration = .milliseconds(50), maximum: Duration = .seconds(2)) {
            self.initial = initial
            self.maximum = maximum
        }

        /// The delay before attempt `failures + 1`; `random` in 0...1.
        public func delay(afterFailures failures: Int, random: Double) -> Duration {
            guard failures > 0 else { return .zero }
            let exponent = min(failures - 1, 30)
            let raw = Double(initial.nanoseconds) * Double(1 << exponent)
            let capped = min(raw, Double(maximum.nanoseconds))
            return .nanoseconds(Int64(capped * (0.5 + 0.5 * random)))
        }
    }

    public init(url: RedisURL, connectTimeout: Duration = .seconds(3), commandTimeout: Duration = .seconds(5),
                backoff: Backoff = Backoff(), clientName: String? = nil, topology: Topology = .automatic,
                cluster: ClusterOptions = ClusterOptions()) {
        self.url = url
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.backoff = backoff
        self.clientName = clientName
        self.topology = topology
        self.cluster = cluster
    }

    /// This configuration aimed at one node (another seed, or a node the slot map names):
    /// database 0, that node's host (and TLS server name, unless one was given), no other seeds.
    func node(_ address: RedisNodeAddress, database: Int = 0) -> RedisConfiguration {
        var copy = self
        copy.url.host = address.host
        copy.url.port = address.port
        copy.url.additionalSeeds = []
        copy.url.database = database
        return copy
    }
}
