internal import COpenSSL

/// OpenSSL's error queue is per thread: every OpenSSLKit call clears it before calling into
/// OpenSSL and drains it into the thrown `TLSError` afterwards, so errors never leak from one
/// operation (or one caller on the same thread) into the next.
enum OpenSSLErrorQueue {
    struct Entry {
        let code: UInt
        let text: String
        var library: Int32 { copenssl_ERR_GET_LIB(code) }
        var reason: Int32 { copenssl_ERR_GET_REASON(code) }
    }

    static func clear() {
        ERR_clear_error()
    }

    /// Removes every entry from this thread's queue, oldest first.
    static func drain() -> [Entry] {
        var entries: [Entry] = []
        while true {
            var data: UnsafePointer<CChar>?
            var flags: Int32 = 0
            let code = ERR_get_error_all(nil, nil, nil, &data, &flags)
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            var text = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) },
                              as: UTF8.self)
            if let data, flags & ERR_TXT_STRING != 0 {
                let extra = String(cString: data)
                if !extra.isEmpty { text += " (\(extra))" }
            }
            entries.append(Entry(code: code, text: text))
            // Bound the work if something keeps pushing (it never should).
            if entries.count >= 64 { ERR_clear_error(); break }
        }
        return entries
    }

    /// A `TLSError` whose message ends with whatever OpenSSL queued.
    static func error(_ code: TLSError.Code, _ message: String) -> TLSError {
        let texts = drain().map(\.text)
        return TLSError(code: code, message: compose(message, texts), openSSLErrors: texts)
    }

    /// "message [queue entry; queue entry]".
    static func compose(_ message: String, _ texts: [String]) -> String {
        texts.isEmpty ? message : message + " [" + texts.joined(separator: "; ") + "]"
    }
}
