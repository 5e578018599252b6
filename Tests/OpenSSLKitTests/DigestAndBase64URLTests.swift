import Foundation
import OpenSSLKit
import Testing

@Suite("Digest, random bytes, Base64URL")
struct DigestAndBase64URLTests {
    @Test("SHA-1 known vectors (FIPS 180 / RFC 3174)", arguments: [
        ("", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        ("abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "84983e441c3bd26ebaae4aa1f95129e5e54670f1"),
        ("The quick brown fox jumps over the lazy dog", "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"),
    ])
    func sha1(input: String, expected: String) {
        #expect(Digest.sha1Hex(input) == expected)
        #expect(Digest.sha1Hex(Array(input.utf8)) == expected)
        #expect(Digest.sha1Hex(input.utf8) == expected)
    }

    @Test("SHA-1 of a million 'a's")
    func sha1Million() {
        #expect(Digest.sha1Hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
                == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    @Test("SHA-1 of a Redis Lua script matches Python's hashlib")
    func sha1MatchesPython() throws {
        let directory = try SSLTestDirectory()
        defer { directory.remove() }
        let script = "return redis.call('XADD', KEYS[1], '*', 'k', ARGV[1]) -- é ✓\n"
        let file = try directory.write("script.lua", script)
        let result = try SSLTestProcess.run(
            ["python3", "-c", "import hashlib,sys; print(hashlib.sha1(open(sys.argv[1],'rb').read()).hexdigest())", file],
            in: directory)
        #expect(result.status == 0)
        #expect(Digest.sha1Hex(script) == result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test("SHA-256 known vectors")
    func sha256() {
        #expect(Digest.sha256Hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Digest.sha256Hex([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Digest.sha256(Array("abc".utf8)).count == 32)
        #expect(Digest.sha256(Array("abc".utf8)).first == 0xba)
    }

    @Test("secure random bytes have the requested length and differ between calls")
    func randomBytes() {
        #expect(secureRandomBytes(0).isEmpty)
        let a = secureRandomBytes(32)
        let b = secureRandomBytes(32)
        #expect(a.count == 32 && b.count == 32)
        #expect(a != b)
        // 4096 random bytes hit most byte values (a stuck generator would not).
        #expect(Set(secureRandomBytes(4096)).count > 200)
    }

    @Test("Base64URL matches RFC 4648 test vectors without padding", arguments: [
        ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
        ("foobar", "Zm9vYmFy"),
    ])
    func base64Vectors(plain: String, encoded: String) {
        #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
    }

    @Test("Base64URL uses - and _ and round-trips every length and byte value")
    func base64RoundTrip() {
        #expect(Base64URL.encode([0xfb, 0xff, 0xbf]) == "-_-_")
        #expect(Base64URL.decode("-_-_") == [0xfb, 0xff, 0xbf])
        let all = (0...255).map { UInt8($0) }
        for length in 0...all.count {
            let bytes = Array(all.prefix(length))
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
        let random = secureRandomBytes(1000)
        #expect(Base64URL.decode(Base64URL.encode(random)) == random)
        // Same as Foundation's base64 with the URL alphabet and no padding.
        let foundation = Data(random).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        #expect(Base64URL.encode(random) == foundation)
    }

    @Test("Base64URL decoding is strict", arguments: [
        "Zg==", "Zm8=", "Zm9v=",  // padding
        "Z", "Zm9vY",             // impossible lengths
        "Zh", "Zm9",              // non-zero unused bits (non-canonical)
        "Zm+v", "Zm/v",           // standard alphabet
        "Zm 9v", "Zm9v\n", " Zm9v", // whitespace
        "Zm9v.", "Zm9v\u{0}", "Zé9v", // other bytes
    ])
    func base64Rejects(input: String) {
        #expect(Base64URL.decode(input) == nil)
    }
}
