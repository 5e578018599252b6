internal import CNghttp2

/// A failure reported by HTTP2Kit: a call into nghttp2 that failed, or an argument HTTP2Kit
/// rejected before calling nghttp2.
///
/// `kind` says what to do about it; `message` carries nghttp2's own text (`nghttp2_strerror`)
/// when nghttp2 raised it.
public struct HTTP2Error: Error, CustomStringConvertible, Sendable, Equatable {
    /// What kind of failure this is. An open set: compare against the static members.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidArgument
            case streamIDsExhausted
            case sessionClosing
            case streamClosed
            case protocolError
            case callbackFailure
            case outOfMemory
            case library
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// An argument was refused: a malformed header name, a stream ID this session does not
        /// know (already closed, or never opened), a GOAWAY debug blob that does not fit a frame.
        public static let invalidArgument = Kind(.invalidArgument)
        /// The client has used all 2^30 stream IDs of this connection
        /// (`NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE`): open a new connection.
        public static let streamIDsExhausted = Kind(.streamIDsExhausted)
        /// GOAWAY was sent or received (or the session was terminated): no new streams on this
        /// connection (`NGHTTP2_ERR_SESSION_CLOSING`, `NGHTTP2_ERR_START_STREAM_NOT_ALLOWED`).
        public static let sessionClosing = Kind(.sessionClosing)
        /// The stream is closed or closing.
        public static let streamClosed = Kind(.streamClosed)
        /// The peer broke the protocol badly enough that the connection is over (bad preface,
        /// flooding, compression failure, ...). nghttp2 has queued a GOAWAY: flush the output,
        /// then close the connection.
        public static let protocolError = Kind(.protocolError)
        /// A callback failed (`NGHTTP2_ERR_CALLBACK_FAILURE`): the session is unusable.
        public static let callbackFailure = Kind(.callbackFailure)
        /// nghttp2 could not allocate memory.
        public static let outOfMemory = Kind(.outOfMemory)
        /// Any other nghttp2 error; see `libraryErrorCode`.
        public static let library = Kind(.library)

        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public let kind: Kind
    /// Explanation; for nghttp2 errors, ends with nghttp2's own text.
    public let message: String
    /// The nghttp2 library error code (`NGHTTP2_ERR_*`, negative), or nil when HTTP2Kit itself
    /// refused the call.
    public let libraryErrorCode: Int32?

    public init(kind: Kind, message: String, libraryErrorCode: Int32? = nil) {
        self.kind = kind
        self.message = message
        self.libraryErrorCode = libraryErrorCode
    }

    /// An error from an nghttp2 return value (`code < 0`).
    init(library code: Int, during operation: String) {
        let code32 = Int32(truncatingIfNeeded: code)
        let text = String(cString: nghttp2_strerror(code32))
        let kind: Kind
        switch code32 {
        case NGHTTP2_ERR_INVALID_ARGUMENT.rawValue, NGHTTP2_ERR_INVALID_STREAM_ID.rawValue,
             NGHTTP2_ERR_INVALID_STREAM_STATE.rawValue, NGHTTP2_ERR_INVALID_STATE.rawValue:
            kind = .invalidArgument
        case NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue:
            kind = .streamIDsExhausted
        case NGHTTP2_ERR_SESSION_CLOSING.rawValue, NGHTTP2_ERR_START_STREAM_NOT_ALLOWED.rawValue,
             NGHTTP2_ERR_GOAWAY_ALREADY_SENT.rawValue:
            kind = .sessionClosing
        case NGHTTP2_ERR_STREAM_CLOSED.rawValue, NGHTTP2_ERR_STREAM_CLOSING.rawValue,
             NGHTTP2_ERR_STREAM_SHUT_WR.rawValue:
            kind = .streamClosed
        case NGHTTP2_ERR_PROTO.rawValue, NGHTTP2_ERR_BAD_CLIENT_MAGIC.rawValue, NGHTTP2_ERR_FLOODED.rawValue,
             NGHTTP2_ERR_HEADER_COMP.rawValue, NGHTTP2_ERR_FLOW_CONTROL.rawValue,
             NGHTTP2_ERR_FRAME_SIZE_ERROR.rawValue, NGHTTP2_ERR_TOO_MANY_SETTINGS.rawValue,
             NGHTTP2_ERR_SETTINGS_EXPECTED.rawValue, NGHTTP2_ERR_TOO_MANY_CONTINUATIONS.rawValue:
            kind = .protocolError
        case NGHTTP2_ERR_CALLBACK_FAILURE.rawValue:
            kind = .callbackFailure
        case NGHTTP2_ERR_NOMEM.rawValue:
            kind = .outOfMemory
        default:
            kind = .library
        }
        self.init(kind: kind, message: "\(operation): \(text) (\(code32))", libraryErrorCode: code32)
    }

    public var description: String { "HTTP2Error.\(kind): \(message)" }
}

/// An HTTP/2 error code as carried by RST_STREAM and GOAWAY frames (RFC 9113 §7), and reported
/// when a stream closes. An open set: unknown codes from the peer are kept as they are.
public struct HTTP2ErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public init(_ rawValue: UInt32) { self.rawValue = rawValue }

    /// Graceful close; on a stream: it completed normally.
    public static let noError = HTTP2ErrorCode(0x0)
    public static let protocolError = HTTP2ErrorCode(0x1)
    public static let internalError = HTTP2ErrorCode(0x2)
    public static let flowControlError = HTTP2ErrorCode(0x3)
    public static let settingsTimeout = HTTP2ErrorCode(0x4)
    public static let streamClosed = HTTP2ErrorCode(0x5)
    public static let frameSizeError = HTTP2ErrorCode(0x6)
    /// The stream was not processed at all: safe to send the request again on another
    /// connection (streams above a GOAWAY's last-stream-ID, requests that never left because
    /// the session was closing).
    public static let refusedStream = HTTP2ErrorCode(0x7)
    public static let cancel = HTTP2ErrorCode(0x8)
    public static let compressionError = HTTP2ErrorCode(0x9)
    public static let connectError = HTTP2ErrorCode(0xa)
    public static let enhanceYourCalm = HTTP2ErrorCode(0xb)
    public static let inadequateSecurity = HTTP2ErrorCode(0xc)
    public static let http11Required = HTTP2ErrorCode(0xd)

    public var description: String {
        switch rawValue {
        case 0x0: "NO_ERROR"
        case 0x1: "PROTOCOL_ERROR"
        case 0x2: "INTERNAL_ERROR"
        case 0x3: "FLOW_CONTROL_ERROR"
        case 0x4: "SETTINGS_TIMEOUT"
        case 0x5: "STREAM_CLOSED"
        case 0x6: "FRAME_SIZE_ERROR"
        case 0x7: "REFUSED_STREAM"
        case 0x8: "CANCEL"
        case 0x9: "COMPRESSION_ERROR"
        case 0xa: "CONNECT_ERROR"
        case 0xb: "ENHANCE_YOUR_CALM"
        case 0xc: "INADEQUATE_SECURITY"
        case 0xd: "HTTP_1_1_REQUIRED"
        default: "0x\(String(rawValue, radix: 16))"
        }
    }
}

/// The nghttp2 library this module runs against, e.g. "1.52.0".
public var nghttp2LibraryVersion: String { String(cString: cnghttp2_version_string()) }
