/// What a caller's event loop needs from either session: bytes in, bytes out, and whether the
/// connection still has a use for reading or writing.
///
/// ## Pumping a connection
/// The session never touches a socket. The thread that owns the socket and the TLS session:
/// 1. reads all the plaintext it can (for TLS, until `.wantRead`) and passes each chunk to
///    `receive(_:)`; delegate callbacks fire synchronously from inside it;
/// 2. then calls `produceOutput(into:limit:)` and writes what it appended; whenever the
///    write buffer has drained, calls it again; it must also call it after any `submit*`,
///    `respond`, or other call that queues frames (and after `receive`, which may queue
///    SETTINGS/PING acknowledgements and WINDOW_UPDATEs);
/// 3. polls for readability always (while `wantsRead`), and for writability only while bytes
///    are waiting to be written.
/// When both `wantsRead` and `wantsWrite` are false (after GOAWAY both ways and all streams
/// closed, or after `terminate`, once its GOAWAY has been produced and written), close the
/// connection.
public protocol HTTP2Session: AnyObject {
    /// Feeds bytes received from the peer. Throws when the connection can't continue (protocol
    /// violation by the peer, a failed callback): produce and write any remaining output (it
    /// usually holds a GOAWAY), then close.
    func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error)

    /// Appends frames ready to send to `buffer` until nothing is left or `buffer.count` reaches
    /// `limit` (a soft limit: the last frame appended may cross it). Returns the number of bytes
    /// appended (0: nothing to send now).
    func produceOutput(into buffer: inout [UInt8], limit: Int) throws(HTTP2Error) -> Int

    /// Whether the session still expects to read (`nghttp2_session_want_read`).
    var wantsRead: Bool { get }
    /// Whether the session has frames to send now (`nghttp2_session_want_write`).
    var wantsWrite: Bool { get }

    /// Ends the connection at once: queues GOAWAY with `errorCode` and the last stream ID
    /// processed; no further frames except that one are sent. Produce and write it, then close.
    func terminate(errorCode: HTTP2ErrorCode)
}

extension HTTP2Session {
    /// Feeds bytes received from the peer.
    public func receive(_ bytes: [UInt8]) throws(HTTP2Error) {
        // Array.withUnsafeBytes rethrows untyped errors: carry the typed one out by hand.
        var failure: HTTP2Error?
        bytes.withUnsafeBytes { raw in
            do throws(HTTP2Error) { try receive(raw) } catch { failure = error }
        }
        if let failure { throw failure }
    }
}
