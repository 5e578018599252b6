import ActivityCastCore
import ActivityCastRoutes
import Foundation
import Testing

/// The examples in docs/routes.md compile and do what the text says.
@Suite("docs/routes.md examples")
struct DocsExamplesTests {
    static func yamlBlocks() throws -> [String] {
        let path = ShippedRoutesTests.repository.appendingPathComponent("docs/routes.md").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return text.components(separatedBy: "```yaml\n").dropFirst().map { String($0.components(separatedBy: "```")[0]) }
    }

    static func indented(_ text: String, by spaces: Int) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.isEmpty ? "" : String(repeating: " ", count: spaces) + $0 }.joined(separator: "\n")
    }

    @Test func theShortExampleIsAFileAndPlansAsDescribed() throws {
        let blocks = try Self.yamlBlocks()
        let file = try #require(blocks.first { $0.hasPrefix("feed: sports") })
        let routes = try Routes(yaml: file, file: "example.yaml", feed: .sports)
        #expect(routes.routedTypes == ["match.score"])
        let set = RouteSet(sports: routes, transit: RouteSet.shipped.transit)
        let plan = routePlan(set, .sports, ["type": "match.score", "ts": "1732234500000", "match": "4711", "home_score": "1",
                                            "away_score": "0", "clock": "15'"])
        let key = ActivityKey(kind: .match, id: "4711")
        #expect(plan == Plan(key: key, event: .update, priority: .critical, timestampMillis: 1_732_234_500_000,
                             audience: .activity(key), contentState: ["homeScore": 1, "awayScore": 0, "clock": "15'"],
                             staleAfterSeconds: 1200, relevanceScore: 50))
        #expect(plan.map { String(decoding: JSONValue.object($0.contentState).encoded(), as: UTF8.self) }
            == #"{"awayScore":0,"clock":"15'","homeScore":1}"#)
    }

    @Test func theAlertExampleCompilesAndPicksItsLocKeyByPresence() throws {
        let alert = try #require(try Self.yamlBlocks().first { $0.hasPrefix("alert:") })
        let yaml = sportsFile("  match.moment:\n    key: \"match:{match}\"\n    event: update\n    priority: critical\n"
            + Self.indented(alert, by: 4))
        let routes = try Routes(yaml: yaml, file: "alert.yaml", feed: .sports)
        let set = RouteSet(sports: routes, transit: RouteSet.shipped.transit)
        let full = routePlan(set, .sports, ["type": "match.moment", "ts": "1", "match": "m", "moment": "goal", "team": "home",
                                            "player": "B. Saka", "home_score": "1", "away_score": "0"])
        #expect(full?.alert == PlanAlert(title: "Goal!", body: "B. Saka scores for the home team (1-0)", titleLocKey: "GOAL_TITLE",
                                         titleLocArgs: ["home"], locKey: "GOAL_BY_PLAYER", locArgs: ["home", "B. Saka"],
                                         sound: "default"))
        let bare = routePlan(set, .sports, ["type": "match.moment", "ts": "1", "match": "m", "moment": "goal", "team": "away"])
        #expect(bare?.alert == PlanAlert(title: "Goal!", body: "Goal for the away team", titleLocKey: "GOAL_TITLE",
                                         titleLocArgs: ["away"], locKey: "GOAL", locArgs: ["away", ""], sound: "default"))
    }

    @Test func theVariantExampleCompiles() throws {
        let route = try #require(try Self.yamlBlocks().first { $0.hasPrefix("match.moment:") })
        let routes = try Routes(yaml: sportsFile(Self.indented(route, by: 2)), file: "variants.yaml", feed: .sports)
        let set = RouteSet(sports: routes, transit: RouteSet.shipped.transit)
        let halfTime = routePlan(set, .sports, ["type": "match.moment", "ts": "1", "match": "m", "moment": "half_time"])
        #expect(halfTime?.contentState == ["lastEvent": ["kind": "half_time"], "period": "half_time"])
        #expect(halfTime?.alert?.title == "Half time")
        let card = routePlan(set, .sports, ["type": "match.moment", "ts": "1", "match": "m", "moment": "red_card"])
        #expect(card?.alert == nil)
    }

    @Test func anchorsAndAliasesShareTexts() throws {
        let yaml = sportsFile("""
              match.full_time:
                key: "match:{match}"
                event: end
                priority: critical
                alert: &final {title: "Full time", body: "{home_score}-{away_score}"}
              match.abandoned:
                key: "match:{match}"
                event: end
                priority: critical
                alert: *final

            """)
        // The alias is checked against its own type (match.abandoned may lack the scores), at the anchored text.
        #expect(rejection(yaml) == "test.yaml:8:46: match.abandoned: alert body: '{home_score}-{away_score}' uses "
            + "{home_score}, {away_score}, which match.abandoned may lack; put that part in [brackets], or give a list "
            + "of alternatives ending with one that always renders")
        let fixed = yaml.replacingOccurrences(of: "\"{home_score}-{away_score}\"", with: "[\"{home_score}-{away_score}\", \"Over\"]")
        #expect(rejection(fixed) == "<compiled [\"match.abandoned\", \"match.full_time\"]>")
    }
}
