internal import COpenSSL

/// The lowest TLS version a context accepts.
public enum TLSVersion: Sendable, Hashable, CustomStringConvertible {
    case tls12
    case tls13

    var openSSLValue: Int32 {
        switch self {
        case .tls12: TLS1_2_VERSION
        case .tls13: TLS1_3_VERSION
        }
    }

    public var description: String {
        switch self {
        case .tls12: "TLSv1.2"
        case .tls13: "TLSv1.3"
        }
    }
}

/// TLS configuration shared by many sessions: owns one `SSL_CTX`.
///
/// Thread safety: a `TLSContext` is fully configured inside its factory method and never
/// modified afterwards (nothing in this type mutates the `SSL_CTX` after `init`). OpenSSL
/// documents `SSL_new` on a shared, no-longer-modified `SSL_CTX` as safe from many threads (the
/// reference count is atomic; the session cache and ticket keys are locked internally), so one
/// context may be shared by all connections and threads: hence `@unchecked Sendable`.
///
/// Every context enables `SSL_MODE_ENABLE_PARTIAL_WRITE` and
/// `SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER`, keeps `SSL_MODE_RELEASE_BUFFERS` off (buffers are
/// reused rather than freed and reallocated on every idle moment), and refuses renegotiation.
public final class TLSContext: @unchecked Sendable {
    enum Role { case client, server }

    let pointer: OpaquePointer
    let role: Role
    /// Whether the client verifies the server (drives per-session hostname checks).
    let verifiesPeer: Bool
    /// The ALPN protocols configured, in preference order (empty: no ALPN).
    public let alpnProtocols: [String]
    /// Whether a handshake that ends without an agreed ALPN protocol fails.
    public let requiresALPN: Bool

    private init(pointer: OpaquePointer, role: Role, verifiesPeer: Bool, alpn: [String], requireALPN: Bool) {
        self.pointer = pointer
        self.role = role
        self.verifiesPeer = verifiesPeer
        self.alpnProtocols = alpn
        self.requiresALPN = requireALPN && !alpn.isEmpty
    }

    deinit {
        // Sessions hold a strong reference to their context, so no SSL made from this SSL_CTX
        // is still in use here (SSL_new also takes its own reference on the SSL_CTX).
        SSL_CTX_free(pointer)
    }

    /// A client context.
    ///
    /// - Parameters:
    ///   - verifyPeer: verify the server's certificate chain (and, per session, its name).
    ///     `false` accepts any certificate: for tests and loopback sandboxes only.
    ///   - caFile: a PEM file of trusted certificates. When nil (and `trustedCertificatesPEM` is
    ///     nil) the system's default CA locations are used (`SSL_CTX_set_default_verify_paths`).
    ///     When given, only these certificates are trusted.
    ///   - trustedCertificatesPEM: like `caFile`, but the PEM text itself.
    ///   - alpn: protocols to offer, in preference order (e.g. `["h2"]`).
    ///   - requireALPN: when `alpn` is non-empty, fail the handshake if the server selects none.
    ///   - minimumVersion: the lowest TLS version accepted.
    public static func client(
        verifyPeer: Bool = true,
        caFile: String? = nil,
        trustedCertificatesPEM: String? = nil,
        alpn: [String] = [],
        requireALPN: Bool = true,
        minimumVersion: TLSVersion = .tls12
    ) throws(TLSError) -> TLSContext {
        let wire = try alpnWireFormat(alpn)
        OpenSSLErrorQueue.clear()
        guard let ctx = SSL_CTX_new(TLS_client_method()) else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_new failed")
        }
        // From here on the context owns ctx and frees it if configuration fails.
        let context = TLSContext(pointer: ctx, role: .client, verifiesPeer: verifyPeer, alpn: alpn,
                                 requireALPN: requireALPN)
        try context.applyCommonSettings(minimumVersion: minimumVersion)

        if verifyPeer {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
            if caFile == nil && trustedCertificatesPEM == nil {
                guard SSL_CTX_set_default_verify_paths(ctx) == 1 else {
                    throw OpenSSLErrorQueue.error(.configuration, "cannot load the system CA locations")
                }
            }
            if let caFile {
                guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
                    throw OpenSSLErrorQueue.error(.configuration, "cannot load CA file \(caFile)")
                }
            }
            if let trustedCertificatesPEM {
                try context.addTrustedCertificates(pem: trustedCertificatesPEM)
            }
        } else {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        }

        if !wire.isEmpty {
            // Note the inverted convention: SSL_CTX_set_alpn_protos returns 0 on success.
            let status = wire.withUnsafeBufferPointer { SSL_CTX_set_alpn_protos(ctx, $0.baseAddress, UInt32($0.count)) }
            guard status == 0 else {
                throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_set_alpn_protos failed")
            }
        }
        return context
    }

    /// A server context from a certificate chain PEM file (leaf first, then intermediates) and
    /// a private key PEM file (PKCS#8, or traditional EC/RSA).
    ///
    /// - Parameters:
    ///   - alpn: protocols this server speaks, in its order of preference. The server picks the
    ///     first of these that the client also offered; with none in common the handshake fails
    ///     with the `no_application_protocol` alert.
    ///   - requireALPN: when `alpn` is non-empty, also reject clients that offer no ALPN at all.
    public static func server(
        certificatePEMFile: String,
        keyPEMFile: String,
        alpn: [String] = [],
        requireALPN: Bool = true,
        minimumVersion: TLSVersion = .tls12
    ) throws(TLSError) -> TLSContext {
        let context = try makeServer(alpn: alpn, requireALPN: requireALPN, minimumVersion: minimumVersion)
        let ctx = context.pointer
        OpenSSLErrorQueue.clear()
        guard SSL_CTX_use_certificate_chain_file(ctx, certificatePEMFile) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "cannot load certificate chain \(certificatePEMFile)")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, keyPEMFile, SSL_FILETYPE_PEM) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "cannot load private key file \(keyPEMFile)")
        }
        try context.checkPrivateKey()
        return context
    }

    /// A server context from PEM text: `certificateChainPEM` holds the leaf certificate first,
    /// then any intermediates; `privateKeyPEM` the matching key.
    public static func server(
        certificateChainPEM: String,
        privateKeyPEM: String,
        alpn: [String] = [],
        requireALPN: Bool = true,
        minimumVersion: TLSVersion = .tls12
    ) throws(TLSError) -> TLSContext {
        let context = try makeServer(alpn: alpn, requireALPN: requireALPN, minimumVersion: minimumVersion)
        let ctx = context.pointer
        let certificates = try X509Certificate.readAll(pem: certificateChainPEM)
        guard let leaf = certificates.first else {
            throw TLSError(code: .configuration, message: "no certificate in the certificate PEM")
        }
        OpenSSLErrorQueue.clear()
        guard SSL_CTX_use_certificate(ctx, leaf.pointer) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_use_certificate failed")
        }
        for intermediate in certificates.dropFirst() {
            guard copenssl_SSL_CTX_add1_chain_cert(ctx, intermediate.pointer) == 1 else {
                throw OpenSSLErrorQueue.error(.configuration, "cannot add a chain certificate")
            }
        }
        let key = try PrivateKeyHandle(pem: privateKeyPEM)
        OpenSSLErrorQueue.clear()
        guard SSL_CTX_use_PrivateKey(ctx, key.pointer) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_use_PrivateKey failed")
        }
        try context.checkPrivateKey()
        return context
    }

    // MARK: - Building blocks

    private static func makeServer(alpn: [String], requireALPN: Bool, minimumVersion: TLSVersion) throws(TLSError) -> TLSContext {
        let wire = try alpnWireFormat(alpn)
        OpenSSLErrorQueue.clear()
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_new failed")
        }
        let context = TLSContext(pointer: ctx, role: .server, verifiesPeer: false, alpn: alpn,
                                 requireALPN: requireALPN)
        try context.applyCommonSettings(minimumVersion: minimumVersion)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        if !wire.isEmpty {
            let status = wire.withUnsafeBufferPointer {
                copenssl_SSL_CTX_set_alpn_server_protocols(ctx, $0.baseAddress, UInt32($0.count),
                                                           context.requiresALPN ? 1 : 0)
            }
            guard status == 1 else {
                throw OpenSSLErrorQueue.error(.configuration, "cannot install the ALPN selection callback")
            }
        }
        return context
    }

    private func applyCommonSettings(minimumVersion: TLSVersion) throws(TLSError) {
        guard copenssl_SSL_CTX_set_min_proto_version(pointer, minimumVersion.openSSLValue) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "cannot set minimum version \(minimumVersion)")
        }
        // Partial writes: SSL_write may accept part of the buffer (one record at a time), so a
        // non-blocking writer makes progress without handing OpenSSL megabytes at once.
        // Moving buffer: a retried write may come from a different address holding the same
        // bytes (Swift arrays move).
        _ = copenssl_SSL_CTX_set_mode(pointer, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = copenssl_SSL_CTX_clear_mode(pointer, Int(SSL_MODE_RELEASE_BUFFERS))
        copenssl_SSL_CTX_disable_renegotiation(pointer)
    }

    private func checkPrivateKey() throws(TLSError) {
        OpenSSLErrorQueue.clear()
        guard SSL_CTX_check_private_key(pointer) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "the private key does not match the certificate")
        }
    }

    private func addTrustedCertificates(pem: String) throws(TLSError) {
        let certificates = try X509Certificate.readAll(pem: pem)
        guard !certificates.isEmpty else {
            throw TLSError(code: .configuration, message: "no certificate in the trusted certificates PEM")
        }
        guard let store = SSL_CTX_get_cert_store(pointer) else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_get_cert_store failed")
        }
        for certificate in certificates {
            OpenSSLErrorQueue.clear()
            // X509_STORE_add_cert takes its own reference.
            guard X509_STORE_add_cert(store, certificate.pointer) == 1 else {
                throw OpenSSLErrorQueue.error(.configuration, "cannot add a trusted certificate")
            }
        }
    }

    /// ALPN protocol list in wire format: each name prefixed by its length (1...255 bytes).
    static func alpnWireFormat(_ protocols: [String]) throws(TLSError) -> [UInt8] {
        var wire: [UInt8] = []
        for name in protocols {
            let bytes = Array(name.utf8)
            guard (1...255).contains(bytes.count) else {
                throw TLSError(code: .invalidArgument, message: "ALPN protocol names must be 1 to 255 bytes long")
            }
            wire.append(UInt8(bytes.count))
            wire.append(contentsOf: bytes)
        }
        return wire
    }
}
