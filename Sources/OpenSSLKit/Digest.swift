internal import COpenSSL

/// One-shot message digests (OpenSSL EVP).
public enum Digest {
    /// SHA-1 as 40 lowercase hex digits (what Redis EVALSHA/SCRIPT LOAD use).
    public static func sha1Hex(_ bytes: some Sequence<UInt8>) -> String {
        hex(sha1(bytes))
    }

    /// SHA-1 of the string's UTF-8 bytes, as 40 lowercase hex digits.
    public static func sha1Hex(_ string: String) -> String {
        hex(sha1(string.utf8))
    }

    /// The 20-byte SHA-1.
    public static func sha1(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        digest(bytes, EVP_sha1(), length: 20)
    }

    /// The 32-byte SHA-256.
    public static func sha256(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        digest(bytes, EVP_sha256(), length: 32)
    }

    /// SHA-256 as 64 lowercase hex digits.
    public static func sha256Hex(_ bytes: some Sequence<UInt8>) -> String {
        hex(sha256(bytes))
    }

    /// Lowercase hex.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func digest(_ bytes: some Sequence<UInt8>, _ md: OpaquePointer?, length: Int) -> [UInt8] {
        let input = bytes.withContiguousStorageIfAvailable { Array($0) } ?? Array(bytes)
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var outputLength: UInt32 = 0
        let ok = input.withUnsafeBytes { raw in
            EVP_Digest(raw.baseAddress, raw.count, &output, &outputLength, md, nil)
        }
        // EVP_Digest with a built-in digest only fails on allocation failure.
        precondition(ok == 1 && Int(outputLength) == length, "EVP_Digest failed")
        return Array(output.prefix(length))
    }
}

/// `n` bytes from OpenSSL's CSPRNG (RAND_bytes). A CSPRNG failure is unrecoverable: traps.
public func secureRandomBytes(_ n: Int) -> [UInt8] {
    precondition(n >= 0, "secureRandomBytes: negative count")
    guard n > 0 else { return [] }
    var bytes = [UInt8](repeating: 0, count: n)
    var offset = 0
    while offset < n {
        // RAND_bytes takes an Int32 count.
        let chunk = min(n - offset, Int(Int32.max))
        let ok = bytes.withUnsafeMutableBufferPointer { buffer in
            RAND_bytes(buffer.baseAddress! + offset, Int32(chunk))
        }
        precondition(ok == 1, "RAND_bytes failed: the OpenSSL CSPRNG is unavailable")
        offset += chunk
    }
    return bytes
}
