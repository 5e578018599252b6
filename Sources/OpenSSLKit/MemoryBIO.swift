internal import COpenSSL

/// Owns one memory BIO (BIO_s_mem), used to move PEM text in and out of OpenSSL.
final class MemoryBIO {
    let pointer: OpaquePointer

    /// An empty, writable memory BIO.
    init() throws(TLSError) {
        guard let bio = BIO_new(BIO_s_mem()) else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "BIO_new failed")
        }
        pointer = bio
    }

    /// A memory BIO holding a copy of `bytes` (BIO_new_mem_buf would alias Swift memory that
    /// may move; writing a copy keeps ownership simple).
    convenience init(copying bytes: some Collection<UInt8>) throws(TLSError) {
        try self.init()
        let array = Array(bytes)
        guard !array.isEmpty else { return }
        let written = array.withUnsafeBytes { raw in
            BIO_write(pointer, raw.baseAddress, Int32(raw.count))
        }
        guard written == Int32(array.count) else {
            throw OpenSSLErrorQueue.error(.cryptoFailure, "BIO_write failed")
        }
    }

    deinit {
        BIO_free(pointer)
    }

    /// Everything currently in the BIO.
    func bytes() -> [UInt8] {
        var data: UnsafeMutablePointer<CChar>?
        let length = copenssl_BIO_get_mem_data(pointer, &data)
        guard length > 0, let data else { return [] }
        return data.withMemoryRebound(to: UInt8.self, capacity: length) { base in
            Array(UnsafeBufferPointer(start: base, count: length))
        }
    }

    /// Everything currently in the BIO, as UTF-8 text.
    func string() -> String {
        String(decoding: bytes(), as: UTF8.self)
    }
}
