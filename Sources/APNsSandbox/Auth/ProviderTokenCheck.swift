import APNsCore
import OpenSSLKit

/// The time-independent verdict on one `authorization` header value: whether it is a bearer JWT
/// signed with one of our keys by our team, and if so its key id and `iat`. Age is judged per
/// request from `issuedAt`; everything else never changes for a given string, which is why the
/// verdict can be cached (valid and invalid alike).
enum ProviderTokenCheck: Sendable, Equatable {
    case valid(keyID: String, issuedAt: Int64)
    case invalid

    /// Verifies `authorization` (`bearer <JWT>`). Invalid (403 `InvalidProviderToken`): no bearer
    /// scheme, not a compact JWS with JSON header and claims, `alg` other than ES256, an unknown
    /// `kid`, `iss` other than `teamID`, no integer `iat`, or a signature that doesn't verify.
    /// This is the expensive path (one ECDSA verification, about 50 µs).
    static func verify(authorization: String, teamID: String, keys: [String: ES256PublicKey]) -> ProviderTokenCheck {
        let utf8 = authorization.utf8
        guard utf8.count > 7 else { return .invalid }
        let scheme = String(decoding: utf8.prefix(7), as: UTF8.self)
        guard scheme.lowercased() == "bearer " else { return .invalid }
        let jwt = String(decoding: utf8.dropFirst(7), as: UTF8.self)
        guard let decoded = DecodedJWT(jwt), decoded.algorithm == "ES256", let keyID = decoded.keyID, let key = keys[keyID],
              decoded.issuer == teamID, let issuedAt = decoded.issuedAt,
              key.verify(signature: decoded.signature, message: decoded.signingInput) else { return .invalid }
        return .valid(keyID: keyID, issuedAt: issuedAt)
    }
}
