#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
internal import COpenSSL

/// Progress of a non-blocking handshake.
public enum TLSProgress: Sendable, Hashable {
    /// The handshake is complete.
    case done
    /// Call again once the socket is readable.
    case wantRead
    /// Call again once the socket is writable.
    case wantWrite
}

/// Outcome of a non-blocking `read` or `write`.
public enum TLSIO: Sendable, Hashable {
    /// This many plaintext bytes were read or written (always > 0 for a non-empty buffer).
    case bytes(Int)
    /// Retry once the socket is readable (a write can need this too, e.g. during a TLS 1.3 key
    /// update or before the handshake finished).
    case wantRead
    /// Retry once the socket is writable (a read can need this too).
    case wantWrite
    /// The peer sent close_notify: no more data will arrive.
    case closed
}

/// One TLS connection over a connected, non-blocking socket that the caller owns: owns one `SSL`.
///
/// Not thread-safe, not `Sendable`: use it from the one thread (event loop) that polls its socket.
/// Every call is non-blocking; `.wantRead`/`.wantWrite` say which socket readiness to wait for
/// before calling the *same* operation again. OpenSSL's wants are independent of the direction
/// of the operation: a `read` can want the socket writable and a `write` can want it readable.
///
/// Rules carried over from OpenSSL:
/// - after `write` returned `.wantRead`/`.wantWrite`, retry with the same bytes (it may come from
///   another address; it must not be shorter);
/// - after `read` returned `.bytes`, more plaintext may already be decrypted inside OpenSSL with
///   nothing left on the socket: keep reading until `.wantRead` (or check
///   `pendingReadableBytes`) before going back to poll;
/// - a thrown error is final: close the socket;
/// - `read`/`write` before the handshake finished drive the handshake first (same wants).
///
/// Teardown order: `shutdown()` (optional), release the session (frees `SSL`), then close the fd.
public final class TLSSession {
    private let pointer: OpaquePointer
    /// Keeps the SSL_CTX (and the ALPN list it owns) alive for as long as this SSL exists.
    public let context: TLSContext
    /// The socket this session reads and writes (never closed by the session).
    public let fileDescriptor: Int32
    /// The name the client verifies and sends as SNI (nil on servers).
    public let serverName: String?
    private var handshakeComplete = false
    /// Set once OpenSSL reported SSL_ERROR_SSL or SSL_ERROR_SYSCALL: SSL_shutdown must not be
    /// called after those.
    private var failed = false

    /// A client session. `serverName` is sent as SNI and verified against the certificate when
    /// the context verifies peers: a DNS name is matched against the DNS subjectAltNames
    /// (wildcards only as a whole left-most label), an IP literal (`127.0.0.1`, `::1`) against
    /// the IP subjectAltNames and is not sent as SNI. With `serverName == nil` the chain is still
    /// verified but no name is checked: always pass the name you connected to.
    public init(context: TLSContext, fd: Int32, serverName: String?) throws(TLSError) {
        guard context.role == .client else {
            throw TLSError(code: .invalidArgument, message: "a client session needs a client context")
        }
        self.context = context
        self.fileDescriptor = fd
        self.serverName = serverName
        self.pointer = try Self.makeSSL(context: context, fd: fd)
        // From here deinit frees the SSL if configuration fails.
        SSL_set_connect_state(pointer)
        if let serverName {
            try configureServerName(serverName)
        }
    }

    /// A server session for an accepted connection.
    public init(serverContext: TLSContext, fd: Int32) throws(TLSError) {
        guard serverContext.role == .server else {
            throw TLSError(code: .invalidArgument, message: "a server session needs a server context")
        }
        self.context = serverContext
        self.fileDescriptor = fd
        self.serverName = nil
        self.pointer = try Self.makeSSL(context: serverContext, fd: fd)
        SSL_set_accept_state(pointer)
    }

    deinit {
        // SSL_free also frees the BIO (which never closes the fd).
        SSL_free(pointer)
    }

    private static func makeSSL(context: TLSContext, fd: Int32) throws(TLSError) -> OpaquePointer {
        OpenSSLErrorQueue.clear()
        guard let ssl = SSL_new(context.pointer) else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_new failed")
        }
        guard let bio = copenssl_BIO_new_socket_nosigpipe(fd) else {
            SSL_free(ssl)
            throw OpenSSLErrorQueue.error(.configuration, "cannot create the socket BIO")
        }
        // One BIO for both directions; SSL_set_bio takes the single reference we hold.
        SSL_set_bio(ssl, bio, bio)
        return ssl
    }

    private func configureServerName(_ name: String) throws(TLSError) {
        let isIP = Self.isIPAddress(name)
        OpenSSLErrorQueue.clear()
        if !isIP {
            guard !name.isEmpty, name.utf8.count <= 253, !name.utf8.contains(0) else {
                throw TLSError(code: .invalidArgument, message: "invalid server name")
            }
            // RFC 6066: SNI carries DNS names only, never IP literals.
            guard copenssl_SSL_set_tlsext_host_name(pointer, name) == 1 else {
                throw OpenSSLErrorQueue.error(.configuration, "cannot set SNI host name")
            }
        }
        guard context.verifiesPeer else { return }
        if isIP {
            guard let param = SSL_get0_param(pointer),
                  X509_VERIFY_PARAM_set1_ip_asc(param, name) == 1 else {
                throw OpenSSLErrorQueue.error(.configuration, "cannot set the IP address to verify")
            }
        } else {
            SSL_set_hostflags(pointer, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            guard SSL_set1_host(pointer, name) == 1 else {
                throw OpenSSLErrorQueue.error(.configuration, "cannot set the host name to verify")
            }
        }
    }

    static func isIPAddress(_ text: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }

    // MARK: - Handshake

    /// Advances the handshake. Call until `.done`, waiting for the wanted readiness in between.
    /// On completion, if the context requires ALPN and none was agreed, throws
    /// `.noApplicationProtocol`.
    public func handshake() throws(TLSError) -> TLSProgress {
        if handshakeComplete { return .done }
        OpenSSLErrorQueue.clear()
        let result = SSL_do_handshake(pointer)
        if result == 1 {
            handshakeComplete = true
            if context.requiresALPN && negotiatedProtocol == nil {
                failed = true
                throw TLSError(
                    code: .noApplicationProtocol,
                    message: "the peer agreed no ALPN protocol (offered: \(context.alpnProtocols.joined(separator: ",")))")
            }
            return .done
        }
        let savedErrno = errno
        switch SSL_get_error(pointer, result) {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case let code:
            failed = true
            throw failure(code: code, errno: savedErrno, during: "handshake")
        }
    }

    /// Whether the handshake has completed.
    public var isHandshakeComplete: Bool { handshakeComplete }

    /// The ALPN protocol agreed in the handshake (e.g. "h2"), or nil.
    public var negotiatedProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(pointer, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// The negotiated protocol version, e.g. "TLSv1.3" (before the handshake: the version in
    /// progress).
    public var protocolVersion: String {
        guard let version = SSL_get_version(pointer) else { return "unknown" }
        return String(cString: version)
    }

    /// The negotiated cipher suite, e.g. "TLS_AES_256_GCM_SHA384", or nil before the handshake.
    public var cipherSuite: String? {
        guard let cipher = SSL_get_current_cipher(pointer), let name = SSL_CIPHER_get_name(cipher) else {
            return nil
        }
        return String(cString: name)
    }

    // MARK: - Data

    /// Reads decrypted bytes into `buffer`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> TLSIO {
        if let pending = try finishHandshakeFirst() { return pending }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        OpenSSLErrorQueue.clear()
        var count = 0
        let result = SSL_read_ex(pointer, base, buffer.count, &count)
        return try dataResult(result, count: count, during: "read")
    }

    /// Encrypts and sends up to `bytes.count` bytes; with partial writes enabled it may accept
    /// fewer (`.bytes(n)`, n > 0): send the rest in the next call. After `.wantRead`/`.wantWrite`
    /// retry with the same bytes.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(TLSError) -> TLSIO {
        if let pending = try finishHandshakeFirst() { return pending }
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .bytes(0) }
        OpenSSLErrorQueue.clear()
        var count = 0
        let result = SSL_write_ex(pointer, base, bytes.count, &count)
        return try dataResult(result, count: count, during: "write")
    }

    /// What an `SSL_read_ex`/`SSL_write_ex` result means: bytes moved, a want, the peer's
    /// close_notify, or a failure (the session is then unusable).
    private func dataResult(_ result: Int32, count: Int, during: String) throws(TLSError) -> TLSIO {
        if result == 1 { return .bytes(count) }
        let savedErrno = errno
        switch SSL_get_error(pointer, result) {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            OpenSSLErrorQueue.clear()
            return .closed
        case let code:
            failed = true
            throw failure(code: code, errno: savedErrno, during: during)
        }
    }

    /// SSL_read/SSL_write would run the handshake implicitly and skip the ALPN check: route
    /// early calls through `handshake()` instead. Nil once the handshake is complete.
    private func finishHandshakeFirst() throws(TLSError) -> TLSIO? {
        guard !handshakeComplete else { return nil }
        switch try handshake() {
        case .done: return nil
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        }
    }

    /// Decrypted bytes already buffered inside OpenSSL (`SSL_pending`): readable now without
    /// waiting for the socket.
    public var pendingReadableBytes: Int {
        Int(SSL_pending(pointer))
    }

    /// Whether OpenSSL holds any unread input at all, decrypted or not (`SSL_has_pending`).
    public var hasBufferedInput: Bool {
        SSL_has_pending(pointer) == 1
    }

    /// Best-effort, non-blocking close: sends close_notify once if possible. Returns true if
    /// close_notify was written to the socket, false if it could not be sent now (socket full,
    /// connection already failed, or handshake never finished). Never waits for the peer's
    /// close_notify; the caller closes the fd after releasing the session.
    @discardableResult
    public func shutdown() -> Bool {
        // SSL_shutdown must not follow SSL_ERROR_SSL/SSL_ERROR_SYSCALL, and before the handshake
        // finished there is nothing to close cleanly.
        guard !failed, handshakeComplete else { return false }
        if SSL_get_shutdown(pointer) & SSL_SENT_SHUTDOWN != 0 { return true }
        OpenSSLErrorQueue.clear()
        let result = SSL_shutdown(pointer)
        // 0: close_notify sent, the peer's not yet received; 1: both sent and received.
        // Anything else (WANT_WRITE, EPIPE, ...) is given up on: this is best effort.
        OpenSSLErrorQueue.clear()
        return result >= 0
    }

    /// Whether the peer's close_notify has been received.
    public var peerClosed: Bool {
        SSL_get_shutdown(pointer) & SSL_RECEIVED_SHUTDOWN != 0
    }

    // MARK: - Errors

    private func failure(code: Int32, errno savedErrno: Int32, during operation: String) -> TLSError {
        let entries = OpenSSLErrorQueue.drain()
        let texts = entries.map(\.text)
        let sslReasons = Set(entries.filter { $0.library == ERR_LIB_SSL }.map(\.reason))

        if code == SSL_ERROR_SYSCALL {
            if savedErrno == 0 {
                // OpenSSL 1.1-style EOF report (kept for completeness; 3.0 reports EOF as
                // SSL_R_UNEXPECTED_EOF_WHILE_READING below).
                return TLSError(code: .unexpectedEOF,
                                message: OpenSSLErrorQueue.compose(
                                    "\(operation): the peer closed the connection without close_notify", texts),
                                openSSLErrors: texts)
            }
            let reason = String(cString: strerror(savedErrno))
            return TLSError(code: .systemError,
                            message: OpenSSLErrorQueue.compose("\(operation): \(reason)", texts),
                            openSSLErrors: texts, systemErrno: savedErrno)
        }

        if sslReasons.contains(SSL_R_UNEXPECTED_EOF_WHILE_READING) {
            return TLSError(code: .unexpectedEOF,
                            message: OpenSSLErrorQueue.compose(
                                "\(operation): the peer closed the connection without close_notify", texts),
                            openSSLErrors: texts)
        }

        if sslReasons.contains(SSL_R_CERTIFICATE_VERIFY_FAILED) {
            let result = SSL_get_verify_result(pointer)
            var detail = "certificate verify failed"
            if result != X509_V_OK, let text = X509_verify_cert_error_string(result) {
                detail += ": \(String(cString: text)) (X509 verify error \(result))"
            }
            return TLSError(code: .certificateVerificationFailed,
                            message: OpenSSLErrorQueue.compose("\(operation): \(detail)", texts),
                            openSSLErrors: texts)
        }

        if sslReasons.contains(SSL_R_NO_APPLICATION_PROTOCOL)
            || sslReasons.contains(SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL) {
            return TLSError(code: .noApplicationProtocol,
                            message: OpenSSLErrorQueue.compose("\(operation): no ALPN protocol in common", texts),
                            openSSLErrors: texts)
        }

        let kind: TLSError.Code = handshakeComplete ? .protocolError : .handshakeFailed
        let what = code == SSL_ERROR_SSL ? "TLS failure" : "unexpected SSL_get_error \(code)"
        return TLSError(code: kind, message: OpenSSLErrorQueue.compose("\(operation): \(what)", texts),
                        openSSLErrors: texts)
    }
}

@available(*, unavailable, message: "TLSSession belongs to the one thread that polls its socket")
extension TLSSession: Sendable {}
