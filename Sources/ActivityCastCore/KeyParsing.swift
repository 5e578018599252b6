/// Parsing keys back from their text form (`match:4711`, `team:ars`), for values read from Redis.

extension ActivityKey {
    /// `kind:id` with a known kind and an identifier id; nil otherwise.
    public init?(parsing text: String) {
        guard let colon = text.firstIndex(of: ":"), let kind = Kind(rawValue: String(text[..<colon])) else { return nil }
        let id = String(text[text.index(after: colon)...])
        guard isIdentifier(id) else { return nil }
        self.init(kind: kind, id: id)
    }
}

extension FollowTarget {
    /// `team:id` or `route:id`; nil otherwise.
    public init?(parsing text: String) {
        guard let colon = text.firstIndex(of: ":"), let kind = Kind(rawValue: String(text[..<colon])) else { return nil }
        let id = String(text[text.index(after: colon)...])
        guard isIdentifier(id) else { return nil }
        self.init(kind: kind, id: id)
    }
}


/// 1–128 bytes of `A–Z a–z 0–9 . _ -` (docs/schema.md).
func isIdentifier(_ s: String) -> Bool {
    let bytes = s.utf8
    guard !bytes.isEmpty, bytes.count <= 128 else { return false }
    return bytes.allSatisfy { b in
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F || b == 0x2D
    }
}
