/// Per-connection state: stream count, provider token in use, GOAWAY sent. A class so that the
/// hot path finds it with one hash lookup and updates it in place; only touched under the lock.
final class ConnectionRecord {
    var streams = 0
    /// The `authorization` value currently in use (verified), with its key id and `iat`.
    var authorization: [UInt8]?
    var keyID = ""
    var issuedAt: Int64 = 0
    /// The key id of the connection's first token (`UnrelatedKeyIdInToken`).
    var firstKeyID: String?
    /// When the connection last switched from one token to another (not the first adoption).
    var lastChangeMillis: Int64?
    var goneAway = false
}

/// A device token's view, by reference (see `ConnectionRecord`), and the app (index) it is
/// bound to.
final class DeviceRecord {
    let bundle: Int
    var view: DeviceView
    init(_ view: DeviceView, bundle: Int) { self.view = view; self.bundle = bundle }
}

/// A channel: its order of creation (for listing) and its view.
struct ChannelRecord {
    var sequence: Int
    var view: DeviceView
}
