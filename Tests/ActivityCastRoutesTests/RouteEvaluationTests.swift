import ActivityCastCore
import ActivityCastRoutes
import Testing

/// What a compiled route makes of an entry: JSON types, dates, templates, variants, audiences.
@Suite("Route evaluation")
struct RouteEvaluationTests {
    /// Routes `pairs` through a file of one transit route with the given lines.
    func transit(_ route: String, header: String = "", _ pairs: KeyValuePairs<String, String>) -> Plan? {
        let yaml = "feed: transit\nstorage-policy: latest-message\n\(header)types:\n" + route
        guard let routes = compile(yaml, feed: .transit) else { return nil }
        let raw = fields(pairs)
        guard case .success(let entry) = decode(.transit, raw) else {
            Issue.record("did not decode")
            return nil
        }
        switch routes.plan(entry: entry, fields: raw) {
        case .success(let plan): return plan
        case .failure(let error):
            Issue.record("\(error)")
            return nil
        }
    }

    static let eta = "  trip.eta:\n    key: \"trip:{trip}\"\n    event: update\n    priority: routine\n"
    static let etaEntry: KeyValuePairs<String, String> = ["type": "trip.eta", "ts": "1732233660000", "trip": "t-1", "stop": "s-17",
                                                          "eta": "1732233900400", "delay": "-0030"]

    // MARK: Types and dates

    @Test func exactJSONTypesFromFieldsAndConstants() {
        let plan = transit(Self.eta + """
                content-state:
                  stop: string stop
                  delay: int delay
                  delayAsDouble: double delay
                  delayAsText: string delay
                  eta: int eta
                  count: int -3
                  ratio: double 0.25
                  whole: double 2
                  live: bool true
                  quiet: bool false
                  label: string "a \\"quoted\\" \\\\ text"
                  empty: string ""

            """, Self.etaEntry)
        #expect(plan?.contentState == [
            "stop": "s-17", "delay": .int(-30), "delayAsDouble": .double(-30), "delayAsText": "-30",
            "eta": .int(1_732_233_900_400), "count": .int(-3), "ratio": .double(0.25), "whole": .double(2),
            "live": true, "quiet": false, "label": "a \"quoted\" \\ text", "empty": "",
        ])
    }

    @Test func datesAreSecondsSince2001UnlessTheFileOrTheKeySaysUnixSeconds() {
        let state = """
                content-state:
                  arrival: date eta
                  arrival2001: date-since-2001 eta
                  arrivalUnix: date-unix-seconds eta
                  sent: date ts

            """
        let eta2001: Double = 1_732_233_900.4 - 978_307_200
        let ts2001: Double = 1_732_233_660 - 978_307_200
        let etaUnix: Double = 1_732_233_900.4
        let tsUnix: Double = 1_732_233_660
        let since2001 = transit(Self.eta + state, Self.etaEntry)
        let expected2001: [String: JSONValue] = ["arrival": .double(eta2001), "arrival2001": .double(eta2001),
                                                 "arrivalUnix": .double(etaUnix), "sent": .double(ts2001)]
        #expect(since2001?.contentState == expected2001)
        let unix = transit(Self.eta + state, header: "date-encoding: unix-seconds\n", Self.etaEntry)
        let expectedUnix: [String: JSONValue] = ["arrival": .double(etaUnix), "arrival2001": .double(eta2001),
                                                 "arrivalUnix": .double(etaUnix), "sent": .double(tsUnix)]
        #expect(unix?.contentState == expectedUnix)
    }

    @Test func secondsUntilIsRoundedAndNeverNegative() {
        let route = Self.eta + "    content-state:\n      left: seconds-until eta\n"
        func left(ts: String, eta: String) -> JSONValue? {
            transit(route, ["type": "trip.eta", "ts": ts, "trip": "t", "stop": "s", "eta": eta])?.contentState["left"]
        }
        #expect(left(ts: "1000", eta: "2499") == 1)
        #expect(left(ts: "1000", eta: "2500") == 2)
        #expect(left(ts: "5000", eta: "1000") == 0)
        #expect(left(ts: "1732233660000", eta: "1732233900400") == 240)
    }

    @Test func absentFieldsAreLeftOutOrFallBack() {
        let route = Self.eta + """
                content-state:
                  name: string stop_name
                  nameOrDash: string stop_name ?? "-"
                  delay: int delay ?? 0
                  detail:
                    name: string stop_name
                    delay: int delay
                  always:
                    stop: string stop
                    name: string stop_name

            """
        let plan = transit(route, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2", "stop_name": ""])
        // An empty field is absent; an object with no members is left out.
        #expect(plan?.contentState == ["nameOrDash": "-", "delay": 0, "always": ["stop": "s"]])
    }

    // MARK: Templates

    @Test func optionalSegmentsAlternativesAndLiteralBrackets() {
        let route = Self.eta + """
                content-state:
                  stop: string stop
                alert:
                  title: ["{stop_name} in {{braces}} and [[brackets]]", "Stop {stop}"]
                  body: "Stop {stop}[ ({stop_name})][, {delay} s late]"
                  sound: "default"

            """
        let full = transit(route, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s-1", "eta": "2", "stop_name": "Sq",
                                   "delay": "007"])
        #expect(full?.alert == PlanAlert(title: "Sq in {braces} and [brackets]", body: "Stop s-1 (Sq), 7 s late", sound: "default"))
        let bare = transit(route, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s-1", "eta": "2"])
        #expect(bare?.alert == PlanAlert(title: "Stop s-1", body: "Stop s-1", sound: "default"))
    }

    @Test func fieldValuesAreNeverReadAsTemplates() {
        let route = Self.eta + "    alert:\n      title: \"[{stop_name}]\"\n      body: \"{stop}: [{stop_name}]\"\n"
        let plan = transit(route, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                   "stop_name": "{stop} [x] }}"])
        #expect(plan?.alert == PlanAlert(title: "{stop} [x] }}", body: "s: {stop} [x] }}"))
    }

    @Test func localizedAlertKeysAndArguments() {
        let route = Self.eta + """
                alert:
                  title: "Delay"
                  body: "Stop {stop}[ is {delay} s late]"
                  title-loc-key: TRIP_DELAY_TITLE
                  title-loc-args: ["{stop}"]
                  loc-key: ["TRIP_DELAY_{delay}", "TRIP_DELAY"]
                  loc-args: ["{stop}", "[{delay}]", "[{stop_name}]"]

            """
        let plan = transit(route, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2", "delay": "60"])
        #expect(plan?.alert == PlanAlert(title: "Delay", body: "Stop s is 60 s late", titleLocKey: "TRIP_DELAY_TITLE",
                                         titleLocArgs: ["s"], locKey: "TRIP_DELAY_60", locArgs: ["s", "60", ""]))
    }

    // MARK: Variants, audiences, keys

    @Test func variantsOverrideTheRouteAndMergeItsContentState() {
        let route = """
              trip.disruption:
                key: ["trip:{trip}", "route:{route}"]
                event: update
                priority: routine
                content-state:
                  message: string message
                  level: int 0
                variant-by: severity
                variants:
                  severe:
                    event: end
                    priority: critical
                    dismiss-after: 0
                    content-state:
                      level: int 2
                      closed: bool true
                    alert: {title: "Closed", body: "{message}"}
                  info: ~

            """
        func plan(_ severity: String?) -> Plan? {
            switch severity {
            case let severity?:
                transit(route, ["type": "trip.disruption", "ts": "1", "route": "42", "message": "m", "severity": severity])
            case nil:
                transit(route, ["type": "trip.disruption", "ts": "1", "route": "42", "message": "m"])
            }
        }
        let routeKey = ActivityKey(kind: .route, id: "42")
        #expect(plan("severe") == Plan(key: routeKey, event: .end, priority: .critical, timestampMillis: 1,
                                       audience: .activity(routeKey),
                                       contentState: ["message": "m", "level": 2, "closed": true],
                                       alert: PlanAlert(title: "Closed", body: "m"), dismissAfterSeconds: 0,
                                       storagePolicy: .latestMessage))
        // A value without a variant, a variant of ~, and no value at all: the route itself.
        for severity in ["warning", "info", nil] {
            #expect(plan(severity) == Plan(key: routeKey, event: .update, priority: .routine, timestampMillis: 1,
                                           audience: .activity(routeKey), contentState: ["message": "m", "level": 0],
                                           storagePolicy: .latestMessage), "\(severity ?? "nil")")
        }
    }

    @Test func startAudienceDropsAbsentTargetsAndDuplicates() {
        let yaml = sportsFile("""
              match.started:
                key: "match:{match}"
                event: start
                priority: critical
                attributes-type: MatchActivityAttributes
                followers: ["team:{home}", "team:{away}", "team:{home}"]
                alert: {title: "Kick-off", body: "Go"}

            """)
        guard let routes = compile(yaml) else { return }
        let set = RouteSet(sports: routes, transit: RouteSet.shipped.transit)
        #expect(routePlan(set, .sports, ["type": "match.started", "ts": "1", "match": "m", "home": "a", "away": "b"])?.audience
            == .followers([FollowTarget(kind: .team, id: "a"), FollowTarget(kind: .team, id: "b")]))
        #expect(routePlan(set, .sports, ["type": "match.started", "ts": "1", "match": "m", "home": "a", "away": "a"])?.audience
            == .followers([FollowTarget(kind: .team, id: "a")]))
        #expect(routePlan(set, .sports, ["type": "match.started", "ts": "1", "match": "m", "away": "b"])?.audience
            == .followers([FollowTarget(kind: .team, id: "b")]))
        #expect(routePlan(set, .sports, ["type": "match.started", "ts": "1", "match": "m"])?.audience == Audience.none)
    }

    @Test func defaultsApplyWhereTheyMeanSomethingAndRoutesOverrideThem() {
        let yaml = """
            feed: sports
            storage-policy: no-storage
            defaults: {stale-after: 600, relevance: 10, dismiss-after: 60}
            types:
              match.score: {key: "match:{match}", event: update, priority: critical, content-state: {homeScore: int home_score}}
              match.clock: {key: "match:{match}", event: update, priority: routine, stale-after: 90, relevance: 0,
                            content-state: {clock: string clock}}
              match.full_time: {key: "match:{match}", event: end, priority: critical}
              match.postponed: {key: "match:{match}", event: end, priority: critical, dismiss-after: 0}
              match.scheduled: {key: "match:{match}", event: none}
              match.abandoned: ~

            """
        guard let routes = compile(yaml) else { return }
        let set = RouteSet(sports: routes, transit: RouteSet.shipped.transit)
        let score = routePlan(set, .sports, ["type": "match.score", "ts": "1", "match": "m", "home_score": "1", "away_score": "0"])
        #expect(score?.staleAfterSeconds == 600 && score?.relevanceScore == 10 && score?.dismissAfterSeconds == nil)
        let clock = routePlan(set, .sports, ["type": "match.clock", "ts": "1", "match": "m", "clock": "1'"])
        #expect(clock?.staleAfterSeconds == 90 && clock?.relevanceScore == 0)
        let end = routePlan(set, .sports, ["type": "match.full_time", "ts": "1", "match": "m", "home_score": "1", "away_score": "0"])
        #expect(end?.staleAfterSeconds == nil && end?.dismissAfterSeconds == 60 && end?.relevanceScore == 10)
        #expect(routePlan(set, .sports, ["type": "match.postponed", "ts": "1", "match": "m"])?.dismissAfterSeconds == 0)
        let none = routePlan(set, .sports, ["type": "match.scheduled", "ts": "1", "match": "m", "home": "a", "away": "b",
                                            "kickoff": "2"])
        #expect(none == Plan(key: ActivityKey(kind: .match, id: "m"), event: nil, priority: .routine, timestampMillis: 1,
                             audience: .none))
        // `~` and a type not listed are both routed to nothing.
        #expect(routes.routedTypes == ["match.clock", "match.full_time", "match.postponed", "match.scheduled", "match.score"])
        let abandoned = fields(["type": "match.abandoned", "ts": "1", "match": "m"])
        let moment = fields(["type": "match.moment", "ts": "1", "match": "m", "moment": "red_card"])
        for raw in [abandoned, moment] {
            let entry = try? decode(.sports, raw).get()
            #expect(entry.map { routes.plan(entry: $0, fields: raw) == .success(nil) } == true)
        }
    }

    // MARK: Entries the decoder did not validate

    @Test func valuesThatDoNotParseAreErrorsNotCrashes() {
        guard let routes = compile(sportsFile("  match.score:\n    key: \"match:{match}\"\n    event: update\n"
            + "    priority: critical\n    content-state:\n      homeScore: int home_score\n")) else { return }
        let entry = DecodedEntry(type: "match.score", timestampMillis: 1,
                                 body: .sports(.score(match: "m", score: Score(home: 1, away: 0), clock: nil, period: nil)))
        let raw = fields(["type": "match.score", "ts": "1", "match": "m", "home_score": "1x", "away_score": "0"])
        #expect(routes.plan(entry: entry, fields: raw)
            == .failure(RouteError(location: nil, reason: "match.score: field 'home_score' is not an integer: '1x'")))
        let huge = fields(["type": "match.score", "ts": "1", "match": "m", "home_score": "99999999999999999999", "away_score": "0"])
        #expect(routes.plan(entry: entry, fields: huge)
            == .failure(RouteError(location: nil, reason: "match.score: field 'home_score' is not an integer: '99999999999999999999'")))
    }

    /// Hostile raw fields under a type's name (as if the decoder had been skipped): every plan
    /// either succeeds or says why, and nothing traps.
    @Test func unvalidatedRandomFieldsNeverCrash() {
        var rng = SplitMix64(seed: 99)
        let junk = ["", "-", "--1", "1.", "x", "99999999999999999999", "-9223372036854775808", "1e5", "\u{0}", "{a}", "[", "é",
                    "9007199254740993", "0.1.2", "true"]
        var failures = 0, plans = 0
        for type in EntrySchema.types where type.stream != .registrations {
            let entry = DecodedEntry(type: type.name, timestampMillis: 1_000,
                                     body: type.stream == .sports ? .sports(.postponed(match: "m", reason: nil))
                                         : .transit(.ended(trip: "t")))
            for _ in 0..<300 {
                var raw = [RawField("type", type.name)]
                for field in type.fields where Bool.random(using: &rng) {
                    raw.append(RawField(field.name, junk.randomElement(using: &rng)!))
                }
                switch RouteSet.shipped.plan(entry: entry, fields: raw) {
                case .success: plans += 1
                case .failure(let error):
                    failures += 1
                    #expect(!error.reason.contains("\n") && error.location == nil)
                }
            }
        }
        // Both outcomes happen, so both paths were exercised.
        #expect(failures > 100 && plans > 100, "\(failures) failures, \(plans) plans")
    }

    @Test func registrationsHaveNoRouteFile() {
        #expect(rejection("feed: sports\n", feed: .registrations)
            == "registrations have no routes; a route file is for sports or transit")
    }

    // MARK: Cost

    /// Not a benchmark (no timing is asserted): many evaluations of every feed type through one
    /// compiled route set give the same plans as the first, so nothing is rebuilt or accumulated
    /// per event. `swift test -c release --filter RouteEvaluationTests` shows the time it takes.
    @Test func manyEvaluationsReuseTheCompiledRoutes() {
        let entries: [(DecodedEntry, [RawField])] = ShippedRoutesTests.handMade.compactMap { kind, raw in
            (try? decode(kind, raw).get()).map { ($0, raw) }
        }
        #expect(entries.count == ShippedRoutesTests.handMade.count)
        let routes = RouteSet.shipped
        let first = entries.map { routes.plan(entry: $0.0, fields: $0.1) }
        var same = 0
        for _ in 0..<500 {
            for (i, (entry, raw)) in entries.enumerated() where routes.plan(entry: entry, fields: raw) == first[i] { same += 1 }
        }
        #expect(same == 500 * entries.count)
    }
}
