internal import COpenSSL

/// An ECDSA P-256 private key for ES256 (JWT provider tokens for APNs).
///
/// Thread safety: the `EVP_PKEY` is parsed or generated in `init` and only read afterwards;
/// each `sign` call creates its own `EVP_MD_CTX`. OpenSSL 3 allows a fully set-up, provider-native
/// `EVP_PKEY` to be used by many threads at once, so one key may sign concurrently from any
/// number of threads: hence `@unchecked Sendable`.
///
/// Errors from this type never contain key material or the PEM text.
public final class ES256PrivateKey: @unchecked Sendable {
    private let key: EVPKey

    private init(key: EVPKey) {
        self.key = key
    }

    /// Parses a PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`, Apple's `.p8` files) or SEC1
    /// (`BEGIN EC PRIVATE KEY`). Encrypted keys are refused. The key must be on P-256.
    public convenience init(pem: String) throws(TLSError) {
        let key = try EVPKey(pem: pem)
        guard key.isP256 else {
            throw TLSError(code: .invalidKey, message: "not an EC P-256 private key (ES256 needs prime256v1)")
        }
        self.init(key: key)
    }

    /// Reads a PEM private key file (see `init(pem:)`).
    public convenience init(pemFile path: String) throws(TLSError) {
        let text = try readTextFile(path)
        try self.init(pem: text)
    }

    /// A fresh random P-256 key.
    public static func generate() throws(TLSError) -> ES256PrivateKey {
        ES256PrivateKey(key: try generateP256Key())
    }

    /// The key as unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), the `.p8` format.
    public func pkcs8PEM() throws(TLSError) -> String {
        let bio = try MemoryBIO()
        OpenSSLErrorQueue.clear()
        guard PEM_write_bio_PrivateKey(bio.pointer, key.pointer, nil, nil, 0, nil, nil) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot encode the private key")
        }
        return bio.string()
    }

    /// The matching public key (a separate public-only key object).
    public var publicKey: ES256PublicKey {
        // A P-256 key always has an encodable public half; failure means memory exhaustion.
        do {
            return try ES256PublicKey(publicHalfOf: key)
        } catch {
            preconditionFailure("cannot derive the public key: \(error)")
        }
    }

    /// Signs SHA-256(`message`) and returns the raw 64-byte signature R‖S (JWS ES256 form; each
    /// half left-padded with zeros to 32 bytes).
    public func sign(_ message: [UInt8]) throws(TLSError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        guard let md = EVP_MD_CTX_new() else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "EVP_MD_CTX_new failed")
        }
        defer { EVP_MD_CTX_free(md) }
        guard EVP_DigestSignInit(md, nil, EVP_sha256(), nil, key.pointer) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "EVP_DigestSignInit failed")
        }
        // EVP_DigestSign wants a valid pointer even for an empty message.
        var derLength = 0
        let sized = withNonNullBytes(message) { input, count in
            EVP_DigestSign(md, nil, &derLength, input, count)
        }
        guard sized == 1, derLength > 0 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "EVP_DigestSign (size) failed")
        }
        var der = [UInt8](repeating: 0, count: derLength)
        let signed = withNonNullBytes(message) { input, count in
            EVP_DigestSign(md, &der, &derLength, input, count)
        }
        guard signed == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "EVP_DigestSign failed")
        }
        return try ECDSASignature.rawFromDER(Array(der.prefix(derLength)))
    }
}

/// An ECDSA P-256 public key for verifying ES256 signatures. Immutable after `init`:
/// `@unchecked Sendable` for the same reason as `ES256PrivateKey`.
public final class ES256PublicKey: @unchecked Sendable {
    private let key: EVPKey

    /// Parses a SubjectPublicKeyInfo PEM (`BEGIN PUBLIC KEY`) holding a P-256 key.
    public init(pem: String) throws(TLSError) {
        let bio = try MemoryBIO(copying: pem.utf8)
        OpenSSLErrorQueue.clear()
        guard let pointer = copenssl_PEM_read_bio_PUBKEY_nopass(bio.pointer) else {
            throw OpenSSLErrorQueue.error(.invalidKey, "cannot parse the public key PEM")
        }
        let key = EVPKey(taking: pointer)
        guard key.isP256 else {
            throw TLSError(code: .invalidKey, message: "not an EC P-256 public key")
        }
        self.key = key
    }

    /// Copies only the public half of `privateKey` (DER SubjectPublicKeyInfo round trip), so
    /// this object never holds private material.
    init(publicHalfOf privateKey: EVPKey) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        let length = i2d_PUBKEY(privateKey.pointer, nil)
        guard length > 0 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "i2d_PUBKEY failed")
        }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_PUBKEY(privateKey.pointer, &cursor)
        }
        guard written == length else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "i2d_PUBKEY failed")
        }
        let parsed = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            // d2i_* advances the pointer it is given: pass a copy.
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, Int(length))
        }
        guard let parsed else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "d2i_PUBKEY failed")
        }
        key = EVPKey(taking: parsed)
    }

    /// The key as SubjectPublicKeyInfo PEM (`BEGIN PUBLIC KEY`).
    public func pem() -> String {
        do {
            let bio = try MemoryBIO()
            OpenSSLErrorQueue.clear()
            guard PEM_write_bio_PUBKEY(bio.pointer, key.pointer) == 1 else {
                throw OpenSSLErrorQueue.error(.cryptoFailure, "PEM_write_bio_PUBKEY failed")
            }
            return bio.string()
        } catch {
            // Only memory exhaustion gets here.
            preconditionFailure("cannot encode the public key: \(error)")
        }
    }

    /// Whether `signature` (raw 64-byte R‖S) is a valid ES256 signature of `message`. Any other
    /// length, R or S out of range, or a mismatch yields false.
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        guard signature.count == 64, let der = ECDSASignature.derFromRaw(signature) else {
            return false
        }
        OpenSSLErrorQueue.clear()
        defer { OpenSSLErrorQueue.clear() }
        guard let md = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(md) }
        guard EVP_DigestVerifyInit(md, nil, EVP_sha256(), nil, key.pointer) == 1 else { return false }
        let result = der.withUnsafeBufferPointer { sig in
            withNonNullBytes(message) { input, count in
                EVP_DigestVerify(md, sig.baseAddress, sig.count, input, count)
            }
        }
        return result == 1
    }
}

/// Conversions between OpenSSL's DER ECDSA-Sig-Value and JWS's raw R‖S.
enum ECDSASignature {
    static let halfLength = 32

    /// DER SEQUENCE { r INTEGER, s INTEGER } → 64 bytes R‖S, each left-padded to 32 bytes.
    static func rawFromDER(_ der: [UInt8]) throws(TLSError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        let parsed = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature = parsed else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot parse the DER signature")
        }
        defer { ECDSA_SIG_free(signature) }
        // get0: borrowed pointers, owned by the ECDSA_SIG.
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        guard let r, let s else {
            throw TLSError(code: .cryptoFailure, message: "DER signature without R or S")
        }
        var raw = [UInt8](repeating: 0, count: 2 * halfLength)
        let ok = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(r, buffer.baseAddress, Int32(halfLength)) == Int32(halfLength)
                && BN_bn2binpad(s, buffer.baseAddress! + halfLength, Int32(halfLength)) == Int32(halfLength)
        }
        guard ok else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "R or S longer than 32 bytes")
        }
        return raw
    }

    /// 64 bytes R‖S → DER, or nil if the input is malformed (wrong length, zero R or S).
    static func derFromRaw(_ raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * halfLength else { return nil }
        OpenSSLErrorQueue.clear()
        defer { OpenSSLErrorQueue.clear() }
        let bignums = raw.withUnsafeBufferPointer { buffer -> (OpaquePointer?, OpaquePointer?) in
            (BN_bin2bn(buffer.baseAddress, Int32(halfLength), nil),
             BN_bin2bn(buffer.baseAddress! + halfLength, Int32(halfLength), nil))
        }
        guard let r = bignums.0, let s = bignums.1 else {
            BN_free(bignums.0)
            BN_free(bignums.1)
            return nil
        }
        guard BN_is_zero(r) == 0, BN_is_zero(s) == 0 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        guard let signature = ECDSA_SIG_new() else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        defer { ECDSA_SIG_free(signature) }
        // ECDSA_SIG_set0 takes ownership of r and s on success only.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}

/// A fresh EC P-256 key. EVP_EC_gen is a macro, so: EVP_PKEY_CTX for "EC", group "P-256".
func generateP256Key() throws(TLSError) -> EVPKey {
    OpenSSLErrorQueue.clear()
    guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
        throw OpenSSLErrorQueue.error(.cryptoFailure, "EVP_PKEY_CTX_new_from_name(EC) failed")
    }
    defer { EVP_PKEY_CTX_free(ctx) }
    guard EVP_PKEY_keygen_init(ctx) == 1 else {
        throw OpenSSLErrorQueue.error(.cryptoFailure, "EVP_PKEY_keygen_init failed")
    }
    guard EVP_PKEY_CTX_set_group_name(ctx, "P-256") == 1 else {
        throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot select curve P-256")
    }
    var pointer: OpaquePointer?
    guard EVP_PKEY_generate(ctx, &pointer) == 1, let pointer else {
        throw OpenSSLErrorQueue.error(.cryptoFailure, "EC key generation failed")
    }
    return EVPKey(taking: pointer)
}

/// Calls `body` with a non-NULL pointer even for an empty array (OpenSSL's one-shot
/// EVP_DigestSign/Verify reject NULL data).
private func withNonNullBytes<R>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>, Int) -> R) -> R {
    if bytes.isEmpty {
        let zero: UInt8 = 0
        return withUnsafePointer(to: zero) { body($0, 0) }
    }
    return bytes.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
}

/// Reads a whole text file (used for PEM files; errors mention the path only).
func readTextFile(_ path: String) throws(TLSError) -> String {
    OpenSSLErrorQueue.clear()
    guard let bio = BIO_new_file(path, "rb") else {
        throw OpenSSLErrorQueue.error(.configuration, "cannot open \(path)")
    }
    defer { BIO_free(bio) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = chunk.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
        if count <= 0 { break }
        bytes.append(contentsOf: chunk.prefix(Int(count)))
        if bytes.count > 1 << 20 {
            throw TLSError(code: .configuration, message: "\(path) is larger than 1 MiB")
        }
    }
    OpenSSLErrorQueue.clear()
    return String(decoding: bytes, as: UTF8.self)
}
