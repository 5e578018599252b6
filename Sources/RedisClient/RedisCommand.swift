@_exported import HiredisCodec
import OpenSSLKit

/// Something that can be a command argument: sent as its bytes.
public protocol RedisArgument: Sendable {
    var redisBytes: [UInt8] { get }
}

extension String: RedisArgument { public var redisBytes: [UInt8] { Array(utf8) } }
extension Substring: RedisArgument { public var redisBytes: [UInt8] { Array(utf8) } }
extension Array: RedisArgument where Element == UInt8 { public var redisBytes: [UInt8] { self } }
extension Int: RedisArgument { public var redisBytes: [UInt8] { Array(String(self).utf8) } }
extension Int64: RedisArgument { public var redisBytes: [UInt8] { Array(String(self).utf8) } }

/// One command as its argument list. A command built from a script carries its `EVAL` form so
/// a `NOSCRIPT` reply (a restarted or flushed Redis) is answered by sending the source.
public struct RedisCommand: Sendable, Equatable {
    public var arguments: [[UInt8]]
    var evalFallback: [[UInt8]]?

    public init(arguments: [[UInt8]]) {
        precondition(!arguments.isEmpty)
        self.arguments = arguments
    }

    public init(_ name: String, _ args: any RedisArgument...) {
        self.arguments = [Array(name.utf8)] + args.map(\.redisBytes)
    }

    public init(_ name: String, _ args: [any RedisArgument]) {
        self.arguments = [Array(name.utf8)] + args.map(\.redisBytes)
    }

    /// `EVALSHA` of `script`, falling back to `EVAL` on `NOSCRIPT`.
    public static func script(_ script: RedisScript, keys: [String], args: [any RedisArgument]) -> RedisCommand {
        let tail: [[UInt8]] = [Array(String(keys.count).utf8)] + keys.map { Array($0.utf8) } + args.map(\.redisBytes)
        var command = RedisCommand(arguments: [Array("EVALSHA".utf8), Array(script.sha1.utf8)] + tail)
        command.evalFallback = [Array("EVAL".utf8), Array(script.source.utf8)] + tail
        return command
    }

    /// The command name, for errors and logs (never the arguments: they may hold secrets).
    public var name: String { String(decoding: arguments[0], as: UTF8.self).uppercased() }
}

/// A Lua script identified by the SHA-1 of its source.
public struct RedisScript: Sendable {
    public let source: String
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        self.sha1 = Digest.sha1Hex(Array(source.utf8))
    }
}

/// Everything the Redis adapter throws. The `kind` tells the caller whether retrying can help.
public struct RedisError: Error, CustomStringConvertible, Sendable {
    public enum Kind: String, Sendable {
        /// Could not connect (refused, unreachable, TLS handshake, timeout). Retry later.
        case connectionFailed
        /// The connection broke with commands in flight: they may or may not have run.
        case connectionLost
        /// No reply within the command timeout; the connection was dropped.
        case timeout
        /// The server answered with an error reply (`WRONGTYPE …`, `NOGROUP …`).
        case server
        /// AUTH or SELECT was refused. Retrying won't help until the configuration changes.
        case authentication
        /// The reply did not have the expected shape.
        case unexpectedReply
        /// The connection was closed by its owner.
        case closed
        /// A Redis Cluster can't run this command as asked: its keys span hash slots (`CROSSSLOT`),
        /// or nothing says which of its arguments are keys. A bug in the caller: retrying won't help.
        case unroutable
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

    /// True for the failures a reconnect can cure.
    public var isConnectionProblem: Bool {
        kind == .connectionFailed || kind == .connectionLost || kind == .timeout
    }
}

extension RESPValue {
    /// Bulk or status text as a String (lossy for non-UTF-8 bytes).
    public var string: String? {
        switch self {
        case .bulk(let b): return String(decoding: b, as: UTF8.self)
        case .status(let s): return s
        default: return nil
        }
    }

    public var bytes: [UInt8]? {
        if case .bulk(let b) = self { return b }
        return nil
    }

    public var int: Int64? {
        switch self {
        case .integer(let i): return i
        case .bulk(let b): return Int64(String(decoding: b, as: UTF8.self))
        default: return nil
        }
    }

    public var array: [RESPValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var isNull: Bool { self == .null }

    public var errorMessage: String? {
        if case .error(let e) = self { return e }
        return nil
    }

    /// The value, or a `server` error if Redis answered with an error reply.
    public func orThrow(_ command: String = "") throws -> RESPValue {
        if case .error(let e) = self { throw RedisError(.server, command.isEmpty ? e : "\(command): \(e)") }
        return self
    }
}
