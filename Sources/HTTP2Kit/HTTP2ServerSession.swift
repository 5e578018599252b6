internal import CNghttp2

/// A request received by a server session.
///
/// Delivered once the request is complete (END_STREAM), or as soon as its body passes the
/// session's `maxRequestBodySize` (then `bodyTooLarge` is true, `body` is empty and the rest of
/// the body is discarded as it arrives): answer it (413 for APNs) or reset it. A value type,
/// safe to keep.
public struct HTTP2Request: Sendable {
    /// The stream to answer with `HTTP2ServerSession.respond`.
    public let stream: Int32
    /// Every header, pseudo-headers (`:method`, `:scheme`, `:authority`, `:path`) first.
    public let headers: HTTP2HeaderList
    /// The body (empty when `bodyTooLarge`).
    public let body: [UInt8]
    /// The body exceeded the session's `maxRequestBodySize`.
    public let bodyTooLarge: Bool

    public var method: String? { headers.value(for: ":method") }
    public var path: String? { headers.value(for: ":path") }
    public var authority: String? { headers.value(for: ":authority") }
}

/// Events of a server session; they fire synchronously on the session's thread from inside
/// `receive(_:)` or `produceOutput(into:limit:)`. The delegate may respond from inside
/// `request` (the usual way) or later.
public protocol HTTP2ServerDelegate: AnyObject {
    /// A request to answer with `respond` (or `resetStream`).
    func http2(_ session: HTTP2ServerSession, request: HTTP2Request)

    /// A stream closed: `.noError` after a complete exchange; otherwise the client reset it, or
    /// it was above a GOAWAY's last stream ID (`.refusedStream`).
    func http2(_ session: HTTP2ServerSession, streamClosed stream: Int32, errorCode: HTTP2ErrorCode)

    /// The client sent GOAWAY.
    func http2(_ session: HTTP2ServerSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode,
               debugData: [UInt8])

    /// The client acknowledged a PING sent with `submitPing(payload:)`.
    func http2(_ session: HTTP2ServerSession, pingAcknowledged payload: UInt64)
}

extension HTTP2ServerDelegate {
    public func http2(_ session: HTTP2ServerSession, streamClosed stream: Int32, errorCode: HTTP2ErrorCode) {}
    public func http2(_ session: HTTP2ServerSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode,
                      debugData: [UInt8]) {}
    public func http2(_ session: HTTP2ServerSession, pingAcknowledged payload: UInt64) {}
}

/// The server side of one HTTP/2 connection (the APNs sandbox): a protocol engine driven by
/// memory. See `HTTP2Session` for how to pump it.
///
/// Not thread-safe and not `Sendable`: one thread owns it, with its socket and TLS.
///
/// Limits: SETTINGS_MAX_CONCURRENT_STREAMS is advertised and enforced by nghttp2 (streams
/// beyond it are refused with REFUSED_STREAM); request header blocks above
/// `maxRequestHeaderBytes` are reset with INTERNAL_ERROR; bodies above `maxRequestBodySize` are
/// handed over early with `bodyTooLarge` (see `HTTP2Request`).
public final class HTTP2ServerSession: HTTP2Session {
    struct Stream {
        var streamID: Int32 = 0
        var headers = HTTP2HeaderList()
        var body: [UInt8] = []
        var bodyTooLarge = false
        var delivered = false
        var responded = false
        /// Answered while the (too large) request body was still arriving: reset with NO_ERROR
        /// once the response is out (counted in `pendingEarlyResponses`).
        var awaitingEarlyReset = false
        var response: [UInt8] = []
        var responseOffset = 0
        var inUse = false
    }

    /// Receives the events. Held weakly.
    public weak var delegate: (any HTTP2ServerDelegate)?

    /// Receives the events instead of `delegate` when set (package use): held unowned(unsafe),
    /// so the object must outlive every call into this session. Unlike a weak reference it gives
    /// the object no side table, whose retains and releases take the runtime's slow path.
    @exclusivity(unchecked) package unowned(unsafe) var unownedDelegate: (any HTTP2ServerDelegate)?

    let handle: NGHTTP2SessionHandle
    // Exclusivity checks are off for the hot mutable state, as in HTTP2ClientSession (same
    // reasons: one thread, no access held across a call out of this class).
    @exclusivity(unchecked) var streams: ContiguousArray<Stream> = []
    @exclusivity(unchecked) var freeSlots: [Int] = []
    @exclusivity(unchecked) var openCount = 0
    /// Streams answered while their request body was still arriving (too large): each gets an
    /// RST_STREAM(NO_ERROR) once its response is out, so the client stops sending.
    @exclusivity(unchecked) var pendingEarlyResponses = 0
    /// The stream whose header block is being received, and its slot (header blocks are
    /// contiguous, so one cache entry saves a lookup per header).
    @exclusivity(unchecked) var headerStream: Int32 = 0
    @exclusivity(unchecked) var headerSlot = -1
    let scratch = HeaderScratch()
    /// The header block being received, gathered here (plain memory, no reference counting per
    /// field) and turned into the stream's `HTTP2HeaderList` in one go when the block ends.
    @exclusivity(unchecked) var blockBytes: UnsafeMutablePointer<UInt8>
    @exclusivity(unchecked) var blockByteCount = 0
    @exclusivity(unchecked) var blockByteCapacity = 1024
    @exclusivity(unchecked) var blockFields: UnsafeMutablePointer<HTTP2HeaderList.Field>
    @exclusivity(unchecked) var blockFieldCount = 0
    @exclusivity(unchecked) var blockFieldCapacity = 16
    @exclusivity(unchecked) var activeDelegate: (any HTTP2ServerDelegate)?
    /// Inside `receive`/`produceOutput`.
    @exclusivity(unchecked) var driving = false

    /// The body size above which a request is handed over early with `bodyTooLarge`.
    public let maxRequestBodySize: Int
    /// The header block size (names plus values) above which a request is reset.
    public let maxRequestHeaderBytes: Int

    /// Makes a server session and queues its SETTINGS (MAX_CONCURRENT_STREAMS,
    /// INITIAL_WINDOW_SIZE) and a connection-level WINDOW_UPDATE; nghttp2 expects the client
    /// magic first. Produce and write right after the TLS handshake.
    public init(delegate: (any HTTP2ServerDelegate)?, maxConcurrentStreams: Int = 1000,
                initialWindowSize: Int = 1 << 20, connectionWindowSize: Int = 1 << 24,
                maxRequestBodySize: Int = 64 << 10, maxRequestHeaderBytes: Int = 64 << 10) throws(HTTP2Error) {
        self.delegate = delegate
        blockBytes = .allocate(capacity: blockByteCapacity)
        blockFields = .allocate(capacity: blockFieldCapacity)
        self.maxRequestBodySize = maxRequestBodySize
        self.maxRequestHeaderBytes = maxRequestHeaderBytes
        handle = try NGHTTP2SessionHandle(server: true, setCallbacks: { callbacks in
            nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, serverOnBeginHeaders)
            nghttp2_session_callbacks_set_on_header_callback(callbacks, serverOnHeader)
            nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, serverOnFrameReceived)
            nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, serverOnDataChunk)
            nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
            nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, serverOnFrameSent)
        }, setOptions: { option in
            // Closed streams are kept only for priority bookkeeping, which nobody here uses.
            nghttp2_option_set_no_closed_streams(option, 1)
        })
        handle.setUserData(self)
        try handle.submitSettings([
            NG.settings(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, maxConcurrentStreams),
            NG.settings(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, min(initialWindowSize, Int(Int32.max))),
        ])
        let rv = nghttp2_session_set_local_window_size(handle.pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0,
                                                       Int32(clamping: connectionWindowSize))
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_session_set_local_window_size") }
    }

    deinit {
        blockBytes.deallocate()
        blockFields.deallocate()
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

    public func terminate(errorCode: HTTP2ErrorCode = .noError) {
        handle.terminate(errorCode: errorCode)
    }

    // MARK: Responses

    /// Queues the response to `stream`: `:status`, then `headers` (HPACK "never indexed";
    /// lowercase names), then `body` if non-empty (streamed from the array, not copied).
    ///
    /// - Throws: `.invalidArgument` if the stream is not open (closed or reset by the client,
    ///   refused by a GOAWAY) or was already answered, or for a status outside 100...999.
    public func respond(stream: Int32, status: Int, headers: [HTTP2Header] = [], body: [UInt8]? = nil) throws(HTTP2Error) {
        let slot = try respondableSlot(stream: stream, status: status)
        var extraBytes = 3
        for header in headers { extraBytes += header.name.utf8.count + header.value.utf8.count }
        scratch.reset(entryCount: 1 + headers.count, byteCount: extraBytes)
        appendStatus(status)
        for header in headers {
            scratch.append(name: header.name, value: header.value, flags: NVFlags.noIndex)
        }
        try submitResponse(slot: slot, stream: stream, body: body)
    }

    /// `respond` with the header fields as bytes: no String is read or built (the sandbox's
    /// hot path). nghttp2 copies the bytes while queueing the response.
    public func respond(stream: Int32, status: Int, headerList: HTTP2HeaderList, body: [UInt8]? = nil) throws(HTTP2Error) {
        let slot = try respondableSlot(stream: stream, status: status)
        scratch.reset(entryCount: 1 + headerList.count, byteCount: 3)
        appendStatus(status)
        let rv = headerList.bytes.withUnsafeBufferPointer { all -> Int32 in
            if let base = all.baseAddress {
                for f in headerList.fields {
                    scratch.append(nghttp2_nv(name: UnsafeMutablePointer(mutating: base + Int(f.nameStart)),
                                              value: UnsafeMutablePointer(mutating: base + Int(f.valueStart)),
                                              namelen: Int(f.nameLength), valuelen: Int(f.valueLength), flags: NVFlags.noIndex))
                }
            }
            return submit(slot: slot, stream: stream, body: body)
        }
        try finishSubmit(rv, slot: slot, stream: stream)
    }

    private func respondableSlot(stream: Int32, status: Int) throws(HTTP2Error) -> Int {
        guard (100...999).contains(status) else {
            throw HTTP2Error(kind: .invalidArgument, message: "status \(status) out of range")
        }
        guard let slot = handle.slot(of: stream), slot < streams.count, streams[slot].inUse,
              streams[slot].streamID == stream else {
            throw HTTP2Error(kind: .invalidArgument, message: "stream \(stream) is not open")
        }
        guard !streams[slot].responded else {
            throw HTTP2Error(kind: .invalidArgument, message: "stream \(stream) was already answered")
        }
        return slot
    }

    @inline(__always)
    private func appendStatus(_ status: Int) {
        let digits: (UInt8, UInt8, UInt8) = (UInt8(48 + status / 100), UInt8(48 + status / 10 % 10), UInt8(48 + status % 10))
        withUnsafeBytes(of: digits) { raw in
            scratch.append(staticName: ":status", valueBytes: raw.assumingMemoryBound(to: UInt8.self), flags: NVFlags.none)
        }
    }

    private func submitResponse(slot: Int, stream: Int32, body: [UInt8]?) throws(HTTP2Error) {
        try finishSubmit(submit(slot: slot, stream: stream, body: body), slot: slot, stream: stream)
    }

    /// Submits the scratch's entries (and `body`) as the response to `stream`.
    private func submit(slot: Int, stream: Int32, body: [UInt8]?) -> Int32 {
        if let body, !body.isEmpty {
            streams[slot].response = body
            streams[slot].responseOffset = 0
            var provider = cnghttp2_data_provider_make(slotPointer(slot), serverReadBody)
            return nghttp2_submit_response(handle.pointer, stream, scratch.entries, scratch.count, &provider)
        }
        return nghttp2_submit_response(handle.pointer, stream, scratch.entries, scratch.count, nil)
    }

    private func finishSubmit(_ rv: Int32, slot: Int, stream: Int32) throws(HTTP2Error) {
        if rv != 0 {
            streams[slot].response = []
            throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_response")
        }
        streams[slot].responded = true
        if streams[slot].bodyTooLarge && nghttp2_session_get_stream_remote_close(handle.pointer, stream) == 0 {
            streams[slot].awaitingEarlyReset = true
            pendingEarlyResponses += 1
        }
    }

    /// Resets a stream: RST_STREAM(`errorCode`).
    public func resetStream(_ stream: Int32, errorCode: HTTP2ErrorCode) throws(HTTP2Error) {
        try handle.resetStream(stream, errorCode: errorCode)
    }

    // MARK: Connection control

    /// Sends GOAWAY. Streams above `lastStreamID` are closed (the client sees REFUSED_STREAM and
    /// may retry them elsewhere); streams at or below it may still be answered. nil means the
    /// last stream this session has processed. APNs sends `{"reason":"..."}` as `debugData`.
    public func submitGoAway(lastStreamID: Int32? = nil, errorCode: HTTP2ErrorCode = .noError,
                             debugData: [UInt8] = []) throws(HTTP2Error) {
        let last = lastStreamID ?? nghttp2_session_get_last_proc_stream_id(handle.pointer)
        try handle.submitGoAway(lastStreamID: last, errorCode: errorCode, debugData: debugData)
    }

    /// Sends the graceful-shutdown notice (GOAWAY with the maximum stream ID): follow with
    /// `submitGoAway()` after at least one round trip.
    public func submitShutdownNotice() throws(HTTP2Error) {
        let rv = nghttp2_submit_shutdown_notice(handle.pointer)
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_shutdown_notice") }
    }

    /// Advertises a new SETTINGS_MAX_CONCURRENT_STREAMS. Streams already open continue; new
    /// streams beyond the limit are refused (REFUSED_STREAM).
    public func updateMaxConcurrentStreams(_ value: Int) throws(HTTP2Error) {
        try handle.submitSettings([NG.settings(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, value)])
    }

    /// Sends PING; `pingAcknowledged(payload)` fires when the ACK arrives.
    public func submitPing(payload: UInt64 = 0) throws(HTTP2Error) {
        try handle.submitPing(payload: payload)
    }

    /// Streams opened by the client and not yet closed.
    public var activeStreams: Int { openCount }

    /// The highest stream ID this session has received and processed.
    public var lastProcessedStreamID: Int32 { nghttp2_session_get_last_proc_stream_id(handle.pointer) }

    // MARK: Slots

    func allocateSlot(stream: Int32) -> Int {
        openCount += 1
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            streams.append(Stream())
            slot = streams.count - 1
        }
        streams[slot].inUse = true
        streams[slot].streamID = stream
        streams[slot].headers = HTTP2HeaderList()
        streams[slot].body.removeAll(keepingCapacity: true)
        streams[slot].bodyTooLarge = false
        streams[slot].delivered = false
        streams[slot].responded = false
        streams[slot].awaitingEarlyReset = false
        streams[slot].responseOffset = 0
        return slot
    }

    func releaseSlot(_ slot: Int) {
        streams[slot].inUse = false
        streams[slot].response = []
        freeSlots.append(slot)
        openCount -= 1
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

    @inline(__always)
    var eventDelegate: (any HTTP2ServerDelegate)? { activeDelegate ?? unownedDelegate ?? delegate }

    @inline(__always)
    func liveSlot(_ stream: Int32) -> Int? {
        guard let slot = handle.slot(of: stream), slot < streams.count, streams[slot].inUse,
              streams[slot].streamID == stream else { return nil }
        return slot
    }

    // MARK: Callback bodies

    func beginHeaders(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        let stream = cnghttp2_frame_stream_id(frame)
        blockByteCount = 0
        blockFieldCount = 0
        guard cnghttp2_frame_headers_category(frame) == NG.categoryRequest else {
            // Trailers: their fields are not kept (headerSlot -1 drops them).
            headerStream = stream
            headerSlot = -1
            return 0
        }
        let slot = allocateSlot(stream: stream)
        let rv = nghttp2_session_set_stream_user_data(handle.pointer, stream, slotPointer(slot))
        guard rv == 0 else {
            releaseSlot(slot)
            return NG.callbackFailure
        }
        headerStream = stream
        headerSlot = slot
        return 0
    }

    func header(stream: Int32, name: UnsafePointer<UInt8>, nameLength: Int, value: UnsafePointer<UInt8>,
                valueLength: Int) -> Int32 {
        guard stream == headerStream, headerSlot >= 0 else { return 0 }
        let needed = blockByteCount + nameLength + valueLength
        if needed > maxRequestHeaderBytes {
            // nghttp2 resets the stream with INTERNAL_ERROR.
            return NG.temporalCallbackFailure
        }
        if needed > blockByteCapacity {
            let grown = UnsafeMutablePointer<UInt8>.allocate(capacity: max(needed, blockByteCapacity * 2))
            grown.update(from: blockBytes, count: blockByteCount)
            blockBytes.deallocate()
            blockBytes = grown
            blockByteCapacity = max(needed, blockByteCapacity * 2)
        }
        if blockFieldCount == blockFieldCapacity {
            let grown = UnsafeMutablePointer<HTTP2HeaderList.Field>.allocate(capacity: blockFieldCapacity * 2)
            grown.update(from: blockFields, count: blockFieldCount)
            blockFields.deallocate()
            blockFields = grown
            blockFieldCapacity *= 2
        }
        let nameStart = blockByteCount
        (blockBytes + nameStart).update(from: name, count: nameLength)
        (blockBytes + nameStart + nameLength).update(from: value, count: valueLength)
        blockFields[blockFieldCount] = HTTP2HeaderList.Field(
            nameStart: UInt32(truncatingIfNeeded: nameStart), nameLength: UInt32(truncatingIfNeeded: nameLength),
            valueStart: UInt32(truncatingIfNeeded: nameStart + nameLength), valueLength: UInt32(truncatingIfNeeded: valueLength))
        blockFieldCount += 1
        blockByteCount = needed
        return 0
    }

    /// The header block just received, as a list (copied out of the block buffer).
    private func takeHeaderBlock() -> HTTP2HeaderList {
        let list = HTTP2HeaderList(bytes: Array(UnsafeBufferPointer(start: blockBytes, count: blockByteCount)),
                                   fields: Array(UnsafeBufferPointer(start: blockFields, count: blockFieldCount)))
        blockByteCount = 0
        blockFieldCount = 0
        return list
    }

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let type = cnghttp2_frame_type(frame)
        if type == NG.headersFrame || type == NG.dataFrame {
            let stream = cnghttp2_frame_stream_id(frame)
            if type == NG.headersFrame, stream == headerStream, headerSlot >= 0 {
                // The request's header block is complete.
                if let slot = liveSlot(stream) { streams[slot].headers = takeHeaderBlock() }
                headerSlot = -1
            }
            guard cnghttp2_frame_flags(frame) & NG.flagEndStream != 0 else { return }
            guard let slot = liveSlot(stream), !streams[slot].delivered else { return }
            deliver(slot: slot, stream: stream)
        } else if type == NG.goAwayFrame {
            let length = cnghttp2_frame_goaway_debug_data_length(frame)
            var debugData: [UInt8] = []
            if length > 0, let data = cnghttp2_frame_goaway_debug_data(frame) {
                debugData = Array(UnsafeBufferPointer(start: data, count: length))
            }
            eventDelegate?.http2(self, goAway: cnghttp2_frame_goaway_last_stream_id(frame),
                                 errorCode: HTTP2ErrorCode(cnghttp2_frame_goaway_error_code(frame)),
                                 debugData: debugData)
        } else if type == NG.pingFrame {
            guard cnghttp2_frame_flags(frame) & NG.flagAck != 0 else { return }
            eventDelegate?.http2(self, pingAcknowledged: cnghttp2_frame_ping_payload(frame))
        }
    }

    private func deliver(slot: Int, stream: Int32) {
        streams[slot].delivered = true
        let request = HTTP2Request(stream: stream, headers: streams[slot].headers, body: streams[slot].body,
                                   bodyTooLarge: streams[slot].bodyTooLarge)
        eventDelegate?.http2(self, request: request)
    }

    func dataChunk(stream: Int32, data: UnsafePointer<UInt8>, length: Int) {
        guard let slot = liveSlot(stream), !streams[slot].delivered else { return }
        if streams[slot].body.count + length > maxRequestBodySize {
            streams[slot].bodyTooLarge = true
            streams[slot].body.removeAll(keepingCapacity: true)
            deliver(slot: slot, stream: stream)
            return
        }
        streams[slot].body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    }

    func streamClosed(stream: Int32, errorCode: UInt32) {
        if stream == headerStream { headerSlot = -1 }
        guard let slot = liveSlot(stream) else { return }
        resolveEarlyResponse(slot)
        releaseSlot(slot)
        eventDelegate?.http2(self, streamClosed: stream, errorCode: HTTP2ErrorCode(errorCode))
    }

    private func resolveEarlyResponse(_ slot: Int) {
        guard streams[slot].awaitingEarlyReset else { return }
        streams[slot].awaitingEarlyReset = false
        pendingEarlyResponses -= 1
    }

    func frameSent(_ frame: UnsafePointer<nghttp2_frame>) {
        // Only responses answered before their request finished need work here.
        guard pendingEarlyResponses > 0 else { return }
        let type = cnghttp2_frame_type(frame)
        guard type == NG.headersFrame || type == NG.dataFrame,
              cnghttp2_frame_flags(frame) & NG.flagEndStream != 0 else { return }
        let stream = cnghttp2_frame_stream_id(frame)
        guard let slot = liveSlot(stream), streams[slot].awaitingEarlyReset else { return }
        resolveEarlyResponse(slot)
        if nghttp2_session_get_stream_remote_close(handle.pointer, stream) == 0 {
            // RFC 9113 §8.1: a server that answers before the request is complete may reset the
            // stream with NO_ERROR so that the client stops sending.
            _ = nghttp2_submit_rst_stream(handle.pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream,
                                          HTTP2ErrorCode.noError.rawValue)
        }
    }

    func readBody(slot: Int, stream: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int,
                  flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard slot >= 0, slot < streams.count, streams[slot].inUse, streams[slot].streamID == stream else {
            return Int(NG.temporalCallbackFailure)
        }
        let response = streams[slot].response
        guard !response.isEmpty else {
            flags.pointee |= NG.dataFlagEOF
            return 0
        }
        return response.withUnsafeBytes { source in
            readBodyChunk(from: source.baseAddress!, count: source.count, offset: &streams[slot].responseOffset, into: buffer,
                          length: length, flags: flags)
        }
    }
}

@available(*, unavailable, message: "HTTP2ServerSession belongs to the one thread that owns its connection")
extension HTTP2ServerSession: Sendable {}

// MARK: - C callbacks (see HTTP2ClientSession.swift for the conventions)

@inline(__always)
private func withServerSession<R>(_ userData: UnsafeMutableRawPointer?, failure: R, _ body: (HTTP2ServerSession) -> R) -> R {
    withSessionObject(userData, failure: failure, body)
}

private func serverOnBeginHeaders(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                                  _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame else { return NG.callbackFailure }
    guard cnghttp2_frame_type(frame) == NG.headersFrame else { return 0 }
    return withServerSession(userData, failure: NG.callbackFailure) { $0.beginHeaders(frame) }
}

private func serverOnHeader(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                            _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
                            _ value: UnsafePointer<UInt8>?, _ valueLength: Int,
                            _ flags: UInt8, _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame, let name, let value else { return NG.callbackFailure }
    return withServerSession(userData, failure: NG.callbackFailure) {
        $0.header(stream: cnghttp2_frame_stream_id(frame), name: name, nameLength: nameLength, value: value, valueLength: valueLength)
    }
}

private func serverOnFrameReceived(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                                   _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame else { return NG.callbackFailure }
    return withServerSession(userData, failure: NG.callbackFailure) { $0.frameReceived(frame); return 0 }
}

private func serverOnDataChunk(_ session: OpaquePointer?, _ flags: UInt8, _ stream: Int32,
                               _ data: UnsafePointer<UInt8>?, _ length: Int,
                               _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let data, length > 0 else { return userData == nil ? NG.callbackFailure : 0 }
    return withServerSession(userData, failure: NG.callbackFailure) { $0.dataChunk(stream: stream, data: data, length: length); return 0 }
}

private func serverOnStreamClose(_ session: OpaquePointer?, _ stream: Int32, _ errorCode: UInt32,
                                 _ userData: UnsafeMutableRawPointer?) -> Int32 {
    withServerSession(userData, failure: NG.callbackFailure) { $0.streamClosed(stream: stream, errorCode: errorCode); return 0 }
}

private func serverOnFrameSent(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
                               _ userData: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame else { return NG.callbackFailure }
    return withServerSession(userData, failure: NG.callbackFailure) { $0.frameSent(frame); return 0 }
}

private func serverReadBody(_ session: OpaquePointer?, _ stream: Int32, _ buffer: UnsafeMutablePointer<UInt8>?,
                            _ length: Int, _ dataFlags: UnsafeMutablePointer<UInt32>?,
                            _ source: UnsafeMutablePointer<nghttp2_data_source>?,
                            _ userData: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let dataFlags, let slot = slotIndex(cnghttp2_data_source_ptr(source)) else {
        return Int(NG.callbackFailure)
    }
    return withServerSession(userData, failure: Int(NG.callbackFailure)) {
        $0.readBody(slot: slot, stream: stream, into: buffer, length: length, flags: dataFlags)
    }
}
