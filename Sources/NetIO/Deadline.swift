#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A point on the monotonic clock, in nanoseconds. Cheap to take and compare on I/O threads.
public struct Deadline: Comparable, Sendable {
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    public static func now() -> Deadline {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Deadline(nanoseconds: UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
    }

    public static func after(_ duration: Duration) -> Deadline {
        Deadline(nanoseconds: now().nanoseconds &+ duration.nanoseconds)
    }

    public static let distantFuture = Deadline(nanoseconds: .max / 2)

    /// Milliseconds left, rounded up, clamped for poll(2): 0 when passed.
    public var pollTimeoutMillis: Int32 {
        let now = Deadline.now().nanoseconds
        guard nanoseconds > now else { return 0 }
        let ms = (nanoseconds - now + 999_999) / 1_000_000
        return Int32(min(ms, UInt64(Int32.max)))
    }

    public var hasPassed: Bool { Deadline.now() >= self }

    public static func < (a: Deadline, b: Deadline) -> Bool { a.nanoseconds < b.nanoseconds }
}

extension Duration {
    /// Whole nanoseconds, saturating; negative durations count as zero.
    public var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        // Both carry the duration's sign: -0.3 s is (0, -3·10^17).
        if seconds < 0 || attoseconds < 0 { return 0 }
        let (ns, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max / 2 : ns &+ UInt64(attoseconds / 1_000_000_000)
    }

    public var milliseconds: Int64 { Int64(nanoseconds / 1_000_000) }
}
