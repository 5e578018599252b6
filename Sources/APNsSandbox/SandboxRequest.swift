/// One decoded HTTP/2 request, as the server loop hands it to `SandboxState.handle`.
public struct SandboxRequest: Sendable {
    /// `:method`, e.g. `POST`.
    public var method: String
    /// `:path`, e.g. `/3/device/<token>` (query string included, if any).
    public var path: String
    /// Regular header fields in arrival order, names lowercase (HTTP/2), duplicates kept.
    /// Pseudo-headers, if passed, are ignored.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// The connection the stream arrived on: provider-token rules and stream counts are per
    /// connection.
    public var connectionID: UInt64

    public init(method: String, path: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                connectionID: UInt64 = 0) {
        self.method = method; self.path = path; self.headers = headers; self.body = body; self.connectionID = connectionID
    }

    /// The value of the first header named `name` (lowercase).
    public func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }
}

/// What the server loop does to a connection besides (or instead of) answering a stream.
public enum ConnectionFault: Sendable, Equatable {
    /// Send the response, then GOAWAY (error code NO_ERROR, last stream id = this stream) with
    /// this debug data (Apple-style JSON, `{"reason":"Shutdown"}`), and stop accepting streams.
    case goAway(debugData: [UInt8])
    /// Don't answer: reset the connection (close the socket without TLS close_notify). The
    /// request was not processed; the response's status is 0 and it carries nothing.
    case reset
}

/// The answer to one request.
public struct SandboxResponse: Sendable {
    /// HTTP status (`:status`); 0 only with `connectionFault == .reset`.
    public var status: Int
    /// Response header fields, names lowercase.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// Slow-response fault: wait this long before answering, without blocking the connection's
    /// other streams.
    public var delay: Duration?
    /// A connection-level fault to act on (GOAWAY after this response, or a reset).
    public var connectionFault: ConnectionFault?
    /// Set on the first request that authenticates a connection: raise
    /// SETTINGS_MAX_CONCURRENT_STREAMS to this value. Until then APNs allows one stream
    /// (`SandboxConfiguration.streamsBeforeAuthentication`).
    public var maxConcurrentStreams: Int?

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = [], delay: Duration? = nil,
                connectionFault: ConnectionFault? = nil, maxConcurrentStreams: Int? = nil) {
        self.status = status; self.headers = headers; self.body = body; self.delay = delay
        self.connectionFault = connectionFault; self.maxConcurrentStreams = maxConcurrentStreams
    }

    /// The value of the first header named `name`.
    public func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }
}
