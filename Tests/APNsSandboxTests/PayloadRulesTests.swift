import ActivityCastCore
import APNsCore
import APNsSandbox
import Foundation
import Testing

/// The payload rules, through `handle()`: nil means accepted (200).
@Suite struct PayloadRulesTests {
    let f: Fixture
    let s: SandboxState
    init() throws {
        f = try Fixture()
        s = f.sandbox()
    }

    private func reason(_ body: [UInt8]) throws -> String? {
        let r = s.handle(try f.devicePush(body: body), nowMillis: Fixture.now)
        return r.status == 200 ? nil : r.reason ?? "status \(r.status)"
    }

    static let accepted: [String] = [
        #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#,
        #" { "aps" : { "event" : "update" , "timestamp" : 1.5e9 , "content-state" : { "a" : [1, -2.5e-3, true, false, null, "x"] } } } "#,
        #"{"aps":{"event":"end","timestamp":1}}"#,
        #"{"aps":{"event":"end","timestamp":1,"dismissal-date":0,"content-state":{"s":"é✓😀"}}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},"alert":{"title":"t","body":"b","sound":"default"},"stale-date":2,"relevance-score":0.5,"sound":"x","badge":1}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},"alert":"plain"},"custom":{"deep":[[[]]]}}"#,
        #"{"\u0061ps":{"ev\u0065nt":"upd\u0061te","timestamp":1,"content-state":{"k":"\ud83d\ude00\n\"\\\/"}}}"#,
        #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"A","attributes":{},"alert":{"title":"t","body":"b"},"input-push-token":1,"input-push-channel":"abc="}}"#,
        // The last key wins.
        #"{"aps":{"event":"bogus","event":"update","timestamp":1,"content-state":{}}}"#,
        #"{"aps":1,"aps":{"event":"update","timestamp":1,"content-state":{}}}"#,
    ]

    static let refused: [String] = [
        "not json", "{}", "[]", "null", #"{"aps":[]}"#, #"{"aps":"x"}"#, #"{"aps":{}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{}}"#,  // unterminated
        #"{"aps":{"event":"update","timestamp":1,"content-state":{}}} x"#,  // trailing garbage
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},}}"#,  // trailing comma
        #"{"aps":{"event":"pause","timestamp":1,"content-state":{}}}"#,
        #"{"aps":{"event":"Update","timestamp":1,"content-state":{}}}"#,
        #"{"aps":{"timestamp":1,"content-state":{}}}"#,
        #"{"aps":{"event":"update","content-state":{}}}"#,
        #"{"aps":{"event":"update","timestamp":"1","content-state":{}}}"#,
        #"{"aps":{"event":"update","timestamp":01,"content-state":{}}}"#,
        #"{"aps":{"event":"update","timestamp":1.,"content-state":{}}}"#,
        #"{"aps":{"event":"update","timestamp":+1,"content-state":{}}}"#,
        #"{"aps":{"event":"update","timestamp":1}}"#,  // update without content-state
        #"{"aps":{"event":"update","timestamp":1,"content-state":[]}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":"{}"}}"#,
        #"{"aps":{"event":"end","timestamp":1,"content-state":null}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},"dismissal-date":5}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},"input-push-token":1}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},"stale-date":"soon"}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{},"alert":5}}"#,
        #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes":{},"alert":"a"}}"#,
        #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"A","alert":"a"}}"#,
        #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"A","attributes":[],"alert":"a"}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{"a":"\x"}}}"#,  // bad escape
        #"{"aps":{"event":"update","timestamp":1,"content-state":{"a":"\ud83d"}}}"#,  // lone surrogate
        #"{"aps":{"event":"update","timestamp":1,"content-state":{"a":"\ude00"}}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{"a":tru}}}"#,
        #"{"aps":{"event":"update","timestamp":1,"content-state":{'a':1}}}"#,
    ]

    @Test(arguments: accepted)
    func acceptedBodies(_ body: String) throws {
        #expect(try reason(bytes(body)) == nil)
    }

    @Test(arguments: refused)
    func refusedBodies(_ body: String) throws {
        #expect(try reason(bytes(body)) == "BadRequestPayload")
    }

    @Test func rawControlCharactersAndBadUTF8AreRefused() throws {
        let good = bytes(#"{"aps":{"event":"update","timestamp":1,"content-state":{"a":"XY"}}}"#)
        let at = good.firstIndex(of: UInt8(ascii: "X"))!
        for bad: [UInt8] in [[0x01], [0x0A], [0xFF], [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xC3]] {
            var body = good
            body.replaceSubrange(at..<(at + 1), with: bad)
            #expect(try reason(body) == "BadRequestPayload", "bytes \(bad)")
        }
        var ok = good
        ok.replaceSubrange(at..<(at + 1), with: [0xF0, 0x9F, 0x98, 0x80])
        #expect(try reason(ok) == nil)
    }

    @Test func nestingIsBounded() throws {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(try reason(bytes(#"{"aps":{"event":"update","timestamp":1,"content-state":{"a":\#(deep)}}}"#)) == "BadRequestPayload")
        let fine = String(repeating: "[", count: 20) + String(repeating: "]", count: 20)
        #expect(try reason(bytes(#"{"aps":{"event":"update","timestamp":1,"content-state":{"a":\#(fine)}}}"#)) == nil)
    }

    /// Bodies that differ only in the middle share a slot of the scan cache: the cache must tell
    /// them apart by their bytes.
    @Test func theScanCacheNeverChangesAnAnswer() throws {
        let good = bytes(#"{"aps":{"event":"update","timestamp":1,"content-state":{"a":"x"}}}"#)
        var bad = good
        bad[good.count / 2] = UInt8(ascii: "{")
        for _ in 0..<3 {
            #expect(try reason(good) == nil)
            #expect(try reason(bad) == "BadRequestPayload")
            #expect(try reason(bad) == "BadRequestPayload")
        }
        // And a body whose verdict was "bad" stays bad, a good one good, across many slots.
        for i in 0..<100 {
            let body = bytes(#"{"aps":{"event":"update","timestamp":\#(i),"content-state":{}}}"#)
            #expect(try reason(body) == nil)
            #expect(try reason(Array(body.dropLast())) == "BadRequestPayload")
        }
    }

    /// Random corruptions of valid payloads: whatever the sandbox accepts must be JSON to
    /// Foundation too (the sandbox is never more lenient than a real JSON parser).
    @Test func neverMoreLenientThanFoundation() throws {
        var rng = SystemRandomNumberGenerator()
        let seeds = Self.accepted.map(bytes) + [start(timestamp: 5), end(timestamp: 9, dismissal: 3)]
        let alphabet = bytes(#"{}[]":,\ -+.0123456789eEtrufalsn"#) + [0x00, 0x1F, 0x80, 0xC3, 0xFF]
        var accepted = 0
        for i in 0..<4000 {
            var body = seeds[i % seeds.count]
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let at = Int.random(in: 0..<body.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: body[at] = alphabet.randomElement(using: &rng)!
                case 1: body.remove(at: at)
                default: body.insert(alphabet.randomElement(using: &rng)!, at: at)
                }
                if body.isEmpty { body = [0x20] }
            }
            let r = s.handle(try f.devicePush(body: body), nowMillis: Fixture.now)
            if r.status == 200 {
                accepted += 1
                #expect((try? JSONSerialization.jsonObject(with: Data(body))) != nil, "\(String(decoding: body, as: UTF8.self))")
            } else {
                #expect(r.reason == "BadRequestPayload")
            }
        }
        #expect(accepted > 0)
    }
}
