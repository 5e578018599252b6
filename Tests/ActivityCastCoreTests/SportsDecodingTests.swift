import ActivityCastCore
import Testing

@Suite("Decoding sports entries")
struct SportsDecodingTests {
    @Test func scheduled() {
        let entry = decoded(.sports, ["type": "match.scheduled", "ts": "1732230000000", "match": "4711", "home": "ars",
                                      "away": "che", "kickoff": "1732233600000", "competition": "Premier League"])
        #expect(entry == DecodedEntry(type: "match.scheduled", timestampMillis: 1_732_230_000_000,
                                      body: .sports(.scheduled(match: "4711", home: "ars", away: "che",
                                                               kickoffMillis: 1_732_233_600_000,
                                                               competition: "Premier League"))))
    }

    @Test func started() {
        let entry = decoded(.sports, ["type": "match.started", "ts": "1732233600000", "match": "4711", "home": "ars",
                                      "away": "che", "competition": "Premier League"])
        #expect(entry == DecodedEntry(type: "match.started", timestampMillis: 1_732_233_600_000,
                                      body: .sports(.started(match: "4711", home: "ars", away: "che",
                                                             competition: "Premier League"))))
    }

    @Test func startedWithOnlyTheMatch() {
        let entry = decoded(.sports, ["type": "match.started", "ts": "1732233600000", "match": "4711"])
        #expect(entry?.body == .sports(.started(match: "4711", home: nil, away: nil, competition: nil)))
    }

    @Test func score() {
        let entry = decoded(.sports, ["type": "match.score", "ts": "1732234500000", "match": "4711", "home_score": "1",
                                      "away_score": "0", "clock": "15'", "period": "first_half"])
        #expect(entry == DecodedEntry(type: "match.score", timestampMillis: 1_732_234_500_000,
                                      body: .sports(.score(match: "4711", score: Score(home: 1, away: 0),
                                                           clock: "15'", period: .firstHalf))))
    }

    @Test func clock() {
        let entry = decoded(.sports, ["type": "match.clock", "ts": "1732236000000", "match": "4711", "clock": "45+2'",
                                      "period": "first_half"])
        #expect(entry?.body == .sports(.clock(match: "4711", clock: "45+2'", period: .firstHalf)))
    }

    @Test func goal() {
        let entry = decoded(.sports, ["type": "match.moment", "ts": "1732234500000", "match": "4711", "moment": "goal",
                                      "team": "home", "player": "B. Saka", "clock": "15'", "home_score": "1",
                                      "away_score": "0"])
        #expect(entry?.body == .sports(.moment(match: "4711", moment: .goal, team: .home, player: "B. Saka",
                                               clock: "15'", score: Score(home: 1, away: 0))))
    }

    @Test func redCardWithoutOptionalFields() {
        let entry = decoded(.sports, ["type": "match.moment", "ts": "1732234500000", "match": "4711",
                                      "moment": "red_card"])
        #expect(entry?.body == .sports(.moment(match: "4711", moment: .redCard, team: nil, player: nil, clock: nil,
                                               score: nil)))
    }

    @Test func fullTime() {
        let entry = decoded(.sports, ["type": "match.full_time", "ts": "1732240000000", "match": "4711",
                                      "home_score": "2", "away_score": "1"])
        #expect(entry?.body == .sports(.fullTime(match: "4711", score: Score(home: 2, away: 1))))
    }

    @Test func postponed() {
        let entry = decoded(.sports, ["type": "match.postponed", "ts": "1732230000000", "match": "4711",
                                      "reason": "Waterlogged pitch"])
        #expect(entry?.body == .sports(.postponed(match: "4711", reason: "Waterlogged pitch")))
    }

    @Test func abandoned() {
        let entry = decoded(.sports, ["type": "match.abandoned", "ts": "1732236000000", "match": "4711",
                                      "reason": "Floodlight failure", "home_score": "1", "away_score": "1"])
        #expect(entry?.body == .sports(.abandoned(match: "4711", reason: "Floodlight failure",
                                                  score: Score(home: 1, away: 1))))
    }

    @Test(arguments: MatchPeriod.allCases)
    func everyPeriod(_ period: MatchPeriod) {
        let entry = decoded(.sports, ["type": "match.clock", "ts": "1", "match": "m", "clock": "1'",
                                      "period": period.rawValue])
        #expect(entry?.body == .sports(.clock(match: "m", clock: "1'", period: period)))
    }

    @Test(arguments: MatchMoment.allCases)
    func everyMoment(_ moment: MatchMoment) {
        let entry = decoded(.sports, ["type": "match.moment", "ts": "1", "match": "m", "moment": moment.rawValue,
                                      "team": "away"])
        #expect(entry?.body == .sports(.moment(match: "m", moment: moment, team: .away, player: nil, clock: nil,
                                               score: nil)))
    }

    @Test func unicodeTextAndTabsAreKept() {
        let entry = decoded(.sports, ["type": "match.moment", "ts": "1", "match": "m", "moment": "goal",
                                      "team": "home", "player": "Ødegaard\tМартин 🇳🇴"])
        #expect(entry?.body == .sports(.moment(match: "m", moment: .goal, team: .home,
                                               player: "Ødegaard\tМартин 🇳🇴", clock: nil, score: nil)))
    }

    @Test func emptyOptionalFieldsCountAsAbsent() {
        let entry = decoded(.sports, ["type": "match.score", "ts": "1", "match": "m", "home_score": "0",
                                      "away_score": "0", "clock": "", "period": ""])
        #expect(entry?.body == .sports(.score(match: "m", score: Score(home: 0, away: 0), clock: nil, period: nil)))
    }

    @Test func extensionFieldsAreIgnored() {
        let entry = decoded(.sports, ["x-trace-id": "abc", "type": "match.full_time", "ts": "5", "match": "m",
                                      "home_score": "0", "away_score": "3", "x-": "\u{1}anything"])
        #expect(entry?.body == .sports(.fullTime(match: "m", score: Score(home: 0, away: 3))))
    }

    @Test func fieldOrderDoesNotMatter() {
        let entry = decoded(.sports, ["away_score": "1", "match": "4711", "home_score": "2", "ts": "9",
                                      "type": "match.full_time"])
        #expect(entry == DecodedEntry(type: "match.full_time", timestampMillis: 9,
                                      body: .sports(.fullTime(match: "4711", score: Score(home: 2, away: 1)))))
    }
}
