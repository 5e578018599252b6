/// Typed values decoded from stream entries. See docs/schema.md for the wire format.

/// Which stream an entry came from; decides which types are allowed.
public enum StreamKind: String, Sendable, Codable, CaseIterable {
    case sports, transit, registrations
}

/// One raw field of a stream entry, binary-safe as Redis delivers it.
public struct RawField: Sendable, Equatable {
    public var name: [UInt8]
    public var value: [UInt8]
    public init(name: [UInt8], value: [UInt8]) { self.name = name; self.value = value }
    public init(_ name: String, _ value: String) { self.name = Array(name.utf8); self.value = Array(value.utf8) }
}

public enum APNsEnvironment: String, Sendable, Codable, CaseIterable { case development, production }
public enum Tier: String, Sendable, Codable, CaseIterable { case standard, frequent }
public enum PriorityClass: String, Sendable, Codable { case critical, routine }

/// An activity key such as `match:4711`, `trip:t-981` or `route:42`.
public struct ActivityKey: Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, CaseIterable { case match, trip, route }
    public var kind: Kind
    public var id: String
    public init(kind: Kind, id: String) { self.kind = kind; self.id = id }
    public var description: String { "\(kind.rawValue):\(id)" }
}

/// A follow target such as `team:ars` or `route:42`.
public struct FollowTarget: Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, CaseIterable { case team, route }
    public var kind: Kind
    public var id: String
    public init(kind: Kind, id: String) { self.kind = kind; self.id = id }
    public var description: String { "\(kind.rawValue):\(id)" }
}

public enum MatchPeriod: String, Sendable, CaseIterable {
    case firstHalf = "first_half", halfTime = "half_time", secondHalf = "second_half"
    case extraTime = "extra_time", penalties, fullTime = "full_time"
}

public enum MatchMoment: String, Sendable, CaseIterable { case goal, redCard = "red_card", penalty, halfTime = "half_time" }
public enum Side: String, Sendable, CaseIterable { case home, away }
public enum Severity: String, Sendable, CaseIterable { case info, warning, severe }

public struct Score: Equatable, Sendable {
    public var home: Int
    public var away: Int
    public init(home: Int, away: Int) { self.home = home; self.away = away }
}

public enum SportsEvent: Equatable, Sendable {
    case scheduled(match: String, home: String, away: String, kickoffMillis: Int64, competition: String?)
    case started(match: String, home: String?, away: String?, competition: String?)
    case score(match: String, score: Score, clock: String?, period: MatchPeriod?)
    case clock(match: String, clock: String, period: MatchPeriod?)
    case moment(match: String, moment: MatchMoment, team: Side?, player: String?, clock: String?, score: Score?)
    case fullTime(match: String, score: Score)
    case postponed(match: String, reason: String?)
    case abandoned(match: String, reason: String?, score: Score?)
}

public enum TransitEvent: Equatable, Sendable {
    case started(trip: String, route: String, headsign: String?, vehicle: String?)
    case position(trip: String, lat: Double, lon: Double, nextStop: String?, etaMillis: Int64?)
    case eta(trip: String, stop: String, etaMillis: Int64, delaySeconds: Int?, stopName: String?)
    case arriving(trip: String, stop: String, stopName: String?, etaMillis: Int64?)
    case departed(trip: String, stop: String, stopName: String?)
    case ended(trip: String)
    case cancelled(trip: String, reason: String?)
    case disruption(route: String?, trip: String?, message: String, severity: Severity)
}

/// Device settings that may ride along on token registrations; nil means "not given".
public struct DeviceSettings: Equatable, Sendable {
    public var env: APNsEnvironment?
    public var tier: Tier?
    public var broadcast: Bool?
    public init(env: APNsEnvironment? = nil, tier: Tier? = nil, broadcast: Bool? = nil) {
        self.env = env; self.tier = tier; self.broadcast = broadcast
    }
}

public enum Registration: Equatable, Sendable {
    /// `token` is lowercase hex.
    /// `stateMillis`: the `ts` of the state the activity shows (`state_ts`), when the app says.
    case activityToken(device: String, key: ActivityKey, activity: String, token: String, settings: DeviceSettings, stateMillis: Int64? = nil)
    case startToken(device: String, activityType: String, token: String, settings: DeviceSettings)
    case follow(device: String, target: FollowTarget)
    case unfollow(device: String, target: FollowTarget)
    case device(device: String, settings: DeviceSettings)
    case unregisterActivity(device: String, key: ActivityKey, activity: String)
    case unregisterDevice(device: String)
}

public enum EventBody: Equatable, Sendable {
    case sports(SportsEvent)
    case transit(TransitEvent)
    case registration(Registration)
}

/// A decoded entry: its `type` string, its source time and its typed body.
public struct DecodedEntry: Equatable, Sendable {
    public var type: String
    public var timestampMillis: Int64
    public var body: EventBody
    public init(type: String, timestampMillis: Int64, body: EventBody) {
        self.type = type; self.timestampMillis = timestampMillis; self.body = body
    }
}
