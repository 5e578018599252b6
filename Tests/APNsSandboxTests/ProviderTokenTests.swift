import ActivityCastCore
import APNsCore
import APNsSandbox
import OpenSSLKit
import Testing

/// Provider tokens, with real keys and the project's own signer.
@Suite struct ProviderTokenTests {
    let f: Fixture
    init() throws { f = try Fixture() }

    private func push(_ s: SandboxState, authorization: String?, at: Int64 = Fixture.now, connection: UInt64 = 1,
                      timestamp: Int64 = 100) throws -> SandboxResponse {
        var h = try f.deviceHeaders()
        if let authorization { h.set("authorization", authorization) } else { h.remove("authorization") }
        return s.handle(try f.devicePush(headers: h, body: update(timestamp: timestamp), connection: connection), nowMillis: at)
    }

    @Test func aValidTokenIsVerifiedOnceAndCached() throws {
        let s = f.sandbox()
        let auth = try f.bearer()
        for i in 0..<50 {
            #expect(try push(s, authorization: auth, connection: UInt64(i % 5)).status == 200)
        }
        #expect(s.stats.tokenVerifications == 1)
        #expect(s.stats.delivered == 50)
    }

    @Test func ageLimitsAndClockSkew() throws {
        let s = f.sandbox()
        #expect(try push(s, authorization: try f.bearer(ageSeconds: 3599), connection: 1).status == 200)
        #expect(try push(s, authorization: try f.bearer(ageSeconds: 3600), connection: 2).status == 200)
        #expect(try push(s, authorization: try f.bearer(ageSeconds: 3601), connection: 3).reason == "ExpiredProviderToken")
        // The same cached token expires as time passes.
        let auth = try f.bearer(ageSeconds: 0)
        #expect(try push(s, authorization: auth, connection: 4).status == 200)
        #expect(try push(s, authorization: auth, at: Fixture.now + 3_601_000, connection: 4).reason == "ExpiredProviderToken")
        // Issued in the future: a little skew is tolerated, more is invalid.
        #expect(try push(s, authorization: try f.bearer(ageSeconds: -30), connection: 5).status == 200)
        #expect(try push(s, authorization: try f.bearer(ageSeconds: -120), connection: 6).reason == "InvalidProviderToken")
        // A properly signed but absurd iat is invalid (and doesn't overflow anything).
        for iat in [Int64.max / 10, Int64.min / 10, -1] {
            let absurd = "bearer " + (try f.signer.token(issuedAt: iat).value)
            let r = try push(s, authorization: absurd, connection: 7)
            #expect(r.status == 403, "iat \(iat)")
        }
    }

    @Test func wrongKeyIDTeamSignatureOrAlgorithmAreInvalid() throws {
        let s = f.sandbox()
        // A kid the sandbox doesn't know.
        let unknownKid = ProviderTokenSigner(key: f.key, identity: try ProviderIdentity(keyID: "UNKNOWN123", teamID: Fixture.teamID))
        #expect(try push(s, authorization: try f.bearer(signer: unknownKid)).reason == "InvalidProviderToken")
        // Another team.
        let otherTeam = ProviderTokenSigner(key: f.key, identity: try ProviderIdentity(keyID: Fixture.keyID, teamID: "OTHERTEAM1"))
        #expect(try push(s, authorization: try f.bearer(signer: otherTeam)).reason == "InvalidProviderToken")
        // Our kid and team, but signed with another key.
        let impostor = ProviderTokenSigner(key: try ES256PrivateKey.generate(),
                                           identity: try ProviderIdentity(keyID: Fixture.keyID, teamID: Fixture.teamID))
        #expect(try push(s, authorization: try f.bearer(signer: impostor)).reason == "InvalidProviderToken")

        let good = try f.signer.token(issuedAt: Fixture.now / 1000 - 60).value
        let parts = good.split(separator: ".").map(String.init)
        // A flipped signature bit.
        var signature = Base64URL.decode(parts[2])!
        signature[10] ^= 0x01
        #expect(try push(s, authorization: "bearer \(parts[0]).\(parts[1]).\(Base64URL.encode(signature))").reason == "InvalidProviderToken")
        // Claims changed after signing (a later iat).
        let forgedClaims = Base64URL.encode(#"{"iss":"\#(Fixture.teamID)","iat":\#(Fixture.now / 1000)}"#)
        #expect(try push(s, authorization: "bearer \(parts[0]).\(forgedClaims).\(parts[2])").reason == "InvalidProviderToken")
        // alg other than ES256, even with a valid ES256 signature over the new header.
        let hs256 = Base64URL.encode(#"{"alg":"HS256","kid":"\#(Fixture.keyID)"}"#)
        let input = Array("\(hs256).\(parts[1])".utf8)
        let sig = Base64URL.encode(try f.key.sign(input))
        #expect(try push(s, authorization: "bearer \(hs256).\(parts[1]).\(sig)").reason == "InvalidProviderToken")
        // Not a bearer token, or not a JWT.
        #expect(try push(s, authorization: "basic \(good)").reason == "InvalidProviderToken")
        #expect(try push(s, authorization: "bearer \(good)x").reason == "InvalidProviderToken")
        #expect(try push(s, authorization: "bearer").reason == "InvalidProviderToken")
        // Missing or empty.
        #expect(try push(s, authorization: nil).reason == "MissingProviderToken")
        #expect(try push(s, authorization: "").reason == "MissingProviderToken")
        // And the genuine one still works; the scheme is case-insensitive.
        #expect(try push(s, authorization: "Bearer \(good)").status == 200)
        #expect(s.stats.rejected == 11)
    }

    @Test func invalidVerdictsAreCachedToo() throws {
        let s = f.sandbox()
        for _ in 0..<20 { #expect(try push(s, authorization: "bearer a.b.c").reason == "InvalidProviderToken") }
        #expect(s.stats.tokenVerifications == 1)
    }

    @Test func theCacheIsBounded() throws {
        let s = f.sandbox { $0.tokenCacheCapacity = 2 }
        let tokens = try (0..<3).map { try f.bearer(ageSeconds: Int64(100 + $0)) }
        // Three tokens through a cache of two: each new one is verified; the first again after eviction.
        for (i, t) in tokens.enumerated() { #expect(try push(s, authorization: t, connection: UInt64(10 + i)).status == 200) }
        #expect(try push(s, authorization: tokens[0], connection: 20).status == 200)
        #expect(s.stats.tokenVerifications == 4)
    }

    @Test func tooFrequentTokenChangesOnOneConnection() throws {
        let s = f.sandbox()
        let t0 = Fixture.now
        let a = try f.bearer(ageSeconds: 1500), b = try f.bearer(ageSeconds: 60), c = try f.bearer(ageSeconds: 30)
        #expect(try push(s, authorization: a, at: t0).status == 200)
        // A connection may switch at once from a token it started with (the first change)…
        #expect(try push(s, authorization: b, at: t0 + 1000).status == 200)
        // …but not again within 20 minutes of that change; the refused token isn't adopted.
        #expect(try push(s, authorization: c, at: t0 + 60_000).reason == "TooManyProviderTokenUpdates")
        #expect(try push(s, authorization: c, at: t0 + 60_000).status == 429)
        #expect(try push(s, authorization: b, at: t0 + 61_000).status == 200)
        // Going back to an earlier token is a change too.
        #expect(try push(s, authorization: a, at: t0 + 62_000).reason == "TooManyProviderTokenUpdates")
        // Other connections are not affected.
        #expect(try push(s, authorization: c, at: t0 + 62_000, connection: 2).status == 200)
        // 20 minutes after the change, the next one is fine.
        #expect(try push(s, authorization: c, at: t0 + 1000 + 20 * 60_000).status == 200)
        // A closed connection's history is forgotten.
        s.connectionClosed(1)
        #expect(try push(s, authorization: b, at: t0 + 1001 + 20 * 60_000).status == 200)
    }

    @Test func aConnectionKeepsToTheKeyOfItsFirstToken() throws {
        let otherKey = try ES256PrivateKey.generate()
        let other = ProviderTokenSigner(key: otherKey, identity: try ProviderIdentity(keyID: "KEY7654321", teamID: Fixture.teamID))
        let s = f.sandbox { $0.keys["KEY7654321"] = otherKey.publicKey }
        #expect(try push(s, authorization: try f.bearer(signer: other), connection: 1).status == 200)
        #expect(try push(s, authorization: try f.bearer(), connection: 2).status == 200)
        #expect(try push(s, authorization: try f.bearer(), connection: 1).reason == "UnrelatedKeyIdInToken")
    }

    @Test func keyRestrictions() throws {
        let s = f.sandbox {
            $0.bundleIDs = [Fixture.bundle, "com.example.other"]
            $0.keyRestrictions = [Fixture.keyID: .init(environment: .development, bundleIDs: [Fixture.bundle])]
        }
        #expect(try push(s, authorization: try f.bearer()).status == 200)
        let h = try f.deviceHeaders().with("apns-topic", "com.example.other.push-type.liveactivity")
        let r = s.handle(try f.devicePush(token: String(repeating: "cd", count: 32), headers: h), nowMillis: Fixture.now)
        #expect(r.status == 403 && r.reason == "Forbidden")
    }

    @Test func theFirstValidTokenRaisesTheStreamLimit() throws {
        let s = f.sandbox { $0.maxConcurrentStreams = 1200 }
        #expect(try push(s, authorization: nil).maxConcurrentStreams == nil)
        let first = try push(s, authorization: try f.bearer())
        #expect(first.status == 200 && first.maxConcurrentStreams == 1200)
        #expect(try push(s, authorization: try f.bearer(), timestamp: 101).maxConcurrentStreams == nil)
        #expect(s.configuration.streamsBeforeAuthentication == 1)
    }
}
