/// Error replies that say Redis can't serve this client right now — out of memory, a replica,
/// loading, busy with a script, denying this user a command — rather than that the command was
/// wrong for its data. Retrying later can help, and the data that met them is not at fault: a
/// worker leaves such entries pending instead of holding them responsible.
public struct RedisRefusal: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// `OOM`: `maxmemory` reached with a policy that refuses writes.
        case outOfMemory = "out_of_memory"
        /// `NOPERM`, or a script's call denied by ACL: this user lacks a permission.
        case permission
        /// `NOAUTH`, `WRONGPASS`: the credentials are missing or wrong.
        case authentication
        /// `READONLY`, `MASTERDOWN`, `NOREPLICAS`, `MOVED`/`ASK`, `CLUSTERDOWN`, `TRYAGAIN`: not a writable primary now.
        case notWritable = "not_writable"
        /// `LOADING`, `BUSY`, `MISCONF`, too many clients: the server is not serving now.
        case unavailable
    }

    public var kind: Kind
    /// Redis's own words (the first line, at most 300 characters).
    public var message: String

    public var description: String { "\(kind.rawValue): \(message)" }

    /// The refusal an error reply states, or nil for an error about the command or its data
    /// (`WRONGTYPE`, `ERR syntax`, a script's own error).
    public init?(errorReply message: String) {
        let code = message.prefix { $0 != " " }
        let kind: Kind
        switch code {
        case "OOM": kind = .outOfMemory
        case "NOPERM": kind = .permission
        case "NOAUTH", "WRONGPASS": kind = .authentication
        case "READONLY", "MASTERDOWN", "NOREPLICAS", "MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN": kind = .notWritable
        case "LOADING", "BUSY", "MISCONF": kind = .unavailable
        case "ERR":
            // Redis 7 words an ACL denial inside a script, and a full client table, as ERR.
            if message.contains("can't run this command or subcommand") || message.contains("no permissions to") {
                kind = .permission
            } else if message.contains("max number of clients") {
                kind = .unavailable
            } else {
                return nil
            }
        default:
            return nil
        }
        self.kind = kind
        self.message = String(message.prefix { $0 != "\n" && $0 != "\r" }.prefix(300))
    }
}

extension RedisRefusal {
    /// The refusal quoted in a failure's text: an error reply at its start, or after one of the
    /// wrappers callers put before a reply they didn't expect (`XREADGROUP: NOPERM …`, `fan-out
    /// create: unexpected reply OOM command not allowed …`). Nil when no refusal is quoted there.
    public init?(quotedIn text: String) {
        if let r = RedisRefusal(errorReply: text) { self = r; return }
        for marker in [": ", "unexpected reply "] {
            var rest = text[...]
            while let found = rest.range(of: marker) {
                if let r = RedisRefusal(errorReply: String(text[found.upperBound...])) { self = r; return }
                rest = text[found.upperBound...]
            }
        }
        return nil
    }
}

extension RedisError {
    /// The refusal behind a server error, if it is one (see `RedisRefusal`).
    public var refusal: RedisRefusal? {
        guard kind == .server || kind == .authentication else { return nil }
        // Server errors are often prefixed with the command (`XREADGROUP: NOPERM …`).
        return RedisRefusal(quotedIn: message)
    }
}
