import HTTP2Kit

/// One decoded HTTP/2 request, as the server loop hands it to `SandboxState.handle`.
///
/// The header fields stay bytes (`HTTP2HeaderList`, as nghttp2 delivered them): the hot path
/// reads them in place and builds a String only for the values it keeps.
public struct SandboxRequest: Sendable {
    /// Every header field in arrival order, names lowercase (HTTP/2), duplicates kept;
    /// pseudo-headers (`:method`, `:path`, …) included.
    public var headers: HTTP2HeaderList
    public var body: [UInt8]
    /// The connection the stream arrived on: provider-token rules and stream counts are per
    /// connection.
    public var connectionID: UInt64

    /// A request as the server received it.
    public init(headers: HTTP2HeaderList, body: [UInt8] = [], connectionID: UInt64 = 0) {
        self.headers = headers; self.body = body; self.connectionID = connectionID
    }

    /// A request from Strings (tests and tools). Pseudo-headers in `headers` are ignored.
    public init(method: String, path: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                connectionID: UInt64 = 0) {
        var fields = HTTP2HeaderList()
        fields.append(name: ":method", value: method)
        fields.append(name: ":path", value: path)
        for h in headers where !h.name.hasPrefix(":") { fields.append(name: h.name, value: h.value) }
        self.init(headers: fields, body: body, connectionID: connectionID)
    }

    /// `:method`, e.g. `POST` (empty if missing).
    public var method: String { headers.value(for: ":method") ?? "" }
    /// `:path`, e.g. `/3/device/<token>` (query string included, if any; empty if missing).
    public var path: String { headers.value(for: ":path") ?? "" }

    /// The value of the first header named `name` (lowercase).
    public func header(_ name: String) -> String? { headers.value(for: name) }

}

enum HTTPMethod {
    case post, get, delete, other

    /// The method named by `:method`'s bytes.
    init(_ b: UnsafeBufferPointer<UInt8>?) {
        guard let b else { self = .other; return }
        if Bytes.equal(b, "POST") { self = .post } else if Bytes.equal(b, "GET") { self = .get } else if Bytes.equal(b, "DELETE") {
            self = .delete
        } else {
            self = .other
        }
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
    public var headers: HTTP2HeaderList
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
        var fields = HTTP2HeaderList()
        for h in headers { fields.append(name: h.name, value: h.value) }
        self.init(status: status, headerList: fields, body: body, delay: delay, connectionFault: connectionFault,
                  maxConcurrentStreams: maxConcurrentStreams)
    }

    public init(status: Int, headerList: HTTP2HeaderList, body: [UInt8] = [], delay: Duration? = nil,
                connectionFault: ConnectionFault? = nil, maxConcurrentStreams: Int? = nil) {
        self.status = status; self.headers = headerList; self.body = body; self.delay = delay
        self.connectionFault = connectionFault; self.maxConcurrentStreams = maxConcurrentStreams
    }

    /// The value of the first header named `name`.
    public func header(_ name: String) -> String? { headers.value(for: name) }
}
