internal import CNghttp2

/// Events of a client session. All fire synchronously on the session's thread, from inside
/// `receive(_:)` (most), `produceOutput(into:limit:)` (requests refused before they were sent)
/// or `terminate`. A delegate may call back into the session (e.g. submit the next request from
/// `streamClosed`).
public protocol HTTP2ClientDelegate: AnyObject {
    /// The final response head of a request (1xx heads are skipped; trailers are not reported).
    /// `headers` leaves out `:status`.
    func http2(_ session: HTTP2ClientSession, responseHead stream: Int32, context: UInt64, status: Int,
               headers: HTTP2HeaderList)

    /// A chunk of a response body. `bytes` is valid only during the call.
    func http2(_ session: HTTP2ClientSession, responseBody stream: Int32, context: UInt64,
               bytes: UnsafeRawBufferPointer)

    /// The stream is over; fires exactly once for every request `submitRequest` accepted (unless
    /// the session is discarded first: see `unfinishedRequests`). After a response head,
    /// `.noError` means the response is complete. Without one, the request failed:
    /// `.refusedStream` means the server did not process it (above a GOAWAY's last stream ID,
    /// refused by the server, or never sent because the session was closing): safe to retry on
    /// another connection. Any other code (an RST_STREAM from the peer, `.internalError` for a
    /// response HTTP2Kit rejected): the request may or may not have been processed.
    func http2(_ session: HTTP2ClientSession, streamClosed stream: Int32, context: UInt64,
               errorCode: HTTP2ErrorCode)

    /// The server sent GOAWAY: no new requests on this connection. Fires before the streams
    /// above `lastStreamID` are closed with `.refusedStream`. APNs puts `{"reason":"..."}` in
    /// `debugData`.
    func http2(_ session: HTTP2ClientSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode,
               debugData: [UInt8])

    /// The server sent SETTINGS (at connection start, then whenever it changes them).
    /// `maxConcurrentStreams` is its SETTINGS_MAX_CONCURRENT_STREAMS now in force (see
    /// `HTTP2ClientSession.remoteMaxConcurrentStreams`).
    func http2(_ session: HTTP2ClientSession, settingsChanged maxConcurrentStreams: Int)

    /// The server acknowledged a PING sent with `submitPing(payload:)`.
    func http2(_ session: HTTP2ClientSession, pingAcknowledged payload: UInt64)
}

extension HTTP2ClientDelegate {
    public func http2(_ session: HTTP2ClientSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode,
                      debugData: [UInt8]) {}
    public func http2(_ session: HTTP2ClientSession, settingsChanged maxConcurrentStreams: Int) {}
    public func http2(_ session: HTTP2ClientSession, pingAcknowledged payload: UInt64) {}
}

/// The client side of one HTTP/2 connection (the APNs sender): a protocol engine driven by
/// memory. See `HTTP2Session` for how to pump it.
///
/// Not thread-safe and not `Sendable`: one event-loop thread owns it, with its socket and TLS.
///
/// Per request the Swift side allocates nothing of its own in the steady state: the shared
/// headers come from an `HTTP2RequestTemplate` (referenced, not copied), `:path` and the extra
/// headers are copied into a reused scratch area, the body is streamed from a shared
/// `HTTP2Body`, streams live in a reused slot table, and response headers are collected into a
/// reused `HTTP2HeaderList`. (nghttp2 itself allocates its stream and frame structures.)
public final class HTTP2ClientSession: HTTP2Session {
    struct Stream {
        var streamID: Int32 = 0
        var context: UInt64 = 0
        /// Keeps `bodyBase` alive until the stream is released.
        var body: HTTP2Body?
        var bodyBase: UnsafeRawPointer?
        var bodyCount = 0
        var bodyOffset = 0
        var template: HTTP2RequestTemplate?
        var headDelivered = false
        var inUse = false
        /// Reported closed (refused by a GOAWAY while nghttp2 still held it back); the slot is
        /// freed when nghttp2 drops the request.
        var reported = false
    }

    /// Receives the events. Held weakly: the object that owns the session is usually its delegate.
    public weak var delegate: (any HTTP2ClientDelegate)?

    /// Receives the events instead of `delegate` when set (package use): held unowned(unsafe),
    /// so the object must outlive every call into this session. Unlike a weak reference it gives
    /// the object no side table: the delegate is retained and released around every event, and
    /// on an object with a side table each of those takes the runtime's slow path.
    @exclusivity(unchecked) package unowned(unsafe) var unownedDelegate: (any HTTP2ClientDelegate)?

    let handle: NGHTTP2SessionHandle

    // The mutable state below is touched several times per request from the nghttp2 callbacks.
    // Swift checks exclusive access to class properties at run time (swift_beginAccess, a
    // thread-local access set): 5-7% of all CPU samples in the in-memory client+server
    // benchmark. The checks are switched off for these properties only; what makes that safe:
    // the session is used from one thread (not Sendable), and no access to them is ever held
    // across a call out of this class (delegate calls get copies, taken before the call).

    /// Slot table for requests in flight; `stream user data` and data-source pointers carry the
    /// slot index. Freed slots are reused (their capacity too).
    @exclusivity(unchecked) var streams: ContiguousArray<Stream> = []
    @exclusivity(unchecked) var freeSlots: [Int] = []
    @exclusivity(unchecked) var openCount = 0
    /// The header block being received (one at a time on a connection: HEADERS and its
    /// CONTINUATIONs are contiguous), and its `:status`.
    @exclusivity(unchecked) var headerBlock = HTTP2HeaderList()
    @exclusivity(unchecked) var headerBlockStatus = 0
    @exclusivity(unchecked) var headerBlockTooLarge = false
    let maxResponseHeaderBytes: Int
    let scratch = HeaderScratch()
    /// The delegate, strongly held while the session runs callbacks (one weak load per entry
    /// point instead of one per event).
    @exclusivity(unchecked) var activeDelegate: (any HTTP2ClientDelegate)?
    /// Inside `receive`/`produceOutput`.
    @exclusivity(unchecked) var driving = false
    var receivedSettings = false

    /// Makes a client session and queues the connection preface: the client magic, SETTINGS
    /// (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE `initialWindowSize`) and a connection-level
    /// WINDOW_UPDATE up to `connectionWindowSize`. Call `produceOutput` and write the result
    /// right after the TLS handshake.
    ///
    /// - Parameters:
    ///   - initialWindowSize: per-stream receive window for response bodies.
    ///   - connectionWindowSize: connection-level receive window.
    ///   - maxConcurrentStreamsHint: the server's concurrency assumed until its SETTINGS arrive
    ///     (`remoteMaxConcurrentStreams` reports it until then). nghttp2 itself holds back
    ///     requests beyond the limit in force, so this only bounds the very first burst; a server
    ///     that allows fewer refuses the excess (REFUSED_STREAM). Callers that want no refusals
    ///     wait for `settingsChanged` (or `hasReceivedSettings`) before the first burst.
    ///   - maxResponseHeaderBytes: a response whose header block is larger is reset
    ///     (the stream closes with `.internalError`).
    public init(delegate: (any HTTP2ClientDelegate)?, initialWindowSize: Int = 1 << 20,
                connectionWindowSize: Int = 1 << 24, maxConcurrentStreamsHint: Int = 100,
                maxResponseHeaderBytes: Int = 64 << 10) throws(HTTP2Error) {
        self.delegate = delegate
        self.maxResponseHeaderBytes = maxResponseHeaderBytes
        handle = try NGHTTP2SessionHandle(server: false, setCallbacks: { callbacks in
            nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, clientOnBeginHeaders)
            nghttp2_session_callbacks_set_on_header_callback(callbacks, clientOnHeader)
            nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, clientOnFrameReceived)
            nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, clientOnDataChunk)
            nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, clientOnStreamClose)
        }, setOptions: { option in
            nghttp2_option_set_peer_max_concurrent_streams(option, UInt32(clamping: max(1, maxConcurrentStreamsHint)))
        })
        handle.setUserData(self)
        try handle.submitSettings([
            NG.settings(NGHTTP2_SETTINGS_ENABLE_PUSH, 0),
            NG.settings(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, min(initialWindowSize, Int(Int32.max))),
        ])
        let rv = nghttp2_session_set_local_window_size(handle.pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0,
                                                       Int32(clamping: connectionWindowSize))
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_session_set_local_window_size") }
    }

    // MARK: HTTP2Session

    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error) {
        try enter()
        defer { leave() }
        try handle.receive(bytes)
    }

    public func produceOutput(into buffer: inout [UInt8], limit: Int) throws(HTTP2Error) -> Int {
        try enter()
        defer { leave() }
        return try handle.produce(into: &buffer, limit: limit)
    }

    public var wantsRead: Bool { handle.wantsRead }
    public var wantsWrite: Bool { handle.wantsWrite }

    /// Requests still open are not reported (nghttp2 stops all processing once the GOAWAY is
    /// out): take them from `unfinishedRequests()`.
    public func terminate(errorCode: HTTP2ErrorCode = .noError) {
        handle.terminate(errorCode: errorCode)
    }

    // MARK: Requests

    /// Queues a request; returns its stream ID. The request leaves with the next
    /// `produceOutput`; its events carry `context`.
    ///
    /// `:path` is the template's `pathPrefix` followed by `path`.
    ///
    /// Headers are sent in this order: the template's pseudo-headers, `:path`, the template's
    /// headers, then `headers`. `:path` and `headers` are HPACK "never indexed" (they differ per
    /// request and would only churn the dynamic table); their names should be lowercase.
    ///
    /// Requests beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS are accepted but held back
    /// inside nghttp2 until a stream closes: callers that want bounded latency submit only
    /// while `activeStreams < remoteMaxConcurrentStreams`.
    ///
    /// - Throws: `.sessionClosing` after GOAWAY (sent or received) or `terminate`;
    ///   `.streamIDsExhausted` once the connection has used all its stream IDs (about 1.07
    ///   billion requests): open a new connection.
    @discardableResult
    public func submitRequest(_ template: HTTP2RequestTemplate, path: String, headers: [HTTP2Header] = [],
                              body: HTTP2Body? = nil, context: UInt64 = 0) throws(HTTP2Error) -> Int32 {
        let pointer = handle.pointer
        if nghttp2_session_check_request_allowed(pointer) == 0 {
            if nghttp2_session_get_next_stream_id(pointer) > UInt32(Int32.max) {
                throw HTTP2Error(kind: .streamIDsExhausted, message: "no stream ID left on this connection")
            }
            throw HTTP2Error(kind: .sessionClosing, message: "the session is closing (GOAWAY sent or received)")
        }

        // Build the nv array: pseudo-headers, :path (the template's prefix, then `path`), regular
        // template headers, extras.
        var extraBytes = template.pathPrefixBytes.count + path.utf8.count
        if !headers.isEmpty {
            for header in headers { extraBytes += header.name.utf8.count + header.value.utf8.count }
        }
        scratch.reset(entryCount: template.entryCount + 1 + headers.count, byteCount: extraBytes)
        scratch.append(template.entries, count: HTTP2RequestTemplate.pseudoCount)
        scratch.append(staticName: ":path", prefix: template.pathPrefixBytes, value: path, flags: NVFlags.noIndex)
        scratch.append(template.entries + HTTP2RequestTemplate.pseudoCount,
                       count: template.entryCount - HTTP2RequestTemplate.pseudoCount)
        if !headers.isEmpty {
            for header in headers {
                scratch.append(name: header.name, value: header.value, flags: NVFlags.noIndex)
            }
        }

        let slot = allocateSlot()
        streams[slot].context = context
        streams[slot].template = template
        streams[slot].body = body
        if let body {
            streams[slot].bodyBase = UnsafeRawPointer(body.base)
            streams[slot].bodyCount = body.count
        } else {
            streams[slot].bodyBase = nil
            streams[slot].bodyCount = 0
        }
        streams[slot].bodyOffset = 0
        streams[slot].headDelivered = false

        let rv: Int32
        if body != nil {
            var provider = cnghttp2_data_provider_make(slotPointer(slot), clientReadBody)
            rv = nghttp2_submit_request(pointer, nil, scratch.entries, scratch.count, &provider, slotPointer(slot))
        } else {
            rv = nghttp2_submit_request(pointer, nil, scratch.entries, scratch.count, nil, slotPointer(slot))
        }
        if rv < 0 {
            releaseSlot(slot)
            throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_request")
        }
        streams[slot].streamID = rv
        return rv
    }

    /// Requests accepted by `submitRequest` whose stream has not closed yet (in flight, or held
    /// back by nghttp2), as (stream ID, context). When a connection dies, these are the requests
    /// to account for: their outcome is unknown, except that those never sent were not
    /// processed. Read it before discarding the session (which reports nothing).
    public func unfinishedRequests() -> [(stream: Int32, context: UInt64)] {
        streams.filter { $0.inUse && !$0.reported }.map { ($0.streamID, $0.context) }
    }

    /// Requests submitted and not yet closed (including those nghttp2 holds back).
    public var activeStreams: Int { openCount }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS in force: `maxConcurrentStreamsHint` until
    /// its first SETTINGS frame arrives; `Int(UInt32.max)` if that SETTINGS sets no limit.
    public var remoteMaxConcurrentStreams: Int {
        Int(handle.remoteSetting(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS))
    }

    /// Whether the server's first SETTINGS frame has arrived.
    public var hasReceivedSettings: Bool { receivedSettings }

    /// Whether a new request can be submitted now (no GOAWAY either way, stream IDs left).
    public var canSubmitRequests: Bool { nghttp2_session_check_request_allowed(handle.pointer) != 0 }

    /// The stream ID the next request gets. Client stream IDs are odd and end at 2^31 - 1; rotate
    /// the connection well before (`submitRequest` throws `.streamIDsExhausted` after).
    public var nextStreamID: Int64 { Int64(nghttp2_session_get_next_stream_id(handle.pointer)) }

    /// Moves the stream ID counter forward (`nghttp2_session_set_next_stream_id`): tests use it
    /// to reach stream-ID exhaustion without a billion requests (package access: not public API).
    package func setNextStreamID(_ id: Int32) throws(HTTP2Error) {
        let rv = nghttp2_session_set_next_stream_id(handle.pointer, id)
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_session_set_next_stream_id") }
    }

    // MARK: Connection control

    /// Sends PING; `pingAcknowledged(payload)` fires when the ACK arrives.
    public func submitPing(payload: UInt64 = 0) throws(HTTP2Error) {
        try handle.submitPing(payload: payload)
    }

    /// Sends GOAWAY (graceful: streams already open continue; no new requests may be submitted).
    public func submitGoAway(errorCode: HTTP2ErrorCode = .noError, debugData: [UInt8] = []) throws(HTTP2Error) {
        try handle.submitGoAway(lastStreamID: 0, errorCode: errorCode, debugData: debugData)
    }

    /// Cancels a request: RST_STREAM(`errorCode`); `streamClosed` follows.
    public func cancel(stream: Int32, errorCode: HTTP2ErrorCode = .cancel) throws(HTTP2Error) {
        try handle.resetStream(stream, errorCode: errorCode)
    }

    // MARK: Slots

    @inline(__always)
    func allocateSlot() -> Int {
        openCount += 1
        if let slot = freeSlots.popLast() {
            streams[slot].inUse = true
            streams[slot].reported = false
            return slot
        }
        streams.append(Stream(inUse: true))
        return streams.count - 1
    }

    @inline(__always)
    func releaseSlot(_ slot: Int) {
        if !streams[slot].reported { openCount -= 1 }
        streams[slot].inUse = false
        streams[slot].body = nil
        streams[slot].bodyBase = nil
        streams[slot].template = nil
        freeSlots.append(slot)
    }

    /// Marks the start of a `receive`/`produceOutput` call: nghttp2 must not be re-entered from
    /// its own callbacks (its parser and serializer keep state across the call), and the
    /// delegate is loaded once for all the events the call fires.
    @inline(__always)
    func enter() throws(HTTP2Error) {
        guard !driving else {
            throw HTTP2Error(kind: .invalidArgument,
                             message: "receive/produceOutput called from inside a delegate callback")
        }
        driving = true
        activeDelegate = unownedDelegate ?? delegate
    }

    @inline(__always)
    func leave() {
        driving = false
        activeDelegate = nil
    }

    /// The delegate for an event: the one held by the entry point, else a fresh weak load (for
    /// events fired from `submit*`/`terminate`).
    @inline(__always)
    var eventDelegate: (any HTTP2ClientDelegate)? { activeDelegate ?? unownedDelegate ?? delegate }

    /// The slot of an open, not yet reported stream.
    @inline(__always)
    func liveSlot(_ stream: Int32) -> Int? {
        guard let slot = handle.slot(of: stream), slot < streams.count, streams[slot].inUse,
              !streams[slot].reported, streams[slot].streamID == stream else { return nil }
        return slot
    }

    // MARK: Callback bodies (called from the C callbacks below)

    func beginHeaders() {
        headerBlock.removeAll()
        headerBlockStatus = 0
        headerBlockTooLarge = false
    }

    func header(name: UnsafePointer<UInt8>, nameLength: Int, value: UnsafePointer<UInt8>, valueLength: Int) -> Int32 {
        if nameLength == 7 && name[0] == UInt8(ascii: ":") && name[1] == UInt8(ascii: "s") {
            // `:status` (nghttp2 has already checked it is three digits on a response).
            var status = 0
            for i in 0..<valueLength {
                let digit = Int(value[i]) - 48
                guard digit >= 0 && digit <= 9 else { return 0 }
                status = status * 10 + digit
            }
            headerBlockStatus = status
            return 0
        }
        if headerBlock.byteCount + nameLength + valueLength > maxResponseHeaderBytes {
            // Resets the stream with INTERNAL_ERROR.
            headerBlockTooLarge = true
            return NG.temporalCallbackFailure
        }
        headerBlock.append(name: name, nameLength: nameLength, value: value, valueLength: valueLength)
        return 0
    }

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let type = cnghttp2_frame_type(frame)
        if type == NG.headersFrame {
            let stream = cnghttp2_frame_stream_id(frame)
            guard headerBlockStatus >= 200, !headerBlockTooLarge, let slot = liveSlot(stream),
                  !streams[slot].headDelivered else { return }
            streams[slot].headDelivered = true
            let context = streams[slot].context
            eventDelegate?.http2(self, responseHead: stream, context: context, status: headerBlockStatus,
                                 headers: headerBlock)
        } else if type == NG.settingsFrame {
            guard cnghttp2_frame_flags(frame) & NG.flagAck == 0 else { return }
            receivedSettings = true
            eventDelegate?.http2(self, settingsChanged: remoteMaxConcurrentStreams)
        } else if type == NG.goAwayFrame {
            let length = cnghttp2_frame_goaway_debug_data_length(frame)
            var debugData: [UInt8] = []
            if length > 0, let data = cnghttp2_frame_goaway_debug_data(frame) {
                debugData = Array(UnsafeBufferPointer(start: data, count: length))
            }
            let lastStreamID = cnghttp2_frame_goaway_last_stream_id(frame)
            eventDelegate?.http2(self, goAway: lastStreamID,
                                 errorCode: HTTP2ErrorCode(cnghttp2_frame_goaway_error_code(frame)),
                                 debugData: debugData)
            refuseHeldBackRequests(above: lastStreamID)
        } else if type == NG.pingFrame {
            guard cnghttp2_frame_flags(frame) & NG.flagAck != 0 else { return }
            eventDelegate?.http2(self, pingAcknowledged: cnghttp2_frame_ping_payload(frame))
        }
    }

    /// After GOAWAY, nghttp2 closes the open streams above the last stream ID itself (right after
    /// this callback), but requests it is still holding back for lack of concurrency would only
    /// be refused once a stream slot frees up, possibly never. They can't be sent any more: report
    /// them now, in stream order.
    private func refuseHeldBackRequests(above lastStreamID: Int32) {
        var refused: [(slot: Int, stream: Int32, context: UInt64)] = []
        for slot in streams.indices where streams[slot].inUse && !streams[slot].reported
            && streams[slot].streamID > lastStreamID
            && nghttp2_session_find_stream(handle.pointer, streams[slot].streamID) == nil {
            refused.append((slot, streams[slot].streamID, streams[slot].context))
        }
        refused.sort { $0.stream < $1.stream }
        for entry in refused {
            streams[entry.slot].reported = true
            openCount -= 1
        }
        for entry in refused {
            eventDelegate?.http2(self, streamClosed: entry.stream, context: entry.context, errorCode: .refusedStream)
        }
    }

    func dataChunk(stream: Int32, data: UnsafePointer<UInt8>, length: Int) {
        guard let slot = liveSlot(stream) else { return }
        let context = streams[slot].context
        eventDelegate?.http2(self, responseBody: stream, context: context,
                             bytes: UnsafeRawBufferPointer(start: data, count: length))
    }

    func streamClosed(stream: Int32, errorCode: UInt32) {
        guard let slot = handle.slot(of: stream), slot < streams.count, streams[slot].inUse,
              streams[slot].streamID == stream else { return }
        if streams[slot].reported {
            // Already reported as refused (see refuseHeldBackRequests).
            releaseSlot(slot)
            return
        }
        let context = streams[slot].context
        releaseSlot(slot)
        eventDelegate?.http2(self, streamClosed: stream, context: context, errorCode: HTTP2ErrorCode(errorCode))
    }

    func readBody(slot: Int, stream: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int,
                  flags: UnsafeMutablePointer<UInt32>) -> Int {
        // The body's bytes through the raw pointer the slot keeps (its `body` keeps them alive):
        // no reference counting per DATA frame.
        guard slot >= 0, slot < streams.count, streams[slot].inUse, streams[slot].streamID == stream,
              let base = streams[slot].bodyBase else {
            // Not ours (cannot happen): reset the stream rather than send garbage.
            return Int(NG.temporalCallbackFailure)
        }
        return readBodyChunk(from: base, count: streams[slot].bodyCount, offset: &streams[slot].bodyOffset, into: buffer,
                             length: length, flags: flags)
    }
}

@available(*, unavailable, message: "HTTP2ClientSession belongs to the one thread that owns its connection")
extension HTTP2ClientSession: Sendable {}

// MARK: - C callbacks
//
// File-scope @convention(c) functions: they recover the session from user_data (unretained;
// see NGHTTP2SessionHandle), guard every pointer, and never throw: a failure becomes an nghttp2
// error code.

@inline(__always)
private func withClientSession<R>(_ userData: UnsafeMutableRawPointer?, failure: R, _ body: (HTTP2ClientSession) -> R) -> R {
    withSessionObject(userData, failure: failure, body)
}

private func clientOnBeginHeaders(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                                  _ userData: UnsafeMutableRawPointer?) -> Int32 {
    withClientSession(userData, failure: NG.callbackFailure) { owner in
        owner.beginHeaders()
        return 0
    }
}

private func clientOnHeader(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                            _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
                            _ value: UnsafePointer<UInt8>?, _ valueLength: Int,
                            _ flags: UInt8, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let name, let value else { return NG.callbackFailure }
    return withClientSession(userData, failure: NG.callbackFailure) { owner in
        owner.header(name: name, nameLength: nameLength, value: value, valueLength: valueLength)
    }
}

private func clientOnFrameReceived(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                                   _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame else { return NG.callbackFailure }
    return withClientSession(userData, failure: NG.callbackFailure) { owner in
        owner.frameReceived(frame)
        return 0
    }
}

private func clientOnDataChunk(_ session: OpaquePointer?, _ flags: UInt8, _ stream: Int32,
                               _ data: UnsafePointer<UInt8>?, _ length: Int,
                               _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard userData != nil else { return NG.callbackFailure }
    guard let data, length > 0 else { return 0 }
    return withClientSession(userData, failure: NG.callbackFailure) { owner in
        owner.dataChunk(stream: stream, data: data, length: length)
        return 0
    }
}

private func clientOnStreamClose(_ session: OpaquePointer?, _ stream: Int32, _ errorCode: UInt32,
                                 _ userData: UnsafeMutableRawPointer?) -> Int32 {
    withClientSession(userData, failure: NG.callbackFailure) { owner in
        owner.streamClosed(stream: stream, errorCode: errorCode)
        return 0
    }
}

private func clientReadBody(_ session: OpaquePointer?, _ stream: Int32, _ buffer: UnsafeMutablePointer<UInt8>?,
                            _ length: Int, _ dataFlags: UnsafeMutablePointer<UInt32>?,
                            _ source: UnsafeMutablePointer<nghttp2_data_source>?,
                            _ userData: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let dataFlags, let slot = slotIndex(cnghttp2_data_source_ptr(source)) else {
        return Int(NG.callbackFailure)
    }
    return withClientSession(userData, failure: Int(NG.callbackFailure)) { owner in
        owner.readBody(slot: slot, stream: stream, into: buffer, length: length, flags: dataFlags)
    }
}
