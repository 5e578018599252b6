/// Stream entry ids (`<ms>-<seq>`) in their order. `package`: the worker (group positions) and
/// inspect (the age of a stream's first entry) read them; no API of this module takes one.
package struct StreamID: Comparable, CustomStringConvertible {
    package var ms: UInt64
    package var seq: UInt64

    package init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let ms = UInt64(parts[0]), let seq = UInt64(parts[1]) else { return nil }
        self.ms = ms
        self.seq = seq
    }

    package static func < (a: StreamID, b: StreamID) -> Bool { (a.ms, a.seq) < (b.ms, b.seq) }
    package var description: String { "\(ms)-\(seq)" }

    /// The further of two ids given as text (either may be missing or malformed).
    package static func furthest(_ a: String?, _ b: String?) -> String? {
        switch (a.flatMap(StreamID.init), b.flatMap(StreamID.init)) {
        case let (x?, y?): return max(x, y).description
        case let (x?, nil): return x.description
        case let (nil, y?): return y.description
        case (nil, nil): return nil
        }
    }
}
