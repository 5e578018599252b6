import Logging
import Synchronization

/// Logs an ongoing condition (Redis refusing writes, a broken stream, rejected credentials) when
/// it starts, then at most once per `interval` while it lasts with how often it was met, and once
/// when it ends — instead of a line per batch, or silence.
public final class ConditionLog: Sendable {
    private struct Entry {
        var message: String
        var since: ContinuousClock.Instant
        var lastLogged: ContinuousClock.Instant
        var count: Int
    }

    private let logger: Logger
    private let interval: Duration
    private let active = Mutex<[String: Entry]>([:])

    public init(logger: Logger, interval: Duration = .seconds(10)) {
        self.logger = logger
        self.interval = interval
    }

    /// The condition `key` holds (again): logs `message` at once if it is new, else only when
    /// `interval` has passed since it was last logged.
    public func report(_ key: String, level: Logger.Level = .error, _ message: String, _ metadata: Logger.Metadata = [:]) {
        let now = ContinuousClock.now
        let log: (first: Bool, count: Int, since: ContinuousClock.Instant)? = active.withLock { map in
            if var e = map[key] {
                e.count += 1
                e.message = message
                defer { map[key] = e }
                guard now - e.lastLogged >= interval else { return nil }
                e.lastLogged = now
                return (false, e.count, e.since)
            }
            map[key] = Entry(message: message, since: now, lastLogged: now, count: 1)
            return (true, 1, now)
        }
        guard let log else { return }
        var meta = metadata
        if !log.first {
            meta["times"] = "\(log.count)"
            meta["for_s"] = "\(Int((now - log.since).seconds))"
        }
        logger.log(level: level, "\(log.first ? "" : "still: ")\(message)", metadata: meta)
    }

    /// The condition `key` no longer holds: logs `message` if it had been reported.
    public func clear(_ key: String, _ message: String, _ metadata: Logger.Metadata = [:]) {
        let ended: Entry? = active.withLock { $0.removeValue(forKey: key) }
        guard let ended else { return }
        var meta = metadata
        meta["after_s"] = "\(Int((ContinuousClock.now - ended.since).seconds))"
        meta["times"] = "\(ended.count)"
        logger.info("\(message)", metadata: meta)
    }

    public func isActive(_ key: String) -> Bool { active.withLock { $0[key] != nil } }
}

extension Duration {
    /// The duration in seconds, for printing and rates.
    public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
