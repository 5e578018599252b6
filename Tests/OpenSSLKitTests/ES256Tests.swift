import Foundation
import OpenSSLKit
import Testing

/// ES256 signatures checked against independent implementations: the `openssl` CLI and
/// Python's `cryptography`.
@Suite("ES256")
struct ES256Tests {
    // MARK: Helpers (independent of the library's own DER conversion)

    /// Raw R‖S → DER ECDSA-Sig-Value, written here rather than borrowed from the library.
    static func der(fromRaw raw: [UInt8]) -> [UInt8] {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop(while: { $0 == 0 }))
            if value.isEmpty { value = [0] }
            if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }

    /// DER ECDSA-Sig-Value → raw R‖S (short-form lengths only, as P-256 always has).
    static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        guard der.count > 8, der[0] == 0x30, Int(der[1]) == der.count - 2 else { return nil }
        var index = 2
        var halves: [[UInt8]] = []
        for _ in 0..<2 {
            guard der[index] == 0x02 else { return nil }
            let length = Int(der[index + 1])
            var value = Array(der[(index + 2)..<(index + 2 + length)].drop(while: { $0 == 0 }))
            guard value.count <= 32 else { return nil }
            value = [UInt8](repeating: 0, count: 32 - value.count) + value
            halves.append(value)
            index += 2 + length
        }
        return halves[0] + halves[1]
    }

    static let message = Array(#"eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ.eyJpc3MiOiJERUYxMjM0NTY3IiwiaWF0IjoxNzAwMDAwMDAwfQ"#.utf8)

    // MARK: Tests

    @Test("a generated key's signature is 64 bytes and verifies with openssl dgst")
    func verifiedByOpenSSL() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let key = try ES256PrivateKey.generate()
        let signature = try key.sign(Self.message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verify(signature: signature, message: Self.message))

        let publicKey = try directory.write("pub.pem", key.publicKey.pem())
        let messageFile = try directory.write("msg.bin", bytes: Self.message)
        let signatureFile = try directory.write("sig.der", bytes: Self.der(fromRaw: signature))
        let result = try SSLTestProcess.run([
            "openssl", "dgst", "-sha256", "-verify", publicKey, "-signature", signatureFile, messageFile,
        ], in: directory)
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("Verified OK"))

        // And a tampered message does not verify there either (the check can fail).
        let tamperedFile = try directory.write("tampered.bin", bytes: Self.message + [0x2e])
        let tampered = try SSLTestProcess.run([
            "openssl", "dgst", "-sha256", "-verify", publicKey, "-signature", signatureFile, tamperedFile,
        ], in: directory)
        #expect(tampered.status != 0)
    }

    @Test("many signatures, including ones whose R or S has leading zero bytes, all verify with Python cryptography")
    func verifiedByPythonIncludingLeadingZeros() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let key = try ES256PrivateKey.generate()
        let publicKey = key.publicKey
        var lines: [String] = []
        var leadingZeroHalves = 0
        for index in 0..<1_500 {
            let message = Array("message \(index)".utf8)
            let signature = try key.sign(message)
            try #require(signature.count == 64)
            if signature[0] == 0 || signature[32] == 0 { leadingZeroHalves += 1 }
            #expect(publicKey.verify(signature: signature, message: message))
            lines.append(Digest.hex(message) + " " + Digest.hex(signature))
        }
        // P(no leading zero in 1500 signatures) ≈ e^-11.7: this path really was exercised.
        #expect(leadingZeroHalves > 0)

        try directory.write("pub.pem", publicKey.pem())
        try directory.write("sigs.txt", lines.joined(separator: "\n") + "\n")
        let script = """
        import sys
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils
        from cryptography.exceptions import InvalidSignature
        pub = serialization.load_pem_public_key(open(sys.argv[1], 'rb').read())
        assert isinstance(pub.curve, ec.SECP256R1)
        ok = bad = 0
        for line in open(sys.argv[2]):
            msg, sig = (bytes.fromhex(x) for x in line.split())
            assert len(sig) == 64
            der = utils.encode_dss_signature(int.from_bytes(sig[:32], 'big'), int.from_bytes(sig[32:], 'big'))
            try:
                pub.verify(der, msg, ec.ECDSA(hashes.SHA256()))
                ok += 1
            except InvalidSignature:
                bad += 1
            try:
                pub.verify(der, msg + b'x', ec.ECDSA(hashes.SHA256()))
                bad += 1
            except InvalidSignature:
                pass
        print(f"ok={ok} bad={bad}")
        """
        try directory.write("verify.py", script)
        let result = try SSLTestProcess.run(
            ["python3", directory.path("verify.py"), directory.path("pub.pem"), directory.path("sigs.txt")],
            in: directory)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("ok=1500 bad=0"), "\(result.stdout) \(result.stderr)")
    }

    @Test("a .p8-style key from openssl genpkey loads, signs for openssl and Python, and verifies their signatures")
    func opensslGeneratedPKCS8Key() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let keyFile = directory.path("AuthKey_TEST.p8")
        let pubFile = directory.path("pub.pem")
        let generated = try SSLTestProcess.run([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile,
        ], in: directory)
        try #require(generated.status == 0, "\(generated.stderr)")
        let derived = try SSLTestProcess.run(["openssl", "pkey", "-in", keyFile, "-pubout", "-out", pubFile], in: directory)
        try #require(derived.status == 0, "\(derived.stderr)")
        let keyText = try String(contentsOfFile: keyFile, encoding: .utf8)
        try #require(keyText.hasPrefix("-----BEGIN PRIVATE KEY-----"))

        let key = try ES256PrivateKey(pemFile: keyFile)
        let publicKey = try ES256PublicKey(pem: try String(contentsOfFile: pubFile, encoding: .utf8))
        // The public key we derive is the one openssl derives.
        #expect(key.publicKey.pem() == publicKey.pem())

        // Our signature verifies with openssl.
        let messageFile = try directory.write("msg.bin", bytes: Self.message)
        let ours = try key.sign(Self.message)
        let oursFile = try directory.write("ours.der", bytes: Self.der(fromRaw: ours))
        let check = try SSLTestProcess.run([
            "openssl", "dgst", "-sha256", "-verify", pubFile, "-signature", oursFile, messageFile,
        ], in: directory)
        #expect(check.status == 0 && check.stdout.contains("Verified OK"), "\(check.stdout) \(check.stderr)")

        // openssl's signature (DER) verifies with us after conversion to R‖S.
        let theirsFile = directory.path("theirs.der")
        let signed = try SSLTestProcess.run([
            "openssl", "dgst", "-sha256", "-sign", keyFile, "-out", theirsFile, messageFile,
        ], in: directory)
        try #require(signed.status == 0, "\(signed.stderr)")
        let theirsDER = Array(try Data(contentsOf: URL(fileURLWithPath: theirsFile)))
        let theirs = try #require(Self.raw(fromDER: theirsDER))
        #expect(publicKey.verify(signature: theirs, message: Self.message))
        #expect(!publicKey.verify(signature: theirs, message: Self.message + [0]))

        // Python signs with the same .p8 and converts to raw itself.
        let script = """
        import sys
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils
        key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), password=None)
        msg = open(sys.argv[2], 'rb').read()
        r, s = utils.decode_dss_signature(key.sign(msg, ec.ECDSA(hashes.SHA256())))
        print((r.to_bytes(32, 'big') + s.to_bytes(32, 'big')).hex())
        """
        try directory.write("sign.py", script)
        let python = try SSLTestProcess.run(["python3", directory.path("sign.py"), keyFile, messageFile], in: directory)
        try #require(python.status == 0, "\(python.stderr)")
        let pythonSignature = try #require(hexBytes(python.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(pythonSignature.count == 64)
        #expect(publicKey.verify(signature: pythonSignature, message: Self.message))
        #expect(key.publicKey.verify(signature: pythonSignature, message: Self.message))
    }

    @Test("a SEC1 'BEGIN EC PRIVATE KEY' key loads and signs verifiably")
    func sec1Key() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let sec1File = directory.path("key.sec1.pem")
        let made = try SSLTestProcess.run([
            "openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", sec1File,
        ], in: directory)
        try #require(made.status == 0, "\(made.stderr)")
        let text = try String(contentsOfFile: sec1File, encoding: .utf8)
        try #require(text.hasPrefix("-----BEGIN EC PRIVATE KEY-----"))
        let key = try ES256PrivateKey(pem: text)
        let signature = try key.sign(Self.message)
        #expect(key.publicKey.verify(signature: signature, message: Self.message))
        // Re-exported as PKCS#8, it is the same key.
        let pkcs8 = try key.pkcs8PEM()
        #expect(pkcs8.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reloaded = try ES256PrivateKey(pem: pkcs8)
        #expect(reloaded.publicKey.pem() == key.publicKey.pem())
        #expect(key.publicKey.verify(signature: try reloaded.sign(Self.message), message: Self.message))
    }

    @Test("tampered messages and signatures, wrong lengths and wrong keys are rejected")
    func rejections() throws {
        let key = try ES256PrivateKey.generate()
        let publicKey = key.publicKey
        let signature = try key.sign(Self.message)
        #expect(publicKey.verify(signature: signature, message: Self.message))

        var flippedMessage = Self.message
        flippedMessage[5] ^= 0x01
        #expect(!publicKey.verify(signature: signature, message: flippedMessage))
        for index in [0, 31, 32, 63] {
            var flipped = signature
            flipped[index] ^= 0x80
            #expect(!publicKey.verify(signature: flipped, message: Self.message))
        }
        #expect(!publicKey.verify(signature: Array(signature.prefix(63)), message: Self.message))
        #expect(!publicKey.verify(signature: signature + [0], message: Self.message))
        #expect(!publicKey.verify(signature: [], message: Self.message))
        #expect(!publicKey.verify(signature: [UInt8](repeating: 0, count: 64), message: Self.message))
        #expect(!publicKey.verify(signature: [UInt8](repeating: 0xff, count: 64), message: Self.message))
        // DER is not accepted where raw R‖S is expected.
        #expect(!publicKey.verify(signature: Self.der(fromRaw: signature), message: Self.message))
        // Another key's signature does not verify.
        let other = try ES256PrivateKey.generate()
        #expect(!publicKey.verify(signature: try other.sign(Self.message), message: Self.message))
        // Empty messages sign and verify too.
        let emptySignature = try key.sign([])
        #expect(publicKey.verify(signature: emptySignature, message: []))
        #expect(!publicKey.verify(signature: emptySignature, message: [0]))
    }

    @Test("bad key input is refused without echoing key material")
    func badKeys() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        // Not PEM at all.
        #expect(throws: TLSError.self) { _ = try ES256PrivateKey(pem: "not a key") }
        // A P-384 key is not an ES256 key.
        let p384File = directory.path("p384.pem")
        let made = try SSLTestProcess.run([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", p384File,
        ], in: directory)
        try #require(made.status == 0)
        let p384 = try String(contentsOfFile: p384File, encoding: .utf8)
        let p384ErrorCaught = caughtTLSError { () throws(TLSError) in _ = try ES256PrivateKey(pem: p384) }
        let p384Error = try #require(p384ErrorCaught, "a P-384 key was accepted")
        #expect(p384Error.code == .invalidKey)
        // A corrupted key: the error must not contain any of the PEM body.
        let valid = try ES256PrivateKey.generate().pkcs8PEM()
        var lines = valid.split(separator: "\n").map(String.init)
        let body = lines[1]
        lines[1] = String(body.reversed())
        let corrupted = lines.joined(separator: "\n")
        let errorCaught = caughtTLSError { () throws(TLSError) in _ = try ES256PrivateKey(pem: corrupted) }
        let error = try #require(errorCaught, "a corrupted key was accepted")
        #expect(error.code == .invalidKey)
        let text = error.description + error.openSSLErrors.joined()
        #expect(!text.contains(body.prefix(16)))
        #expect(!text.contains(String(body.reversed()).prefix(16)))
        #expect(throws: TLSError.self) { _ = try ES256PrivateKey(pemFile: directory.path("missing.p8")) }
        #expect(throws: TLSError.self) { _ = try ES256PublicKey(pem: valid) }
        // An RSA public key is not a P-256 key.
        let rsaFile = directory.path("rsa.pem")
        let rsaPub = directory.path("rsa.pub")
        let rsa = try SSLTestProcess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024",
                                          "-out", rsaFile], in: directory)
        try #require(rsa.status == 0)
        try #require(try SSLTestProcess.run(["openssl", "pkey", "-in", rsaFile, "-pubout", "-out", rsaPub], in: directory).status == 0)
        #expect(throws: TLSError.self) { _ = try ES256PublicKey(pem: try String(contentsOfFile: rsaPub, encoding: .utf8)) }
        #expect(throws: TLSError.self) { _ = try ES256PrivateKey(pemFile: rsaFile) }
    }

    @Test("one key signs concurrently from many tasks")
    func concurrentSigning() async throws {
        let key = try ES256PrivateKey.generate()
        let publicKey = key.publicKey
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var allValid = true
                    for index in 0..<200 {
                        let message = Array("task \(task) message \(index)".utf8)
                        let signature = try key.sign(message)
                        allValid = allValid && signature.count == 64
                            && publicKey.verify(signature: signature, message: message)
                    }
                    return allValid
                }
            }
            var all: [Bool] = []
            for try await result in group { all.append(result) }
            return all
        }
        #expect(results.count == 8)
        #expect(results.allSatisfy { $0 })
    }

    @Test("a JWT signed here verifies with Python cryptography")
    func jwtRoundTrip() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let key = try ES256PrivateKey.generate()
        let header = Base64URL.encode(#"{"alg":"ES256","kid":"ABC1234567"}"#)
        let claims = Base64URL.encode(#"{"iss":"DEF1234567","iat":1700000000}"#)
        let signingInput = header + "." + claims
        let signature = try key.sign(Array(signingInput.utf8))
        let jwt = signingInput + "." + Base64URL.encode(signature)

        try directory.write("pub.pem", key.publicKey.pem())
        let script = """
        import sys, base64, json
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils
        def b64(s): return base64.urlsafe_b64decode(s + '=' * (-len(s) % 4))
        h, c, s = sys.argv[2].split('.')
        sig = b64(s)
        assert len(sig) == 64
        pub = serialization.load_pem_public_key(open(sys.argv[1], 'rb').read())
        der = utils.encode_dss_signature(int.from_bytes(sig[:32], 'big'), int.from_bytes(sig[32:], 'big'))
        pub.verify(der, (h + '.' + c).encode(), ec.ECDSA(hashes.SHA256()))
        print(json.loads(b64(h))['alg'], json.loads(b64(c))['iss'])
        """
        try directory.write("jwt.py", script)
        let result = try SSLTestProcess.run(["python3", directory.path("jwt.py"), directory.path("pub.pem"), jwt],
                                            in: directory)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "ES256 DEF1234567")
    }
}

private func hexBytes(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    var index = 0
    while index < digits.count {
        guard let byte = UInt8(String(decoding: digits[index..<(index + 2)], as: UTF8.self), radix: 16) else {
            return nil
        }
        bytes.append(byte)
        index += 2
    }
    return bytes
}
