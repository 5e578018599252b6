import Foundation
import OpenSSLKit

/// An APNs provider token (JWT, ES256) and when it was issued.
public struct ProviderToken: Sendable, Hashable {
    public let value: String
    /// `iat`, seconds since 1970.
    public let issuedAt: Int64

    public init(value: String, issuedAt: Int64) {
        self.value = value
        self.issuedAt = issuedAt
    }

    public func age(now: Int64) -> Int64 { now - issuedAt }
}

/// Who signs: the 10-character key id of the `.p8` key and the 10-character team id.
public struct ProviderIdentity: Sendable, Hashable {
    public let keyID: String
    public let teamID: String

    public struct Invalid: Error, CustomStringConvertible, Sendable { public var description: String }

    public init(keyID: String, teamID: String) throws {
        func check(_ v: String, _ what: String) throws {
            guard v.utf8.count == 10, v.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }) else {
                throw Invalid(description: "\(what) must be 10 characters A-Z 0-9, got '\(v.prefix(20))'")
            }
        }
        try check(keyID, "the APNs key id")
        try check(teamID, "the team id")
        self.keyID = keyID
        self.teamID = teamID
    }
}

/// Mints provider tokens. The key never leaves this object and is never printed.
public final class ProviderTokenSigner: Sendable, CustomStringConvertible {
    public let identity: ProviderIdentity
    private let key: ES256PrivateKey

    public init(key: ES256PrivateKey, identity: ProviderIdentity) {
        self.key = key
        self.identity = identity
    }

    /// Loads the `.p8` key from a file path, or from PEM text (an environment variable).
    /// The signer of the key in `pem` (its PEM text), else in `pemFile`: the text wins when both
    /// are given. An error names the one that was read, by the names of its settings (`pemSetting`,
    /// `fileSetting`), and never the key's bytes.
    public static func load(pemFile: String?, pem: String?, identity: ProviderIdentity,
                            pemSetting: String = "apns.key (ACTIVITYCAST_APNS_KEY)",
                            fileSetting: String = "apns.key_file (ACTIVITYCAST_APNS_KEY_FILE)") throws -> ProviderTokenSigner {
        if let pem, !pem.isEmpty {
            do { return ProviderTokenSigner(key: try ES256PrivateKey(pem: pem), identity: identity) } catch {
                let beside = pemFile.map { "; it wins over \(fileSetting) (\($0)), which was not read" } ?? ""
                throw ProviderIdentity.Invalid(description: "cannot load the APNs signing key from \(pemSetting), the key's PEM text\(beside): \(error)")
            }
        }
        if let pemFile {
            do { return ProviderTokenSigner(key: try ES256PrivateKey(pemFile: pemFile), identity: identity) } catch {
                throw ProviderIdentity.Invalid(description: "cannot load the APNs signing key from \(fileSetting) (\(pemFile)): \(error)")
            }
        }
        throw ProviderIdentity.Invalid(description: "no APNs signing key: give a .p8 file (\(fileSetting)) or its PEM text (\(pemSetting))")
    }

    public func token(issuedAt: Int64) throws -> ProviderToken {
        let header = Base64URL.encode(#"{"alg":"ES256","kid":"\#(identity.keyID)"}"#)
        let claims = Base64URL.encode(#"{"iss":"\#(identity.teamID)","iat":\#(issuedAt)}"#)
        let input = header + "." + claims
        let signature = try key.sign(Array(input.utf8))
        return ProviderToken(value: input + "." + Base64URL.encode(signature), issuedAt: issuedAt)
    }

    public var description: String { "ProviderTokenSigner(kid: \(identity.keyID), iss: \(identity.teamID))" }
}

/// The parts of a JWT as the sandbox checks them.
public struct DecodedJWT: Sendable {
    public var algorithm: String?
    public var keyID: String?
    public var issuer: String?
    public var issuedAt: Int64?
    public var signingInput: [UInt8]
    public var signature: [UInt8]

    /// Splits and decodes a compact JWS; nil if it isn't three base64url parts with JSON objects.
    public init?(_ token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = Base64URL.decode(String(parts[0])), let c = Base64URL.decode(String(parts[1])),
              let s = Base64URL.decode(String(parts[2])),
              let header = try? JSONSerialization.jsonObject(with: Data(h)) as? [String: Any],
              let claims = try? JSONSerialization.jsonObject(with: Data(c)) as? [String: Any] else { return nil }
        algorithm = header["alg"] as? String
        keyID = header["kid"] as? String
        issuer = claims["iss"] as? String
        issuedAt = (claims["iat"] as? NSNumber)?.int64Value
        signingInput = Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8)
        signature = s
    }
}
