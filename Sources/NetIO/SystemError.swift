#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call: which call, on what, and `errno`'s text.
public struct SystemError: Error, CustomStringConvertible, Sendable {
    public var call: String
    public var errno: Int32
    public var context: String
    /// The reason in words when `errno` isn't it (a name that doesn't resolve has its own).
    public var reason: String?

    public init(_ call: String, errno: Int32, context: String = "", reason: String? = nil) {
        self.call = call
        self.errno = errno
        self.context = context
        self.reason = reason
    }

    public var description: String {
        let text = reason ?? String(cString: strerror(errno))
        return context.isEmpty ? "\(call): \(text)" : "\(call) \(context): \(text)"
    }
}

/// Why a stream stopped: a timeout, a peer that closed, or a failed call.
public enum StreamError: Error, CustomStringConvertible, Sendable {
    case timedOut(String)
    case closedByPeer
    case system(SystemError)
    case tls(String)

    public var description: String {
        switch self {
        case .timedOut(let what): return "timed out \(what)"
        case .closedByPeer: return "connection closed by peer"
        case .system(let e): return e.description
        case .tls(let e): return "TLS: \(e)"
        }
    }
}
