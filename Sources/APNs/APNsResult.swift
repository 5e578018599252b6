import APNsCore

/// The outcome of one request: APNs's answer, or why there was none.
public enum APNsResult: Sendable, Hashable {
    case response(APNsResponse)
    case failed(APNsTransportError)

    /// What to do next. A request that got no answer is retried with back-off (its outcome is
    /// unknown; a Live Activity push carries its timestamp, so a duplicate is harmless); so is one
    /// that was never sent for want of a provider token (the fleet's is in Redis, which may be
    /// away for a moment): neither says anything about the device token.
    public var action: APNsAction {
        switch self {
        case .response(let r): return r.action
        case .failed(let e): return e.kind == .configuration ? .fail : .retryWithBackoff
        }
    }

    /// Never sent because no connection to APNs could be made (`connectionFailed`): says
    /// nothing about the request, its device or its entry, only that APNs is out of reach.
    public var apnsUnreachable: Bool {
        if case .failed(let e) = self { return e.kind == .connectionFailed }
        return false
    }

    /// APNs can't be used now for reasons outside the request: no connection could be made
    /// (`apnsUnreachable`), or it refuses our credentials (`APNsReason.refusesCredentials`). Says
    /// nothing about the request, its device or its entry.
    public var apnsUnusable: Bool {
        apnsUnreachable || response?.reason?.refusesCredentials == true
    }

    /// No answer, and the request may have reached APNs: its connection was lost or reset, its
    /// stream closed without an answer, or it timed out. A push whose fate is unknown goes again
    /// only without its alert (a start not at all). Other failures without an answer — no
    /// connection, no provider token, the client shut down — never sent the request.
    public var fateUnknown: Bool {
        if case .failed(let e) = self { return e.kind == .connectionLost || e.kind == .timeout }
        return false
    }

    public var response: APNsResponse? {
        if case .response(let r) = self { return r }
        return nil
    }
}
