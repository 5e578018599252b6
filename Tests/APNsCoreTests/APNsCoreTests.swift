import ActivityCastCore
import APNsCore
import Foundation
import OpenSSLKit
import Testing
import TestSupport

@Suite struct APNsReasonTests {
    @Test func everyReasonRoundTripsAndHasItsStatus() {
        #expect(APNsReason.allKnown.count == 40)
        for reason in APNsReason.allKnown {
            #expect(APNsReason(rawValue: reason.rawValue) == reason)
        }
        #expect(APNsReason(rawValue: "SomethingNew") == .unknown("SomethingNew"))
        #expect(APNsReason.unregistered.status == 410 && APNsReason.expiredProviderToken.status == 403)
        #expect(APNsReason.tooManyRequests.status == 429 && APNsReason.shutdown.status == 503 && APNsReason.badPath.status == 404)
    }

    @Test func actionsFollowApplesRules() {
        #expect(APNsReason.unregistered.action(timestampMillis: 1700000000000) == .forgetToken(invalidSince: 1700000000000))
        #expect(APNsReason.expiredToken.action() == .forgetToken(invalidSince: nil))
        #expect(APNsReason.badDeviceToken.action() == .forgetToken(invalidSince: nil))
        #expect(APNsReason.deviceTokenNotForTopic.action() == .forgetToken(invalidSince: nil))
        #expect(APNsReason.expiredProviderToken.action() == .refreshProviderToken)
        #expect(APNsReason.invalidProviderToken.action() == .refreshProviderToken)
        #expect(APNsReason.tooManyProviderTokenUpdates.action() == .retryAfter(.seconds(60)))
        #expect(APNsReason.tooManyRequests.action(retryAfter: .seconds(7)) == .retryAfter(.seconds(7)))
        for r in [APNsReason.internalServerError, .serviceUnavailable, .shutdown, .idleTimeout] {
            #expect(r.action() == .retryWithBackoff)
        }
        // Our credentials refused: the request waits for them (no refresh can mend a key or team).
        for r in [APNsReason.unrelatedKeyIdInToken, .badCertificate, .badCertificateEnvironment] {
            #expect(r.action() == .retryWithBackoff)
        }
        // Every 403 but Forbidden (an action not allowed) and a key limited to the other
        // environment (a setting, not a fault) refuses the credentials, nothing else does.
        #expect(APNsReason.allKnown.filter(\.refusesCredentials)
                == APNsReason.allKnown.filter { $0.status == 403 && $0 != .forbidden && $0 != .badEnvironmentKeyIdInToken })
        // Never retried.
        for r in [APNsReason.forbidden, .badEnvironmentKeyIdInToken, .payloadTooLarge, .badTopic, .topicDisallowed, .badExpirationDate, .badChannelId, .unknown("X")] {
            #expect(r.action() == .fail)
        }
    }

    @Test func responsesDecideByReasonThenStatus() {
        let (reason, ts) = APNsResponse.parseErrorBody(Array(#"{"reason":"Unregistered","timestamp":1732233600123}"#.utf8))
        #expect(reason == .unregistered && ts == 1732233600123)
        #expect(APNsResponse(status: 410, reason: reason, timestampMillis: ts).action == .forgetToken(invalidSince: 1732233600123))
        #expect(APNsResponse(status: 200).action == .delivered)
        #expect(APNsResponse(status: 201).action == .delivered)
        #expect(APNsResponse(status: 502).action == .retryWithBackoff)
        #expect(APNsResponse(status: 429).action == .retryAfter(.seconds(1)))
        // A reason Apple doesn't document (yet): its status decides.
        #expect(APNsResponse(status: 503, reason: .unknown("Maintenance")).action == .retryWithBackoff)
        #expect(APNsResponse(status: 429, reason: .unknown("SlowDown"), retryAfter: .seconds(3)).action == .retryAfter(.seconds(3)))
        #expect(APNsResponse(status: 410, reason: .unknown("Gone"), timestampMillis: 5).action == .forgetToken(invalidSince: 5))
        #expect(APNsResponse(status: 400, reason: .unknown("BadThing")).action == .fail)
        #expect(APNsResponse.parseErrorBody(Array("not json".utf8)).reason == nil)
        #expect(APNsResponse.parseErrorBody(Array(#"{ "reason" : "Bad\"Path" }"#.utf8)).reason == .unknown("Bad\"Path"))
    }
}

@Suite struct ProviderTokenTests {
    @Test func identitiesAreValidated() {
        #expect(throws: ProviderIdentity.Invalid.self) { try ProviderIdentity(keyID: "short", teamID: "ABCDE12345") }
        #expect(throws: ProviderIdentity.Invalid.self) { try ProviderIdentity(keyID: "ABCDE12345", teamID: "abcde12345") }
        #expect((try? ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456")) != nil)
    }

    /// The JWT is checked by independent implementations: the openssl command and Python's
    /// `cryptography`, against a `.p8`-style PKCS#8 key made by openssl.
    @Test func tokensVerifyWithOpenSSLAndPython() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let keyPath = dir.path + "/AuthKey.p8"
        try run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyPath])
        try run("/usr/bin/openssl", ["pkey", "-in", keyPath, "-pubout", "-out", dir.path + "/pub.pem"])
        let signer = try ProviderTokenSigner.load(pemFile: keyPath, pem: nil, identity: try ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456"))
        #expect(!signer.description.contains("PRIVATE"))
        let token = try signer.token(issuedAt: 1_732_233_600)
        let parts = token.value.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[0])))) as? [String: Any]
        let claims = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[1])))) as? [String: Any]
        #expect(header?["alg"] as? String == "ES256" && header?["kid"] as? String == "ABCDE12345")
        #expect(claims?["iss"] as? String == "TEAM123456" && (claims?["iat"] as? NSNumber)?.int64Value == 1_732_233_600)

        let raw = try #require(Base64URL.decode(parts[2]))
        #expect(raw.count == 64)
        // openssl wants DER: build it from R and S.
        try Data(derSignature(raw)).write(to: URL(fileURLWithPath: dir.path + "/sig.der"))
        try Data((parts[0] + "." + parts[1]).utf8).write(to: URL(fileURLWithPath: dir.path + "/input"))
        try run("/usr/bin/openssl", ["dgst", "-sha256", "-verify", dir.path + "/pub.pem", "-signature", dir.path + "/sig.der", dir.path + "/input"])

        let python = """
        import sys, base64
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils
        tok = sys.argv[1]; h, c, s = tok.split('.')
        pad = lambda x: x + '=' * (-len(x) % 4)
        sig = base64.urlsafe_b64decode(pad(s))
        key = serialization.load_pem_public_key(open(sys.argv[2], 'rb').read())
        key.verify(utils.encode_dss_signature(int.from_bytes(sig[:32], 'big'), int.from_bytes(sig[32:], 'big')), (h + '.' + c).encode(), ec.ECDSA(hashes.SHA256()))
        print('ok')
        """
        try run("/usr/bin/env", ["python3", "-c", python, token.value, dir.path + "/pub.pem"])
        // A tampered token fails the same check.
        #expect(throws: (any Error).self) { try run("/usr/bin/env", ["python3", "-c", python, parts[0] + "." + parts[1] + "x." + parts[2], dir.path + "/pub.pem"]) }

        let decoded = try #require(DecodedJWT(token.value))
        #expect(decoded.keyID == "ABCDE12345" && decoded.issuer == "TEAM123456" && decoded.issuedAt == 1_732_233_600)
        let pub = try ES256PublicKey(pem: try String(contentsOfFile: dir.path + "/pub.pem", encoding: .utf8))
        #expect(pub.verify(signature: decoded.signature, message: decoded.signingInput))
    }

    @Test func aMissingOrBrokenKeyIsAClearErrorWithoutKeyBytes() {
        let id = try! ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456")
        #expect(throws: ProviderIdentity.Invalid.self) { try ProviderTokenSigner.load(pemFile: nil, pem: nil, identity: id) }
        let secretish = "-----BEGIN PRIVATE KEY-----\nTUlJQ0lUSVNBU0VDUkVU\n-----END PRIVATE KEY-----\n"
        #expect {
            try ProviderTokenSigner.load(pemFile: nil, pem: secretish, identity: id)
        } throws: { error in
            !"\(error)".contains("TUlJQ0lUSVNBU0VDUkVU")
        }
    }
}

@Suite struct PayloadTests {
    @Test func updateAndStartUseApplesKeys() throws {
        let update = LiveActivityPayload(event: .update, timestamp: 1_732_233_600, contentState: ["homeScore": 1, "awayScore": 0],
                                         staleDate: 1_732_234_500, alert: .init(title: "Goal!", body: "Saka scores"))
        let json = try JSONSerialization.jsonObject(with: Data(update.encoded())) as? [String: Any]
        let aps = try #require(json?["aps"] as? [String: Any])
        #expect(aps["event"] as? String == "update" && (aps["timestamp"] as? NSNumber)?.int64Value == 1_732_233_600)
        #expect((aps["content-state"] as? [String: Any])?["homeScore"] as? Int == 1)
        #expect((aps["stale-date"] as? NSNumber)?.int64Value == 1_732_234_500)
        #expect((aps["alert"] as? [String: Any])?["title"] as? String == "Goal!")
        #expect(aps["attributes-type"] == nil && aps["input-push-token"] == nil)

        let start = LiveActivityPayload(event: .start, timestamp: 1, contentState: [:], alert: .init(title: "Kick-off", body: "ARS v CHE"),
                                        attributesType: "MatchActivityAttributes", attributes: ["home": "ars"], inputPushToken: true,
                                        inputPushChannel: "dHN0LWNoYW5uZWw=")
        let s = try #require((try JSONSerialization.jsonObject(with: Data(start.encoded())) as? [String: Any])?["aps"] as? [String: Any])
        #expect(s["attributes-type"] as? String == "MatchActivityAttributes" && (s["attributes"] as? [String: Any])?["home"] as? String == "ars")
        #expect(s["input-push-token"] as? Int == 1 && s["input-push-channel"] as? String == "dHN0LWNoYW5uZWw=")
    }
}

/// DER `SEQUENCE { INTEGER r, INTEGER s }` from raw R‖S, as openssl expects.
func derSignature(_ raw: [UInt8]) -> [UInt8] {
    func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var b = Array(bytes.drop { $0 == 0 })
        if b.isEmpty { b = [0] }
        if b[0] & 0x80 != 0 { b.insert(0, at: 0) }
        return [0x02, UInt8(b.count)] + b
    }
    let body = integer(raw[0..<32]) + integer(raw[32..<64])
    return [0x30, UInt8(body.count)] + body
}

/// Runs a command to completion; throws if it exits non-zero.
func run(_ executable: String, _ arguments: [String]) throws {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else { throw RedisServerError(description: "\(executable) \(arguments.first ?? "") exited \(p.terminationStatus)") }
}

/// A signing key that can't be loaded is named by the setting it came from (issue 40).
@Suite struct SigningKeySourceTests {
    @Test func aBadKeyIsNamedByItsSettingAndTheTextWinsOverTheFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ac-keys-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("AuthKey_ABCDE12345.p8").path
        try ES256PrivateKey.generate().pkcs8PEM().write(toFile: file, atomically: true, encoding: .utf8)
        let identity = try ProviderIdentity(keyID: "ABCDE12345", teamID: "TEAM123456")
        // A valid file alone loads.
        _ = try ProviderTokenSigner.load(pemFile: file, pem: nil, identity: identity)
        // Bogus text beside it: the text was read (it wins), and the error says so.
        do {
            _ = try ProviderTokenSigner.load(pemFile: file, pem: "bogus", identity: identity)
            Issue.record("a bogus key loaded")
        } catch {
            let message = "\(error)"
            #expect(message.contains("from apns.key (ACTIVITYCAST_APNS_KEY), the key's PEM text"), "\(message)")
            #expect(message.contains("it wins over apns.key_file (ACTIVITYCAST_APNS_KEY_FILE) (\(file)), which was not read"), "\(message)")
            #expect(!message.contains("bogus"), "the key's text is never shown")
        }
        // A bad file alone names the file's setting.
        do {
            _ = try ProviderTokenSigner.load(pemFile: dir.appendingPathComponent("missing.p8").path, pem: nil, identity: identity)
            Issue.record("a missing file loaded")
        } catch {
            #expect("\(error)".contains("from apns.key_file (ACTIVITYCAST_APNS_KEY_FILE) ("), "\(error)")
        }
    }
}
