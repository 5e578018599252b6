import ActivityCastCore
import ActivityCastSend
import RedisClient
import Testing
import TestSupport

/// The key-state merge: the pure model, and the Redis script checked against it on generated
/// sequences (several workers applying one key's events in any order end in the same state).
@Suite struct KeyStateTests {
    @Test func newerValuesWinAndOlderEventsAreStaleButFillGaps() {
        var state = KeyState()
        #expect(state.merge(millis: 2000, event: .update, contentState: ["homeScore": 1, "clock": "15'"]) == .init(stale: false, changed: true))
        #expect(state.merge(millis: 3000, event: .update, contentState: ["homeScore": 2]) == .init(stale: false, changed: true))
        // Older: stale; it can't undo the newer score, but it brings a key nobody set yet.
        #expect(state.merge(millis: 1000, event: .update, contentState: ["homeScore": 0, "period": "first_half"]) == .init(stale: true, changed: true))
        #expect(state.merge(millis: 1500, event: .update, contentState: ["homeScore": 0]) == .init(stale: true, changed: false))
        #expect(state.contentState == ["homeScore": 2, "clock": "15'", "period": "first_half"])
        #expect(state.newestMillis == 3000)
        #expect(state.newestEvent == .update)
        // Equal time is not stale (a redelivered event is sent again: harmless, same timestamp).
        #expect(state.merge(millis: 3000, event: .end, contentState: ["homeScore": 2]).stale == false)
        #expect(state.newestEvent == .end)
        // A start is recorded as an update: the activity it starts takes updates.
        var other = KeyState()
        other.merge(millis: 1, event: .start, contentState: [:])
        #expect(other.newestEvent == .update)
    }

    /// Random events of one key applied in random orders, with presentations and state limits:
    /// the script's answers, final state and signature equal the model's, and every order ends in
    /// the same state.
    @Test func theScriptAgreesWithTheModelOnGeneratedSequences() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        var rng = SystemRandomNumberGenerator()
        // Names that need escaping too: the script sizes them as JSONValue encodes them.
        let keys = ["homeScore", "awayScore", "clock", "period", "lastEvent", "quote\"d", "tab\t", "nl\u{1}", "ls\u{2028}", "é"]
        var refused = 0, unchangedValues = 0
        for round in 0..<40 {
            var events: [(KeyState.Event, [String: JSONValue])] = []
            for i in 0..<Int.random(in: 1...12, using: &rng) {
                var cs: [String: JSONValue] = [:]
                for k in keys where Int.random(in: 0..<3, using: &rng) == 0 {
                    switch Int.random(in: 0..<3, using: &rng) {
                    case 0: cs[k] = .int(Int64(i % 3))
                    case 1: cs[k] = .object(["kind": .string("goal-\(i % 2)"), "n": .double(Double(i) / 3)])
                    default: cs[k] = .string(String(repeating: "x", count: Int.random(in: 0...120, using: &rng)))
                    }
                }
                let e = KeyState.Event(millis: Int64(Int.random(in: 1...8, using: &rng)) * 1000, event: Bool.random(using: &rng) ? .update : .end,
                                       staleAfter: Bool.random(using: &rng) ? "1200" : nil, relevance: Bool.random(using: &rng) ? "50.0" : nil,
                                       stateLimit: Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 2...400, using: &rng) : nil)
                events.append((e, cs))
            }
            var finals: [[String: JSONValue]] = []
            var refusedHere = false
            for order in 0..<3 {
                let shuffled = order == 0 ? events : events.shuffled(using: &rng)
                let stateKey = "state:\(round):\(order)"
                var model = KeyState()
                for (n, (e, cs)) in shuffled.enumerated() {
                    let expected = model.merge(e, contentState: cs)
                    let got = try KeyStateScripts.parse(try await redis.send(
                        KeyStateScripts.mergeCommand(stateKey: stateKey, e, entry: "s/\(n)-0", ttlSeconds: 60, contentState: cs)))
                    #expect(got.tooLarge == expected.tooLarge, "\(e) \(cs)")
                    #expect(got.stale == expected.stale)
                    #expect(got.changed == expected.changed)
                    #expect(got.newestMillis == model.newestMillis ?? e.millis)
                    #expect(got.newestEvent == model.newestEvent)
                    #expect(got.contentState == model.contentState.mapValues { .encoded($0.encoded()) })
                    if expected.tooLarge != nil {
                        refused += 1
                        refusedHere = true
                        #expect(try await redis.command("HGET", stateKey, "_rej").string == "s/\(n)-0")
                    } else {
                        if !expected.changed, !cs.isEmpty { unchangedValues += 1 }
                        let sig = try await redis.command("HGET", stateKey, "_sig").string
                        let sha = try await redis.command("EVAL", "return redis.sha1hex(ARGV[1])", 0, model.signatureSource).string
                        #expect(sig == sha, "\(model.signatureSource)")
                    }
                }
                finals.append(model.contentState)
            }
            // Ties at the same time may resolve either way, so compare only when times are distinct;
            // what is refused as too large depends on what was merged before it.
            if Set(events.map(\.0.millis)).count == events.count, !refusedHere {
                #expect(finals.allSatisfy { $0 == finals[0] })
            }
        }
        #expect(refused > 0 && unchangedValues > 0, "refused \(refused), unchanged \(unchangedValues)")
    }

    /// The content-state's size as the merge counts it is the size of what a push carries.
    @Test func theStateSizeIsTheEncodedContentStatesSize() {
        let states: [[String: JSONValue]] = [[:], ["a": 1], ["homeScore": 2, "quote\"d": "x\ny", "ls\u{2028}": .array([1, "é"]), "\u{1}": .null]]
        for state in states {
            #expect(KeyState.encodedSize(state.mapValues { $0.encoded() }) == JSONValue.object(state).encoded().count)
        }
    }

    /// Setting a key to the value it has is no change, and the signature moves only with what a
    /// device would show: values and presentation, not times.
    @Test func sameValuesAreNoChangeAndTheSignatureFollowsWhatIsShown() {
        var state = KeyState()
        state.merge(KeyState.Event(millis: 1000, event: .update, staleAfter: "1200"), contentState: ["homeScore": 1, "awayScore": 0])
        let first = state.signatureSource
        #expect(state.merge(KeyState.Event(millis: 1001, event: .update, staleAfter: "1200"), contentState: ["homeScore": 1]) == .init(stale: false, changed: false))
        #expect(state.signatureSource == first)
        // A presentation comes with a change: an event that changes nothing keeps the last one
        // (the score after its goal keeps the goal's relevance).
        state.merge(KeyState.Event(millis: 1002, event: .update, staleAfter: "600", relevance: "75"), contentState: ["homeScore": 1])
        #expect(state.signatureSource == first)
        state.merge(KeyState.Event(millis: 1003, event: .update, staleAfter: "600", relevance: "75"), contentState: ["homeScore": 2])
        let second = state.signatureSource
        #expect(second != first && state.relevance == "75")
        state.merge(KeyState.Event(millis: 1004, event: .update, staleAfter: "1200"), contentState: ["homeScore": 2])
        #expect(state.signatureSource == second)
        #expect(state.merge(KeyState.Event(millis: 1005, event: .update, staleAfter: "1200"), contentState: ["homeScore": 2, "clock": "2'"]).changed)
        #expect(state.signatureSource != second && state.relevance == nil)
        // Over the limit: nothing merged, the state as it was.
        let before = state
        let refused = state.merge(KeyState.Event(millis: 2000, event: .update, stateLimit: 40), contentState: ["clock": .string(String(repeating: "9", count: 40))])
        #expect(refused.tooLarge == KeyState.encodedSize(["homeScore": Array("2".utf8), "awayScore": Array("0".utf8), "clock": Array(repeating: 0, count: 42)]))
        #expect(state == before)
    }

    /// The presentation a flush carries is the newest changing event's: an older event's doesn't
    /// replace it, nor does one that changes nothing; a newer change without one clears it;
    /// `read` returns it with the state.
    @Test func thePresentationKeptIsTheNewestEventsAndReadReturnsIt() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let key = "p:{match:1}:state"
        func merge(_ ms: Int64, _ stale: String?, _ rel: String?, homeScore: JSONValue = 1) async throws {
            _ = try await redis.send(KeyStateScripts.mergeCommand(stateKey: key, KeyState.Event(millis: ms, event: .update, staleAfter: stale, relevance: rel),
                                                                  entry: "", ttlSeconds: 60, contentState: ["homeScore": homeScore])).orThrow()
        }
        try await merge(200, "600", "75")
        try await merge(100, "10", "5")
        var read = try #require(KeyStateScripts.read(try await redis.send(RedisCommand("HGETALL", key))))
        #expect(read.staleAfterSeconds == 600 && read.relevanceScore == 75 && read.newestMillis == 200)
        #expect(read.contentState["homeScore"] == .encoded(Array("1".utf8)))
        try await merge(300, nil, nil)
        read = try #require(KeyStateScripts.read(try await redis.send(RedisCommand("HGETALL", key))))
        #expect(read.staleAfterSeconds == 600, "an event that changes nothing keeps the presentation")
        try await merge(400, nil, nil, homeScore: 2)
        read = try #require(KeyStateScripts.read(try await redis.send(RedisCommand("HGETALL", key))))
        #expect(read.staleAfterSeconds == nil && read.relevanceScore == nil)
    }
}
