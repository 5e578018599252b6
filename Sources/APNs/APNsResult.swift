import APNsCore

/// The outcome of one request: APNs's answer, or why there was none.
public enum APNsResult: Sendable, Hashable {
    case response(APNsResponse)
    case failed(APNsTransportError)

    /// What to do next. A request that got no answer is retried with back-off (its outcome is
    /// unknown; a Live Activity push carries its timestamp, so a duplicate is harmless).
    public var action: APNsAction {
        switch self {
        case .response(let r): return r.action
        case .failed(let e): return e.kind == .configuration || e.kind == .providerToken ? .fail : .retryWithBackoff
        }
    }

    public var response: APNsResponse? {
        if case .response(let r) = self { return r }
        return nil
    }
}
