import HTTP2Kit

/// Records every client event, keyed by the request context.
final class ClientRecorder: HTTP2ClientDelegate {
    struct Response {
        var stream: Int32
        var status = 0
        var headers = HTTP2HeaderList()
        var heads = 0
        var body: [UInt8] = []
        var closed: HTTP2ErrorCode?
        var closes = 0
    }

    var responses: [UInt64: Response] = [:]
    /// Events in order, for ordering checks: "head 1", "close 3 REFUSED_STREAM", "goaway 5", ...
    var log: [String] = []
    var goAways: [(lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8])] = []
    var settings: [Int] = []
    var pings: [UInt64] = []
    var closedCount = 0
    var unknownEvents = 0
    /// Called after a stream closed is recorded.
    var onClosed: ((HTTP2ClientSession, Int32, UInt64, HTTP2ErrorCode) -> Void)?
    var keepLog = true

    func http2(_ session: HTTP2ClientSession, responseHead stream: Int32, context: UInt64, status: Int,
               headers: HTTP2HeaderList) {
        guard var response = responses[context], response.stream == stream else { unknownEvents += 1; return }
        response.status = status
        response.headers = headers
        response.heads += 1
        responses[context] = response
        if keepLog { log.append("head \(stream) \(status)") }
    }

    func http2(_ session: HTTP2ClientSession, responseBody stream: Int32, context: UInt64, bytes: UnsafeRawBufferPointer) {
        guard responses[context]?.stream == stream else { unknownEvents += 1; return }
        responses[context]!.body.append(contentsOf: bytes)
    }

    func http2(_ session: HTTP2ClientSession, streamClosed stream: Int32, context: UInt64, errorCode: HTTP2ErrorCode) {
        guard var response = responses[context], response.stream == stream else { unknownEvents += 1; return }
        response.closed = errorCode
        response.closes += 1
        responses[context] = response
        closedCount += 1
        if keepLog { log.append("close \(stream) \(errorCode)") }
        onClosed?(session, stream, context, errorCode)
    }

    func http2(_ session: HTTP2ClientSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8]) {
        goAways.append((lastStreamID, errorCode, debugData))
        log.append("goaway \(lastStreamID)")
    }

    func http2(_ session: HTTP2ClientSession, settingsChanged maxConcurrentStreams: Int) {
        settings.append(maxConcurrentStreams)
    }

    func http2(_ session: HTTP2ClientSession, pingAcknowledged payload: UInt64) {
        pings.append(payload)
    }

    /// Submits and records the stream for `context`.
    @discardableResult
    func submit(_ session: HTTP2ClientSession, _ template: HTTP2RequestTemplate, path: String,
                headers: [HTTP2Header] = [], body: HTTP2Body? = nil, context: UInt64) throws -> Int32 {
        let stream = try session.submitRequest(template, path: path, headers: headers, body: body, context: context)
        responses[context] = Response(stream: stream)
        return stream
    }
}

/// Records server events; answers requests with `answer` (nil: keep them for later).
final class ServerRecorder: HTTP2ServerDelegate {
    var requests: [HTTP2Request] = []
    var pending: [HTTP2Request] = []
    var closed: [(stream: Int32, errorCode: HTTP2ErrorCode)] = []
    var pings: [UInt64] = []
    var goAways: [(lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8])] = []
    var maxActiveStreams = 0
    var answer: ((HTTP2ServerSession, HTTP2Request) throws -> Void)?
    var answerErrors: [Error] = []
    var keepRequests = true
    var requestCount = 0

    func http2(_ session: HTTP2ServerSession, request: HTTP2Request) {
        requestCount += 1
        maxActiveStreams = max(maxActiveStreams, session.activeStreams)
        if keepRequests { requests.append(request) }
        if let answer {
            do { try answer(session, request) } catch { answerErrors.append(error) }
        } else {
            pending.append(request)
        }
    }

    func http2(_ session: HTTP2ServerSession, streamClosed stream: Int32, errorCode: HTTP2ErrorCode) {
        if keepRequests { closed.append((stream, errorCode)) }
    }

    func http2(_ session: HTTP2ServerSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8]) {
        goAways.append((lastStreamID, errorCode, debugData))
    }

    func http2(_ session: HTTP2ServerSession, pingAcknowledged payload: UInt64) {
        pings.append(payload)
    }
}

/// The APNs-like answer used by the interop tests and benchmarks: 200 with `apns-id` (echoed
/// when the request carries one), or 400 `{"reason":"BadPath"}` off `/3/device/`.
func apnsLikeAnswer(_ session: HTTP2ServerSession, _ request: HTTP2Request) throws {
    if request.bodyTooLarge {
        try session.respond(stream: request.stream, status: 413, body: Array(#"{"reason":"PayloadTooLarge"}"#.utf8))
        return
    }
    guard let path = request.headers.valueBytes(for: ":path"), path.starts(with: "/3/device/".utf8) else {
        try session.respond(stream: request.stream, status: 400, body: Array(#"{"reason":"BadPath"}"#.utf8))
        return
    }
    let digits = String(request.stream)
    let id = request.headers.value(for: "apns-id")
        ?? "8f2b5c3a-0000-4000-8000-" + String(repeating: "0", count: max(0, 12 - digits.count)) + digits
    try session.respond(stream: request.stream, status: 200, headers: [HTTP2Header("apns-id", id)])
}
