import ActivityCastCore

/// Decides what a feed event means for Live Activities, following the "Live Activity effect" and
/// "priority class" columns of docs/schema.md. Stateless: whether a key has live activities, budgets
/// and ordering against earlier events are the worker's business.
public struct Planner: Sendable {
    public init() {}

    /// The plan for a feed event; nil for registrations, which change state rather than send, and for
    /// a hand-built `.disruption` with neither route nor trip.
    public func plan(_ entry: DecodedEntry) -> Plan? {
        switch entry.body {
        case .sports(let event): sportsPlan(event, timestampMillis: entry.timestampMillis)
        case .transit(let event): transitPlan(event, timestampMillis: entry.timestampMillis)
        case .registration: nil
        }
    }

    // MARK: Sports

    private func sportsPlan(_ event: SportsEvent, timestampMillis ts: Int64) -> Plan {
        switch event {
        case let .scheduled(match, home, away, _, competition):
            // Nothing to show yet; the plan still names the key the match will use.
            return Plan(key: Self.matchKey(match), event: nil, priority: .routine, timestampMillis: ts,
                        audience: .none,
                        attributes: Self.matchAttributes(match: match, home: home, away: away, competition: competition))

        case let .started(match, home, away, competition):
            let targets = [home, away].compactMap { $0 }.map { FollowTarget(kind: .team, id: $0) }
            let body = switch (home, away) {
            case let (home?, away?): "\(home) v \(away)"
            default: competition ?? "The match has started"
            }
            // A match starts at 0-0, and a push-to-start's content-state must decode as the app's whole
            // ContentState, so the score is included although the event doesn't carry it.
            return Plan(key: Self.matchKey(match), event: .start, priority: .critical, timestampMillis: ts,
                        audience: targets.isEmpty ? .none : .followers(Self.unique(targets)),
                        contentState: ["homeScore": 0, "awayScore": 0],
                        attributes: Self.matchAttributes(match: match, home: home, away: away, competition: competition),
                        // APNs requires an alert on a start.
                        alert: PlanAlert(title: "Kick-off", body: body), attributesType: "MatchActivityAttributes")

        case let .score(match, score, clock, period):
            var state = Self.scoreState(score)
            state["clock"] = clock.map(JSONValue.string)
            state["period"] = period.map { .string($0.rawValue) }
            return update(match, .critical, ts, state)

        case let .clock(match, clock, period):
            var state: [String: JSONValue] = ["clock": .string(clock)]
            state["period"] = period.map { .string($0.rawValue) }
            return update(match, .routine, ts, state)

        case let .moment(match, moment, team, player, clock, score):
            var lastEvent: [String: JSONValue] = ["kind": .string(moment.rawValue)]
            lastEvent["team"] = team.map { .string($0.rawValue) }
            lastEvent["player"] = player.map(JSONValue.string)
            lastEvent["clock"] = clock.map(JSONValue.string)
            var state = score.map(Self.scoreState) ?? [:]
            state["clock"] = clock.map(JSONValue.string)
            state["lastEvent"] = .object(lastEvent)
            if moment == .halfTime { state["period"] = .string(MatchPeriod.halfTime.rawValue) }
            var plan = update(match, .critical, ts, state)
            plan.alert = Self.momentAlert(moment, team: team, player: player, score: score)
            return plan

        case let .fullTime(match, score):
            var state = Self.scoreState(score)
            state["period"] = .string(MatchPeriod.fullTime.rawValue)
            return end(Self.matchKey(match), ts, state)

        case let .postponed(match, reason):
            // "End (if started)": whether anything is live for the key is known only to the worker;
            // with no activities the end reaches nobody.
            var state: [String: JSONValue] = ["status": "postponed"]
            state["reason"] = reason.map(JSONValue.string)
            return end(Self.matchKey(match), ts, state)

        case let .abandoned(match, reason, score):
            var state = score.map(Self.scoreState) ?? [:]
            state["status"] = "abandoned"
            state["reason"] = reason.map(JSONValue.string)
            return end(Self.matchKey(match), ts, state)
        }
    }

    private static func matchKey(_ match: String) -> ActivityKey { ActivityKey(kind: .match, id: match) }

    /// `matchId` names the key (`match:<matchId>`), so the app that gets the start can register the
    /// started activity's update token for it.
    private static func matchAttributes(match: String, home: String?, away: String?, competition: String?) -> [String: JSONValue] {
        var attributes: [String: JSONValue] = ["matchId": .string(match)]
        attributes["homeTeam"] = home.map(JSONValue.string)
        attributes["awayTeam"] = away.map(JSONValue.string)
        attributes["competition"] = competition.map(JSONValue.string)
        return attributes
    }

    private static func scoreState(_ score: Score) -> [String: JSONValue] {
        ["homeScore": .int(Int64(score.home)), "awayScore": .int(Int64(score.away))]
    }

    private static func momentAlert(_ moment: MatchMoment, team: Side?, player: String?, score: Score?) -> PlanAlert {
        let side = team.map { "the \($0.rawValue) team" }
        let scoreLine = score.map { " (\($0.home)-\($0.away))" } ?? ""
        switch moment {
        case .goal:
            let body = switch (player, side) {
            case let (player?, side?): "\(player) scores for \(side)"
            case let (nil, side?): "Goal for \(side)"
            case let (player?, nil): "\(player) scores"
            case (nil, nil): "A goal is scored"
            }
            return PlanAlert(title: "Goal!", body: body + scoreLine)
        case .redCard:
            let body = switch (player, side) {
            case let (player?, side?): "\(player) of \(side) is sent off"
            case let (nil, side?): "A player of \(side) is sent off"
            case let (player?, nil): "\(player) is sent off"
            case (nil, nil): "A player is sent off"
            }
            return PlanAlert(title: "Red card", body: body)
        case .penalty:
            var body = side.map { "Penalty to \($0)" } ?? "Penalty awarded"
            if let player { body += ", \(player) to take it" }
            return PlanAlert(title: "Penalty", body: body)
        case .halfTime:
            return PlanAlert(title: "Half time", body: score.map { "\($0.home)-\($0.away) at the break" } ?? "Half time")
        }
    }

    // MARK: Transit

    /// nil only for a disruption with neither trip nor route, which the decoder never produces.
    private func transitPlan(_ event: TransitEvent, timestampMillis ts: Int64) -> Plan? {
        switch event {
        case let .started(trip, route, headsign, vehicle):
            var state: [String: JSONValue] = [:]
            state["vehicle"] = vehicle.map(JSONValue.string)
            // `tripId` names the key (`trip:<tripId>`), as `matchId` does for a match.
            var attributes: [String: JSONValue] = ["tripId": .string(trip), "route": .string(route)]
            attributes["headsign"] = headsign.map(JSONValue.string)
            return Plan(key: Self.tripKey(trip), event: .start, priority: .critical, timestampMillis: ts,
                        audience: .followers([FollowTarget(kind: .route, id: route)]),
                        contentState: state, attributes: attributes,
                        // APNs requires an alert on a start.
                        alert: PlanAlert(title: "Trip started",
                                         body: headsign.map { "Route \(route) to \($0)" } ?? "Route \(route)"),
                        attributesType: "TripActivityAttributes")

        case let .position(trip, lat, lon, nextStop, etaMillis):
            var state: [String: JSONValue] = ["lat": .double(lat), "lon": .double(lon)]
            state["nextStop"] = nextStop.map(JSONValue.string)
            Self.addETA(etaMillis, now: ts, to: &state)
            return update(Self.tripKey(trip), .routine, ts, state)

        case let .eta(trip, stop, etaMillis, delaySeconds, stopName):
            var state: [String: JSONValue] = ["stop": .string(stop)]
            state["stopName"] = stopName.map(JSONValue.string)
            state["delaySeconds"] = delaySeconds.map { .int(Int64($0)) }
            Self.addETA(etaMillis, now: ts, to: &state)
            return update(Self.tripKey(trip), .routine, ts, state)

        case let .arriving(trip, stop, stopName, etaMillis):
            var state: [String: JSONValue] = ["status": "arriving", "stop": .string(stop)]
            state["stopName"] = stopName.map(JSONValue.string)
            Self.addETA(etaMillis, now: ts, to: &state)
            var plan = update(Self.tripKey(trip), .critical, ts, state)
            let place = stopName ?? "stop \(stop)"
            plan.alert = PlanAlert(title: "Arriving at \(place)", body: "Next stop: \(place)")
            return plan

        case let .departed(trip, stop, stopName):
            var state: [String: JSONValue] = ["status": "departed", "stop": .string(stop)]
            state["stopName"] = stopName.map(JSONValue.string)
            return update(Self.tripKey(trip), .routine, ts, state)

        case let .ended(trip):
            return end(Self.tripKey(trip), ts, ["status": "ended"])

        case let .cancelled(trip, reason):
            var state: [String: JSONValue] = ["status": "cancelled"]
            state["reason"] = reason.map(JSONValue.string)
            var plan = end(Self.tripKey(trip), ts, state)
            plan.alert = PlanAlert(title: "Trip cancelled", body: reason ?? "This trip has been cancelled")
            return plan

        case let .disruption(route, trip, message, severity):
            // A disruption of a route alone concerns `route:<id>`.
            guard let key = trip.map(Self.tripKey) ?? route.map({ ActivityKey(kind: .route, id: $0) }) else {
                return nil
            }
            let state: [String: JSONValue] = ["message": .string(message), "severity": .string(severity.rawValue)]
            var plan = update(key, severity == .severe ? .critical : .routine, ts, state)
            switch severity {
            case .info: break
            case .warning: plan.alert = PlanAlert(title: "Disruption", body: message)
            case .severe: plan.alert = PlanAlert(title: "Severe disruption", body: message)
            }
            return plan
        }
    }

    private static func tripKey(_ trip: String) -> ActivityKey { ActivityKey(kind: .trip, id: trip) }

    /// Seconds between 2001-01-01 and 1970-01-01: a default `JSONDecoder` decodes a `Date` as seconds
    /// since 2001.
    static let referenceDateOffsetSeconds = 978_307_200.0

    /// `etaSeconds`: whole seconds left at the event's time (rounded, never negative); `etaDate`: the
    /// arrival as a `Date`, so the app can count down without more pushes.
    private static func addETA(_ etaMillis: Int64?, now: Int64, to state: inout [String: JSONValue]) {
        guard let etaMillis else { return }
        let remaining = max(0, etaMillis - now)
        state["etaSeconds"] = .int((remaining + 500) / 1000)
        state["etaDate"] = .double(Double(etaMillis) / 1000 - referenceDateOffsetSeconds)
    }

    // MARK: Common shapes

    private func update(_ match: String, _ priority: PriorityClass, _ ts: Int64, _ state: [String: JSONValue]) -> Plan {
        update(Self.matchKey(match), priority, ts, state)
    }

    private func update(_ key: ActivityKey, _ priority: PriorityClass, _ ts: Int64, _ state: [String: JSONValue]) -> Plan {
        Plan(key: key, event: .update, priority: priority, timestampMillis: ts, audience: .activity(key),
             contentState: state)
    }

    private func end(_ key: ActivityKey, _ ts: Int64, _ state: [String: JSONValue]) -> Plan {
        Plan(key: key, event: .end, priority: .critical, timestampMillis: ts, audience: .activity(key),
             contentState: state)
    }

    private static func unique(_ targets: [FollowTarget]) -> [FollowTarget] {
        var seen: [FollowTarget] = []
        for target in targets where !seen.contains(target) { seen.append(target) }
        return seen
    }
}
