import HTTP2Kit

/// The header fields APNs reads, picked out of a request in one pass over its bytes. Fields are
/// remembered by position; a String is built only when a value is asked for as one.
struct RequestHeaders {
    let fields: HTTP2HeaderList
    private(set) var authorizationIndex: Int?
    private(set) var pushTypeIndex: Int?
    private(set) var topicIndex: Int?
    private(set) var priorityIndex: Int?
    private(set) var expirationIndex: Int?
    private(set) var apnsIDIndex: Int?
    private(set) var collapseIDIndex: Int?
    private(set) var channelIDIndex: Int?
    private(set) var requestIDIndex: Int?
    /// The first `:method` and `:path` (nghttp2 rejects requests with two).
    private(set) var methodIndex: Int?
    private(set) var pathIndex: Int?
    /// An `apns-*` header (or `authorization`) appeared more than once: 400 `DuplicateHeaders`.
    /// `authorization` is included because two provider tokens make the request ambiguous too.
    private(set) var duplicate = false

    init(_ fields: HTTP2HeaderList) {
        self.fields = fields
        var a: Int?, pt: Int?, t: Int?, p: Int?, e: Int?, id: Int?, c: Int?, ch: Int?, r: Int?, m: Int?, pa: Int?
        var duplicate = false
        var otherAPNs: [[UInt8]] = []
        @inline(__always) func set(_ slot: inout Int?, _ index: Int) {
            if slot != nil { duplicate = true } else { slot = index }
        }
        fields.forEachField { index, name, _ in
            switch Known(name) {
            case .authorization?: set(&a, index)
            case .pushType?: set(&pt, index)
            case .topic?: set(&t, index)
            case .priority?: set(&p, index)
            case .expiration?: set(&e, index)
            case .apnsID?: set(&id, index)
            case .collapseID?: set(&c, index)
            case .channelID?: set(&ch, index)
            case .requestID?: set(&r, index)
            case nil:
                if name.count == 7, name[0] == UInt8(ascii: ":") {
                    if m == nil, Bytes.equal(name, ":method") { m = index }
                    return
                }
                if name.count == 5, name[0] == UInt8(ascii: ":") {
                    if pa == nil, Bytes.equal(name, ":path") { pa = index }
                    return
                }
                // Other pseudo-headers and headers APNs doesn't read are skipped, but unknown
                // apns-* headers still count for duplicates.
                if name.count > 5, name[0] == UInt8(ascii: "a"), Bytes.equal(UnsafeBufferPointer(rebasing: name[0..<5]), "apns-") {
                    if otherAPNs.contains(where: { $0.elementsEqual(name) }) { duplicate = true } else { otherAPNs.append(Array(name)) }
                }
            }
        }
        self.duplicate = duplicate
        authorizationIndex = a; pushTypeIndex = pt; topicIndex = t; priorityIndex = p; expirationIndex = e
        apnsIDIndex = id; collapseIDIndex = c; channelIDIndex = ch; requestIDIndex = r
        methodIndex = m; pathIndex = pa
    }

    // MARK: Values as Strings

    var authorization: String? { string(authorizationIndex) }
    var pushType: String? { string(pushTypeIndex) }
    var topic: String? { string(topicIndex) }
    var priority: String? { string(priorityIndex) }
    var expiration: String? { string(expirationIndex) }
    var apnsID: String? { string(apnsIDIndex) }
    var collapseID: String? { string(collapseIDIndex) }
    var channelID: String? { string(channelIDIndex) }
    var requestID: String? { string(requestIDIndex) }

    // MARK: Values as bytes

    /// The `authorization` value's bytes (sharing the request's storage).
    var authorizationBytes: ArraySlice<UInt8>? { authorizationIndex.map { fields.valueBytes(at: $0) } }

    /// Calls `body` with the bytes of the field at `index` (nil when absent).
    func withValue<R>(_ index: Int?, _ body: (UnsafeBufferPointer<UInt8>?) -> R) -> R {
        guard let index else { return body(nil) }
        return fields.withValueBytes(at: index) { body($0) }
    }

    /// Whether the field at `index` is present and its value is exactly `text`.
    func value(_ index: Int?, is text: StaticString) -> Bool {
        withValue(index) { b in b.map { Bytes.equal($0, text) } ?? false }
    }

    private func string(_ index: Int?) -> String? { index.map { fields.value(at: $0) } }

    /// The headers APNs reads, recognised by length first so that most names are ruled out by
    /// one comparison.
    private enum Known {
        case authorization, pushType, topic, priority, expiration, apnsID, collapseID, channelID, requestID

        init?(_ name: UnsafeBufferPointer<UInt8>) {
            // Every name here starts with "a"; pseudo-headers (":path") and most others don't.
            guard name.count >= 7, name[0] == UInt8(ascii: "a") else { return nil }
            switch name.count {
            case 7 where Self.equal(name, "apns-id"): self = .apnsID
            case 10 where Self.equal(name, "apns-topic"): self = .topic
            case 13 where Self.equal(name, "authorization"): self = .authorization
            case 13 where Self.equal(name, "apns-priority"): self = .priority
            case 14 where Self.equal(name, "apns-push-type"): self = .pushType
            case 15 where Self.equal(name, "apns-expiration"): self = .expiration
            case 15 where Self.equal(name, "apns-channel-id"): self = .channelID
            case 15 where Self.equal(name, "apns-request-id"): self = .requestID
            case 16 where Self.equal(name, "apns-collapse-id"): self = .collapseID
            default: return nil
            }
        }

        @inline(__always) private static func equal(_ b: UnsafeBufferPointer<UInt8>, _ s: StaticString) -> Bool {
            Bytes.equal(b, s)
        }
    }
}
