import ActivityCastCore

/// Builds an entry from name/value pairs in order, as a stream entry would arrive.
func fields(_ pairs: KeyValuePairs<String, String>) -> [RawField] {
    pairs.map { RawField($0.key, $0.value) }
}

func decode(_ kind: StreamKind, _ pairs: KeyValuePairs<String, String>, limits: DecodeLimits = .init())
    -> Result<DecodedEntry, DecodeError> {
    EntryDecoder(limits: limits).decode(kind: kind, fields: fields(pairs))
}

/// The reason an entry is rejected, or a marker string if it decoded (so a comparison fails loudly).
func reason(_ result: Result<DecodedEntry, DecodeError>) -> String {
    switch result {
    case .success(let entry): "<decoded \(entry.type)>"
    case .failure(let error): error.reason
    }
}

func reason(_ kind: StreamKind, _ pairs: KeyValuePairs<String, String>, limits: DecodeLimits = .init()) -> String {
    reason(decode(kind, pairs, limits: limits))
}

func reason(_ kind: StreamKind, raw: [RawField], limits: DecodeLimits = .init()) -> String {
    reason(EntryDecoder(limits: limits).decode(kind: kind, fields: raw))
}

/// The decoded entry, or nil (the caller's `#expect(... == expected)` then fails with the value shown).
func decoded(_ kind: StreamKind, _ pairs: KeyValuePairs<String, String>) -> DecodedEntry? {
    try? decode(kind, pairs).get()
}


let token64 = String(repeating: "9f3c", count: 16)  // 64 hex digits
