/// Size limits for one entry (`limits.*` in the configuration). They are checked before any other
/// work, so an oversized entry costs next to nothing to reject.
public struct DecodeLimits: Sendable, Equatable {
    /// At most this many fields (name/value pairs), `type` and `ts` included.
    public var maxFields: Int
    /// At most this many bytes in one value.
    public var maxValueBytes: Int
    /// At most this many bytes in all names and values together.
    public var maxEntryBytes: Int
    /// Free text for people (`FreeText`) longer than this is trimmed, not refused.
    public var maxTextBytes = 256

    public init(maxFields: Int = 64, maxValueBytes: Int = 1024, maxEntryBytes: Int = 8192) {
        self.maxFields = maxFields
        self.maxValueBytes = maxValueBytes
        self.maxEntryBytes = maxEntryBytes
    }
}
