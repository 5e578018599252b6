import ActivityCastSend
import RedisClient

/// Why an entry's commands failed: Redis refusing work, Redis out of reach or APNs down (not the
/// entry's fault: its attempt is given back), or an error about the entry's own data.
enum EntryFailure {
    case refused(RedisRefusal)
    /// Redis unreachable or timing out (a failover, a restart), or APNs down: not the entry's
    /// fault either.
    case unreachable(String)
    case own(String)
    /// Not final yet, through no failure: its fan-out's slices are under way.
    case handedOff

    init(_ message: String) {
        if let refusal = RedisRefusal(errorReply: message) { self = .refused(refusal) } else { self = .own(message) }
    }

    /// Why a send threw: Redis refusing, Redis out of reach or APNs down, or the entry's own failure.
    init(sending error: Error) {
        if let refusal = Outage.refusal(of: error) {
            self = .refused(refusal)
        } else if Outage.isOutage(error) {
            self = .unreachable("\(error)")
        } else {
            self = .own("sending failed: \(error)")
        }
    }
}

/// Redis or APNs, not the work, behind a failure.
enum Outage {
    /// An attempt failed because Redis was unreachable, timed out, or refused (see
    /// `RedisRefusal`), or because APNs was down: no connection could be made for any of its
    /// requests, or they all failed while APNs answered nothing normally (`SendFailure.apnsOutage`).
    static func isOutage(_ error: Error) -> Bool {
        if let e = error as? RedisError, e.isConnectionProblem { return true }
        if let e = error as? SendFailure, e.apnsOutage { return true }
        return refusal(of: error) != nil
    }

    /// Redis refusing work behind a send's failure: a `RedisError`'s, or one the send path quotes
    /// (`fan-out create: unexpected reply OOM command not allowed …`).
    static func refusal(of error: Error) -> RedisRefusal? {
        if let e = error as? RedisError { return e.refusal }
        if let e = error as? SendFailure { return RedisRefusal(quotedIn: e.description) }
        return nil
    }
}
