// The typed body of each entry type, built from fields that `EntryDecoder` has already checked for
// names, duplicates, text and presence. Values are parsed in the order of the schema's tables, and
// rules that span fields come last.

extension FieldReader {
    func sportsEvent() throws(DecodeError) -> SportsEvent {
        let match = try identifier(.match)
        switch type {
        case .matchScheduled:
            return .scheduled(match: match, home: try identifier(.home), away: try identifier(.away),
                              kickoffMillis: try millis(.kickoff), competition: optionalText(.competition))
        case .matchStarted:
            return .started(match: match, home: try optionalIdentifier(.home), away: try optionalIdentifier(.away),
                            competition: optionalText(.competition))
        case .matchScore:
            return .score(match: match, score: try score(), clock: try optionalClock(),
                          period: try optionalChoice(.period, MatchPeriod.self))
        case .matchClock:
            return .clock(match: match, clock: try requiredClock(), period: try optionalChoice(.period, MatchPeriod.self))
        case .matchMoment:
            let moment = try choice(.moment, MatchMoment.self)
            let team = try optionalChoice(.team, Side.self)
            let player = optionalText(.player)
            let clock = try optionalClock()
            let score = try optionalScore()
            // A goal without a side can't update the score line or say who scored.
            if moment == .goal && team == nil { throw .missing(.team, for: type, " with moment=goal") }
            return .moment(match: match, moment: moment, team: team, player: player, clock: clock, score: score)
        case .matchFullTime:
            return .fullTime(match: match, score: try score())
        case .matchPostponed:
            return .postponed(match: match, reason: optionalText(.reason))
        case .matchAbandoned:
            return .abandoned(match: match, reason: optionalText(.reason), score: try optionalScore())
        default:
            preconditionFailure("\(type.name) is not a sports type")
        }
    }

    func transitEvent() throws(DecodeError) -> TransitEvent {
        if type == .tripDisruption {
            let message = try text(.message)
            let route = try optionalIdentifier(.route)
            let trip = try optionalIdentifier(.trip)
            let severity = try optionalChoice(.severity, Severity.self) ?? .info
            guard route != nil || trip != nil else {
                throw DecodeError(reason: "missing field 'route' or 'trip' for \(type.name)")
            }
            return .disruption(route: route, trip: trip, message: message, severity: severity)
        }
        let trip = try identifier(.trip)
        switch type {
        case .tripStarted:
            return .started(trip: trip, route: try identifier(.route), headsign: optionalText(.headsign),
                            vehicle: optionalText(.vehicle))
        case .tripPosition:
            return .position(trip: trip, lat: try coordinate(.lat, limit: 90), lon: try coordinate(.lon, limit: 180),
                             nextStop: try optionalIdentifier(.nextStop), etaMillis: try optionalMillis(.eta))
        case .tripEta:
            return .eta(trip: trip, stop: try identifier(.stop), etaMillis: try millis(.eta),
                        delaySeconds: try optionalDelaySeconds(), stopName: optionalText(.stopName))
        case .tripArriving:
            return .arriving(trip: trip, stop: try identifier(.stop), stopName: optionalText(.stopName),
                             etaMillis: try optionalMillis(.eta))
        case .tripDeparted:
            return .departed(trip: trip, stop: try identifier(.stop), stopName: optionalText(.stopName))
        case .tripEnded:
            return .ended(trip: trip)
        case .tripCancelled:
            return .cancelled(trip: trip, reason: optionalText(.reason))
        default:
            preconditionFailure("\(type.name) is not a transit type")
        }
    }

    func registration() throws(DecodeError) -> Registration {
        let device = try identifier(.device)
        switch type {
        case .activityToken:
            return .activityToken(device: device, key: try activityKey(), activity: try identifier(.activity),
                                  token: try token(), settings: try settings(), stateMillis: try optionalMillis(.stateTs))
        case .startToken:
            return .startToken(device: device, activityType: try activityType(), token: try token(),
                               settings: try settings())
        case .follow:
            return .follow(device: device, target: try followTarget())
        case .unfollow:
            return .unfollow(device: device, target: try followTarget())
        case .device:
            return .device(device: device, settings: try settings())
        case .unregister:
            let key = try optionalActivityKey()
            let activity = try optionalIdentifier(.activity)
            switch (key, activity) {
            case let (key?, activity?): return .unregisterActivity(device: device, key: key, activity: activity)
            case (nil, nil): return .unregisterDevice(device: device)
            case (_?, nil): throw .missing(.activity, for: type, " with 'key'")
            case (nil, _?): throw .missing(.key, for: type, " with 'activity'")
            }
        default:
            preconditionFailure("\(type.name) is not a registration type")
        }
    }
}
