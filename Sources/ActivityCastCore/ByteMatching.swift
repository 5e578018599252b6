extension UnsafeBufferPointer<UInt8> {
    /// Whether these bytes are exactly the literal's. Comparing with a `StaticString` reads constant
    /// data: no `String`, no allocation, no reference counting, which matters for lookups done for
    /// every field of every entry.
    @inline(__always)
    func equals(_ literal: StaticString) -> Bool {
        guard count == literal.utf8CodeUnitCount else { return false }
        let expected = literal.utf8Start
        var i = 0
        while i < count {
            if self[i] != expected[i] { return false }
            i &+= 1
        }
        return true
    }
}
