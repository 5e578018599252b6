import ActivityCastCore
import ActivityCastRoutes
import Testing

/// PlannerTests, through the shipped routes: the same expectations, plus what only routes give
/// (attributes-type, stale and dismissal dates, relevance, storage policy).
@Suite("Shipped routes: plans")
struct ShippedRoutesPlanTests {
    let routes = RouteSet.shipped
    let match = ActivityKey(kind: .match, id: "4711")
    let trip = ActivityKey(kind: .trip, id: "t-981")

    func plan(_ kind: StreamKind, _ pairs: KeyValuePairs<String, String>) -> Plan? { routePlan(routes, kind, pairs) }

    // MARK: Sports

    @Test func scheduledSendsNothing() {
        let plan = plan(.sports, ["type": "match.scheduled", "ts": "1732230000000", "match": "4711", "home": "ars",
                                  "away": "che", "kickoff": "1732233600000"])
        #expect(plan == Plan(key: match, event: nil, priority: .routine, timestampMillis: 1_732_230_000_000,
                             audience: .none, attributes: ["matchId": "4711", "homeTeam": "ars", "awayTeam": "che"]))
        #expect(plan?.description == "key=match:4711 event=none priority=routine audience=none")
    }

    @Test func startedPushesToFollowersOfBothTeams() {
        let plan = plan(.sports, ["type": "match.started", "ts": "1732233600000", "match": "4711", "home": "ars",
                                  "away": "che", "competition": "Premier League"])
        #expect(plan == Plan(key: match, event: .start, priority: .critical, timestampMillis: 1_732_233_600_000,
                             audience: .followers([FollowTarget(kind: .team, id: "ars"), FollowTarget(kind: .team, id: "che")]),
                             contentState: ["homeScore": 0, "awayScore": 0],
                             attributes: ["matchId": "4711", "homeTeam": "ars", "awayTeam": "che", "competition": "Premier League"],
                             alert: PlanAlert(title: "Kick-off", body: "ars v che"),
                             attributesType: "MatchActivityAttributes", staleAfterSeconds: 1200, relevanceScore: 50,
                             storagePolicy: .noStorage))
    }

    @Test func startedWithoutTeamsHasNoAudience() {
        let plan = plan(.sports, ["type": "match.started", "ts": "1", "match": "4711", "competition": "Cup"])
        #expect(plan?.event == .start)
        #expect(plan?.audience == Audience.none)
        #expect(plan?.alert == PlanAlert(title: "Kick-off", body: "Cup"))
        let bare = self.plan(.sports, ["type": "match.started", "ts": "1", "match": "4711"])
        #expect(bare?.alert == PlanAlert(title: "Kick-off", body: "The match has started"))
    }

    @Test func startedWithOneTeamReachesItsFollowersOnce() {
        #expect(plan(.sports, ["type": "match.started", "ts": "1", "match": "4711", "away": "che"])?.audience
            == .followers([FollowTarget(kind: .team, id: "che")]))
        #expect(plan(.sports, ["type": "match.started", "ts": "1", "match": "4711", "home": "che", "away": "che"])?.audience
            == .followers([FollowTarget(kind: .team, id: "che")]))
    }

    @Test func score() {
        let plan = plan(.sports, ["type": "match.score", "ts": "1732234500000", "match": "4711", "home_score": "1",
                                  "away_score": "0", "clock": "15'", "period": "first_half"])
        #expect(plan == Plan(key: match, event: .update, priority: .critical, timestampMillis: 1_732_234_500_000,
                             audience: .activity(match),
                             contentState: ["homeScore": 1, "awayScore": 0, "clock": "15'", "period": "first_half"],
                             staleAfterSeconds: 1200, relevanceScore: 50))
    }

    @Test func scoreWithoutClockAndWithLeadingZeros() {
        let plan = plan(.sports, ["type": "match.score", "ts": "1", "match": "4711", "home_score": "03", "away_score": "2"])
        #expect(plan?.contentState == ["homeScore": 3, "awayScore": 2])
    }

    @Test func clockIsRoutine() {
        let plan = plan(.sports, ["type": "match.clock", "ts": "1", "match": "4711", "clock": "67'", "period": "second_half"])
        #expect(plan?.priority == .routine)
        #expect(plan?.contentState == ["clock": "67'", "period": "second_half"])
    }

    @Test func goal() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1732234500000", "match": "4711", "moment": "goal",
                                  "team": "home", "player": "B. Saka", "clock": "15'", "home_score": "1", "away_score": "0"])
        #expect(plan?.priority == .critical)
        #expect(plan?.contentState == [
            "homeScore": 1, "awayScore": 0, "clock": "15'",
            "lastEvent": ["kind": "goal", "team": "home", "player": "B. Saka", "clock": "15'"],
        ])
        #expect(plan?.alert == PlanAlert(title: "Goal!", body: "B. Saka scores for the home team (1-0)"))
        #expect(plan?.relevanceScore == 75)
    }

    @Test func goalWithoutPlayerOrScore() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "goal", "team": "away"])
        #expect(plan?.contentState == ["lastEvent": ["kind": "goal", "team": "away"]])
        #expect(plan?.alert == PlanAlert(title: "Goal!", body: "Goal for the away team"))
    }

    @Test func redCard() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "red_card", "team": "away",
                                  "player": "M. Caicedo", "clock": "71'"])
        #expect(plan?.contentState == ["clock": "71'", "lastEvent": ["kind": "red_card", "team": "away", "player": "M. Caicedo",
                                                                     "clock": "71'"]])
        #expect(plan?.alert == PlanAlert(title: "Red card", body: "M. Caicedo of the away team is sent off"))
        #expect(self.plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "red_card"])?.alert?.body
            == "A player is sent off")
    }

    @Test func penalty() {
        #expect(plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "penalty", "team": "home"])?.alert
            == PlanAlert(title: "Penalty", body: "Penalty to the home team"))
        #expect(plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "penalty", "player": "P"])?.alert
            == PlanAlert(title: "Penalty", body: "Penalty awarded, P to take it"))
    }

    @Test func halfTimeMomentSetsThePeriod() {
        let plan = plan(.sports, ["type": "match.moment", "ts": "1", "match": "4711", "moment": "half_time", "home_score": "1",
                                  "away_score": "1"])
        #expect(plan?.contentState == ["homeScore": 1, "awayScore": 1, "period": "half_time", "lastEvent": ["kind": "half_time"]])
        #expect(plan?.alert == PlanAlert(title: "Half time", body: "1-1 at the break"))
    }

    @Test func fullTimeEndsAndStaysAnHour() {
        let plan = plan(.sports, ["type": "match.full_time", "ts": "1732240000000", "match": "4711", "home_score": "2",
                                  "away_score": "1"])
        #expect(plan == Plan(key: match, event: .end, priority: .critical, timestampMillis: 1_732_240_000_000,
                             audience: .activity(match), contentState: ["homeScore": 2, "awayScore": 1, "period": "full_time"],
                             dismissAfterSeconds: 3600, relevanceScore: 50))
    }

    @Test func postponedAndAbandonedEnd() {
        #expect(plan(.sports, ["type": "match.postponed", "ts": "1", "match": "4711", "reason": "Fog"])?.contentState
            == ["status": "postponed", "reason": "Fog"])
        let abandoned = plan(.sports, ["type": "match.abandoned", "ts": "1", "match": "4711", "home_score": "0", "away_score": "0"])
        #expect(abandoned?.event == .end)
        #expect(abandoned?.contentState == ["status": "abandoned", "homeScore": 0, "awayScore": 0])
    }

    // MARK: Transit

    @Test func tripStartedPushesToRouteFollowers() {
        let plan = plan(.transit, ["type": "trip.started", "ts": "1732233600000", "trip": "t-981", "route": "42",
                                   "headsign": "Central Station"])
        #expect(plan == Plan(key: trip, event: .start, priority: .critical, timestampMillis: 1_732_233_600_000,
                             audience: .followers([FollowTarget(kind: .route, id: "42")]),
                             attributes: ["tripId": "t-981", "route": "42", "headsign": "Central Station"],
                             alert: PlanAlert(title: "Trip started", body: "Route 42 to Central Station"),
                             attributesType: "TripActivityAttributes", staleAfterSeconds: 300, relevanceScore: 50,
                             storagePolicy: .latestMessage))
    }

    @Test func position() {
        let plan = plan(.transit, ["type": "trip.position", "ts": "1732233700000", "trip": "t-981", "lat": "51.5074",
                                   "lon": "-0.1278", "next_stop": "s-17", "eta": "1732233900000"])
        #expect(plan?.priority == .routine)
        #expect(plan?.contentState == ["lat": 51.5074, "lon": -0.1278, "nextStop": "s-17", "etaSeconds": 200,
                                       "etaDate": .double(1_732_233_900 - 978_307_200)])
    }

    @Test func etaComputesRemainingSecondsRoundedAndNeverNegative() {
        let plan = plan(.transit, ["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                                   "eta": "1732233900400", "delay": "120", "stop_name": "Market Sq"])
        #expect(plan?.contentState == ["stop": "s-17", "stopName": "Market Sq", "delaySeconds": 120, "etaSeconds": 240,
                                       "etaDate": .double(1_732_233_900.4 - 978_307_200)])
        let past = self.plan(.transit, ["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                                        "eta": "1732233600000", "delay": "-30"])
        #expect(past?.contentState["etaSeconds"] == 0)
        #expect(past?.contentState["delaySeconds"] == -30)
        #expect(self.plan(.transit, ["type": "trip.eta", "ts": "1000", "trip": "t", "stop": "s", "eta": "2499"])?
            .contentState["etaSeconds"] == 1)
        #expect(self.plan(.transit, ["type": "trip.eta", "ts": "1000", "trip": "t", "stop": "s", "eta": "2500"])?
            .contentState["etaSeconds"] == 2)
    }

    @Test func arrivingAlertsAndRanksFirst() {
        let plan = plan(.transit, ["type": "trip.arriving", "ts": "1732233880000", "trip": "t-981", "stop": "s-17",
                                   "stop_name": "Market Sq"])
        #expect(plan?.priority == .critical)
        #expect(plan?.contentState == ["status": "arriving", "stop": "s-17", "stopName": "Market Sq"])
        #expect(plan?.alert == PlanAlert(title: "Arriving at Market Sq", body: "Next stop: Market Sq"))
        #expect(plan?.relevanceScore == 100)
        #expect(self.plan(.transit, ["type": "trip.arriving", "ts": "1", "trip": "t-981", "stop": "s-17"])?.alert?.title
            == "Arriving at stop s-17")
    }

    @Test func departedAndEnded() {
        #expect(plan(.transit, ["type": "trip.departed", "ts": "1", "trip": "t-981", "stop": "s-17"])?.contentState
            == ["status": "departed", "stop": "s-17"])
        let ended = plan(.transit, ["type": "trip.ended", "ts": "1732235000000", "trip": "t-981"])
        #expect(ended == Plan(key: trip, event: .end, priority: .critical, timestampMillis: 1_732_235_000_000,
                              audience: .activity(trip), contentState: ["status": "ended"], dismissAfterSeconds: 300,
                              relevanceScore: 50, storagePolicy: .latestMessage))
    }

    @Test func cancelledEndsWithAnAlertThatStaysLonger() {
        let plan = plan(.transit, ["type": "trip.cancelled", "ts": "1", "trip": "t-981", "reason": "No driver"])
        #expect(plan?.event == .end)
        #expect(plan?.alert == PlanAlert(title: "Trip cancelled", body: "No driver"))
        #expect(plan?.dismissAfterSeconds == 1800)
        #expect(self.plan(.transit, ["type": "trip.cancelled", "ts": "1", "trip": "t-981"])?.alert?.body
            == "This trip has been cancelled")
    }

    @Test func disruptionsBySeverity() {
        let route = ActivityKey(kind: .route, id: "42")
        let info = plan(.transit, ["type": "trip.disruption", "ts": "1", "route": "42", "message": "Works at night"])
        #expect(info?.key == route)
        #expect(info?.audience == .activity(route))
        #expect(info?.priority == .routine)
        #expect(info?.alert == nil)
        #expect(info?.contentState == ["message": "Works at night", "severity": "info"])
        let warning = plan(.transit, ["type": "trip.disruption", "ts": "1", "trip": "t-981", "route": "42", "message": "Delays",
                                      "severity": "warning"])
        #expect(warning?.key == trip)
        #expect(warning?.priority == .routine)
        #expect(warning?.alert == PlanAlert(title: "Disruption", body: "Delays"))
        let severe = plan(.transit, ["type": "trip.disruption", "ts": "1", "trip": "t-981", "message": "Line closed",
                                     "severity": "severe"])
        #expect(severe?.priority == .critical)
        #expect(severe?.alert == PlanAlert(title: "Severe disruption", body: "Line closed"))
    }

    // MARK: Other

    @Test func registrationsHaveNoPlan() {
        let raw = fields(["type": "follow", "ts": "1", "device": "d-1", "target": "team:ars"])
        let entry = try? decode(.registrations, raw).get()
        #expect(entry != nil)
        #expect(entry.map { routes.plan(entry: $0, fields: raw) == .success(nil) } == true)
    }

    @Test func disruptionWithoutRouteOrTripIsAnError() {
        // The decoder never produces one; a hand-built entry gets a reason, not a crash.
        let entry = DecodedEntry(type: "trip.disruption", timestampMillis: 1,
                                 body: .transit(.disruption(route: nil, trip: nil, message: "m", severity: .severe)))
        #expect(routes.plan(entry: entry, fields: fields(["type": "trip.disruption", "ts": "1", "message": "m"]))
            == .failure(RouteError(location: nil, reason: "trip.disruption: no activity key: the entry has no 'trip' or 'route'")))
    }
}
