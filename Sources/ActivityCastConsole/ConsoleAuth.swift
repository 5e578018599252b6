import Foundation
import OpenSSLKit

/// Who may do what in the console (docs/operations.md, "The console"), as pure values.
///
/// - Reading: anyone who can reach a loopback listener; beyond loopback, only with the operator
///   token (a session cookie from the login form, or `Authorization: Bearer <token>`).
/// - Actions (replay, discard): only with `console.allow_actions`, the token, and for a browser
///   session the form's CSRF token (a bearer request is not one a browser makes by itself).
///
/// A session cookie is `<expiry ms>.<HMAC-SHA256(key, "session:<expiry>")>` and a form's CSRF
/// token `HMAC(key, "csrf:<cookie>")`, with the key derived from the operator token: nothing is
/// kept per session, every console replica accepts the same cookie, and changing the token ends
/// every session. Compared in constant time.
public struct ConsoleAuth: Sendable {
    /// nil: no token configured (loopback only, read-only).
    let key: [UInt8]?
    let token: [UInt8]?
    public let loopbackOnly: Bool
    public let allowActions: Bool
    /// How long a login lasts.
    public static let sessionMillis: Int64 = 12 * 3_600_000
    public static let cookieName = "activitycast_session"

    public init(token: String?, loopbackOnly: Bool, allowActions: Bool) {
        let t = token.map { Array($0.utf8) }
        self.token = t
        key = t.map { Digest.sha256(Array("activitycast-console:".utf8) + $0) }
        self.loopbackOnly = loopbackOnly
        self.allowActions = allowActions
    }

    /// Why the console can't start with these settings, or nil.
    public static func startProblem(host: String, token: String?, allowActions: Bool) -> String? {
        if let token, token.utf8.count < 16 {
            return "ACTIVITYCAST_CONSOLE_TOKEN is \(token.utf8.count) bytes; use at least 16 (openssl rand -hex 24 makes one)"
        }
        if !isLoopback(host), token == nil {
            return "console.listen \(host) is beyond loopback: set ACTIVITYCAST_CONSOLE_TOKEN (or --token-file) so that every page needs the operator token"
        }
        if allowActions, token == nil {
            return "console.allow_actions needs the operator token: set ACTIVITYCAST_CONSOLE_TOKEN (or --token-file)"
        }
        return nil
    }

    /// 127.0.0.0/8, ::1 and localhost.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    public var hasToken: Bool { token != nil }

    /// Whether `candidate` is the operator token (constant time in the candidate's length).
    public func isToken(_ candidate: String) -> Bool {
        guard let token else { return false }
        return Self.equal(Array(candidate.utf8), token)
    }

    /// A session cookie's value, valid until `nowMillis + sessionMillis`.
    public func session(nowMillis: Int64) -> String? {
        guard let key else { return nil }
        let expiry = nowMillis + Self.sessionMillis
        return "\(expiry).\(Digest.hex(Self.hmac(key, Array("session:\(expiry)".utf8))))"
    }

    /// Whether `cookie` is a session of this token that hasn't expired.
    public func isSession(_ cookie: String?, nowMillis: Int64) -> Bool {
        guard let key, let cookie, let dot = cookie.firstIndex(of: "."), let expiry = Int64(cookie[..<dot]), expiry > nowMillis else { return false }
        let want = Digest.hex(Self.hmac(key, Array("session:\(expiry)".utf8)))
        return Self.equal(Array(cookie[cookie.index(after: dot)...].utf8), Array(want.utf8))
    }

    /// The CSRF token of a session's forms.
    public func csrf(for cookie: String) -> String {
        guard let key else { return "" }
        return Digest.hex(Self.hmac(key, Array("csrf:\(cookie)".utf8)))
    }

    public func isCSRF(_ value: String?, for cookie: String) -> Bool {
        guard let value, hasToken else { return false }
        return Self.equal(Array(value.utf8), Array(csrf(for: cookie).utf8))
    }

    /// What a request may do, from its session cookie and `Authorization` header.
    public struct Access: Sendable, Equatable {
        /// It may read pages.
        public var read: Bool
        /// It holds the token (a session or the bearer header).
        public var operator_: Bool
        /// By the bearer header: no CSRF token needed.
        public var bearer: Bool
    }

    public func access(cookie: String?, authorization: String?, nowMillis: Int64) -> Access {
        let bearer = authorization.map { $0.hasPrefix("Bearer ") && isToken(String($0.dropFirst(7))) } ?? false
        let session = isSession(cookie, nowMillis: nowMillis)
        let op = bearer || session
        return Access(read: op || loopbackOnly, operator_: op, bearer: bearer)
    }

    /// HMAC-SHA256 (RFC 2104) over `Digest.sha256`.
    static func hmac(_ key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var k = key.count > 64 ? Digest.sha256(key) : key
        k += [UInt8](repeating: 0, count: 64 - k.count)
        let inner = Digest.sha256(k.map { $0 ^ 0x36 } + message)
        return Digest.sha256(k.map { $0 ^ 0x5c } + inner)
    }

    /// Constant time in `a`'s length: every byte is compared whatever differs first.
    static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var diff = UInt8(a.count == b.count ? 0 : 1)
        for i in a.indices { diff |= a[i] ^ (i < b.count ? b[i] : 0) }
        return diff == 0
    }
}
