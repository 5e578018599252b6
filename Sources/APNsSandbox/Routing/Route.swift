/// The device token in a `/3/device/` path.
enum PathToken {
    /// Nothing after `/3/device/` (`MissingDeviceToken`).
    case missing
    /// Not 32–512 hex digits in pairs (`BadDeviceToken`).
    case invalid
    case valid(TokenKey)
}

/// Which endpoint a `:path` names (the method is checked by the caller).
enum Route {
    /// `/3/device/<token>`.
    case device(PathToken)
    /// `/4/broadcasts/apps/<bundle>`.
    case broadcast(bundle: String)
    /// `/1/apps/<bundle>/channels`.
    case channels(bundle: String)
    /// `/1/apps/<bundle>/all-channels`.
    case allChannels(bundle: String)
    /// `/sandbox/<rest>[?query]`, with `rest` not starting with a slash.
    case admin(path: Substring, query: Substring?)
    case notFound

    init(path: String) {
        // Works on the UTF-8 bytes in place (native strings are contiguous; others are copied).
        let parsed = path.utf8.withContiguousStorageIfAvailable { Self.parse($0) }
            ?? Array(path.utf8).withUnsafeBufferPointer { Self.parse($0) }
        switch parsed {
        case .admin:
            let rest = Substring(path.utf8.dropFirst(9))
            if let q = rest.firstIndex(of: "?") {
                self = .admin(path: rest[..<q], query: rest[rest.index(after: q)...])
            } else {
                self = .admin(path: rest, query: nil)
            }
        default:
            self = parsed
        }
    }

    /// The route of a `:path` given as bytes (nil: no `:path`). `.admin` comes back without its
    /// path and query: build it with `init(path:)`.
    init(pathBytes: UnsafeBufferPointer<UInt8>?) {
        self = pathBytes.map(Self.parse) ?? .notFound
    }

    private static func parse(_ p: UnsafeBufferPointer<UInt8>) -> Route {
        if hasPrefix(p, "/3/device") {
            if p.count == 9 { return .device(.missing) }
            guard p[9] == UInt8(ascii: "/") else { return .notFound }
            if p.count == 10 { return .device(.missing) }
            return .device(TokenKey(hex: UnsafeBufferPointer(rebasing: p[10...])).map(PathToken.valid) ?? .invalid)
        }
        if hasPrefix(p, "/4/broadcasts/apps/") {
            let bundle = UnsafeBufferPointer(rebasing: p[19...])
            guard !bundle.isEmpty, !bundle.contains(UInt8(ascii: "/")) else { return .notFound }
            return .broadcast(bundle: String(decoding: bundle, as: UTF8.self))
        }
        if hasPrefix(p, "/1/apps/") {
            let rest = UnsafeBufferPointer(rebasing: p[8...])
            guard let slash = rest.firstIndex(of: UInt8(ascii: "/")), slash != rest.startIndex else { return .notFound }
            let bundle = String(decoding: UnsafeBufferPointer(rebasing: rest[..<slash]), as: UTF8.self)
            let tail = UnsafeBufferPointer(rebasing: rest[(slash + 1)...])
            if tail.elementsEqual("channels".utf8) { return .channels(bundle: bundle) }
            if tail.elementsEqual("all-channels".utf8) { return .allChannels(bundle: bundle) }
            return .notFound
        }
        if hasPrefix(p, "/sandbox/") { return .admin(path: "", query: nil) }
        return .notFound
    }

    @inline(__always) private static func hasPrefix(_ p: UnsafeBufferPointer<UInt8>, _ prefix: StaticString) -> Bool {
        let n = prefix.utf8CodeUnitCount
        guard p.count >= n else { return false }
        let q = prefix.utf8Start
        for i in 0..<n where p[i] != q[i] { return false }
        return true
    }
}
