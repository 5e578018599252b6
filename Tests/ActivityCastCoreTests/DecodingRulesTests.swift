import ActivityCastCore
import Testing

/// One rule of docs/schema.md and the exact reason an entry breaking it gets.
struct RuleCase: Sendable, CustomTestStringConvertible {
    var label: String
    var kind: StreamKind
    var fields: [RawField]
    var reason: String
    var testDescription: String { label }

    init(_ label: String, _ kind: StreamKind, _ pairs: KeyValuePairs<String, String>, _ reason: String) {
        self.label = label
        self.kind = kind
        self.fields = ActivityCastCoreTests.fields(pairs)
        self.reason = reason
    }
}

private let identifierRule = "an identifier (1-128 of A-Z a-z 0-9 . _ -)"
private let millisRule = "an integer 1-9007199254740992 (Unix ms)"
private let keyRule = "match:<id>, trip:<id> or route:<id> (id: 1-128 of A-Z a-z 0-9 . _ -)"

let ruleCases: [RuleCase] = [
    // type
    RuleCase("missing type", .sports, ["ts": "1", "match": "4711"], "missing field 'type'"),
    RuleCase("empty type", .sports, ["type": "", "ts": "1", "match": "4711"], "field 'type' is empty"),
    RuleCase("repeated type", .sports, ["type": "match.started", "ts": "1", "match": "4711", "type": "match.started"],
             "duplicate field 'type'"),
    RuleCase("unknown type", .sports, ["type": "match.kickoff", "ts": "1"],
             "unknown type 'match.kickoff' for a sports stream"),
    RuleCase("transit type on sports", .sports, ["type": "trip.eta", "ts": "1"],
             "unknown type 'trip.eta' for a sports stream"),
    RuleCase("sports type on transit", .transit, ["type": "match.score", "ts": "1"],
             "unknown type 'match.score' for a transit stream"),
    RuleCase("registration on sports", .sports, ["type": "follow", "ts": "1"],
             "unknown type 'follow' for a sports stream"),
    RuleCase("feed type on registrations", .registrations, ["type": "trip.ended", "ts": "1"],
             "unknown type 'trip.ended' for a registrations stream"),
    RuleCase("type is case-sensitive", .sports, ["type": "Match.Score", "ts": "1"],
             "unknown type 'Match.Score' for a sports stream"),
    RuleCase("type with spaces", .sports, ["type": " match.score", "ts": "1"],
             "unknown type ' match.score' for a sports stream"),

    // names
    RuleCase("unknown field", .sports, ["type": "match.score", "ts": "1", "match": "4711", "scroe": "1"],
             "unknown field 'scroe' for match.score"),
    RuleCase("field of another type", .sports,
             ["type": "match.score", "ts": "1", "match": "4711", "home_score": "1", "away_score": "0", "home": "ars"],
             "unknown field 'home' for match.score"),
    RuleCase("uppercase field name", .sports, ["type": "match.started", "ts": "1", "Match": "4711"],
             "unknown field 'Match' for match.started"),
    RuleCase("duplicate field", .sports, ["type": "match.started", "ts": "1", "match": "4711", "match": "4712"],
             "duplicate field 'match'"),
    RuleCase("duplicate empty field", .sports, ["type": "match.started", "ts": "1", "match": "4711", "home": "",
                                                "home": ""],
             "duplicate field 'home'"),
    RuleCase("duplicate extension field", .sports,
             ["type": "match.started", "ts": "1", "match": "4711", "x-trace": "a", "x-trace": "b"],
             "duplicate field 'x-trace'"),
    RuleCase("first problem in entry order: duplicate", .sports,
             ["type": "match.started", "ts": "1", "match": "4711", "match": "1", "bogus": "1"],
             "duplicate field 'match'"),
    RuleCase("first problem in entry order: unknown", .sports,
             ["type": "match.started", "ts": "1", "bogus": "1", "match": "4711", "match": "1"],
             "unknown field 'bogus' for match.started"),
    RuleCase("names before presence", .sports, ["type": "match.score", "ts": "1", "scroe": "1"],
             "unknown field 'scroe' for match.score"),

    // presence
    RuleCase("missing required", .sports, ["type": "match.score", "ts": "1", "home_score": "1", "away_score": "0"],
             "missing field 'match' for match.score"),
    RuleCase("missing ts", .sports, ["type": "match.started", "match": "4711"],
             "missing field 'ts' for match.started"),
    RuleCase("missing in schema order", .transit, ["type": "trip.eta", "ts": "1", "trip": "t"],
             "missing field 'stop' for trip.eta"),
    RuleCase("empty required", .sports, ["type": "match.started", "ts": "1", "match": ""], "field 'match' is empty"),
    RuleCase("empty ts", .sports, ["type": "match.started", "ts": "", "match": "1"], "field 'ts' is empty"),
    RuleCase("missing token", .registrations, ["type": "activity.token", "ts": "1", "device": "d", "key": "match:1",
                                               "activity": "a"],
             "missing field 'token' for activity.token"),

    // text
    RuleCase("newline", .sports, ["type": "match.started", "ts": "1", "match": "1", "competition": "Premier\nLeague"],
             "field 'competition' contains a control character (U+000A)"),
    RuleCase("NUL", .sports, ["type": "match.postponed", "ts": "1", "match": "1", "reason": "rain\u{0}"],
             "field 'reason' contains a control character (U+0000)"),
    RuleCase("DEL", .sports, ["type": "match.postponed", "ts": "1", "match": "1", "reason": "rain\u{7F}"],
             "field 'reason' contains a control character (U+007F)"),
    RuleCase("C1 control", .sports, ["type": "match.postponed", "ts": "1", "match": "1", "reason": "a\u{85}b"],
             "field 'reason' contains a control character (U+0085)"),
    RuleCase("escape", .transit, ["type": "trip.cancelled", "ts": "1", "trip": "t", "reason": "\u{1B}[31mred"],
             "field 'reason' contains a control character (U+001B)"),
    RuleCase("text before values", .sports, ["type": "match.score", "ts": "x", "match": "1", "home_score": "1\r",
                                              "away_score": "1"],
             "field 'home_score' contains a control character (U+000D)"),

    // limits
    RuleCase("clock too long", .sports, ["type": "match.clock", "ts": "1", "match": "1", "clock": "90+12' (extra!!!)"],
             "field 'clock' too long: 17 bytes > 16"),

    // identifiers
    RuleCase("identifier with colon", .sports, ["type": "match.started", "ts": "1", "match": "47:11"],
             "field 'match' must be \(identifierRule), got '47:11'"),
    RuleCase("identifier with braces", .sports, ["type": "match.started", "ts": "1", "match": "{4711}"],
             "field 'match' must be \(identifierRule), got '{4711}'"),
    RuleCase("identifier with space", .transit, ["type": "trip.ended", "ts": "1", "trip": "t 981"],
             "field 'trip' must be \(identifierRule), got 't 981'"),
    RuleCase("identifier non-ASCII", .registrations, ["type": "device", "ts": "1", "device": "gerät"],
             "field 'device' must be \(identifierRule), got 'gerät'"),
    RuleCase("identifier too long", .sports,
             ["type": "match.started", "ts": "1", "match": String(repeating: "a", count: 129)],
             "field 'match' must be \(identifierRule), got '\(String(repeating: "a", count: 40))…'"),
    RuleCase("team id", .sports, ["type": "match.started", "ts": "1", "match": "1", "home": "ars:x"],
             "field 'home' must be \(identifierRule), got 'ars:x'"),
    RuleCase("next_stop is a stop id", .transit,
             ["type": "trip.position", "ts": "1", "trip": "t", "lat": "0", "lon": "0", "next_stop": "Market Sq"],
             "field 'next_stop' must be \(identifierRule), got 'Market Sq'"),

    // integers
    RuleCase("score not a number", .sports, ["type": "match.score", "ts": "1", "match": "1", "home_score": "x",
                                             "away_score": "0"],
             "field 'home_score' must be an integer 0-999, got 'x'"),
    RuleCase("score too big", .sports, ["type": "match.score", "ts": "1", "match": "1", "home_score": "1",
                                        "away_score": "1000"],
             "field 'away_score' must be an integer 0-999, got '1000'"),
    RuleCase("score negative", .sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": "-1",
                                         "away_score": "0"],
             "field 'home_score' must be an integer 0-999, got '-1'"),
    RuleCase("score with plus", .sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": "+5",
                                          "away_score": "0"],
             "field 'home_score' must be an integer 0-999, got '+5'"),
    RuleCase("score with space", .sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": " 5",
                                           "away_score": "0"],
             "field 'home_score' must be an integer 0-999, got ' 5'"),
    RuleCase("score with exponent", .sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": "1e2",
                                              "away_score": "0"],
             "field 'home_score' must be an integer 0-999, got '1e2'"),
    RuleCase("score decimal", .sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": "1.0",
                                        "away_score": "0"],
             "field 'home_score' must be an integer 0-999, got '1.0'"),
    RuleCase("ts zero", .sports, ["type": "match.started", "ts": "0", "match": "1"],
             "field 'ts' must be \(millisRule), got '0'"),
    RuleCase("ts negative", .sports, ["type": "match.started", "ts": "-5", "match": "1"],
             "field 'ts' must be \(millisRule), got '-5'"),
    RuleCase("ts above 2^53", .sports, ["type": "match.started", "ts": "9007199254740993", "match": "1"],
             "field 'ts' must be \(millisRule), got '9007199254740993'"),
    RuleCase("ts overflowing 64 bits", .sports, ["type": "match.started", "ts": "18446744073709551617", "match": "1"],
             "field 'ts' must be \(millisRule), got '18446744073709551617'"),
    RuleCase("ts in exponent form", .sports, ["type": "match.started", "ts": "1e3", "match": "1"],
             "field 'ts' must be \(millisRule), got '1e3'"),
    RuleCase("ts in seconds with fraction", .sports, ["type": "match.started", "ts": "1732233600.5", "match": "1"],
             "field 'ts' must be \(millisRule), got '1732233600.5'"),
    RuleCase("ts in seconds", .sports, ["type": "match.started", "ts": "1732435200", "match": "1"],
             "field 'ts' must be Unix milliseconds, got '1732435200', which looks like Unix seconds (1732435200000 in ms)"),
    RuleCase("ts in seconds, lowest", .sports, ["type": "match.started", "ts": "1000000000", "match": "1"],
             "field 'ts' must be Unix milliseconds, got '1000000000', which looks like Unix seconds (1000000000000 in ms)"),
    RuleCase("ts in seconds, highest", .sports, ["type": "match.started", "ts": "99999999999", "match": "1"],
             "field 'ts' must be Unix milliseconds, got '99999999999', which looks like Unix seconds (99999999999000 in ms)"),
    RuleCase("ts in seconds, leading zeros", .sports, ["type": "match.started", "ts": "01732435200", "match": "1"],
             "field 'ts' must be Unix milliseconds, got '01732435200', which looks like Unix seconds (1732435200000 in ms)"),
    RuleCase("kickoff in seconds", .sports, ["type": "match.scheduled", "ts": "1", "match": "1", "home": "a", "away": "b",
                                             "kickoff": "1732435200"],
             "field 'kickoff' must be Unix milliseconds, got '1732435200', which looks like Unix seconds (1732435200000 in ms)"),
    RuleCase("optional eta in seconds", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "1", "lon": "2",
                                                   "eta": "1732435200"],
             "field 'eta' must be Unix milliseconds, got '1732435200', which looks like Unix seconds (1732435200000 in ms)"),
    RuleCase("ts before values", .sports, ["type": "match.score", "ts": "x", "match": "1", "home_score": "x",
                                           "away_score": "0"],
             "field 'ts' must be \(millisRule), got 'x'"),
    RuleCase("kickoff", .sports, ["type": "match.scheduled", "ts": "1", "match": "1", "home": "a", "away": "b",
                                  "kickoff": "tomorrow"],
             "field 'kickoff' must be \(millisRule), got 'tomorrow'"),
    RuleCase("eta", .transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "-1"],
             "field 'eta' must be \(millisRule), got '-1'"),
    RuleCase("delay with plus", .transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                           "delay": "+5"],
             "field 'delay' must be an integer from -86400 to 86400 (seconds), got '+5'"),
    RuleCase("delay too big", .transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                         "delay": "86401"],
             "field 'delay' must be an integer from -86400 to 86400 (seconds), got '86401'"),
    RuleCase("delay too negative", .transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                              "delay": "-86401"],
             "field 'delay' must be an integer from -86400 to 86400 (seconds), got '-86401'"),
    RuleCase("delay lone minus", .transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                            "delay": "-"],
             "field 'delay' must be an integer from -86400 to 86400 (seconds), got '-'"),

    // decimals
    RuleCase("lat out of range", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "90.0001",
                                            "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '90.0001'"),
    RuleCase("lon out of range", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "0",
                                            "lon": "-180.5"],
             "field 'lon' must be a decimal from -180 to 180, got '-180.5'"),
    RuleCase("lat exponent", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "1e1", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '1e1'"),
    RuleCase("lat plus", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "+5", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '+5'"),
    RuleCase("lat bare fraction", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": ".5", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '.5'"),
    RuleCase("lat trailing dot", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "5.", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '5.'"),
    RuleCase("lat nan", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "nan", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got 'nan'"),
    RuleCase("lon inf", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "0", "lon": "-inf"],
             "field 'lon' must be a decimal from -180 to 180, got '-inf'"),
    RuleCase("lat comma", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "51,5", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '51,5'"),
    RuleCase("lat hex", .transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "0x1p3", "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '0x1p3'"),
    RuleCase("lat huge", .transit, ["type": "trip.position", "ts": "1", "trip": "t",
                                    "lat": String(repeating: "9", count: 400), "lon": "0"],
             "field 'lat' must be a decimal from -90 to 90, got '\(String(repeating: "9", count: 40))…'"),

    // choices and booleans
    RuleCase("period", .sports, ["type": "match.clock", "ts": "1", "match": "1", "clock": "1'",
                                 "period": "third_half"],
             "field 'period' must be one of first_half, half_time, second_half, extra_time, penalties, full_time, "
                 + "got 'third_half'"),
    RuleCase("moment", .sports, ["type": "match.moment", "ts": "1", "match": "1", "moment": "corner"],
             "field 'moment' must be one of goal, red_card, penalty, half_time, got 'corner'"),
    RuleCase("team side", .sports, ["type": "match.moment", "ts": "1", "match": "1", "moment": "goal",
                                    "team": "ars"],
             "field 'team' must be one of home, away, got 'ars'"),
    RuleCase("severity", .transit, ["type": "trip.disruption", "ts": "1", "route": "42", "message": "m",
                                    "severity": "critical"],
             "field 'severity' must be one of info, warning, severe, got 'critical'"),
    RuleCase("env", .registrations, ["type": "device", "ts": "1", "device": "d", "env": "sandbox"],
             "field 'env' must be one of development, production, got 'sandbox'"),
    RuleCase("tier", .registrations, ["type": "device", "ts": "1", "device": "d", "tier": "Frequent"],
             "field 'tier' must be one of standard, frequent, got 'Frequent'"),
    RuleCase("broadcast", .registrations, ["type": "device", "ts": "1", "device": "d", "broadcast": "yes"],
             "field 'broadcast' must be true, false, 1 or 0, got 'yes'"),
    RuleCase("broadcast TRUE", .registrations, ["type": "device", "ts": "1", "device": "d", "broadcast": "TRUE"],
             "field 'broadcast' must be true, false, 1 or 0, got 'TRUE'"),

    // tokens
    RuleCase("token not hex", .registrations, ["type": "start.token", "ts": "1", "device": "d", "activity_type": "A",
                                               "token": "0x" + String(repeating: "ab", count: 20)],
             "field 'token' must be hex digits, got '0x\(String(repeating: "ab", count: 19))…'"),
    RuleCase("token too short", .registrations, ["type": "start.token", "ts": "1", "device": "d",
                                                 "activity_type": "A", "token": String(repeating: "ab", count: 15)],
             "field 'token' must be 32-512 hex digits, got 30"),
    RuleCase("token too long", .registrations, ["type": "start.token", "ts": "1", "device": "d",
                                                "activity_type": "A", "token": String(repeating: "ab", count: 257)],
             "field 'token' must be 32-512 hex digits, got 514"),
    RuleCase("token odd", .registrations, ["type": "start.token", "ts": "1", "device": "d", "activity_type": "A",
                                           "token": String(repeating: "a", count: 33)],
             "field 'token' must be an even number of hex digits, got 33"),
    RuleCase("token with space", .registrations, ["type": "start.token", "ts": "1", "device": "d",
                                                  "activity_type": "A", "token": "ab cd"],
             "field 'token' must be hex digits, got 'ab cd'"),

    // keys, targets, activity types
    RuleCase("key without kind", .registrations, ["type": "activity.token", "ts": "1", "device": "d",
                                                  "key": "4711", "activity": "a", "token": token64],
             "field 'key' must be \(keyRule), got '4711'"),
    RuleCase("key of unknown kind", .registrations, ["type": "activity.token", "ts": "1", "device": "d",
                                                     "key": "team:ars", "activity": "a", "token": token64],
             "field 'key' must be \(keyRule), got 'team:ars'"),
    RuleCase("key with extra colon", .registrations, ["type": "activity.token", "ts": "1", "device": "d",
                                                      "key": "match:47:11", "activity": "a", "token": token64],
             "field 'key' must be \(keyRule), got 'match:47:11'"),
    RuleCase("key with braces", .registrations, ["type": "activity.token", "ts": "1", "device": "d",
                                                 "key": "match:{4711}", "activity": "a", "token": token64],
             "field 'key' must be \(keyRule), got 'match:{4711}'"),
    RuleCase("key with empty id", .registrations, ["type": "activity.token", "ts": "1", "device": "d",
                                                   "key": "match:", "activity": "a", "token": token64],
             "field 'key' must be \(keyRule), got 'match:'"),
    RuleCase("key uppercase kind", .registrations, ["type": "unregister", "ts": "1", "device": "d",
                                                    "key": "MATCH:1", "activity": "a"],
             "field 'key' must be \(keyRule), got 'MATCH:1'"),
    RuleCase("target of wrong kind", .registrations, ["type": "follow", "ts": "1", "device": "d",
                                                      "target": "match:4711"],
             "field 'target' must be team:<id> or route:<id> (id: 1-128 of A-Z a-z 0-9 . _ -), got 'match:4711'"),
    RuleCase("target with hash tag", .registrations, ["type": "unfollow", "ts": "1", "device": "d",
                                                      "target": "team:}x{"],
             "field 'target' must be team:<id> or route:<id> (id: 1-128 of A-Z a-z 0-9 . _ -), got 'team:}x{'"),
    RuleCase("activity type with dash", .registrations, ["type": "start.token", "ts": "1", "device": "d",
                                                         "activity_type": "Match-Attributes", "token": token64],
             "field 'activity_type' must be a Swift type name (1-128 of A-Z a-z 0-9 _ .), got 'Match-Attributes'"),
    RuleCase("activity type with colon", .registrations, ["type": "start.token", "ts": "1", "device": "d",
                                                          "activity_type": "a:b", "token": token64],
             "field 'activity_type' must be a Swift type name (1-128 of A-Z a-z 0-9 _ .), got 'a:b'"),

    // rules spanning fields
    RuleCase("goal needs team", .sports, ["type": "match.moment", "ts": "1", "match": "1", "moment": "goal",
                                          "player": "B. Saka"],
             "missing field 'team' for match.moment with moment=goal"),
    RuleCase("scores come in pairs", .sports, ["type": "match.moment", "ts": "1", "match": "1", "moment": "penalty",
                                               "home_score": "1"],
             "missing field 'away_score' for match.moment with 'home_score'"),
    RuleCase("scores come in pairs (away)", .sports, ["type": "match.abandoned", "ts": "1", "match": "1",
                                                      "away_score": "1"],
             "missing field 'home_score' for match.abandoned with 'away_score'"),
    RuleCase("disruption needs route or trip", .transit, ["type": "trip.disruption", "ts": "1", "message": "m"],
             "missing field 'route' or 'trip' for trip.disruption"),
    RuleCase("disruption with empty route and trip", .transit,
             ["type": "trip.disruption", "ts": "1", "message": "m", "route": "", "trip": ""],
             "missing field 'route' or 'trip' for trip.disruption"),
    RuleCase("unregister key only", .registrations, ["type": "unregister", "ts": "1", "device": "d",
                                                     "key": "match:1"],
             "missing field 'activity' for unregister with 'key'"),
    RuleCase("unregister activity only", .registrations, ["type": "unregister", "ts": "1", "device": "d",
                                                          "activity": "A1B2"],
             "missing field 'key' for unregister with 'activity'"),
]

@Suite("Decoding rules")
struct DecodingRulesTests {
    @Test(arguments: ruleCases)
    func rejects(_ rule: RuleCase) {
        #expect(reason(rule.kind, raw: rule.fields) == rule.reason)
    }

    @Test func tooManyFields() {
        var raw = fields(["type": "match.started", "ts": "1", "match": "1"])
        for i in 0..<67 { raw.append(RawField("x-\(i)", "")) }
        #expect(reason(.sports, raw: raw) == "too many fields: 70 > 64")
        // 64 is allowed.
        raw.removeLast(6)
        #expect(reason(.sports, raw: raw) == "<decoded match.started>")
    }

    @Test func entryTooLarge() {
        // 17 + 15 + 8 × (3 + 1000) + (3 + 942) = 9001 bytes.
        var raw = fields(["type": "match.started", "ts": "1732233600000"])
        for i in 1...8 { raw.append(RawField("x-\(i)", String(repeating: "v", count: 1000))) }
        raw.append(RawField("x-9", String(repeating: "v", count: 942)))
        #expect(reason(.sports, raw: raw) == "entry too large: 9001 bytes > 8192")
    }

    @Test func entryAtTheSizeLimitIsAccepted() {
        var raw = fields(["type": "match.started", "ts": "1732233600000", "match": "1"])  // 38 bytes
        for i in 1...8 { raw.append(RawField("x-\(i)", String(repeating: "v", count: 1016))) }  // 8152 bytes
        raw.append(RawField("x-", ""))  // 2 bytes: 8192 in all
        #expect(reason(.sports, raw: raw) == "<decoded match.started>")
    }

    @Test func valueTooLong() {
        let message = String(repeating: "m", count: 2000)
        #expect(reason(.transit, ["type": "trip.disruption", "ts": "1", "route": "42", "message": message])
            == "field 'message' too long: 2000 bytes > 1024")
        // 1024 is allowed.
        #expect(reason(.transit, ["type": "trip.disruption", "ts": "1", "route": "42",
                                  "message": String(repeating: "m", count: 1024)]) == "<decoded trip.disruption>")
    }

    @Test func customLimits() {
        let limits = DecodeLimits(maxFields: 3, maxValueBytes: 4, maxEntryBytes: 30)
        #expect(reason(.sports, ["type": "match.started", "ts": "1", "match": "1", "home": "a"], limits: limits)
            == "too many fields: 4 > 3")
        #expect(reason(.sports, ["type": "match.started", "ts": "1", "match": "12345"], limits: limits)
            == "field 'type' too long: 13 bytes > 4")
        #expect(reason(.transit, ["type": "trip.ended", "ts": "1", "trip": "1234567890"], limits: limits)
            == "entry too large: 31 bytes > 30")
    }

    @Test func limitsComeBeforeEverythingElse() {
        // No type, unknown names, bad text: still the limit is reported.
        var raw = (0..<65).map { RawField(name: [0xFF, UInt8($0)], value: [0x0A]) }
        #expect(reason(.sports, raw: raw) == "too many fields: 65 > 64")
        raw = [RawField("bogus", String(repeating: "\n", count: 9000))]
        #expect(reason(.sports, raw: raw) == "entry too large: 9005 bytes > 8192")
        raw = [RawField("bogus", String(repeating: "\n", count: 2000))]
        #expect(reason(.sports, raw: raw) == "field 'bogus' too long: 2000 bytes > 1024")
    }

    @Test func requiredFieldsOfEveryTypeAreRequired() {
        // Removing any one required field from a valid entry names that field.
        let valid: [(StreamKind, KeyValuePairs<String, String>)] = [
            (.sports, ["type": "match.scheduled", "ts": "1", "match": "1", "home": "a", "away": "b", "kickoff": "2"]),
            (.sports, ["type": "match.score", "ts": "1", "match": "1", "home_score": "1", "away_score": "0"]),
            (.sports, ["type": "match.clock", "ts": "1", "match": "1", "clock": "1'"]),
            (.sports, ["type": "match.moment", "ts": "1", "match": "1", "moment": "half_time"]),
            (.sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": "1", "away_score": "0"]),
            (.transit, ["type": "trip.started", "ts": "1", "trip": "t", "route": "r"]),
            (.transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "1", "lon": "2"]),
            (.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2"]),
            (.transit, ["type": "trip.arriving", "ts": "1", "trip": "t", "stop": "s"]),
            (.transit, ["type": "trip.departed", "ts": "1", "trip": "t", "stop": "s"]),
            (.registrations, ["type": "activity.token", "ts": "1", "device": "d", "key": "trip:t", "activity": "a",
                              "token": token64]),
            (.registrations, ["type": "start.token", "ts": "1", "device": "d", "activity_type": "T",
                              "token": token64]),
            (.registrations, ["type": "follow", "ts": "1", "device": "d", "target": "route:1"]),
        ]
        for (kind, pairs) in valid {
            let all = fields(pairs)
            let type = String(decoding: all[0].value, as: UTF8.self)
            #expect(reason(kind, raw: all) == "<decoded \(type)>")
            for i in 1..<all.count {
                var without = all
                let removed = without.remove(at: i)
                let name = String(decoding: removed.name, as: UTF8.self)
                #expect(reason(kind, raw: without) == "missing field '\(name)' for \(type)")
                without.insert(RawField(name: removed.name, value: []), at: i)
                #expect(reason(kind, raw: without) == "field '\(name)' is empty")
            }
        }
    }

    @Test func boundaryValuesAreAccepted() {
        #expect(decoded(.sports, ["type": "match.started", "ts": "9007199254740992", "match": "1"])?.timestampMillis
            == 9_007_199_254_740_992)
        #expect(decoded(.sports, ["type": "match.started", "ts": "0000001", "match": "1"])?.timestampMillis == 1)
        // Just outside the range that looks like Unix seconds: small test values and real milliseconds.
        #expect(decoded(.sports, ["type": "match.started", "ts": "1000", "match": "1"])?.timestampMillis == 1000)
        #expect(decoded(.sports, ["type": "match.started", "ts": "999999999", "match": "1"])?.timestampMillis
            == 999_999_999)
        #expect(decoded(.sports, ["type": "match.started", "ts": "100000000000", "match": "1"])?.timestampMillis
            == 100_000_000_000)
        #expect(decoded(.sports, ["type": "match.started", "ts": "1732435200000", "match": "1"])?.timestampMillis
            == 1_732_435_200_000)
        #expect(decoded(.sports, ["type": "match.full_time", "ts": "1", "match": "1", "home_score": "999",
                                  "away_score": "007"])?.body
            == .sports(.fullTime(match: "1", score: Score(home: 999, away: 7))))
        #expect(decoded(.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                   "delay": "-86400"])?.body
            == .transit(.eta(trip: "t", stop: "s", etaMillis: 2, delaySeconds: -86400, stopName: nil)))
        #expect(decoded(.transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "90", "lon": "-180.000"])?
            .body == .transit(.position(trip: "t", lat: 90, lon: -180, nextStop: nil, etaMillis: nil)))
        let id128 = String(repeating: "Az0._-", count: 21) + "xy"
        #expect(decoded(.transit, ["type": "trip.ended", "ts": "1", "trip": id128])?.body == .transit(.ended(trip: id128)))
        #expect(decoded(.sports, ["type": "match.clock", "ts": "1", "match": "1",
                                  "clock": "90+12' (extra!!)"])?.body  // 16 bytes
            == .sports(.clock(match: "1", clock: "90+12' (extra!!)", period: nil)))
    }
}
