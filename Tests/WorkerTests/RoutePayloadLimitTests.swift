import ActivityCastCore
import ActivityCastRoutes
import ActivityCastSend
import APNsCore
import Testing

/// The bound `routes check` puts on a route's constants is the worker's own payload: the largest
/// route that compiles sends, for its barest event, a payload of exactly Apple's 4,096 bytes
/// (built by `PushBuilder`, as the worker builds it), and one byte more is refused. So the check
/// neither refuses a route that can be sent nor misses one that can't.
///
/// The bound counts a field's value as nothing and a text at its shortest alternative; these
/// routes' barest events render exactly that (their fields are in optional segments, their
/// shortest alternatives are the ones used), so the bound is reached to the byte.
@Suite struct RoutePayloadLimitTests {
    /// One route of `type` with `filler` bytes of constant text, and the barest entry of the type
    /// (no optional field; `ts` 1 ms, so `aps.timestamp` 0).
    struct Case: Sendable {
        var type: String
        /// The route, with `FILLER` for the text.
        var route: String
        var entry: [RawField]
    }

    static let cases: [Case] = [
        Case(type: "match.started", route: """
                key: "match:{match}"
                event: start
                priority: critical
                attributes-type: MatchActivityAttributes
                attributes: {note: string "FILLER", home: string home, rank: int 3}
                content-state: {homeScore: int 0, awayScore: int 0, clock: string "0'", live: bool true}
                followers: ["team:{home}"]
                alert: {title: "Kick-off", body: "Kick-off[ {home} v {away}]", sound: "default"}
            """, entry: [RawField("type", "match.started"), RawField("ts", "1"), RawField("match", "m")]),
        Case(type: "match.score", route: """
                key: "match:{match}"
                event: update
                priority: critical
                content-state: {note: string "FILLER", clock: string clock, last: {kind: string "score", at: string clock}}
                alert:
                  title: "Score"
                  body: "Score[ at {clock}]"
                  title-loc-key: "SCORE"
                  title-loc-args: ["[{clock}]"]
                  loc-key: ["SCORE_AT_TIME{?clock}", "SCORE"]
                  loc-args: ["[{clock}]", "[{period}]"]
            """, entry: [RawField("type", "match.score"), RawField("ts", "1"), RawField("match", "m"), RawField("home_score", "1"),
                   RawField("away_score", "0")]),
        Case(type: "match.full_time", route: """
                key: "match:{match}"
                event: end
                priority: critical
                relevance: 12.5
                content-state: {period: string "full_time", note: string "FILLER"}
            """, entry: [RawField("type", "match.full_time"), RawField("ts", "1"), RawField("match", "m"), RawField("home_score", "1"),
                   RawField("away_score", "0")]),
    ]

    static func file(_ c: Case, filler: Int) -> String {
        "feed: sports\nstorage-policy: no-storage\ndefaults: {stale-after: 1200, relevance: 50, dismiss-after: 3600}\ntypes:\n"
            + "  \(c.type):\n" + c.route.replacingOccurrences(of: "FILLER", with: String(repeating: "a", count: filler)) + "\n"
    }

    @Test(arguments: cases.indices)
    func theLargestRouteThatCompilesSendsExactlyTheLimit(index: Int) throws {
        let c = Self.cases[index]
        func compiles(_ filler: Int) -> Bool { (try? Routes(yaml: Self.file(c, filler: filler), file: "t.yaml", feed: .sports)) != nil }
        #expect(compiles(0) && !compiles(PayloadLimits.device))
        // The largest filler that compiles.
        var low = 0, high = PayloadLimits.device
        while high - low > 1 {
            let mid = (low + high) / 2
            if compiles(mid) { low = mid } else { high = mid }
        }
        let routes = try Routes(yaml: Self.file(c, filler: low), file: "t.yaml", feed: .sports)
        guard case .success(let entry) = EntryDecoder().decode(kind: .sports, fields: c.entry) else {
            Issue.record("\(c.type): the entry does not decode")
            return
        }
        let plan = try #require(try routes.plan(entry: entry, fields: c.entry).get())
        let bytes = PushBuilder.payload(plan, contentState: plan.contentState).encoded()
        #expect(bytes.count == PayloadLimits.device, "\(c.type): \(String(decoding: bytes, as: UTF8.self).prefix(400))")
        // One byte more is refused, with its size.
        do {
            _ = try Routes(yaml: Self.file(c, filler: low + 1), file: "t.yaml", feed: .sports)
            Issue.record("\(c.type): one byte over the limit compiled")
        } catch {
            #expect(error.reason.contains("at least \(PayloadLimits.device + 1) bytes"), "\(error)")
        }
    }
}
