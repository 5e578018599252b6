import OpenSSLKit

/// The `TLSError` thrown by `body`, or nil if it returned normally.
func caughtTLSError<T>(_ body: () throws(TLSError) -> T) -> TLSError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}
