#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
internal import COpenSSL

/// Self-signed certificates for loopback servers and the APNs sandbox. Not for production trust.
public struct SelfSignedCertificate: Sendable {
    /// The certificate PEM (`BEGIN CERTIFICATE`) — also what a client passes as its `caFile` /
    /// `trustedCertificatesPEM` to trust it.
    public let certificatePEM: String
    /// The private key as unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`).
    public let privateKeyPEM: String

    /// Generates an EC P-256 key and an X.509 v3 certificate for it, signed with itself
    /// (ecdsa-with-SHA256): subject and issuer `CN=commonName`, a random positive 128-bit serial,
    /// valid from five minutes ago for `days` days, with `basicConstraints=critical,CA:FALSE`,
    /// `extendedKeyUsage=serverAuth,clientAuth`, a subjectKeyIdentifier, and a subjectAltName
    /// listing `dnsNames` (as DNS entries) and `ipAddresses` (as IP entries; IPv4 or IPv6).
    public static func generate(
        commonName: String,
        dnsNames: [String],
        ipAddresses: [String] = [],
        days: Int = 30
    ) throws(TLSError) -> (certificatePEM: String, privateKeyPEM: String) {
        let made = try make(commonName: commonName, dnsNames: dnsNames, ipAddresses: ipAddresses, days: days)
        return (made.certificatePEM, made.privateKeyPEM)
    }

    /// Like `generate`, as a value.
    public static func make(
        commonName: String,
        dnsNames: [String],
        ipAddresses: [String] = [],
        days: Int = 30
    ) throws(TLSError) -> SelfSignedCertificate {
        guard (1...3650).contains(days) else {
            throw TLSError(code: .invalidArgument, message: "days must be between 1 and 3650")
        }
        guard !commonName.isEmpty, commonName.utf8.count <= 64, !commonName.utf8.contains(0) else {
            throw TLSError(code: .invalidArgument, message: "the common name must be 1 to 64 bytes")
        }
        // The subjectAltName is built as openssl.cnf text: refuse anything that could inject
        // extra entries or options.
        for name in dnsNames {
            let allowed = name.utf8.allSatisfy { byte in
                (byte >= 0x61 && byte <= 0x7a) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x30 && byte <= 0x39)
                    || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "*")
            }
            guard allowed, !name.isEmpty, name.utf8.count <= 253 else {
                throw TLSError(code: .invalidArgument, message: "invalid DNS name for subjectAltName: \(name)")
            }
        }
        for address in ipAddresses {
            guard TLSSession.isIPAddress(address) else {
                throw TLSError(code: .invalidArgument, message: "invalid IP address for subjectAltName: \(address)")
            }
        }

        let key = try generateP256Key()
        OpenSSLErrorQueue.clear()
        guard let x509 = X509_new() else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "X509_new failed")
        }
        let certificate = X509Certificate(taking: x509)

        guard X509_set_version(x509, Int(X509_VERSION_3)) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "X509_set_version failed")
        }
        try setRandomSerial(x509)
        guard X509_gmtime_adj(X509_getm_notBefore(x509), -300) != nil,
              X509_gmtime_adj(X509_getm_notAfter(x509), days * 86_400) != nil else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot set the validity period")
        }
        guard X509_set_pubkey(x509, key.pointer) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "X509_set_pubkey failed")
        }
        try setName(x509, commonName: commonName)

        var altNames = dnsNames.map { "DNS:\($0)" }
        altNames += ipAddresses.map { "IP:\($0)" }
        var extensions: [(Int32, String)] = [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_ext_key_usage, "serverAuth,clientAuth"),
            (NID_subject_key_identifier, "hash"),
        ]
        if !altNames.isEmpty {
            extensions.append((NID_subject_alt_name, altNames.joined(separator: ",")))
        }
        for (nid, value) in extensions {
            guard copenssl_X509_add_ext_text(x509, nid, value) == 1 else {
                throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot add certificate extension \(value)")
            }
        }

        guard X509_sign(x509, key.pointer, EVP_sha256()) > 0 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "X509_sign failed")
        }
        let certificatePEM = try certificate.pem()
        let privateKeyPEM = try pkcs8PEM(key)
        return SelfSignedCertificate(certificatePEM: certificatePEM, privateKeyPEM: privateKeyPEM)
    }

    private static func setRandomSerial(_ x509: OpaquePointer) throws(TLSError) {
        var bytes = secureRandomBytes(16)
        bytes[0] &= 0x7f  // positive
        bytes[0] |= 0x40  // and never zero, always 16 bytes long
        guard let bignum = BN_bin2bn(bytes, Int32(bytes.count), nil) else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "BN_bin2bn failed")
        }
        defer { BN_free(bignum) }
        guard BN_to_ASN1_INTEGER(bignum, X509_get_serialNumber(x509)) != nil else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot set the serial number")
        }
    }

    private static func setName(_ x509: OpaquePointer, commonName: String) throws(TLSError) {
        guard let name = X509_NAME_new() else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "X509_NAME_new failed")
        }
        defer { X509_NAME_free(name) }
        let bytes = Array(commonName.utf8)
        guard X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot set the common name")
        }
        // Both calls copy the name.
        guard X509_set_subject_name(x509, name) == 1, X509_set_issuer_name(x509, name) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot set subject/issuer")
        }
    }

    private static func pkcs8PEM(_ key: EVPKey) throws(TLSError) -> String {
        let bio = try MemoryBIO()
        OpenSSLErrorQueue.clear()
        guard PEM_write_bio_PrivateKey(bio.pointer, key.pointer, nil, nil, 0, nil, nil) == 1 else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "cannot encode the private key")
        }
        return bio.string()
    }
}
