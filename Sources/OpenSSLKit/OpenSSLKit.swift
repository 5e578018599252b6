internal import COpenSSL

// OpenSSLKit: the only Swift module that touches OpenSSL 3 pointers.
//
// - TLS: `TLSContext` (owns SSL_CTX, shared), `TLSSession` (owns SSL, one thread, non-blocking fd).
// - Crypto: `Digest`, `secureRandomBytes`, `ES256PrivateKey`/`ES256PublicKey`, `Base64URL`,
//   `SelfSignedCertificate`.
// - Errors: `TLSError`, carrying the drained OpenSSL error queue.
//
// No C type appears in the public API; COpenSSL is imported `internal` everywhere.

/// Facts about the OpenSSL library linked at run time.
public enum OpenSSLLibrary {
    /// e.g. "OpenSSL 3.0.13 30 Jan 2024".
    public static var versionString: String {
        String(cString: OpenSSL_version(OPENSSL_VERSION))
    }

    /// OPENSSL_VERSION_NUMBER of the library in use (0xMNN00PP0L).
    public static var versionNumber: UInt {
        OpenSSL_version_num()
    }

    /// Whether OpenSSL was initialised without its cleanup at exit (before main, by the C
    /// module): threads still in TLS while the process exits never meet its freed locks.
    public static var exitCleanupDisabled: Bool { copenssl_exit_cleanup_disabled() == 1 }
}
