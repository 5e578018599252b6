internal import COpenSSL

/// Owns one `X509` certificate.
final class X509Certificate {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        X509_free(pointer)
    }

    /// Every certificate in a PEM text, in order. Fails if the text holds anything unparsable
    /// between certificates; returns an empty array if it holds no certificate at all.
    static func readAll(pem: String) throws(TLSError) -> [X509Certificate] {
        let bio = try MemoryBIO(copying: pem.utf8)
        var certificates: [X509Certificate] = []
        while true {
            OpenSSLErrorQueue.clear()
            guard let x509 = copenssl_PEM_read_bio_X509_nopass(bio.pointer) else {
                let entries = OpenSSLErrorQueue.drain()
                // Running out of input ends the loop with PEM_R_NO_START_LINE; anything else
                // is a malformed certificate.
                let endOfInput = entries.allSatisfy {
                    $0.library == ERR_LIB_PEM && $0.reason == PEM_R_NO_START_LINE
                }
                if endOfInput { break }
                throw TLSError(code: .configuration,
                               message: OpenSSLErrorQueue.compose("malformed certificate PEM", entries.map(\.text)),
                               openSSLErrors: entries.map(\.text))
            }
            certificates.append(X509Certificate(taking: x509))
        }
        return certificates
    }

    /// The certificate as PEM text.
    func pem() throws(TLSError) -> String {
        let bio = try MemoryBIO()
        OpenSSLErrorQueue.clear()
        guard PEM_write_bio_X509(bio.pointer, pointer) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "PEM_write_bio_X509 failed")
        }
        return bio.string()
    }
}

/// Owns one `EVP_PKEY` (any algorithm).
final class EVPKey {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        EVP_PKEY_free(pointer)
    }

    /// Whether this is an EC key on P-256 (prime256v1), the only curve ES256 allows.
    var isP256: Bool {
        guard EVP_PKEY_is_a(pointer, "EC") == 1 else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &name, name.count, &length) == 1 else {
            OpenSSLErrorQueue.clear()
            return false
        }
        let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }
}

/// A private key parsed from PEM (PKCS#8 or traditional), for TLS servers.
typealias PrivateKeyHandle = EVPKey

extension EVPKey {
    /// Parses a private key PEM. Encrypted keys are refused (no password prompt). The thrown
    /// error never contains the PEM text.
    convenience init(pem: String) throws(TLSError) {
        let bio = try MemoryBIO(copying: pem.utf8)
        OpenSSLErrorQueue.clear()
        guard let key = copenssl_PEM_read_bio_PrivateKey_nopass(bio.pointer) else {
            throw OpenSSLErrorQueue.error(.invalidKey, "cannot parse the private key PEM")
        }
        self.init(taking: key)
    }
}
