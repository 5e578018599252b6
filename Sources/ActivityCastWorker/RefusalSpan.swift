/// Whether Redis refuses this worker's writes, judged from batches that run concurrently and
/// are noted when they finish, in any order. Each outcome proves something only about the time
/// after its batch began: a batch that went through ends the span only if it began after the
/// last refusal, and a refused batch starts a new span only if it began after the last end (one
/// refused just before Redis had room again, noted late, is old news; if Redis is really full
/// again, the next batch says so). A pure value; the worker keeps one behind a lock.
struct RefusalSpan<Instant: Comparable & Sendable, Reason: Sendable>: Sendable {
    /// The last refusal and when it was noted, while the span lasts.
    private(set) var last: (reason: Reason, at: Instant)?
    /// When the last span ended.
    private(set) var ended: Instant?

    enum Change: Equatable { case none, started, ongoing, ended }

    /// A batch begun at `began` was refused with `reason`, noted at `now`.
    mutating func refused(_ reason: Reason, began: Instant, now: Instant) -> Change {
        if let ended, ended > began { return .none }
        defer { last = (reason, now) }
        return last == nil ? .started : .ongoing
    }

    /// A batch begun at `began` went through, noted at `now`.
    mutating func wentThrough(began: Instant, now: Instant) -> Change {
        guard let at = last?.at, at <= began else { return .none }
        last = nil
        ended = now
        return .ended
    }
}
