/// Every field name the schema defines, across all entry types (docs/schema.md).
///
/// The order matters: when several required fields are missing, the first in this order is reported,
/// so it follows the order of the schema's tables (for example `stop` before `eta`).
enum Field: UInt8, CaseIterable, Sendable {
    case type, ts
    // Sports.
    case match, home, away, kickoff, competition, homeScore, awayScore, clock, period, moment, team, player, reason
    // Transit.
    case trip, route, headsign, vehicle, lat, lon, nextStop, stop, eta, delay, stopName, message, severity
    // Registrations.
    case device, key, activity, activityType, token, env, tier, broadcast, target, stateTs

    /// The name on the wire (one table, `staticName`, serves both).
    var name: String { staticName.withUTF8Buffer { String(decoding: $0, as: UTF8.self) } }

    /// The name on the wire as constant bytes, for `named(_:)`. Kept next to `name` (a `String`
    /// literal costs nothing to hand out, a `StaticString` nothing to compare); the tests check both agree.
    var staticName: StaticString {
        switch self {
        case .type: "type"
        case .ts: "ts"
        case .match: "match"
        case .home: "home"
        case .away: "away"
        case .kickoff: "kickoff"
        case .competition: "competition"
        case .homeScore: "home_score"
        case .awayScore: "away_score"
        case .clock: "clock"
        case .period: "period"
        case .moment: "moment"
        case .team: "team"
        case .player: "player"
        case .reason: "reason"
        case .trip: "trip"
        case .route: "route"
        case .headsign: "headsign"
        case .vehicle: "vehicle"
        case .lat: "lat"
        case .lon: "lon"
        case .nextStop: "next_stop"
        case .stop: "stop"
        case .eta: "eta"
        case .delay: "delay"
        case .stopName: "stop_name"
        case .message: "message"
        case .severity: "severity"
        case .device: "device"
        case .key: "key"
        case .activity: "activity"
        case .activityType: "activity_type"
        case .token: "token"
        case .env: "env"
        case .tier: "tier"
        case .broadcast: "broadcast"
        case .target: "target"
        case .stateTs: "state_ts"
        }
    }

    /// The field with exactly this name, or nil. Grouped by length so that most names are rejected
    /// by one comparison; the tests check that every field is found by its name.
    @inline(__always)
    static func named(_ b: UnsafeBufferPointer<UInt8>) -> Field? {
        // Spelled out rather than looping over an array: no allocation, no generic metadata lookups.
        @inline(__always) func hit(_ field: Field) -> Bool { b.equals(field.staticName) }
        switch b.count {
        case 2: return hit(.ts) ? .ts : nil
        case 3: return hit(.lat) ? .lat : hit(.lon) ? .lon : hit(.eta) ? .eta : hit(.key) ? .key : hit(.env) ? .env : nil
        case 4:
            return hit(.type) ? .type : hit(.home) ? .home : hit(.away) ? .away : hit(.team) ? .team
                : hit(.trip) ? .trip : hit(.stop) ? .stop : hit(.tier) ? .tier : nil
        case 5:
            return hit(.match) ? .match : hit(.clock) ? .clock : hit(.route) ? .route : hit(.delay) ? .delay
                : hit(.token) ? .token : nil
        case 6:
            return hit(.period) ? .period : hit(.moment) ? .moment : hit(.player) ? .player
                : hit(.reason) ? .reason : hit(.device) ? .device : hit(.target) ? .target : nil
        case 7: return hit(.kickoff) ? .kickoff : hit(.vehicle) ? .vehicle : hit(.message) ? .message : nil
        case 8: return hit(.headsign) ? .headsign : hit(.severity) ? .severity : hit(.activity) ? .activity : hit(.stateTs) ? .stateTs : nil
        case 9: return hit(.nextStop) ? .nextStop : hit(.stopName) ? .stopName : hit(.broadcast) ? .broadcast : nil
        case 10: return hit(.homeScore) ? .homeScore : hit(.awayScore) ? .awayScore : nil
        case 11: return hit(.competition) ? .competition : nil
        case 13: return hit(.activityType) ? .activityType : nil
        default: return nil
        }
    }

    static func named(_ bytes: [UInt8]) -> Field? {
        bytes.withUnsafeBufferPointer { named($0) }
    }
}

/// A set of fields as a bit mask, so that "unknown for this type" and "missing" are a few integer
/// operations per entry. Iterates in `Field` order.
struct FieldSet: Equatable, Sendable, ExpressibleByArrayLiteral, Sequence {
    var bits: UInt64

    init(bits: UInt64) { self.bits = bits }
    init(arrayLiteral elements: Field...) {
        bits = 0
        for field in elements { bits |= 1 &<< UInt64(field.rawValue) }
    }

    @inline(__always) func contains(_ field: Field) -> Bool { bits & (1 &<< UInt64(field.rawValue)) != 0 }
    @inline(__always) mutating func insert(_ field: Field) { bits |= 1 &<< UInt64(field.rawValue) }
    @inline(__always) func union(_ other: FieldSet) -> FieldSet { FieldSet(bits: bits | other.bits) }
    @inline(__always) func subtracting(_ other: FieldSet) -> FieldSet { FieldSet(bits: bits & ~other.bits) }
    var isEmpty: Bool { bits == 0 }

    struct Iterator: IteratorProtocol {
        var bits: UInt64
        mutating func next() -> Field? {
            guard bits != 0 else { return nil }
            let index = bits.trailingZeroBitCount
            bits &= bits &- 1
            return Field(rawValue: UInt8(index))
        }
    }
    func makeIterator() -> Iterator { Iterator(bits: bits) }
}
