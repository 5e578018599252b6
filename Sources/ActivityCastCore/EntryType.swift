/// Every entry type of docs/schema.md with its stream and its fields.
enum EntryType: UInt8, CaseIterable, Sendable {
    case matchScheduled, matchStarted, matchScore, matchClock, matchMoment, matchFullTime, matchPostponed, matchAbandoned
    case tripStarted, tripPosition, tripEta, tripArriving, tripDeparted, tripEnded, tripCancelled, tripDisruption
    case activityToken, startToken, follow, unfollow, device, unregister

    /// The `type` value on the wire (one table, `staticName`, serves both).
    var name: String { staticName.withUTF8Buffer { String(decoding: $0, as: UTF8.self) } }

    /// The same as constant bytes, for `named(_:)` (see `Field.staticName`).
    var staticName: StaticString {
        switch self {
        case .matchScheduled: "match.scheduled"
        case .matchStarted: "match.started"
        case .matchScore: "match.score"
        case .matchClock: "match.clock"
        case .matchMoment: "match.moment"
        case .matchFullTime: "match.full_time"
        case .matchPostponed: "match.postponed"
        case .matchAbandoned: "match.abandoned"
        case .tripStarted: "trip.started"
        case .tripPosition: "trip.position"
        case .tripEta: "trip.eta"
        case .tripArriving: "trip.arriving"
        case .tripDeparted: "trip.departed"
        case .tripEnded: "trip.ended"
        case .tripCancelled: "trip.cancelled"
        case .tripDisruption: "trip.disruption"
        case .activityToken: "activity.token"
        case .startToken: "start.token"
        case .follow: "follow"
        case .unfollow: "unfollow"
        case .device: "device"
        case .unregister: "unregister"
        }
    }

    var stream: StreamKind {
        switch self {
        case .matchScheduled, .matchStarted, .matchScore, .matchClock, .matchMoment, .matchFullTime,
             .matchPostponed, .matchAbandoned:
            .sports
        case .tripStarted, .tripPosition, .tripEta, .tripArriving, .tripDeparted, .tripEnded, .tripCancelled,
             .tripDisruption:
            .transit
        case .activityToken, .startToken, .follow, .unfollow, .device, .unregister:
            .registrations
        }
    }

    /// Required fields besides `type` (which is checked before the type is known). Every type needs `ts`.
    var required: FieldSet {
        switch self {
        case .matchScheduled: [.ts, .match, .home, .away, .kickoff]
        case .matchStarted: [.ts, .match]
        case .matchScore: [.ts, .match, .homeScore, .awayScore]
        case .matchClock: [.ts, .match, .clock]
        case .matchMoment: [.ts, .match, .moment]
        case .matchFullTime: [.ts, .match, .homeScore, .awayScore]
        case .matchPostponed: [.ts, .match]
        case .matchAbandoned: [.ts, .match]
        case .tripStarted: [.ts, .trip, .route]
        case .tripPosition: [.ts, .trip, .lat, .lon]
        case .tripEta: [.ts, .trip, .stop, .eta]
        case .tripArriving: [.ts, .trip, .stop]
        case .tripDeparted: [.ts, .trip, .stop]
        case .tripEnded: [.ts, .trip]
        case .tripCancelled: [.ts, .trip]
        // `route` or `trip` is needed too; that rule is checked with the values.
        case .tripDisruption: [.ts, .message]
        case .activityToken: [.ts, .device, .key, .activity, .token]
        case .startToken: [.ts, .device, .activityType, .token]
        case .follow, .unfollow: [.ts, .device, .target]
        case .device: [.ts, .device]
        case .unregister: [.ts, .device]
        }
    }

    var optional: FieldSet {
        switch self {
        case .matchScheduled: [.competition]
        case .matchStarted: [.home, .away, .competition]
        case .matchScore: [.clock, .period]
        case .matchClock: [.period]
        case .matchMoment: [.team, .player, .clock, .homeScore, .awayScore]
        case .matchFullTime: []
        case .matchPostponed: [.reason]
        case .matchAbandoned: [.reason, .homeScore, .awayScore]
        case .tripStarted: [.headsign, .vehicle]
        case .tripPosition: [.nextStop, .eta]
        case .tripEta: [.delay, .stopName]
        case .tripArriving: [.stopName, .eta]
        case .tripDeparted: [.stopName]
        case .tripEnded: []
        case .tripCancelled: [.reason]
        case .tripDisruption: [.route, .trip, .severity]
        case .activityToken: [.env, .tier, .broadcast, .stateTs]
        case .startToken, .device: [.env, .tier, .broadcast]
        case .follow, .unfollow: []
        case .unregister: [.key, .activity]
        }
    }

    /// Every field this type accepts, `type` included.
    var allowed: FieldSet { required.union(optional).union([.type]) }

    /// The type with exactly this name, or nil; grouped by length like `Field.named(_:)`.
    @inline(__always)
    static func named(_ b: UnsafeBufferPointer<UInt8>) -> EntryType? {
        @inline(__always) func hit(_ type: EntryType) -> Bool { b.equals(type.staticName) }
        switch b.count {
        case 6: return hit(.follow) ? .follow : hit(.device) ? .device : nil
        case 8: return hit(.tripEta) ? .tripEta : hit(.unfollow) ? .unfollow : nil
        case 10: return hit(.tripEnded) ? .tripEnded : hit(.unregister) ? .unregister : nil
        case 11: return hit(.matchScore) ? .matchScore : hit(.matchClock) ? .matchClock : hit(.startToken) ? .startToken : nil
        case 12: return hit(.matchMoment) ? .matchMoment : hit(.tripStarted) ? .tripStarted : nil
        case 13:
            return hit(.matchStarted) ? .matchStarted : hit(.tripPosition) ? .tripPosition
                : hit(.tripArriving) ? .tripArriving : hit(.tripDeparted) ? .tripDeparted : nil
        case 14: return hit(.tripCancelled) ? .tripCancelled : hit(.activityToken) ? .activityToken : nil
        case 15:
            return hit(.matchScheduled) ? .matchScheduled : hit(.matchFullTime) ? .matchFullTime
                : hit(.matchPostponed) ? .matchPostponed : hit(.matchAbandoned) ? .matchAbandoned
                : hit(.tripDisruption) ? .tripDisruption : nil
        default: return nil
        }
    }

    static func named(_ bytes: [UInt8]) -> EntryType? {
        bytes.withUnsafeBufferPointer { named($0) }
    }
}
