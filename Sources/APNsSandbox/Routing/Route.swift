/// Which endpoint a `:path` names (the method is checked by the caller).
enum Route {
    /// `/3/device/<token>`; the token may be empty (`MissingDeviceToken`).
    case device(token: Substring)
    /// `/4/broadcasts/apps/<bundle>`.
    case broadcast(bundle: Substring)
    /// `/1/apps/<bundle>/channels`.
    case channels(bundle: Substring)
    /// `/1/apps/<bundle>/all-channels`.
    case allChannels(bundle: Substring)
    /// `/sandbox/<rest>[?query]`, with `rest` not starting with a slash.
    case admin(path: Substring, query: Substring?)
    case notFound

    init(path: String) {
        let utf8 = path.utf8
        if utf8.starts(with: "/3/device".utf8) {
            let rest = utf8.dropFirst(9)
            if rest.isEmpty { self = .device(token: ""); return }
            if rest.first == UInt8(ascii: "/") { self = .device(token: Substring(rest.dropFirst())); return }
            self = .notFound
            return
        }
        if utf8.starts(with: "/4/broadcasts/apps/".utf8) {
            let bundle = utf8.dropFirst(19)
            guard !bundle.isEmpty, !bundle.contains(UInt8(ascii: "/")) else { self = .notFound; return }
            self = .broadcast(bundle: Substring(bundle))
            return
        }
        if utf8.starts(with: "/1/apps/".utf8) {
            let rest = utf8.dropFirst(8)
            guard let slash = rest.firstIndex(of: UInt8(ascii: "/")), slash != rest.startIndex else { self = .notFound; return }
            let bundle = Substring(rest[rest.startIndex..<slash])
            let tail = rest[rest.index(after: slash)...]
            if tail.elementsEqual("channels".utf8) { self = .channels(bundle: bundle); return }
            if tail.elementsEqual("all-channels".utf8) { self = .allChannels(bundle: bundle); return }
            self = .notFound
            return
        }
        if utf8.starts(with: "/sandbox/".utf8) {
            let rest = Substring(utf8.dropFirst(9))
            if let q = rest.firstIndex(of: "?") {
                self = .admin(path: rest[..<q], query: rest[rest.index(after: q)...])
            } else {
                self = .admin(path: rest, query: nil)
            }
            return
        }
        self = .notFound
    }
}
