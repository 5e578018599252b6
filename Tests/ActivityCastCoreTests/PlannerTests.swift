import ActivityCastCore
import PlannerOracle
import Testing

@Suite("Planner")
struct PlannerTests {
    let planner = Planner()

    func plan(_ kind: StreamKind, _ pairs: KeyValuePairs<String, String>) -> Plan? {
        guard let entry = decoded(kind, pairs) else {
            Issue.record("entry did not decode: \(reason(kind, pairs))")
            return nil
        }
        return planner.plan(entry)
    }

    let match = ActivityKey(kind: .match, id: "4711")
    let trip = ActivityKey(kind: .trip, id: "t-981")

    // MARK: Sports

    @Test func scheduledSendsNothing() {
        let plan = plan(.sports, ["type": "match.scheduled", "ts": "1732230000000", "match": "4711", "home": "ars",
                                  "away": "che", "kickoff": "1732233600000"])
        #expect(plan == Plan(key: match, event: nil, priority: .routine, timestampMillis: 1_732_230_000_000,
                             audience: .none, contentState: [:],
                             attributes: ["matchId": "4711", "homeTeam": "ars", "awayTeam": "che"]))
        #expect(plan?.description == "key=match:4711 event=none priority=routine audience=none")
    }

    @Test func startedPushesToFollowersOfBothTeams() {
        let plan = plan(.sports, ["type": "match.started", "ts": "1732233600000", "match": "4711", "home": "ars",
                                  "away": "che", "competition": "Premier League"])
        #expect(plan?.event == .start)
        #expect(plan?.priority == .critical)
        #expect(plan?.timestampMillis == 1_732_233_600_000)
        #expect(plan?.audience == .followers([FollowTarget(kind: .team, id: "ars"), FollowTarget(kind: .team, id: "che")]))
        #expect(plan?.contentState == ["homeScore": 0, "awayScore": 0])
        #expect(plan?.attributes == ["matchId": "4711", "homeTeam": "ars", "awayTeam": "che", "competition": "Premier League"])
        #expect(plan?.alert == PlanAlert(title: "Kick-off", body: "ars v che"))
        #expect(plan?.attributesType == "MatchActivityAttributes")
        #expect(plan?.description
            == "key=match:4711 event=start priority=critical audience=followers(team:ars,team:che) alert=Kick-off")
    }

    @Test func startedWithoutTeamsHasNoAudience() {
        let plan = plan(.sports, ["type": "match.started", "ts": "1", "match": "4711", "competition": "Cup"])
        #expect(plan?.event == .start)
        #expect(plan?.audience == Audience.none)
        #expect(plan?.alert == PlanAlert(title: "Kick-off", body: "Cup"))
    }

    @Test func startedWithOneTeamReachesItsFollowers() {
        let plan = plan(.sports, ["type": "match.started", "ts": "1", "match": "4711", "away": "che"])
        #expect(plan?.audience == .followers([FollowTarget(kind: .team, id: "che")]))
    }

    @Test func score() {
        let plan = plan(.sports, ["type": "match.score", "ts": "1732234500000", "match": "4711", "home_score": "1",
                                  "away_score": "0", "clock": "15'", "period": "first_half"])
        #expect(plan == Plan(key: match, event: .update, priority: .critical, timestampMillis: 1_732_234_500_000,
                             audience: .activity(match),
                             contentState: ["homeScore": 1, "awayScore": 0, "clock": "15'", "period": "first_half"]))
        #expect(plan?.description == "key=match:4711 event=update priority=critical audience=channel+tokens(match:4711)")
    }

    @Test func scoreWithoutClock() {
        let plan = plan(.sports, ["type": "match.score", "ts": "1", "match": "4711", "home_score": "3",
                                  "away_score": "2"])
        #expect(plan?.contentState == ["homeScore": 3, "awayScore": 2])
    }

    @Test func clockIsRoutine() {
        let plan = plan(.sports, ["type": "match.clock", "ts": "1", "match": "4711", "clock": "67'",
                                  "period": "second_half"])
        #expect(plan == Plan(key: match, event: .update, priority: .routine, timestampMillis: 1,
                             audience: .activity(match), contentState: ["clock": "67'", "period": "second_half"]))
    }

    @Test func goal() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1732234500000", "match": "4711", "moment": "goal",
                                  "team": "home", "player": "B. Saka", "clock": "15'", "home_score": "1",
                                  "away_score": "0"])
        #expect(plan?.event == .update)
        #expect(plan?.priority == .critical)
        #expect(plan?.audience == .activity(match))
        #expect(plan?.contentState == [
            "homeScore": 1, "awayScore": 0, "clock": "15'",
            "lastEvent": ["kind": "goal", "team": "home", "player": "B. Saka", "clock": "15'"],
        ])
        #expect(plan?.alert == PlanAlert(title: "Goal!", body: "B. Saka scores for the home team (1-0)"))
        #expect(plan?.description
            == "key=match:4711 event=update priority=critical audience=channel+tokens(match:4711) alert=Goal!")
    }

    @Test func goalWithoutPlayer() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "goal",
                                  "team": "away"])
        #expect(plan?.contentState == ["lastEvent": ["kind": "goal", "team": "away"]])
        #expect(plan?.alert == PlanAlert(title: "Goal!", body: "Goal for the away team"))
    }

    @Test func redCard() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "red_card",
                                  "team": "away", "player": "M. Caicedo", "clock": "71'"])
        #expect(plan?.priority == .critical)
        #expect(plan?.contentState == [
            "clock": "71'", "lastEvent": ["kind": "red_card", "team": "away", "player": "M. Caicedo", "clock": "71'"],
        ])
        #expect(plan?.alert == PlanAlert(title: "Red card", body: "M. Caicedo of the away team is sent off"))
    }

    @Test func penalty() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "penalty",
                                  "team": "home"])
        #expect(plan?.alert == PlanAlert(title: "Penalty", body: "Penalty to the home team"))
    }

    @Test func halfTimeMoment() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "half_time",
                                  "home_score": "1", "away_score": "1"])
        #expect(plan?.contentState == ["homeScore": 1, "awayScore": 1, "period": "half_time",
                                       "lastEvent": ["kind": "half_time"]])
        #expect(plan?.alert == PlanAlert(title: "Half time", body: "1-1 at the break"))
    }

    @Test func fullTimeEnds() {
        let plan = plan(.sports, ["type": "match.full_time", "ts": "1732240000000", "match": "4711",
                                  "home_score": "2", "away_score": "1"])
        #expect(plan == Plan(key: match, event: .end, priority: .critical, timestampMillis: 1_732_240_000_000,
                             audience: .activity(match),
                             contentState: ["homeScore": 2, "awayScore": 1, "period": "full_time"]))
    }

    @Test func postponedEnds() {
        let plan = plan(.sports, ["type": "match.postponed", "ts": "1", "match": "4711", "reason": "Fog"])
        #expect(plan == Plan(key: match, event: .end, priority: .critical, timestampMillis: 1,
                             audience: .activity(match), contentState: ["status": "postponed", "reason": "Fog"]))
    }

    @Test func abandonedEnds() {
        let plan = plan(.sports, ["type": "match.abandoned", "ts": "1", "match": "4711", "home_score": "0",
                                  "away_score": "0"])
        #expect(plan == Plan(key: match, event: .end, priority: .critical, timestampMillis: 1,
                             audience: .activity(match),
                             contentState: ["status": "abandoned", "homeScore": 0, "awayScore": 0]))
    }

    // MARK: Transit

    @Test func tripStartedPushesToRouteFollowers() {
        let plan = plan(.transit, ["type": "trip.started", "ts": "1732233600000", "trip": "t-981", "route": "42",
                                   "headsign": "Central Station"])
        #expect(plan == Plan(key: trip, event: .start, priority: .critical, timestampMillis: 1_732_233_600_000,
                             audience: .followers([FollowTarget(kind: .route, id: "42")]), contentState: [:],
                             attributes: ["tripId": "t-981", "route": "42", "headsign": "Central Station"],
                             alert: PlanAlert(title: "Trip started", body: "Route 42 to Central Station"),
                             attributesType: "TripActivityAttributes"))
    }

    @Test func position() {
        let plan = plan(.transit, ["type": "trip.position", "ts": "1732233700000", "trip": "t-981", "lat": "51.5074",
                                   "lon": "-0.1278", "next_stop": "s-17", "eta": "1732233900000"])
        #expect(plan == Plan(key: trip, event: .update, priority: .routine, timestampMillis: 1_732_233_700_000,
                             audience: .activity(trip),
                             contentState: ["lat": 51.5074, "lon": -0.1278, "nextStop": "s-17", "etaSeconds": 200,
                                            "etaDate": .double(1_732_233_900 - 978_307_200)]))
    }

    @Test func etaComputesRemainingSeconds() {
        let plan = plan(.transit, ["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                                   "eta": "1732233900400", "delay": "120", "stop_name": "Market Sq"])
        #expect(plan?.priority == .routine)
        #expect(plan?.contentState == ["stop": "s-17", "stopName": "Market Sq", "delaySeconds": 120,
                                       "etaSeconds": 240, "etaDate": .double(1_732_233_900.4 - 978_307_200)])
    }

    @Test func etaInThePastIsZeroSecondsAway() {
        let plan = plan(.transit, ["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                                   "eta": "1732233600000", "delay": "-30"])
        #expect(plan?.contentState["etaSeconds"] == 0)
        #expect(plan?.contentState["delaySeconds"] == -30)
    }

    @Test func etaRoundsToTheNearestSecond() {
        let plan = plan(.transit, ["type": "trip.eta", "ts": "1000", "trip": "t", "stop": "s", "eta": "2499"])
        #expect(plan?.contentState["etaSeconds"] == 1)
        let later = self.plan(.transit, ["type": "trip.eta", "ts": "1000", "trip": "t", "stop": "s", "eta": "2500"])
        #expect(later?.contentState["etaSeconds"] == 2)
    }

    @Test func arrivingAlerts() {
        let plan = plan(.transit, ["type": "trip.arriving", "ts": "1732233880000", "trip": "t-981", "stop": "s-17",
                                   "stop_name": "Market Sq"])
        #expect(plan == Plan(key: trip, event: .update, priority: .critical, timestampMillis: 1_732_233_880_000,
                             audience: .activity(trip),
                             contentState: ["status": "arriving", "stop": "s-17", "stopName": "Market Sq"],
                             alert: PlanAlert(title: "Arriving at Market Sq", body: "Next stop: Market Sq")))
        #expect(plan?.description == "key=trip:t-981 event=update priority=critical audience=channel+tokens(trip:t-981)"
            + " alert=Arriving at Market Sq")
    }

    @Test func arrivingWithoutStopName() {
        let plan = plan(.transit, ["type": "trip.arriving", "ts": "1", "trip": "t-981", "stop": "s-17"])
        #expect(plan?.alert?.title == "Arriving at stop s-17")
    }

    @Test func departed() {
        let plan = plan(.transit, ["type": "trip.departed", "ts": "1", "trip": "t-981", "stop": "s-17"])
        #expect(plan == Plan(key: trip, event: .update, priority: .routine, timestampMillis: 1,
                             audience: .activity(trip), contentState: ["status": "departed", "stop": "s-17"]))
    }

    @Test func ended() {
        let plan = plan(.transit, ["type": "trip.ended", "ts": "1732235000000", "trip": "t-981"])
        #expect(plan == Plan(key: trip, event: .end, priority: .critical, timestampMillis: 1_732_235_000_000,
                             audience: .activity(trip), contentState: ["status": "ended"]))
    }

    @Test func cancelledEndsWithAnAlert() {
        let plan = plan(.transit, ["type": "trip.cancelled", "ts": "1", "trip": "t-981", "reason": "No driver"])
        #expect(plan == Plan(key: trip, event: .end, priority: .critical, timestampMillis: 1,
                             audience: .activity(trip), contentState: ["status": "cancelled", "reason": "No driver"],
                             alert: PlanAlert(title: "Trip cancelled", body: "No driver")))
    }

    @Test func infoDisruptionOfARouteIsRoutineWithoutAlert() {
        let route = ActivityKey(kind: .route, id: "42")
        let plan = plan(.transit, ["type": "trip.disruption", "ts": "1", "route": "42", "message": "Works at night"])
        #expect(plan == Plan(key: route, event: .update, priority: .routine, timestampMillis: 1,
                             audience: .activity(route),
                             contentState: ["message": "Works at night", "severity": "info"]))
    }

    @Test func warningDisruptionAlerts() {
        let plan = plan(.transit, ["type": "trip.disruption", "ts": "1", "trip": "t-981", "route": "42",
                                   "message": "Delays", "severity": "warning"])
        #expect(plan?.key == trip)
        #expect(plan?.priority == .routine)
        #expect(plan?.alert == PlanAlert(title: "Disruption", body: "Delays"))
    }

    @Test func severeDisruptionIsCritical() {
        let plan = plan(.transit, ["type": "trip.disruption", "ts": "1", "trip": "t-981", "message": "Line closed",
                                   "severity": "severe"])
        #expect(plan?.priority == .critical)
        #expect(plan?.audience == .activity(trip))
        #expect(plan?.alert == PlanAlert(title: "Severe disruption", body: "Line closed"))
    }

    // MARK: Other

    @Test func registrationsHaveNoPlan() {
        let entry = decoded(.registrations, ["type": "follow", "ts": "1", "device": "d-1", "target": "team:ars"])
        #expect(entry != nil)
        #expect(entry.flatMap(planner.plan) == nil)
    }

    @Test func disruptionWithoutRouteOrTripHasNoPlan() {
        let entry = DecodedEntry(type: "trip.disruption", timestampMillis: 1,
                                 body: .transit(.disruption(route: nil, trip: nil, message: "m", severity: .severe)))
        #expect(planner.plan(entry) == nil)
    }

    @Test func descriptionKeepsTitlesOnOneLine() {
        let plan = Plan(key: match, event: .update, priority: .routine, timestampMillis: 1, audience: .none,
                        alert: PlanAlert(title: "a\nb\u{2028}c", body: ""))
        #expect(plan.description == "key=match:4711 event=update priority=routine audience=none alert=a\\u{A}b\\u{2028}c")
    }
}
