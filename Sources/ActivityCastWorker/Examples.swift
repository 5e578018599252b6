import ActivityCastCore

/// Example entries for every type in docs/schema.md, used by `activitycast publish` when no
/// fields are given, by the local demo and by the intake benchmark.
public enum Examples {
    public static let byType: [(kind: StreamKind, type: String, fields: [(String, String)])] = [
        (.sports, "match.scheduled", [("match", "4711"), ("home", "ars"), ("away", "che"), ("kickoff", "1732233600000"), ("competition", "Premier League")]),
        (.sports, "match.started", [("match", "4711"), ("home", "ars"), ("away", "che"), ("competition", "Premier League")]),
        (.sports, "match.score", [("match", "4711"), ("home_score", "1"), ("away_score", "0"), ("clock", "15'"), ("period", "first_half")]),
        (.sports, "match.clock", [("match", "4711"), ("clock", "30'"), ("period", "first_half")]),
        (.sports, "match.moment", [("match", "4711"), ("moment", "goal"), ("team", "home"), ("player", "B. Saka"), ("clock", "15'"), ("home_score", "1"), ("away_score", "0")]),
        (.sports, "match.full_time", [("match", "4711"), ("home_score", "2"), ("away_score", "1")]),
        (.sports, "match.postponed", [("match", "4711"), ("reason", "waterlogged pitch")]),
        (.sports, "match.abandoned", [("match", "4711"), ("reason", "floodlight failure"), ("home_score", "1"), ("away_score", "1")]),
        (.transit, "trip.started", [("trip", "t-981"), ("route", "42"), ("headsign", "Central Station"), ("vehicle", "bus-17")]),
        (.transit, "trip.position", [("trip", "t-981"), ("lat", "52.3702"), ("lon", "4.8952"), ("next_stop", "s-17")]),
        (.transit, "trip.eta", [("trip", "t-981"), ("stop", "s-17"), ("eta", "1732233900000"), ("delay", "120"), ("stop_name", "Market Sq")]),
        (.transit, "trip.arriving", [("trip", "t-981"), ("stop", "s-17"), ("stop_name", "Market Sq")]),
        (.transit, "trip.departed", [("trip", "t-981"), ("stop", "s-17"), ("stop_name", "Market Sq")]),
        (.transit, "trip.ended", [("trip", "t-981")]),
        (.transit, "trip.cancelled", [("trip", "t-981"), ("reason", "vehicle breakdown")]),
        (.transit, "trip.disruption", [("route", "42"), ("message", "Diversion via Elm St"), ("severity", "warning")]),
        (.registrations, "device", [("device", "d-1"), ("env", "development"), ("tier", "frequent"), ("broadcast", "true")]),
        (.registrations, "follow", [("device", "d-1"), ("target", "team:ars")]),
        (.registrations, "unfollow", [("device", "d-1"), ("target", "team:ars")]),
        (.registrations, "start.token", [("device", "d-1"), ("activity_type", "MatchActivityAttributes"), ("token", String(repeating: "80a1", count: 16))]),
        (.registrations, "activity.token", [("device", "d-1"), ("key", "match:4711"), ("activity", "A1B2"), ("token", String(repeating: "9f3c", count: 16))]),
        (.registrations, "unregister", [("device", "d-1"), ("key", "match:4711"), ("activity", "A1B2")]),
    ]

    public static func fields(for type: String) -> (kind: StreamKind, fields: [(String, String)])? {
        byType.first { $0.type == type }.map { ($0.kind, $0.fields) }
    }

    public static func kind(of type: String) -> StreamKind? {
        if type.hasPrefix("match.") { return .sports }
        if type.hasPrefix("trip.") { return .transit }
        if ["device", "follow", "unfollow", "start.token", "activity.token", "unregister"].contains(type) { return .registrations }
        return nil
    }
}
