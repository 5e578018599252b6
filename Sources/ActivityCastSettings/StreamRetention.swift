/// How long acknowledged entries stay in the streams the workers read (`streams.retention_ms`,
/// `streams.retention_entries`): an entry goes once every group has acknowledged it (it is below
/// every group's last-delivered id and every pending entry) and it is neither younger than
/// `millis` nor among the newest `entries`. Whichever of the two keeps more, wins.
public struct StreamRetention: Sendable, Equatable, CustomStringConvertible {
    public var millis: Int64
    public var entries: Int
    /// How often a worker trims (`streams.trim_interval_ms`); nil: never (the streams grow until
    /// someone else trims them).
    public var interval: Duration?

    public init(millis: Int64 = 60_000, entries: Int = 10_000, interval: Duration? = .seconds(10)) {
        self.millis = millis
        self.entries = entries
        self.interval = interval
    }

    public var description: String {
        guard interval != nil else { return "not trimmed" }
        return "acknowledged entries kept \(millis / 1000) s and the newest \(entries)"
    }
}
