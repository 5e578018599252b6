internal import CNghttp2

/// Owns one `nghttp2_session*` (freed in `deinit`, which invokes no callbacks).
///
/// The callbacks receive the owning `HTTP2ClientSession`/`HTTP2ServerSession` as `user_data`,
/// unretained: the owner holds this handle, so the handle (and every callback it can fire)
/// never outlives the owner. Callbacks fire only from inside calls the owner makes on its own
/// thread (`mem_recv`, `mem_send`, `submit_*`).
final class NGHTTP2SessionHandle {
    let pointer: OpaquePointer

    /// Makes a session. `setCallbacks` installs the callbacks on a temporary
    /// `nghttp2_session_callbacks` (nghttp2 copies it); `setOptions` tunes a temporary
    /// `nghttp2_option` likewise. `user_data` is set later with `setUserData`, once the owner is
    /// fully initialised.
    init(server: Bool, setCallbacks: (OpaquePointer) -> Void, setOptions: (OpaquePointer) -> Void) throws(HTTP2Error) {
        var callbacks: OpaquePointer?
        var rv = Int(nghttp2_session_callbacks_new(&callbacks))
        guard rv == 0, let callbacks else { throw HTTP2Error(library: rv, during: "nghttp2_session_callbacks_new") }
        defer { nghttp2_session_callbacks_del(callbacks) }
        setCallbacks(callbacks)

        var option: OpaquePointer?
        rv = Int(nghttp2_option_new(&option))
        guard rv == 0, let option else { throw HTTP2Error(library: rv, during: "nghttp2_option_new") }
        defer { nghttp2_option_del(option) }
        setOptions(option)

        var session: OpaquePointer?
        rv = Int(server ? nghttp2_session_server_new2(&session, callbacks, nil, option)
                        : nghttp2_session_client_new2(&session, callbacks, nil, option))
        guard rv == 0, let session else {
            throw HTTP2Error(library: rv, during: server ? "nghttp2_session_server_new2" : "nghttp2_session_client_new2")
        }
        pointer = session
    }

    deinit {
        nghttp2_session_del(pointer)
    }

    func setUserData(_ owner: AnyObject) {
        nghttp2_session_set_user_data(pointer, Unmanaged.passUnretained(owner).toOpaque())
    }

    /// Feeds received bytes to nghttp2 (callbacks fire from inside).
    func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        let rv = nghttp2_session_mem_recv(pointer, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        if rv < 0 { throw HTTP2Error(library: rv, during: "nghttp2_session_mem_recv") }
    }

    /// Appends serialized frames to `buffer` until nghttp2 has nothing more to send or `buffer`
    /// holds at least `limit` bytes. Returns the number of bytes appended.
    func produce(into buffer: inout [UInt8], limit: Int) throws(HTTP2Error) -> Int {
        var appended = 0
        while buffer.count < limit {
            var data: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(pointer, &data)
            if n < 0 { throw HTTP2Error(library: n, during: "nghttp2_session_mem_send") }
            guard n > 0, let data else { break }
            buffer.append(contentsOf: UnsafeBufferPointer(start: data, count: n))
            appended += n
        }
        return appended
    }

    var wantsRead: Bool { nghttp2_session_want_read(pointer) != 0 }
    var wantsWrite: Bool { nghttp2_session_want_write(pointer) != 0 }

    func submitSettings(_ entries: [nghttp2_settings_entry]) throws(HTTP2Error) {
        let rv = entries.withUnsafeBufferPointer {
            nghttp2_submit_settings(pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), $0.baseAddress, $0.count)
        }
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_settings") }
    }

    func submitPing(payload: UInt64) throws(HTTP2Error) {
        let rv = cnghttp2_submit_ping(pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), payload)
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_ping") }
    }

    func submitGoAway(lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8]) throws(HTTP2Error) {
        let rv = debugData.withUnsafeBufferPointer {
            nghttp2_submit_goaway(pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, errorCode.rawValue,
                                  $0.baseAddress, $0.count)
        }
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_goaway") }
    }

    func resetStream(_ stream: Int32, errorCode: HTTP2ErrorCode) throws(HTTP2Error) {
        let rv = nghttp2_submit_rst_stream(pointer, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, errorCode.rawValue)
        if rv != 0 { throw HTTP2Error(library: Int(rv), during: "nghttp2_submit_rst_stream") }
    }

    func terminate(errorCode: HTTP2ErrorCode) {
        // Fails only when the session is already terminating: nothing to do then.
        _ = nghttp2_session_terminate_session(pointer, errorCode.rawValue)
    }

    /// The peer's current value of a SETTINGS parameter.
    func remoteSetting(_ id: nghttp2_settings_id) -> UInt32 {
        nghttp2_session_get_remote_settings(pointer, id)
    }

    /// The slot index stored as this stream's user data, or nil.
    @inline(__always)
    func slot(of stream: Int32) -> Int? {
        guard let data = nghttp2_session_get_stream_user_data(pointer, stream) else { return nil }
        return Int(bitPattern: data) &- 1
    }
}

/// Slot indexes travel through nghttp2 as `void*` user data (stream user data and data-source
/// pointers): the index plus one, so that slot 0 is not NULL.
@inline(__always)
func slotPointer(_ slot: Int) -> UnsafeMutableRawPointer? {
    UnsafeMutableRawPointer(bitPattern: slot &+ 1)
}

@inline(__always)
func slotIndex(_ pointer: UnsafeMutableRawPointer?) -> Int? {
    guard let pointer else { return nil }
    return Int(bitPattern: pointer) &- 1
}

/// Frequently used nghttp2 constants in the integer types the callbacks traffic in.
/// Runs `body` with the session object that nghttp2's `user_data` points at, without retaining
/// it (nghttp2 calls back only from inside a call the session itself made, so it is alive), or
/// returns `failure` when there is none.
@inline(__always)
func withSessionObject<S: AnyObject, R>(_ userData: UnsafeMutableRawPointer?, failure: R, _ body: (S) -> R) -> R {
    guard let userData else { return failure }
    return Unmanaged<S>.fromOpaque(userData)._withUnsafeGuaranteedRef(body)
}

/// Fills nghttp2's DATA buffer from `source` (`count` bytes) at `offset`, advancing it, and
/// flags the end of the body: the body half of a data-source read callback.
@inline(__always)
func readBodyChunk(from source: UnsafeRawPointer, count: Int, offset: inout Int, into buffer: UnsafeMutablePointer<UInt8>,
                   length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
    let n = min(length, count - offset)
    if n > 0 { UnsafeMutableRawPointer(buffer).copyMemory(from: source + offset, byteCount: n) }
    offset += n
    if offset >= count { flags.pointee |= NG.dataFlagEOF }
    return n
}

enum NG {
    static let callbackFailure = Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    static let temporalCallbackFailure = Int32(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
    static let dataFrame = UInt8(NGHTTP2_DATA.rawValue)
    static let headersFrame = UInt8(NGHTTP2_HEADERS.rawValue)
    static let rstStreamFrame = UInt8(NGHTTP2_RST_STREAM.rawValue)
    static let settingsFrame = UInt8(NGHTTP2_SETTINGS.rawValue)
    static let pingFrame = UInt8(NGHTTP2_PING.rawValue)
    static let goAwayFrame = UInt8(NGHTTP2_GOAWAY.rawValue)
    static let flagEndStream = UInt8(NGHTTP2_FLAG_END_STREAM.rawValue)
    static let flagAck = UInt8(NGHTTP2_FLAG_ACK.rawValue)
    static let dataFlagEOF = UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
    static let categoryRequest = Int32(NGHTTP2_HCAT_REQUEST.rawValue)
    static let categoryResponse = Int32(NGHTTP2_HCAT_RESPONSE.rawValue)
    static let categoryHeaders = Int32(NGHTTP2_HCAT_HEADERS.rawValue)

    static func settings(_ id: nghttp2_settings_id, _ value: Int) -> nghttp2_settings_entry {
        nghttp2_settings_entry(settings_id: Int32(id.rawValue), value: UInt32(clamping: value))
    }
}
