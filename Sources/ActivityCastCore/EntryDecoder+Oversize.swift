extension EntryDecoder {
    /// The reason for an entry that was too big to be read at all (the Redis reply limits kept
    /// only its size): the same checks, in the same order and words, as `decode` makes on an
    /// entry it has in memory — count, then total size, then the long value.
    public func oversizeError(fields: Int, bytes: Int, longValue: (name: [UInt8], bytes: Int)?) -> DecodeError {
        if fields > limits.maxFields { return .tooManyFields(fields, max: limits.maxFields) }
        if bytes > limits.maxEntryBytes { return .entryTooLarge(bytes, max: limits.maxEntryBytes) }
        if let longValue { return .tooLong(name: longValue.name, longValue.bytes, max: limits.maxValueBytes) }
        return .entryTooLarge(bytes, max: limits.maxEntryBytes)
    }

    /// Reply limits that keep every entry this decoder could accept and cap the rest: an entry
    /// over them is read as its size only, so a hostile one costs bounded memory.
    /// `batch` is the most entries one read returns.
    public func readLimits(batch: Int) -> (maxElements: Int, maxStringBytes: Int, maxArrayBytes: Int) {
        // Strings up to the whole entry's budget: a field *name* may be longer than a value may
        // (the decoder limits values only), and an entry's total still caps what one costs.
        (maxElements: max(2 * limits.maxFields, batch), maxStringBytes: max(limits.maxValueBytes, limits.maxEntryBytes),
         maxArrayBytes: limits.maxEntryBytes)
    }
}
