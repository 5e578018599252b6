import ActivityCastCore
import PlannerOracle
import Testing

@Suite("Hostile input")
struct HostileInputTests {
    /// A reason must be a single short line whatever the entry contained.
    static func isSafeReason(_ reason: String) -> Bool {
        !reason.isEmpty && reason.utf8.count <= 400
            && !reason.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value)
                || $0 == "\u{2028}" || $0 == "\u{2029}" }
    }

    @Test func invalidUTF8() {
        let cases: [[UInt8]] = [
            [0xFF],                    // never valid
            [0xC0, 0xAF],              // overlong "/"
            [0xE0, 0x80, 0xAF],        // overlong
            [0xED, 0xA0, 0x80],        // UTF-16 surrogate
            [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
            [0x41, 0xE2, 0x82],        // truncated
            [0x80, 0x41],              // lone continuation
        ]
        for bytes in cases {
            var raw = fields(["type": "match.postponed", "ts": "1", "match": "4711"])
            raw.append(RawField(name: Array("reason".utf8), value: bytes))
            #expect(reason(.sports, raw: raw) == "field 'reason' is not valid UTF-8", "\(bytes)")
        }
    }

    @Test func invalidUTF8InNamesAndTypesIsQuotedSafely() {
        var raw = fields(["type": "match.started", "ts": "1", "match": "1"])
        raw.append(RawField(name: [0x68, 0xFF, 0x0A, 0x27, 0x5C], value: Array("v".utf8)))
        #expect(reason(.sports, raw: raw) == "unknown field 'h\\xFF\\n\\'\\\\' for match.started")

        raw = [RawField(name: Array("type".utf8), value: [0x6D, 0xC3, 0x0D, 0x0A, 0xE2, 0x80, 0xA8, 0x00])]
        #expect(reason(.sports, raw: raw) == "unknown type 'm\\xC3\\r\\n\\u{2028}\\u{0000}' for a sports stream")
    }

    @Test func quotedValuesAreTruncatedAtACharacterBoundary() {
        // 39 ASCII bytes and then "é" (2 bytes) would pass 40 bytes: cut before it.
        let value = String(repeating: "a", count: 39) + "éé"
        #expect(reason(.sports, ["type": "match.started", "ts": "1", "match": value])
            == "field 'match' must be an identifier (1-128 of A-Z a-z 0-9 . _ -), got '\(String(repeating: "a", count: 39))…'")
        // Exactly 40 bytes are shown whole.
        let forty = String(repeating: "b", count: 38) + "é"
        #expect(reason(.sports, ["type": "match.started", "ts": "1", "match": forty])
            == "field 'match' must be an identifier (1-128 of A-Z a-z 0-9 . _ -), got '\(forty)'")
    }

    @Test func bidiAndInvisibleCharactersAreEscapedInReasons() {
        #expect(reason(.sports, ["type": "match\u{202E}erocs", "ts": "1"])
            == "unknown type 'match\\u{202E}erocs' for a sports stream")
        #expect(reason(.sports, ["type": "\u{FEFF}match.score", "ts": "1"])
            == "unknown type '\\u{FEFF}match.score' for a sports stream")
    }

    @Test func newlinesInValues() {
        #expect(reason(.transit, ["type": "trip.arriving", "ts": "1", "trip": "t", "stop": "s",
                                  "stop_name": "Market Sq\r\nX-Injected: 1"])
            == "field 'stop_name' contains a control character (U+000D)")
        #expect(reason(.transit, ["type": "trip.arriving", "ts": "1", "trip": "t\n", "stop": "s"])
            == "field 'trip' contains a control character (U+000A)")
    }

    @Test func nulBytes() {
        #expect(reason(.sports, ["type": "match.started", "ts": "1", "match": "47\u{0}11"])
            == "field 'match' contains a control character (U+0000)")
        // A name with a NUL is not the name it starts with.
        var raw = fields(["type": "match.started", "ts": "1", "match": "1"])
        raw.append(RawField(name: Array("home".utf8) + [0], value: Array("ars".utf8)))
        #expect(reason(.sports, raw: raw) == "unknown field 'home\\u{0000}' for match.started")
        raw = [RawField(name: Array("type".utf8), value: Array("match.started".utf8) + [0])]
        #expect(reason(.sports, raw: raw) == "unknown type 'match.started\\u{0000}' for a sports stream")
        raw = [RawField(name: [], value: [])]
        #expect(reason(.sports, raw: raw) == "missing field 'type'")
    }

    @Test func hugeValue() {
        let big = String(repeating: "x", count: 100_000)
        #expect(reason(.sports, ["type": "match.postponed", "ts": "1", "match": "1", "reason": big])
            == "entry too large: 100034 bytes > 8192")
        let generous = DecodeLimits(maxEntryBytes: 1 << 20)
        #expect(reason(.sports, ["type": "match.postponed", "ts": "1", "match": "1", "reason": big], limits: generous)
            == "field 'reason' too long: 100000 bytes > 1024")
        // A huge name is cut in the reason.
        let raw = [RawField(name: Array(repeating: 0x6E, count: 5000), value: [])]
        #expect(reason(.sports, raw: raw, limits: generous)
            == "missing field 'type'")
        let withType = fields(["type": "match.started", "ts": "1", "match": "1"]) + raw
        #expect(reason(.sports, raw: withType, limits: generous)
            == "unknown field '\(String(repeating: "n", count: 40))…' for match.started")
    }

    @Test func tenThousandFields() {
        let raw = (0..<10_000).map { RawField("f\($0)", "v") }
        #expect(reason(.sports, raw: raw) == "too many fields: 10000 > 64")
        let repeated = [RawField](repeating: RawField("match", "1"), count: 10_000)
        #expect(reason(.sports, raw: repeated) == "too many fields: 10000 > 64")
    }

    @Test func hugeIntegers() {
        let digits = String(repeating: "9", count: 1000)
        #expect(reason(.sports, ["type": "match.score", "ts": "1", "match": "1", "home_score": digits,
                                 "away_score": "0"])
            == "field 'home_score' must be an integer 0-999, got '\(String(repeating: "9", count: 40))…'")
        #expect(reason(.sports, ["type": "match.started", "ts": "99999999999999999999999999", "match": "1"])
            == "field 'ts' must be an integer 1-9007199254740992 (Unix ms), got '99999999999999999999999999'")
        #expect(reason(.sports, ["type": "match.started", "ts": "-9223372036854775808", "match": "1"])
            == "field 'ts' must be an integer 1-9007199254740992 (Unix ms), got '-9223372036854775808'")
        #expect(reason(.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                  "delay": "-99999999999999999999"])
            == "field 'delay' must be an integer from -86400 to 86400 (seconds), got '-99999999999999999999'")
        #expect(reason(.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                  "delay": "--5"])
            == "field 'delay' must be an integer from -86400 to 86400 (seconds), got '--5'")
    }

    @Test func emptyEntry() {
        #expect(reason(.sports, raw: []) == "missing field 'type'")
        #expect(reason(.registrations, ["type": ""]) == "field 'type' is empty")
    }

    @Test func extensionFieldValuesAreNotInspected() {
        var raw = fields(["type": "trip.ended", "ts": "1", "trip": "t"])
        raw.append(RawField(name: Array("x-blob".utf8), value: [0xFF, 0x00, 0x0A]))
        #expect(reason(.transit, raw: raw) == "<decoded trip.ended>")
    }

    /// Valid entries of every stream, mutated at random (fields dropped, repeated, renamed, values
    /// swapped or corrupted), never crash the decoder and always give a decoded entry or one safe line.
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func mutatedEntriesNeverCrash(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        let templates: [(StreamKind, [RawField])] = [
            (.sports, fields(["type": "match.moment", "ts": "1732234500000", "match": "4711", "moment": "goal",
                              "team": "home", "player": "B. Saka", "clock": "15'", "home_score": "1",
                              "away_score": "0"])),
            (.sports, fields(["type": "match.scheduled", "ts": "1", "match": "4711", "home": "ars", "away": "che",
                              "kickoff": "1732233600000", "competition": "Premier League"])),
            (.transit, fields(["type": "trip.position", "ts": "1", "trip": "t-981", "lat": "51.5074",
                               "lon": "-0.1278", "next_stop": "s-17", "eta": "1732233900000"])),
            (.transit, fields(["type": "trip.disruption", "ts": "1", "route": "42", "message": "Delays",
                               "severity": "severe"])),
            (.registrations, fields(["type": "activity.token", "ts": "1", "device": "d-1", "key": "match:4711",
                                     "activity": "A1B2", "token": token64, "env": "development",
                                     "tier": "frequent", "broadcast": "true"])),
            (.registrations, fields(["type": "unregister", "ts": "1", "device": "d-1", "key": "trip:t-981",
                                     "activity": "A1"])),
        ]
        let names = ["type", "ts", "match", "home_score", "team", "trip", "lat", "eta", "delay", "key", "token",
                     "target", "x-t", "bogus", "Match", ""]
        let values = ["match.score", "trip.eta", "unregister", "goal", "home", "1", "0", "-1", "999",
                      "9007199254740993", "51.5", "-0.0", "true", "match:4711", "team:ars", "route:42", token64,
                      "", " ", "é", "\n", "1e3", "+5", "A1B2", "{x}", "a:b"]
        let decoder = EntryDecoder()
        var decodedCount = 0
        for _ in 0..<5_000 {
            let (kind, template) = templates.randomElement(using: &rng)!
            var raw = template
            for _ in 0..<Int.random(in: 0...3, using: &rng) {
                let i = Int.random(in: 0..<raw.count, using: &rng)
                switch Int.random(in: 0..<6, using: &rng) {
                case 0: raw.remove(at: i)
                case 1: raw.append(raw[i])
                case 2: raw[i].name = Array(names.randomElement(using: &rng)!.utf8)
                case 3: raw[i].value = Array(values.randomElement(using: &rng)!.utf8)
                case 4:
                    if !raw[i].value.isEmpty {
                        raw[i].value[Int.random(in: 0..<raw[i].value.count, using: &rng)] = .random(in: 0...255, using: &rng)
                    }
                default:
                    raw[i].value = (0..<Int.random(in: 0...40, using: &rng)).map { _ in .random(in: 0...255, using: &rng) }
                }
                if raw.isEmpty { break }
            }
            raw.shuffle(using: &rng)
            switch decoder.decode(kind: kind, fields: raw) {
            case .success(let entry):
                decodedCount += 1
                #expect(entry.timestampMillis >= 1 && entry.timestampMillis <= 1 << 53)
                // Whatever decoded must plan without trouble too.
                _ = Planner().plan(entry)
            case .failure(let error):
                #expect(Self.isSafeReason(error.reason), "\(error.reason)")
            }
        }
        // Unmutated and harmlessly mutated entries decode, so the generator exercises the value parsers.
        #expect(decodedCount > 500)
    }

    /// Fully random bytes, names and values, including sizes around the limits.
    @Test func randomBytesNeverCrash() {
        var rng = SplitMix64(seed: 0xAC)
        let decoder = EntryDecoder(limits: DecodeLimits(maxFields: 16, maxValueBytes: 64, maxEntryBytes: 256))
        for _ in 0..<20_000 {
            let raw = (0..<Int.random(in: 0...20, using: &rng)).map { _ in
                RawField(name: (0..<Int.random(in: 0...12, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) },
                         value: (0..<Int.random(in: 0...80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
            }
            let kind = StreamKind.allCases.randomElement(using: &rng)!
            if case .failure(let error) = decoder.decode(kind: kind, fields: raw) {
                #expect(Self.isSafeReason(error.reason), "\(error.reason)")
            }
        }
    }
}
