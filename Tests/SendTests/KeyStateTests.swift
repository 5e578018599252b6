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

    /// An end is final, whatever order it comes in and whatever its time: it is never stale, it
    /// goes out as the key's newest push carrying the newest merged state, and after it only ends
    /// are merged. The cases of issue 40: a feed whose sources' clocks disagree, and a correction
    /// processed while the end waited for its settle time.
    @Test func anEndIsFinalWhateverItsTime() {
        // Clock skew: the score at T+5000, then full time stamped T+4000.
        var skew = KeyState()
        skew.merge(KeyState.Event(millis: 5000, event: .update, entry: "s/1-0"), contentState: ["homeScore": 2, "awayScore": 0, "clock": "89'"])
        let end = skew.merge(KeyState.Event(millis: 4000, event: .end, entry: "s/2-0"), contentState: ["period": "full_time", "clock": "90'"])
        #expect(end == .init(stale: false, changed: true))
        #expect(skew.newestEvent == .end && skew.endedMillis == 5001 && skew.newestMillis == 5001)
        // The end's own fields are merged as any event's: its `period`; the newer clock stays.
        #expect(skew.contentState == ["homeScore": 2, "awayScore": 0, "clock": "89'", "period": "full_time"])
        // After the end: an update is refused, nothing merged.
        let before = skew
        #expect(skew.merge(KeyState.Event(millis: 9000, event: .update, entry: "s/3-0"), contentState: ["homeScore": 3]) == .init(stale: false, changed: false, afterEnd: true))
        #expect(skew.merge(KeyState.Event(millis: 9000, event: .start, entry: "s/4-0"), contentState: ["homeScore": 3]).afterEnd)
        #expect(skew == before)
        // The same end delivered again: the same time, and it is an end sent again (no alert).
        #expect(skew.merge(KeyState.Event(millis: 4000, event: .end, entry: "s/2-0"), contentState: ["period": "full_time"]) == .init(stale: false, changed: false, endAgain: true))
        #expect(skew.newestMillis == 5001)
        // A corrected end: merged (its newer score wins), again without an alert.
        #expect(skew.merge(KeyState.Event(millis: 6000, event: .end, entry: "s/5-0"), contentState: ["awayScore": 1]) == .init(stale: false, changed: true, endAgain: true))
        #expect(skew.newestMillis == 6000 && skew.contentState["awayScore"] == 1)
        // One older than the key's newest: its older score loses, and it goes just after the newest.
        #expect(skew.merge(KeyState.Event(millis: 4500, event: .end, entry: "s/6-0"), contentState: ["awayScore": 0]) == .init(stale: false, changed: false, endAgain: true))
        #expect(skew.newestMillis == 6001 && skew.contentState["awayScore"] == 1)

        // The race: full time at T+20 merged before its settle, a correction at T+30 meanwhile,
        // then the end recorded: it goes after the correction, carrying it.
        var race = KeyState()
        race.merge(KeyState.Event(millis: 10, event: .update, entry: "s/1-0"), contentState: ["homeScore": 1])
        #expect(race.merge(KeyState.Event(millis: 20, event: nil, settlingEnd: true, entry: "s/2-0"), contentState: ["period": "full_time"]).changed)
        #expect(race.newestMillis == 10, "a settling end doesn't move the key's newest time")
        #expect(race.merge(KeyState.Event(millis: 30, event: .update, entry: "s/3-0"), contentState: ["homeScore": 2]) == .init(stale: false, changed: true))
        #expect(race.merge(KeyState.Event(millis: 20, event: .end, entry: "s/2-0"), contentState: ["period": "full_time"]) == .init(stale: false, changed: false))
        #expect(race.newestMillis == 31 && race.newestEvent == .end)
        #expect(race.contentState == ["homeScore": 2, "period": "full_time"])
        // A settling end after the key's end is an end: its fields are taken.
        #expect(race.merge(KeyState.Event(millis: 40, event: nil, settlingEnd: true, entry: "s/4-0"), contentState: ["homeScore": 3]).changed)

        // The key's data expired: its tombstone still says it ended.
        var tomb = race.expired()
        #expect(tomb.fields.isEmpty && tomb.endedMillis == 31)
        #expect(tomb.merge(KeyState.Event(millis: 99, event: .update), contentState: ["homeScore": 0]).afterEnd)
        #expect(KeyState().expired() == KeyState())
    }

    /// Random events of one key applied in random orders, with presentations, state limits, ends
    /// in every position (some waiting for their settle time first, some delivered again), starts,
    /// and the key's data expiring after its end: the script's answers, final state and signature
    /// equal the model's, and every order of events without an end ends in the same state.
    @Test func theScriptAgreesWithTheModelOnGeneratedSequences() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        var rng = SystemRandomNumberGenerator()
        // Names that need escaping too: the script sizes them as JSONValue encodes them.
        let keys = ["homeScore", "awayScore", "clock", "period", "lastEvent", "quote\"d", "tab\t", "nl\u{1}", "ls\u{2028}", "é"]
        var refused = 0, unchangedValues = 0, afterEnd = 0, endsAgain = 0, endsMoved = 0, tombstones = 0
        for round in 0..<60 {
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
                let kind = Int.random(in: 0..<10, using: &rng)
                let event: LiveActivityEvent? = kind < 6 ? .update : kind < 8 ? .end : kind == 8 ? .start : nil
                var e = KeyState.Event(millis: Int64(Int.random(in: 1...8, using: &rng)) * 1000, event: event,
                                       staleAfter: Bool.random(using: &rng) ? "1200" : nil, relevance: Bool.random(using: &rng) ? "50.0" : nil,
                                       stateLimit: Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 2...400, using: &rng) : nil,
                                       entry: "s/\(i)-0")
                if event == .end, Bool.random(using: &rng) {
                    // Merged before its settle time first, as the worker does, then recorded.
                    var settling = e
                    settling.event = nil
                    settling.settlingEnd = true
                    events.append((settling, cs))
                }
                events.append((e, cs))
                // The same end delivered again later.
                if event == .end, Int.random(in: 0..<3, using: &rng) == 0 { e.stateLimit = nil; events.append((e, cs)) }
            }
            var finals: [[String: JSONValue]] = []
            var refusedHere = false
            for order in 0..<3 {
                let shuffled = order == 0 ? events : events.shuffled(using: &rng)
                let stateKey = "{k\(round):\(order)}:state", tombKey = "{k\(round):\(order)}:ended"
                var model = KeyState()
                for (e, cs) in shuffled {
                    if model.endedMillis != nil, Int.random(in: 0..<6, using: &rng) == 0 {
                        // The key's data expired after its end; its tombstone stays.
                        model = model.expired()
                        _ = try await redis.command("DEL", stateKey)
                        _ = try await redis.command("SET", tombKey, model.endedMillis!)
                        tombstones += 1
                    }
                    let was = model
                    let expected = model.merge(e, contentState: cs)
                    let got = try KeyStateScripts.parse(try await redis.send(
                        KeyStateScripts.mergeCommand(stateKey: stateKey, tombstoneKey: tombKey, e, entry: e.entry, ttlSeconds: 60, contentState: cs)))
                    #expect(got.tooLarge == expected.tooLarge, "\(e) \(cs)")
                    #expect(got.stale == expected.stale, "\(e)")
                    #expect(got.changed == expected.changed, "\(e)")
                    #expect(got.afterEnd == expected.afterEnd, "\(e)")
                    #expect(got.endAgain == expected.endAgain, "\(e)")
                    #expect(got.newestMillis == model.newestMillis ?? e.millis, "\(e)")
                    #expect(got.newestEvent == model.newestEvent)
                    if expected.afterEnd {
                        afterEnd += 1
                        #expect(model == was)
                        continue
                    }
                    if expected.endAgain { endsAgain += 1 }
                    if e.event == .end, expected.tooLarge == nil, model.newestMillis != e.millis { endsMoved += 1 }
                    #expect(got.contentState == model.contentState.mapValues { .encoded($0.encoded()) })
                    if expected.tooLarge != nil {
                        refused += 1
                        refusedHere = true
                        #expect(try await redis.command("HGET", stateKey, "_rej").string == e.entry)
                    } else {
                        if !expected.changed, !cs.isEmpty { unchangedValues += 1 }
                        let sig = try await redis.command("HGET", stateKey, "_sig").string
                        let sha = try await redis.command("EVAL", "return redis.sha1hex(ARGV[1])", 0, model.signatureSource).string
                        #expect(sig == sha, "\(model.signatureSource)")
                        // A key whose only event so far is a settling end has no newest time yet.
                        let read = KeyStateScripts.read(try await redis.command("HGETALL", stateKey))
                        #expect(read?.endedMillis == model.endedMillis && read?.newestMillis == model.newestMillis)
                    }
                }
                finals.append(model.contentState)
            }
            // Ties at the same time may resolve either way, so compare only when times are distinct;
            // what is refused as too large depends on what was merged before it, and what an end
            // refuses after it on the order.
            if Set(events.map(\.0.millis)).count == events.count, !refusedHere, !events.contains(where: { $0.0.event == .end }) {
                #expect(finals.allSatisfy { $0 == finals[0] })
            }
        }
        #expect(refused > 0 && unchangedValues > 0, "refused \(refused), unchanged \(unchangedValues)")
        #expect(afterEnd > 0 && endsAgain > 0 && endsMoved > 0 && tombstones > 0,
                "after the end \(afterEnd), ends again \(endsAgain), ends moved \(endsMoved), tombstones \(tombstones)")
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
