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
                backoff: Backoff = Backoff(), clientName: String? = nil) {
        self.url = url
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.backoff = backoff
        self.clientName = clientName
    }
}
