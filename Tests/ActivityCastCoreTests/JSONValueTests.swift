import ActivityCastCore
import PlannerOracle
import Foundation
import Testing

@Suite("JSON encoding")
struct JSONValueTests {
    func json(_ value: JSONValue) -> String { String(decoding: value.encoded(), as: UTF8.self) }

    /// Parses with Foundation, which rejects anything that isn't valid JSON.
    func parse(_ value: JSONValue) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(value.encoded()), options: [.fragmentsAllowed])
    }

    @Test func scalars() {
        #expect(json(.null) == "null")
        #expect(json(true) == "true")
        #expect(json(false) == "false")
        #expect(json(0) == "0")
        #expect(json(-42) == "-42")
        #expect(json(.int(.max)) == "9223372036854775807")
        #expect(json(.int(.min)) == "-9223372036854775808")
        #expect(json(1.5) == "1.5")
        #expect(json(0.1) == "0.1")
        #expect(json(-0.1278) == "-0.1278")
    }

    @Test func nonFiniteDoublesAreNull() {
        #expect(json(.double(.nan)) == "null")
        #expect(json(.double(.infinity)) == "null")
        #expect(json(.double(-.infinity)) == "null")
        #expect(json(["a": .double(.nan)]) == "{\"a\":null}")
    }

    @Test(arguments: [0.0, -0.0, 1.0, 100.0, 1e-5, 1e16, 1e300, .leastNonzeroMagnitude, 123456.789, -1.7976931348623157e308, 0.1 + 0.2])
    func doublesRoundTripExactly(_ value: Double) throws {
        let text = json(.double(value))
        // Foundation proves it is valid JSON (its number parsing is not always correctly rounded on
        // Linux, so only closeness is checked there); Swift's parser proves the exact round trip.
        let parsed = try #require(try parse(.double(value)) as? NSNumber)
        #expect(parsed.doubleValue == value || abs(parsed.doubleValue - value) <= abs(value) * 1e-15, "\(text)")
        #expect(Double(text) == value)
        #expect(Double(text)?.sign == value.sign)
    }

    @Test func stringEscaping() {
        #expect(json("plain") == "\"plain\"")
        #expect(json("say \"hi\"") == #""say \"hi\"""#)
        #expect(json("back\\slash") == #""back\\slash""#)
        #expect(json("a/b") == "\"a/b\"")
        #expect(json("line\nbreak\r\ttab\u{8}\u{C}") == #""line\nbreak\r\ttab\b\f""#)
        #expect(json("\u{0}\u{1}\u{1F}") == #""\u0000\u0001\u001f""#)
        #expect(json("\u{7F}") == "\"\u{7F}\"")
        #expect(json("sep\u{2028}par\u{2029}") == #""sep\u2028par\u2029""#)
        #expect(json("€ Ødegaard 🇳🇴") == "\"€ Ødegaard 🇳🇴\"")
        #expect(json("") == "\"\"")
    }

    @Test func keysAreSortedAndOutputIsCompact() {
        let value: JSONValue = ["b": 1, "a": [true, nil, "x"], "B": ["z": 1, "y": 2], "é": 0, "aa": 2]
        #expect(json(value) == #"{"B":{"y":2,"z":1},"a":[true,null,"x"],"aa":2,"b":1,"é":0}"#)
    }

    @Test func encodingIsDeterministic() {
        var members: [String: JSONValue] = [:]
        for i in 0..<200 { members["key\(i)"] = .int(Int64(i)) }
        let first = JSONValue.object(members).encoded()
        // A dictionary built in another order (other hash seeds inside) encodes to the same bytes.
        var reversed: [String: JSONValue] = [:]
        for i in (0..<200).reversed() { reversed["key\(i)"] = .int(Int64(i)) }
        #expect(JSONValue.object(reversed).encoded() == first)
    }

    @Test func escapedKeys() {
        #expect(json(["a\"b\n": "v"]) == #"{"a\"b\n":"v"}"#)
    }

    @Test func roundTripsThroughFoundation() throws {
        let value: JSONValue = [
            "homeScore": 1, "awayScore": 0, "clock": "45+2'", "lat": 51.5074, "ok": true, "none": nil,
            "text": "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} sep \u{2028} emoji 🎉 é",
            "nested": ["list": [1, 2.5, "three", ["deep": [[]]]], "empty": [:]],
        ]
        let parsed = try #require(try parse(value) as? [String: Any])
        #expect(parsed["homeScore"] as? Int == 1)
        #expect(parsed["clock"] as? String == "45+2'")
        #expect(parsed["lat"] as? Double == 51.5074)
        #expect(parsed["ok"] as? Bool == true)
        #expect(parsed["none"] is NSNull)
        #expect(parsed["text"] as? String
            == "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} sep \u{2028} emoji 🎉 é")
        let nested = try #require(parsed["nested"] as? [String: Any])
        let list = try #require(nested["list"] as? [Any])
        #expect(list.count == 4)
        #expect(list[2] as? String == "three")
        #expect((nested["empty"] as? [String: Any])?.isEmpty == true)
    }

    @Test func everyControlCharacterRoundTrips() throws {
        let all = String(String.UnicodeScalarView((0..<0x20).map { Unicode.Scalar($0)! }))
        let parsed = try parse(.string(all)) as? String
        #expect(parsed == all)
    }

    @Test func plannedContentStateDecodesWithJSONDecoder() throws {
        struct ContentState: Decodable, Equatable {
            var homeScore: Int
            var awayScore: Int
            var clock: String?
            var period: String?
        }
        let entry = try #require(decoded(.sports, ["type": "match.score", "ts": "1", "match": "1",
                                                   "home_score": "2", "away_score": "1", "clock": "88'"]))
        let plan = try #require(Planner().plan(entry))
        let bytes = JSONValue.object(plan.contentState).encoded()
        let state = try JSONDecoder().decode(ContentState.self, from: Data(bytes))
        #expect(state == ContentState(homeScore: 2, awayScore: 1, clock: "88'", period: nil))
    }

    @Test func etaDateDecodesAsTheArrivalTime() throws {
        struct ContentState: Decodable { var etaDate: Date }
        let entry = try #require(decoded(.transit, ["type": "trip.eta", "ts": "1732233660000", "trip": "t",
                                                    "stop": "s", "eta": "1732233900000"]))
        let plan = try #require(Planner().plan(entry))
        let state = try JSONDecoder().decode(ContentState.self, from: Data(JSONValue.object(plan.contentState).encoded()))
        #expect(state.etaDate == Date(timeIntervalSince1970: 1_732_233_900))
    }
}
