/// APNs's answer to one request, with the action it implies.
public struct APNsResponse: Sendable, Hashable {
    public var status: Int
    public var reason: APNsReason?
    /// `apns-id` (device pushes), echoed or assigned.
    public var apnsID: String?
    /// `apns-unique-id` (development environment, and broadcasts).
    public var uniqueID: String?
    /// `apns-request-id` (broadcasts and channel management).
    public var requestID: String?
    /// `apns-channel-id` (channel creation).
    public var channelID: String?
    /// The 410 body's `timestamp`: when the token stopped being valid, ms since 1970.
    public var timestampMillis: Int64?
    /// A `retry-after` header (seconds), if any.
    public var retryAfter: Duration?
    /// The response body for requests that return one (channel read and list).
    public var body: [UInt8]

    public init(status: Int, reason: APNsReason? = nil, apnsID: String? = nil, uniqueID: String? = nil, requestID: String? = nil,
                channelID: String? = nil, timestampMillis: Int64? = nil, retryAfter: Duration? = nil, body: [UInt8] = []) {
        self.status = status; self.reason = reason; self.apnsID = apnsID; self.uniqueID = uniqueID
        self.requestID = requestID; self.channelID = channelID; self.timestampMillis = timestampMillis
        self.retryAfter = retryAfter; self.body = body
    }

    public var action: APNsAction {
        if (200..<300).contains(status) { return .delivered }
        // A reason Apple may add later says nothing we know: its status does (a 503 with a new
        // reason is still "try again", a 410 still a dead token).
        if let reason, !reason.isUnknown { return reason.action(retryAfter: retryAfter, timestampMillis: timestampMillis) }
        // No reason we can read: decide by status.
        switch status {
        case 410: return .forgetToken(invalidSince: timestampMillis)
        case 429: return .retryAfter(retryAfter ?? .seconds(1))
        case 500...599: return .retryWithBackoff
        default: return .fail
        }
    }

    /// Reads `{"reason": "...", "timestamp": 1234}` from an error body; tolerant of anything else.
    public static func parseErrorBody(_ body: [UInt8]) -> (reason: APNsReason?, timestamp: Int64?) {
        guard !body.isEmpty else { return (nil, nil) }
        let reason = jsonStringValue(body, key: "reason").map(APNsReason.init(rawValue:))
        let timestamp = jsonNumberValue(body, key: "timestamp")
        return (reason, timestamp)
    }
}

/// Minimal extraction of a top-level string or integer member from a small JSON object: APNs
/// error bodies are tiny and fixed in shape, and this runs on the response path.
func jsonStringValue(_ body: [UInt8], key: String) -> String? {
    guard let start = valueStart(body, key: key), start < body.count, body[start] == UInt8(ascii: "\"") else { return nil }
    var i = start + 1
    var out: [UInt8] = []
    while i < body.count {
        let b = body[i]
        if b == UInt8(ascii: "\"") { return String(decoding: out, as: UTF8.self) }
        if b == UInt8(ascii: "\\"), i + 1 < body.count { out.append(body[i + 1]); i += 2; continue }
        out.append(b)
        i += 1
    }
    return nil
}

func jsonNumberValue(_ body: [UInt8], key: String) -> Int64? {
    guard var i = valueStart(body, key: key) else { return nil }
    var value: Int64 = 0
    var digits = 0
    while i < body.count, body[i] >= 0x30, body[i] <= 0x39, digits < 18 {
        value = value * 10 + Int64(body[i] - 0x30)
        digits += 1
        i += 1
    }
    return digits > 0 ? value : nil
}

private func valueStart(_ body: [UInt8], key: String) -> Int? {
    let needle = Array("\"\(key)\"".utf8)
    guard needle.count <= body.count else { return nil }
    var i = 0
    while i + needle.count <= body.count {
        if body[i] == needle[0] && Array(body[i..<(i + needle.count)]) == needle {
            var j = i + needle.count
            while j < body.count, body[j] == 0x20 || body[j] == 0x09 || body[j] == 0x0A || body[j] == 0x0D { j += 1 }
            guard j < body.count, body[j] == UInt8(ascii: ":") else { i += 1; continue }
            j += 1
            while j < body.count, body[j] == 0x20 || body[j] == 0x09 || body[j] == 0x0A || body[j] == 0x0D { j += 1 }
            return j
        }
        i += 1
    }
    return nil
}
