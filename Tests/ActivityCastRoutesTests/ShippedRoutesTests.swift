import ActivityCastCore
import PlannerOracle
import ActivityCastRoutes
import Foundation
import Testing

/// The built-in routes: the same text as routes/*.yaml, and the same plans as `Planner`, which
/// they replace (kept as the oracle).
@Suite("Shipped routes")
struct ShippedRoutesTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test(arguments: [StreamKind.sports, .transit])
    func builtInTextIsTheRepositoryFile(feed: StreamKind) throws {
        let path = Self.repository.appendingPathComponent("routes/\(feed.rawValue).yaml").path
        let file = try String(contentsOfFile: path, encoding: .utf8)
        #expect(ShippedRoutes.text(for: feed) == file,
                "routes/\(feed.rawValue).yaml and ShippedRoutes.\(feed.rawValue) differ: run scripts/embed-routes.sh")
    }

    @Test func shippedRoutesCompileAndRouteEveryFeedType() throws {
        for feed in [StreamKind.sports, .transit] {
            let routes = try Routes(yaml: ShippedRoutes.text(for: feed)!, file: "\(feed.rawValue).yaml", feed: feed)
            #expect(routes.routedTypes == EntrySchema.types(of: feed).map(\.name).sorted())
            #expect(routes.dateEncoding == .since2001)
        }
        #expect(RouteSet.shipped.sports.storagePolicy == .noStorage)
        #expect(RouteSet.shipped.transit.storagePolicy == .latestMessage)
        #expect(ShippedRoutes.text(for: .registrations) == nil)
    }

    // MARK: The same plans as the planner

    /// Everything `Planner` sets; the fields only routes give (attributes-type, stale and
    /// dismissal dates, relevance, storage policy, localized alerts, sound) are cleared.
    static func plannerView(_ plan: Plan?) -> Plan? {
        guard var plan else { return nil }
        plan.staleAfterSeconds = nil
        plan.dismissAfterSeconds = nil
        plan.relevanceScore = nil
        plan.storagePolicy = .noStorage
        plan.alert = plan.alert.map { PlanAlert(title: $0.title, body: $0.body) }
        return plan
    }

    /// Routes `raw` through both; returns false (after recording why) when they differ.
    @discardableResult
    static func expectSamePlan(_ kind: StreamKind, _ raw: [RawField], sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        guard case .success(let entry) = EntryDecoder().decode(kind: kind, fields: raw) else { return false }
        let expected = Planner().plan(entry)
        let routed: Plan?
        switch RouteSet.shipped.plan(entry: entry, fields: raw) {
        case .success(let plan): routed = plan
        case .failure(let error):
            Issue.record("\(entry.type): \(error) for \(raw.map { "\(String(decoding: $0.name, as: UTF8.self))=\(String(decoding: $0.value, as: UTF8.self))" })",
                         sourceLocation: sourceLocation)
            return false
        }
        let same = plannerView(routed) == expected
        if !same {
            // Shown in full, so the difference is visible; a plan's description omits most fields.
            #expect(dump(plannerView(routed)) == dump(expected),
                "\(raw.map { "\(String(decoding: $0.name, as: UTF8.self))=\(String(decoding: $0.value, as: UTF8.self))" })",
                    sourceLocation: sourceLocation)
        }
        return same
    }

    /// Every field of a plan, JSON in its encoded form.
    static func dump(_ plan: Plan?) -> String {
        guard let plan else { return "nil" }
        func json(_ object: [String: JSONValue]) -> String { String(decoding: JSONValue.object(object).encoded(), as: UTF8.self) }
        return "\(plan) ts=\(plan.timestampMillis) state=\(json(plan.contentState)) attributes=\(json(plan.attributes)) "
            + "alert=\(plan.alert.map { "\($0)" } ?? "nil") type=\(plan.attributesType ?? "nil") "
            + "stale=\(plan.staleAfterSeconds.map(String.init) ?? "nil") dismiss=\(plan.dismissAfterSeconds.map(String.init) ?? "nil") "
            + "relevance=\(plan.relevanceScore.map { "\($0)" } ?? "nil") storage=\(plan.storagePolicy)"
    }

    /// One entry per branch of Planner.swift.
    static let handMade: [(StreamKind, [RawField])] = [
        (.sports, fields(["type": "match.scheduled", "ts": "1732230000000", "match": "4711", "home": "ars", "away": "che",
                          "kickoff": "1732233600000", "competition": "Premier League"])),
        (.sports, fields(["type": "match.scheduled", "ts": "1", "match": "4711", "home": "ars", "away": "che", "kickoff": "2"])),
        (.sports, fields(["type": "match.started", "ts": "1732233600000", "match": "4711", "home": "ars", "away": "che",
                          "competition": "Premier League"])),
        (.sports, fields(["type": "match.started", "ts": "1", "match": "4711", "competition": "Cup"])),
        (.sports, fields(["type": "match.started", "ts": "1", "match": "4711"])),
        (.sports, fields(["type": "match.started", "ts": "1", "match": "4711", "away": "che"])),
        (.sports, fields(["type": "match.started", "ts": "1", "match": "4711", "home": "ars", "away": "ars"])),
        (.sports, fields(["type": "match.score", "ts": "1732234500000", "match": "4711", "home_score": "1", "away_score": "0",
                          "clock": "15'", "period": "first_half"])),
        (.sports, fields(["type": "match.score", "ts": "1", "match": "4711", "home_score": "03", "away_score": "2"])),
        (.sports, fields(["type": "match.clock", "ts": "1", "match": "4711", "clock": "67'", "period": "second_half"])),
        (.sports, fields(["type": "match.clock", "ts": "1", "match": "4711", "clock": "45+2'"])),
        (.sports, fields(["type": "match.moment", "ts": "1732234500000", "match": "4711", "moment": "goal", "team": "home",
                          "player": "B. Saka", "clock": "15'", "home_score": "1", "away_score": "0"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "goal", "team": "away"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "red_card", "team": "away",
                          "player": "M. Caicedo", "clock": "71'"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "red_card"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "red_card", "player": "X"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "penalty", "team": "home"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "penalty", "player": "P"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "half_time", "home_score": "1",
                          "away_score": "1"])),
        (.sports, fields(["type": "match.moment", "ts": "1", "match": "4711", "moment": "half_time"])),
        (.sports, fields(["type": "match.full_time", "ts": "1732240000000", "match": "4711", "home_score": "2",
                          "away_score": "1"])),
        (.sports, fields(["type": "match.postponed", "ts": "1", "match": "4711", "reason": "Fog"])),
        (.sports, fields(["type": "match.postponed", "ts": "1", "match": "4711"])),
        (.sports, fields(["type": "match.abandoned", "ts": "1", "match": "4711", "home_score": "0", "away_score": "0"])),
        (.sports, fields(["type": "match.abandoned", "ts": "1", "match": "4711", "reason": "Storm"])),
        (.transit, fields(["type": "trip.started", "ts": "1732233600000", "trip": "t-981", "route": "42",
                           "headsign": "Central Station", "vehicle": "bus-7"])),
        (.transit, fields(["type": "trip.started", "ts": "1", "trip": "t-981", "route": "42"])),
        (.transit, fields(["type": "trip.position", "ts": "1732233700000", "trip": "t-981", "lat": "51.5074",
                           "lon": "-0.1278", "next_stop": "s-17", "eta": "1732233900000"])),
        (.transit, fields(["type": "trip.position", "ts": "1", "trip": "t-981", "lat": "0", "lon": "180"])),
        (.transit, fields(["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                           "eta": "1732233900400", "delay": "120", "stop_name": "Market Sq"])),
        (.transit, fields(["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                           "eta": "1732233600000", "delay": "-30"])),
        (.transit, fields(["type": "trip.eta", "ts": "1000", "trip": "t", "stop": "s", "eta": "2499"])),
        (.transit, fields(["type": "trip.eta", "ts": "1000", "trip": "t", "stop": "s", "eta": "2500"])),
        (.transit, fields(["type": "trip.arriving", "ts": "1732233880000", "trip": "t-981", "stop": "s-17",
                           "stop_name": "Market Sq"])),
        (.transit, fields(["type": "trip.arriving", "ts": "1", "trip": "t-981", "stop": "s-17", "eta": "3000"])),
        (.transit, fields(["type": "trip.departed", "ts": "1", "trip": "t-981", "stop": "s-17"])),
        (.transit, fields(["type": "trip.departed", "ts": "1", "trip": "t-981", "stop": "s-17", "stop_name": "Market Sq"])),
        (.transit, fields(["type": "trip.ended", "ts": "1732235000000", "trip": "t-981"])),
        (.transit, fields(["type": "trip.cancelled", "ts": "1", "trip": "t-981", "reason": "No driver"])),
        (.transit, fields(["type": "trip.cancelled", "ts": "1", "trip": "t-981"])),
        (.transit, fields(["type": "trip.disruption", "ts": "1", "route": "42", "message": "Works at night"])),
        (.transit, fields(["type": "trip.disruption", "ts": "1", "trip": "t-981", "route": "42", "message": "Delays",
                           "severity": "warning"])),
        (.transit, fields(["type": "trip.disruption", "ts": "1", "trip": "t-981", "message": "Line closed",
                           "severity": "severe"])),
        (.transit, fields(["type": "trip.disruption", "ts": "1", "route": "42", "message": "m", "severity": "info"])),
    ]

    @Test func handMadeEntriesOfEveryBranchPlanAsThePlannerDoes() {
        var types = Set<String>()
        for (kind, raw) in Self.handMade {
            #expect(Self.expectSamePlan(kind, raw))
            types.insert(String(decoding: raw[0].value, as: UTF8.self))
        }
        #expect(types == Set(EntrySchema.types.filter { $0.stream != .registrations }.map(\.name)))
    }

    // MARK: Push-to-start names its key

    /// A push-to-start carries the activity's key in its attributes (`matchId` for `match:<id>`,
    /// `tripId` for `trip:<id>`): the app that gets it registers the started activity's update
    /// token for that key, and has no other way to know it (two matches of a team look alike).
    @Test func everyStartNamesItsKeyInItsAttributes() {
        var starts = 0
        for (kind, raw) in Self.handMade {
            guard case .success(let entry) = EntryDecoder().decode(kind: kind, fields: raw),
                  case .success(let plan?) = RouteSet.shipped.plan(entry: entry, fields: raw), plan.event == .start else { continue }
            starts += 1
            let attribute = switch plan.key.kind {
            case .match: "matchId"
            case .trip: "tripId"
            case .route: "routeId"
            }
            #expect(plan.attributes[attribute] == .string(plan.key.id), "\(entry.type) for \(plan.key): \(plan.attributes)")
        }
        #expect(starts >= 6)
    }

    // MARK: Generated combinations

    /// Values to draw from, per field: edge cases of the decoder's syntax (leading zeros, negative
    /// delays, long decimals, an eta before ts) and text that looks like template syntax.
    static let pool: [String: [String]] = [
        "ts": ["1", "1000", "1732233600000", "1732233600123"],
        "match": ["4711", "m.1", "A_b-9"],
        "home": ["ars", "che", "X"], "away": ["che", "ars", "liv"],
        "kickoff": ["1732233600000", "5"],
        "competition": ["Premier League", "Cup {home} [x]", "Ünïcödé ⚽"],
        "home_score": ["0", "1", "007", "999"], "away_score": ["0", "3", "010"],
        "clock": ["15'", "45+2'", "{clock}"],
        "period": MatchPeriod.allCases.map(\.rawValue),
        "moment": MatchMoment.allCases.map(\.rawValue),
        "team": Side.allCases.map(\.rawValue),
        "player": ["B. Saka", "a \"quoted\" \\ name", "[player]"],
        "reason": ["Fog", "{reason}", "Storm, then floods"],
        "trip": ["t-981", "T.2"], "route": ["42", "N_7"],
        "headsign": ["Central Station", "]["], "vehicle": ["bus-7", "Tram 9"],
        "lat": ["51.5074", "-90", "0.1", "12.345678901234567", "-0.000001"],
        "lon": ["-0.1278", "180", "-179.99999", "7"],
        "next_stop": ["s-17", "s.18"], "stop": ["s-17", "s_1"],
        "eta": ["1", "2499", "2500", "1732233600000", "1732233900400", "9007199254740992"],
        "delay": ["0", "120", "-30", "-86400", "86400", "-0007"],
        "stop_name": ["Market Sq", "{stop}"],
        "message": ["Works at night", "[Delays]", "Line closed"],
        "severity": Severity.allCases.map(\.rawValue),
    ]

    /// Optional fields per type, in groups that are present or absent together (the scores).
    static let optionalGroups: [String: [[String]]] = [
        "match.scheduled": [["competition"]],
        "match.started": [["home"], ["away"], ["competition"]],
        "match.score": [["clock"], ["period"]],
        "match.clock": [["period"]],
        "match.moment": [["team"], ["player"], ["clock"], ["home_score", "away_score"]],
        "match.full_time": [],
        "match.postponed": [["reason"]],
        "match.abandoned": [["reason"], ["home_score", "away_score"]],
        "trip.started": [["headsign"], ["vehicle"]],
        "trip.position": [["next_stop"], ["eta"]],
        "trip.eta": [["delay"], ["stop_name"]],
        "trip.arriving": [["stop_name"], ["eta"]],
        "trip.departed": [["stop_name"]],
        "trip.ended": [],
        "trip.cancelled": [["reason"]],
        "trip.disruption": [["route"], ["trip"], ["severity"]],
    ]

    @Test func generatedCombinationsOfOptionalFieldsPlanAsThePlannerDoes() {
        var rng = SplitMix64(seed: 2024)
        var compared: [String: Int] = [:]
        var mismatches = 0
        for type in EntrySchema.types where type.stream != .registrations {
            let groups = Self.optionalGroups[type.name]!
            let required = type.fields.filter(\.required).map(\.name)
            // Every subset of the optional groups, each with several draws of values.
            for subset in 0..<(1 << groups.count) {
                for _ in 0..<64 {
                    var names = required
                    for (g, group) in groups.enumerated() where subset & (1 << g) != 0 { names += group }
                    var raw = [RawField("type", type.name)]
                    for name in names { raw.append(RawField(name, Self.pool[name]!.randomElement(using: &rng)!)) }
                    // An empty optional field counts as absent; extension fields are ignored.
                    if let empty = groups.flatMap({ $0 }).filter({ !names.contains($0) }).randomElement(using: &rng),
                       Bool.random(using: &rng) {
                        raw.append(RawField(empty, ""))
                    }
                    if Bool.random(using: &rng) { raw.append(RawField("x-trace", "abc")) }
                    raw.shuffle(using: &rng)
                    guard case .success = EntryDecoder().decode(kind: type.stream, fields: raw) else { continue }
                    if !Self.expectSamePlan(type.stream, raw) { mismatches += 1 }
                    compared[type.name, default: 0] += 1
                }
            }
        }
        #expect(mismatches == 0)
        // Every type was compared often (entries that don't decode, such as a goal without a
        // team, are skipped, so this checks that the generator still makes valid ones).
        for type in EntrySchema.types where type.stream != .registrations {
            #expect(compared[type.name, default: 0] >= 20, "\(type.name): \(compared[type.name, default: 0]) compared")
        }
    }
}
