/// An error from OpenSSLKit: TLS configuration, handshakes, record I/O, keys and signatures.
///
/// `code` says what kind of failure it was (switch on it to decide retry/close); `message` is a
/// human-readable explanation that ends with the text OpenSSL left in its (thread-local) error
/// queue, e.g. `"error:0A000086:SSL routines::certificate verify failed"`. Messages never contain
/// key material or PEM input.
public struct TLSError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The kind of failure. An open set: compare against the static members.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case configuration
            case handshakeFailed
            case certificateVerificationFailed
            case noApplicationProtocol
            case unexpectedEOF
            case systemError
            case protocolError
            case invalidKey
            case invalidArgument
            case cryptoFailure
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Building a context failed: unreadable certificate/key/CA file, key not matching the
        /// certificate, bad ALPN list, unsupported protocol version.
        public static let configuration = Code(.configuration)
        /// The TLS handshake failed for a reason other than those below (alert from the peer,
        /// no shared cipher, wrong version, ...).
        public static let handshakeFailed = Code(.handshakeFailed)
        /// The peer's certificate chain or name did not verify. The message carries OpenSSL's
        /// X509 verify result, e.g. "self-signed certificate" or "hostname mismatch".
        public static let certificateVerificationFailed = Code(.certificateVerificationFailed)
        /// ALPN failed: no protocol in common, the client offered none to a server that requires
        /// one, or the server selected none for a client that requires one.
        public static let noApplicationProtocol = Code(.noApplicationProtocol)
        /// The peer closed the TCP connection without sending close_notify.
        public static let unexpectedEOF = Code(.unexpectedEOF)
        /// A socket call failed (`errno` is set: ECONNRESET, EPIPE, ...).
        public static let systemError = Code(.systemError)
        /// A TLS protocol failure after the handshake (bad record MAC, fatal alert, ...).
        public static let protocolError = Code(.protocolError)
        /// A key could not be parsed, is of the wrong type or curve.
        public static let invalidKey = Code(.invalidKey)
        /// An argument was rejected before OpenSSL was called (bad DNS name, bad ALPN name, ...).
        public static let invalidArgument = Code(.invalidArgument)
        /// A cryptographic operation (key generation, signing, encoding) failed.
        public static let cryptoFailure = Code(.cryptoFailure)

        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// Explanation. Errors raised by OpenSSLKit end it with the drained OpenSSL error queue
    /// (also in `openSSLErrors`) and, for socket failures, the `errno` text.
    public let message: String
    /// The OpenSSL error queue entries drained when the error was created, oldest first.
    public let openSSLErrors: [String]
    /// `errno` for `.systemError`, otherwise nil.
    public let systemErrno: Int32?

    public init(code: Code, message: String, openSSLErrors: [String] = [], systemErrno: Int32? = nil) {
        self.code = code
        self.message = message
        self.openSSLErrors = openSSLErrors
        self.systemErrno = systemErrno
    }

    public var description: String {
        "TLSError.\(code): \(message)"
    }
}
