import Foundation

/// Where and how to reach Redis: `redis://[user[:password]@]host[:port][/db]`, `rediss://` for
/// TLS. A cluster may be given several seeds, comma-separated: `redis://h1:7000,h2:7001,h3`
/// (each with its own port, 6379 when left out; one is enough, the others are asked when it
/// doesn't answer). TLS options ride in the query: `?ca=/path/ca.pem` trusts that CA (default: the system's),
/// `?verify=false` turns certificate verification off (logged loudly by the caller), and
/// `?sni=name` sets the server name checked against the certificate (default: the host).
public struct RedisURL: Sendable, Equatable, CustomStringConvertible {
    public var tls: Bool
    public var host: String
    public var port: Int
    public var username: String?
    public var password: String?
    public var database: Int
    public var caFile: String?
    public var verifyPeer: Bool
    public var serverName: String?
    /// The seeds after the first (`host`, `port`): `redis://h1:1,h2:2` has `h2:2` here.
    public var additionalSeeds: [RedisNodeAddress]

    /// Every seed, the URL's `host:port` first.
    public var seeds: [RedisNodeAddress] { [RedisNodeAddress(host: host, port: port)] + additionalSeeds }

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public init(tls: Bool = false, host: String = "127.0.0.1", port: Int = 6379, username: String? = nil,
                password: String? = nil, database: Int = 0, caFile: String? = nil, verifyPeer: Bool = true,
                serverName: String? = nil, additionalSeeds: [RedisNodeAddress] = []) {
        self.tls = tls; self.host = host; self.port = port; self.username = username
        self.password = password; self.database = database; self.caFile = caFile
        self.verifyPeer = verifyPeer; self.serverName = serverName; self.additionalSeeds = additionalSeeds
    }

    public init(_ string: String) throws {
        func fail(_ why: String) -> ParseError {
            ParseError(description: "invalid Redis URL '\(RedisURL.redact(string))': \(why)")
        }
        var rest = Substring(string)
        if rest.hasPrefix("redis://") { tls = false; rest = rest.dropFirst(8) }
        else if rest.hasPrefix("rediss://") { tls = true; rest = rest.dropFirst(9) }
        else { throw fail("the scheme must be redis:// or rediss://") }

        var query: Substring = ""
        if let q = rest.firstIndex(of: "?") { query = rest[rest.index(after: q)...]; rest = rest[..<q] }
        var path: Substring = ""
        if let slash = rest.firstIndex(of: "/") { path = rest[rest.index(after: slash)...]; rest = rest[..<slash] }

        username = nil; password = nil
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = userinfo.firstIndex(of: ":") {
                let user = userinfo[..<colon]
                username = user.isEmpty ? nil : try RedisURL.percentDecode(user, fail)
                password = try RedisURL.percentDecode(userinfo[userinfo.index(after: colon)...], fail)
            } else if !userinfo.isEmpty {
                // `redis://secret@host` is the common password-only form (no ACL user).
                password = try RedisURL.percentDecode(userinfo, fail)
            }
        }

        var seeds: [RedisNodeAddress] = []
        for part in rest.split(separator: ",", omittingEmptySubsequences: false) {
            seeds.append(try RedisURL.seed(part, fail))
        }
        host = seeds[0].host
        port = seeds[0].port
        additionalSeeds = Array(seeds.dropFirst())
        if path.isEmpty {
            database = 0
        } else {
            guard let db = Int(path), db >= 0, db < 1 << 16 else { throw fail("the database must be a number, got '\(path)'") }
            database = db
        }

        caFile = nil; verifyPeer = true; serverName = nil
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1)
            let name = String(parts[0])
            let value = parts.count > 1 ? try RedisURL.percentDecode(parts[1], fail) : ""
            switch name {
            case "ca": caFile = value
            case "sni": serverName = value
            case "verify":
                switch value {
                case "true", "1", "yes": verifyPeer = true
                case "false", "0", "no": verifyPeer = false
                default: throw fail("verify must be true or false, got '\(value)'")
                }
            default: throw fail("unknown option '\(name)' (known: ca, sni, verify)")
            }
        }
        if !tls && (caFile != nil || !verifyPeer || serverName != nil) {
            throw fail("ca, sni and verify apply to rediss:// only")
        }
    }

    /// One `host[:port]` (or `[v6]:port`) of the authority.
    private static func seed(_ text: Substring, _ fail: (String) -> ParseError) throws -> RedisNodeAddress {
        let host: String
        var portText: Substring? = nil
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw fail("unterminated IPv6 address") }
            host = String(text[text.index(after: text.startIndex)..<close])
            let after = text[text.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw fail("unexpected text after the IPv6 address") }
        } else if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon]); portText = text[text.index(after: colon)...]
        } else {
            host = String(text)
        }
        guard !host.isEmpty else { throw fail("the host is missing") }
        guard let portText else { return RedisNodeAddress(host: host, port: 6379) }
        guard let p = Int(portText), (1...65535).contains(p) else { throw fail("the port must be 1-65535, got '\(portText)'") }
        return RedisNodeAddress(host: host, port: p)
    }

    /// The URL with the password replaced by `***`: safe for logs.
    public var description: String {
        var s = tls ? "rediss://" : "redis://"
        if username != nil || password != nil {
            s += username ?? ""
            if password != nil { s += ":***" }
            s += "@"
        }
        s += seeds.map(\.description).joined(separator: ",")
        if database != 0 { s += "/\(database)" }
        if !verifyPeer { s += "?verify=false" }
        return s
    }

    /// Hides the userinfo of a URL string that failed to parse.
    static func redact(_ string: String) -> String {
        guard let scheme = string.range(of: "://"), let at = string.range(of: "@", options: .backwards),
              scheme.upperBound <= at.lowerBound else { return string }
        return String(string[..<scheme.upperBound]) + "***@" + String(string[at.upperBound...])
    }

    private static func percentDecode(_ s: Substring, _ fail: (String) -> ParseError) throws -> String {
        guard s.contains("%") else { return String(s) }
        var bytes: [UInt8] = []
        var it = Array(s.utf8)[...]
        while let c = it.popFirst() {
            if c == UInt8(ascii: "%") {
                guard it.count >= 2, let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) else {
                    throw fail("bad percent-escape")
                }
                bytes.append(v); it = it.dropFirst(2)
            } else {
                bytes.append(c)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
