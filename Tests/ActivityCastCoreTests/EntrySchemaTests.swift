@testable import ActivityCastCore
import Testing

/// The public schema table (for route files) says what the decoder does.
@Suite("Entry schema")
struct EntrySchemaTests {
    @Test func everyTypeWithItsStreamAndFieldsAsTheDecoderHasThem() {
        #expect(EntrySchema.types.map(\.name) == EntryType.allCases.map(\.name))
        for type in EntryType.allCases {
            let info = EntrySchema.type(named: type.name)
            #expect(info?.stream == type.stream)
            #expect(info?.fields.map(\.name) == Field.allCases.filter { $0 != .type && type.allowed.contains($0) }.map(\.name))
            #expect(info?.fields.filter(\.required).map(\.name) == type.required.map(\.name))
            #expect(info?.fields.first?.name == "ts")
        }
        #expect(EntrySchema.type(named: "match.scor") == nil)
        #expect(EntrySchema.types(of: .transit).map(\.name).first == "trip.started")
    }

    /// Each kind describes values the decoder accepts, checked on one accepted value per field.
    @Test func valueKindsMatchWhatTheDecoderAccepts() {
        let moment = EntrySchema.type(named: "match.moment")!
        #expect(moment.field(named: "moment")?.kind == .choice(["goal", "red_card", "penalty", "half_time"]))
        #expect(moment.field(named: "moment")?.required == true)
        #expect(moment.field(named: "team")?.kind == .choice(["home", "away"]))
        #expect(moment.field(named: "home_score")?.kind == .integer(0...999))
        #expect(moment.field(named: "player")?.kind == .text)
        #expect(moment.field(named: "match")?.kind == .identifier)
        let eta = EntrySchema.type(named: "trip.eta")!
        #expect(eta.field(named: "eta")?.kind == .millis)
        #expect(eta.field(named: "delay")?.kind == .integer(-86_400...86_400))
        #expect(EntrySchema.type(named: "trip.position")?.field(named: "lat")?.kind == .decimal(-90...90))
        #expect(EntrySchema.type(named: "trip.disruption")?.field(named: "severity")?.kind == .choice(["info", "warning", "severe"]))
        #expect(EntrySchema.type(named: "device")?.field(named: "broadcast")?.kind == .bool)

        // The ends of each range decode; one past them doesn't.
        #expect(decoded(.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2", "delay": "-86400"]) != nil)
        #expect(decoded(.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2", "delay": "86401"]) == nil)
        #expect(decoded(.sports, ["type": "match.score", "ts": "1", "match": "m", "home_score": "999", "away_score": "0"]) != nil)
        #expect(decoded(.sports, ["type": "match.score", "ts": "1", "match": "m", "home_score": "1000", "away_score": "0"]) == nil)
    }
}
