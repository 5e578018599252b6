import Foundation
import OpenSSLKit
import Testing

@Suite("SelfSignedCertificate")
struct SelfSignedCertificateTests {
    @Test("openssl verifies the certificate against itself and sees the names, key and extensions")
    func inspectedByOpenSSL() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let generated = try SelfSignedCertificate.generate(
            commonName: "ActivityCast sandbox", dnsNames: ["localhost", "sandbox.test"],
            ipAddresses: ["127.0.0.1", "::1"], days: 7)
        #expect(generated.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
        #expect(generated.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let certificate = try directory.write("cert.pem", generated.certificatePEM)
        let key = try directory.write("key.pem", generated.privateKeyPEM)

        let verify = try SSLTestProcess.run([
            "openssl", "verify", "-CAfile", certificate, "-purpose", "sslserver", "-verify_hostname", "sandbox.test",
            certificate,
        ], in: directory)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stdout.contains("OK"))

        let text = try SSLTestProcess.run(["openssl", "x509", "-in", certificate, "-noout", "-text"], in: directory)
        try #require(text.status == 0)
        let out = text.stdout
        #expect(out.contains("Version: 3"))
        #expect(out.contains("Subject: CN = ActivityCast sandbox"))
        #expect(out.contains("Issuer: CN = ActivityCast sandbox"))
        #expect(out.contains("ecdsa-with-SHA256"))
        #expect(out.contains("prime256v1") || out.contains("P-256"))
        #expect(out.contains("DNS:localhost, DNS:sandbox.test, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1"), "\(out)")
        #expect(out.contains("CA:FALSE"))
        #expect(out.contains("TLS Web Server Authentication"))

        // The key belongs to the certificate (same public key).
        let fromCert = try SSLTestProcess.run(["openssl", "x509", "-in", certificate, "-noout", "-pubkey"], in: directory)
        let fromKey = try SSLTestProcess.run(["openssl", "pkey", "-in", key, "-pubout"], in: directory)
        #expect(fromCert.status == 0 && fromKey.status == 0)
        #expect(fromCert.stdout == fromKey.stdout)
        #expect(try ES256PrivateKey(pem: generated.privateKeyPEM).publicKey.pem() == fromKey.stdout)

        // Validity: about `days` days from now.
        let dates = try SSLTestProcess.run(["openssl", "x509", "-in", certificate, "-noout", "-checkend", "\(6 * 86_400)"],
                                           in: directory)
        #expect(dates.status == 0)
        let expiring = try SSLTestProcess.run(["openssl", "x509", "-in", certificate, "-noout", "-checkend", "\(8 * 86_400)"],
                                              in: directory)
        #expect(expiring.status != 0)
    }

    @Test("Python cryptography parses the certificate; serials are random and positive")
    func parsedByPython() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let first = try SelfSignedCertificate.generate(commonName: "a", dnsNames: ["localhost"], ipAddresses: [], days: 1)
        let second = try SelfSignedCertificate.generate(commonName: "a", dnsNames: ["localhost"], ipAddresses: [], days: 1)
        try directory.write("first.pem", first.certificatePEM)
        try directory.write("second.pem", second.certificatePEM)
        let script = """
        import sys
        from cryptography import x509
        serials = []
        for path in sys.argv[1:]:
            cert = x509.load_pem_x509_certificate(open(path, 'rb').read())
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert san.get_values_for_type(x509.DNSName) == ['localhost'], san
            bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
            assert bc.critical and not bc.value.ca
            assert cert.serial_number > 0
            serials.append(cert.serial_number)
        assert len(set(serials)) == len(serials)
        print("ok")
        """
        try directory.write("check.py", script)
        let result = try SSLTestProcess.run(
            ["python3", directory.path("check.py"), directory.path("first.pem"), directory.path("second.pem")],
            in: directory)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("ok"))
    }

    @Test("names that could inject subjectAltName entries are refused")
    func refusesBadNames() {
        #expect(throws: TLSError.self) {
            _ = try SelfSignedCertificate.generate(commonName: "x", dnsNames: ["a,IP:1.2.3.4"], ipAddresses: [], days: 1)
        }
        #expect(throws: TLSError.self) {
            _ = try SelfSignedCertificate.generate(commonName: "x", dnsNames: [], ipAddresses: ["not-an-ip"], days: 1)
        }
        #expect(throws: TLSError.self) {
            _ = try SelfSignedCertificate.generate(commonName: "x", dnsNames: ["localhost"], ipAddresses: [], days: 0)
        }
        #expect(throws: TLSError.self) {
            _ = try SelfSignedCertificate.generate(commonName: "", dnsNames: ["localhost"], ipAddresses: [], days: 1)
        }
    }
}
