import ActivityCastCore
import ActivityCastRoutes
import Testing

/// Builds an entry from name/value pairs in order, as a stream entry would arrive.
func fields(_ pairs: KeyValuePairs<String, String>) -> [RawField] {
    pairs.map { RawField($0.key, $0.value) }
}

/// The entry decoded as a worker decodes it, or nil with the reason.
func decode(_ kind: StreamKind, _ raw: [RawField]) -> Result<DecodedEntry, DecodeError> {
    EntryDecoder().decode(kind: kind, fields: raw)
}

/// The route's plan for an entry that must decode; nil (and a recorded issue) otherwise.
func routePlan(_ routes: RouteSet, _ kind: StreamKind, _ pairs: KeyValuePairs<String, String>) -> Plan? {
    routePlan(routes, kind, fields(pairs))
}

func routePlan(_ routes: RouteSet, _ kind: StreamKind, _ raw: [RawField]) -> Plan? {
    switch decode(kind, raw) {
    case .failure(let error):
        Issue.record("entry did not decode: \(error)")
        return nil
    case .success(let entry):
        switch routes.plan(entry: entry, fields: raw) {
        case .success(let plan): return plan
        case .failure(let error):
            Issue.record("routing failed: \(error)")
            return nil
        }
    }
}

/// Compiles a route file, or records why not.
func compile(_ yaml: String, feed: StreamKind = .sports, file: String = "test.yaml") -> Routes? {
    do {
        return try Routes(yaml: yaml, file: file, feed: feed)
    } catch {
        Issue.record("did not compile: \(error)")
        return nil
    }
}

/// The error a route file is rejected with, or a marker that makes a comparison fail.
func rejection(_ yaml: String, feed: StreamKind = .sports, file: String = "test.yaml") -> String {
    do {
        let routes = try Routes(yaml: yaml, file: file, feed: feed)
        return "<compiled \(routes.routedTypes)>"
    } catch {
        return error.description
    }
}

/// A minimal sports file around some routes (indented under `types:`), so tests show only what
/// they are about. Line 5 is the first line of `types`.
func sportsFile(_ types: String, header: String = "") -> String {
    "feed: sports\nstorage-policy: no-storage\n\(header)types:\n" + types
}
