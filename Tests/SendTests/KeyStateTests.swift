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

    /// Random events of one key applied in random orders: the script's answers and final state
    /// equal the model's, and every order ends in the same state.
    @Test func theScriptAgreesWithTheModelOnGeneratedSequences() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        var rng = SystemRandomNumberGenerator()
        let keys = ["homeScore", "awayScore", "clock", "period", "lastEvent"]
        for round in 0..<40 {
            var events: [(Int64, LiveActivityEvent, [String: JSONValue])] = []
            for i in 0..<Int.random(in: 1...12, using: &rng) {
                var cs: [String: JSONValue] = [:]
                for k in keys where Bool.random(using: &rng) {
                    cs[k] = Bool.random(using: &rng) ? .int(Int64(i)) : .object(["kind": .string("goal-\(i)"), "n": .double(Double(i) / 3)])
                }
                events.append((Int64(Int.random(in: 1...8, using: &rng)) * 1000, Bool.random(using: &rng) ? .update : .end, cs))
            }
            var finals: [[String: JSONValue]] = []
            for order in 0..<3 {
                let shuffled = order == 0 ? events : events.shuffled(using: &rng)
                let stateKey = "state:\(round):\(order)"
                var model = KeyState()
                for (ms, event, cs) in shuffled {
                    let expected = model.merge(millis: ms, event: event, contentState: cs)
                    let got = try KeyStateScripts.parse(try await redis.send(
                        KeyStateScripts.mergeCommand(stateKey: stateKey, millis: ms, ttlSeconds: 60, event: event, contentState: cs)))
                    #expect(got.stale == expected.stale)
                    #expect(got.changed == expected.changed)
                    #expect(got.newestMillis == model.newestMillis)
                    #expect(got.newestEvent == model.newestEvent)
                    #expect(got.contentState == model.contentState.mapValues { .encoded($0.encoded()) })
                }
                finals.append(model.contentState)
            }
            // Ties at the same time may resolve either way, so compare only when times are distinct.
            if Set(events.map(\.0)).count == events.count {
                #expect(finals.allSatisfy { $0 == finals[0] })
            }
        }
    }

    /// The presentation a flush carries is the newest event's that gave one: an older event's
    /// doesn't replace it, a newer event without one clears it; `read` returns it with the state.
    @Test func thePresentationKeptIsTheNewestEventsAndReadReturnsIt() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let key = "p:{match:1}:state"
        _ = try await redis.send(KeyStateScripts.mergeCommand(stateKey: key, millis: 200, ttlSeconds: 60, event: .update, contentState: ["homeScore": 1]))
        func present(_ ms: Int64, _ stale: String, _ rel: String) async throws -> Int64? {
            try await redis.send(.script(KeyStateScripts.presentation, keys: [key], args: [ms, stale, rel])).int
        }
        #expect(try await present(200, "600", "75") == 1)
        #expect(try await present(100, "10", "5") == 0)
        var read = try #require(KeyStateScripts.read(try await redis.send(RedisCommand("HGETALL", key))))
        #expect(read.staleAfterSeconds == 600 && read.relevanceScore == 75 && read.newestMillis == 200)
        #expect(read.contentState["homeScore"] == .encoded(Array("1".utf8)))
        #expect(try await present(300, "", "") == 1)
        read = try #require(KeyStateScripts.read(try await redis.send(RedisCommand("HGETALL", key))))
        #expect(read.staleAfterSeconds == nil && read.relevanceScore == nil)
    }
}
