import ActivityCastCore
import ActivityCastSend
import APNsCore
import Testing

@Suite struct PushBuilderTests {
    let key = ActivityKey(kind: .match, id: "m1")

    func json(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test func anUpdateCarriesTheWholeStateAndTheEventsTimes() throws {
        var plan = Plan(key: key, event: .update, priority: .critical, timestampMillis: 1_732_234_500_999, audience: .activity(key),
                        contentState: ["homeScore": 1], alert: PlanAlert(title: "Goal!", body: "Saka", locKey: "GOAL", locArgs: ["Saka"]))
        plan.staleAfterSeconds = 600
        plan.relevanceScore = 75
        plan.dismissAfterSeconds = 60  // end only
        let state: [String: JSONValue] = ["homeScore": .encoded(Array("1".utf8)), "awayScore": .encoded(Array("0".utf8))]
        let bytes = try PushBuilder.encoded(PushBuilder.payload(plan, contentState: state), limit: PayloadLimits.device, what: "t").get()
        #expect(json(bytes) == #"{"aps":{"alert":{"body":"Saka","loc-args":["Saka"],"loc-key":"GOAL","title":"Goal!"},"content-state":{"awayScore":0,"homeScore":1},"event":"update","relevance-score":75.0,"stale-date":1732235100,"timestamp":1732234500}}"#)
        #expect(PushBuilder.priority(plan) == 10)
    }

    @Test func anEndCarriesItsDismissalAndAStartItsAttributesAndInput() throws {
        var end = Plan(key: key, event: .end, priority: .critical, timestampMillis: 2_000_000, audience: .activity(key))
        end.dismissAfterSeconds = 0
        let e = json(try PushBuilder.encoded(PushBuilder.payload(end, contentState: [:]), limit: 4096, what: "t").get())
        #expect(e.contains(#""dismissal-date":2000"#) && e.contains(#""event":"end""#))
        var start = Plan(key: key, event: .start, priority: .critical, timestampMillis: 1000, audience: .followers([]),
                         attributes: ["homeTeam": "ars"], alert: PlanAlert(title: "Kick-off", body: "ars v che"), attributesType: "MatchActivityAttributes")
        start.dismissAfterSeconds = 5  // not on a start
        let plain = json(try PushBuilder.encoded(PushBuilder.payload(start, contentState: [:]), limit: 4096, what: "t").get())
        #expect(plain.contains(#""attributes-type":"MatchActivityAttributes""#) && plain.contains(#""input-push-token":1"#))
        #expect(!plain.contains("dismissal-date") && !plain.contains("input-push-channel"))
        let joined = json(try PushBuilder.encoded(PushBuilder.payload(start, contentState: [:], inputPushChannel: "Y2g="), limit: 4096, what: "t").get())
        #expect(joined.contains(#""input-push-channel":"Y2g=""#) && !joined.contains("input-push-token"))
    }

    @Test func anOversizedPayloadIsRejectedNotTruncated() {
        let plan = Plan(key: key, event: .update, priority: .routine, timestampMillis: 1, audience: .activity(key))
        let payload = PushBuilder.payload(plan, contentState: ["note": .string(String(repeating: "x", count: 5000))])
        guard case .failure(let r) = PushBuilder.encoded(payload, limit: PayloadLimits.device, what: "a device push") else {
            Issue.record("accepted"); return
        }
        #expect(r.description.hasPrefix("payload too large for a device push: 50"))
        #expect(r.description.contains("> 4096"))
        #expect(PushBuilder.priority(plan) == 5)
    }

    @Test func outcomesFollowApplesRules() {
        #expect(TokenOutcome.of(.delivered, reason: nil, registeredMillis: nil, attempt: 0) == .delivered)
        #expect(TokenOutcome.of(.forgetToken(invalidSince: nil), reason: .badDeviceToken, registeredMillis: 5, attempt: 0) == .forget(reason: "BadDeviceToken"))
        // 410: the token stopped being valid at 1000; registered at 500 -> forget; at 2000 (re-registered since) -> keep.
        #expect(TokenOutcome.of(.forgetToken(invalidSince: 1000), reason: .unregistered, registeredMillis: 500, attempt: 0) == .forget(reason: "Unregistered"))
        guard case .failed = TokenOutcome.of(.forgetToken(invalidSince: 1000), reason: .unregistered, registeredMillis: 2000, attempt: 0) else {
            Issue.record("a token registered after its 410 must be kept"); return
        }
        #expect(TokenOutcome.of(.retryAfter(.seconds(3)), reason: .tooManyRequests, registeredMillis: nil, attempt: 0) == .retry(after: .seconds(3), reason: "TooManyRequests"))
        #expect(TokenOutcome.of(.retryWithBackoff, reason: .internalServerError, registeredMillis: nil, attempt: 2) == .retry(after: .milliseconds(400), reason: "InternalServerError"))
        #expect(TokenOutcome.of(.retryWithBackoff, reason: nil, registeredMillis: nil, attempt: 20) == .retry(after: .milliseconds(10_000), reason: "no answer"))
        #expect(TokenOutcome.of(.fail, reason: .payloadTooLarge, registeredMillis: nil, attempt: 0) == .failed(reason: "PayloadTooLarge"))
    }
}
