/// The header fields APNs reads, picked out of a request in one pass.
struct RequestHeaders {
    var authorization: String?
    var pushType: String?
    var topic: String?
    var priority: String?
    var expiration: String?
    var apnsID: String?
    var collapseID: String?
    var channelID: String?
    var requestID: String?
    /// An `apns-*` header (or `authorization`) appeared more than once: 400 `DuplicateHeaders`.
    /// `authorization` is included because two provider tokens make the request ambiguous too.
    var duplicate = false

    init(_ headers: [(name: String, value: String)]) {
        var otherAPNs: [String] = []
        for i in headers.indices {
            let name = headers[i].name
            // Dispatch on the length first: most comparisons are then avoided altogether.
            switch name.utf8.count {
            case 7 where name == "apns-id": Self.set(&apnsID, headers[i].value, &duplicate)
            case 10 where name == "apns-topic": Self.set(&topic, headers[i].value, &duplicate)
            case 13 where name == "authorization": Self.set(&authorization, headers[i].value, &duplicate)
            case 13 where name == "apns-priority": Self.set(&priority, headers[i].value, &duplicate)
            case 14 where name == "apns-push-type": Self.set(&pushType, headers[i].value, &duplicate)
            case 15 where name == "apns-expiration": Self.set(&expiration, headers[i].value, &duplicate)
            case 15 where name == "apns-channel-id": Self.set(&channelID, headers[i].value, &duplicate)
            case 15 where name == "apns-request-id": Self.set(&requestID, headers[i].value, &duplicate)
            case 16 where name == "apns-collapse-id": Self.set(&collapseID, headers[i].value, &duplicate)
            default:
                // Headers APNs doesn't use (yet) still count for duplicates if they are apns-*.
                if name.utf8.count > 5, name.utf8.starts(with: "apns-".utf8) {
                    if otherAPNs.contains(name) { duplicate = true } else { otherAPNs.append(name) }
                }
            }
        }
    }

    @inline(__always) private static func set(_ field: inout String?, _ value: String, _ duplicate: inout Bool) {
        if field != nil { duplicate = true } else { field = value }
    }
}

