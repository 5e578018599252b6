import ActivityCastCore
import ActivityCastRoutes
import Testing

/// Every kind of mistake in a route file is reported as `file:line:column: reason`, on one line,
/// at the place of the mistake.
@Suite("Route file errors")
struct RouteFileErrorTests {
    /// A valid route; lines 4-9 of `sportsFile(score)`.
    static let score = """
          match.score:
            key: "match:{match}"
            event: update
            priority: critical
            content-state:
              homeScore: int home_score

        """

    static func scoreWith(_ old: String, _ new: String) -> String {
        precondition(score.contains(old))
        return sportsFile(score.replacingOccurrences(of: old, with: new))
    }

    static func start(_ lines: String) -> String {
        sportsFile("  match.started:\n    key: \"match:{match}\"\n    event: start\n    priority: critical\n" + lines)
    }

    @Test func theValidBaseCompiles() {
        #expect(rejection(sportsFile(Self.score)) == "<compiled [\"match.score\"]>")
    }

    // MARK: The file

    @Test func yamlSyntaxErrorsAtLibyamlsPosition() {
        #expect(rejection("types:\n  match.score: [\n", file: "sports.yaml")
            == "sports.yaml:3:1: not valid YAML: did not find expected node content (while parsing a flow node at line 3, column 1)")
        #expect(rejection("feed: sports\nstorage-policy: no-storage\ntypes:\n  match.score:\n    key: \"a\u{7}\"\n")
            == "test.yaml:5:12: not valid YAML: control characters are not allowed")
    }

    @Test func emptyFileAndMissingTopLevelKeys() {
        #expect(rejection("") == "test.yaml:1:1: the file is empty; a route file needs feed, storage-policy and types")
        #expect(rejection("# only a comment\n") == "test.yaml:1:1: the file is empty; a route file needs feed, storage-policy and types")
        #expect(rejection("- a\n") == "test.yaml:1:1: the top level must be a mapping with feed, storage-policy and types")
        #expect(rejection("storage-policy: no-storage\ntypes:\n") == "test.yaml:1:1: missing 'feed: sports' (the feed these routes are for)")
        #expect(rejection("feed: sports\ntypes:\n") == "test.yaml:1:1: missing 'storage-policy' (no-storage or latest-message: "
            + "how the key's broadcast channel keeps messages, fixed when it is created)")
        #expect(rejection("feed: sports\nstorage-policy: no-storage\n") == "test.yaml:1:1: missing 'types' (the route of each event type)")
    }

    @Test func unknownTopLevelKeyWithAHint() {
        #expect(rejection("feed: sports\nstorage_policy: no-storage\ntypes:\n")
            == "test.yaml:2:1: unknown key 'storage_policy' (did you mean storage-policy?) "
            + "(known: feed, storage-policy, date-encoding, defaults, types)")
    }

    @Test func wrongFeedPolicyOrDateEncoding() {
        #expect(rejection("feed: transit\nstorage-policy: no-storage\ntypes:\n") == "test.yaml:1:7: this file routes the transit feed, not sports")
        #expect(rejection("feed: registrations\nstorage-policy: no-storage\ntypes:\n")
            == "test.yaml:1:7: feed must be sports or transit, got 'registrations'")
        #expect(rejection("feed: sports\nstorage-policy: none\ntypes:\n")
            == "test.yaml:2:17: storage-policy must be no-storage or latest-message, got 'none'")
        #expect(rejection(sportsFile(Self.score, header: "date-encoding: unix\n"))
            == "test.yaml:3:16: date-encoding must be since-2001 or unix-seconds, got 'unix'")
    }

    @Test func badDefaults() {
        #expect(rejection(sportsFile(Self.score, header: "defaults:\n  stale-after: 0\n"))
            == "test.yaml:4:16: defaults: stale-after must be 1...28800 seconds (an activity is active at most 8 h), got 0")
        #expect(rejection(sportsFile(Self.score, header: "defaults:\n  relevance: high\n"))
            == "test.yaml:4:14: defaults: relevance must be a number ≥ 0 (higher ranks first), got 'high'")
        #expect(rejection(sportsFile(Self.score, header: "defaults:\n  dismiss-after: 14401\n"))
            == "test.yaml:4:18: defaults: dismiss-after must be 0...14400 seconds (APNs removes an ended activity at most 4 h after its end), got 14401")
        #expect(rejection(sportsFile(Self.score, header: "defaults:\n  stale: 5\n"))
            == "test.yaml:4:3: unknown default 'stale' (known: stale-after, relevance, dismiss-after)")
    }

    // MARK: Types and route keys

    @Test func unknownEventTypeForTheFeed() {
        let known = "(known: match.scheduled, match.started, match.score, match.clock, match.moment, match.full_time, "
            + "match.postponed, match.abandoned)"
        #expect(rejection(sportsFile("  match.scores:\n    key: \"match:{match}\"\n"))
            == "test.yaml:4:3: unknown event type 'match.scores' for the sports feed (did you mean match.score?) \(known)")
        // A type of another stream is as unknown here as a made-up one.
        #expect(rejection(sportsFile("  trip.eta:\n    key: \"trip:{trip}\"\n"))
            == "test.yaml:4:3: unknown event type 'trip.eta' for the sports feed \(known)")
        #expect(rejection(sportsFile("  follow:\n    key: \"match:{match}\"\n"))
            == "test.yaml:4:3: unknown event type 'follow' for the sports feed \(known)")
    }

    @Test func unknownRouteKeyWithAHint() {
        #expect(rejection(Self.scoreWith("priority:", "priorty:"))
            == "test.yaml:7:5: match.score: unknown route key 'priorty' (did you mean priority?) (known: key, event, priority, "
            + "content-state, attributes-type, attributes, followers, alert, stale-after, dismiss-after, relevance, variant-by, variants)")
    }

    @Test func duplicateKeys() {
        #expect(rejection(sportsFile(Self.score + Self.score)) == "test.yaml:4:3: 'match.score' appears more than once in the same mapping")
    }

    @Test func missingOrWrongEventAndPriority() {
        #expect(rejection(Self.scoreWith("    event: update\n", "")) == "test.yaml:4:3: match.score: missing 'event' (start, update, end or none)")
        #expect(rejection(Self.scoreWith("event: update", "event: begin"))
            == "test.yaml:6:12: match.score: event must be start, update, end or none, got 'begin'")
        #expect(rejection(Self.scoreWith("    priority: critical\n", "")) == "test.yaml:4:3: match.score: missing 'priority' (critical or routine)")
        #expect(rejection(Self.scoreWith("priority: critical", "priority: high"))
            == "test.yaml:7:15: match.score: priority must be critical or routine, got 'high'")
        #expect(rejection(Self.scoreWith("    key: \"match:{match}\"\n", ""))
            == "test.yaml:4:3: match.score: missing 'key' (the activity key, such as \"match:{match}\")")
    }

    @Test func keysNeedAKnownKindAndAnIdentifierField() {
        #expect(rejection(Self.scoreWith("match:{match}", "match:{clock}"))
            == "test.yaml:5:10: match.score: key: field 'clock' is free text, but an id must be an identifier field (match)")
        #expect(rejection(Self.scoreWith("match:{match}", "match:{game}"))
            == "test.yaml:5:10: match.score: key: unknown field 'game' for match.score "
            + "(its fields: ts, match, home_score, away_score, clock, period)")
        #expect(rejection(Self.scoreWith("match:{match}", "game:{match}"))
            == "test.yaml:5:10: match.score: key kind must be match, trip or route, got 'game'")
        #expect(rejection(Self.scoreWith("match:{match}", "{match}"))
            == "test.yaml:5:10: match.score: key: must be kind:{field} such as match:{match}, got '{match}'")
    }

    // MARK: Values

    @Test func unknownEntryFieldForTheType() {
        #expect(rejection(Self.scoreWith("int home_score", "int home_scor"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': unknown field 'home_scor' for match.score (did you mean home_score?)")
        // A field of another type of the same feed is unknown too.
        #expect(rejection(Self.scoreWith("int home_score", "string player"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': unknown field 'player' for match.score "
            + "(its fields: ts, match, home_score, away_score, clock, period)")
    }

    @Test func badJSONTypes() {
        #expect(rejection(Self.scoreWith("int home_score", "integer home_score"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': unknown value type 'integer'; a value is TYPE SOURCE with "
            + "TYPE one of int, double, string, bool, date, date-since-2001, date-unix-seconds, seconds-until, or a nested mapping")
        #expect(rejection(Self.scoreWith("int home_score", "int clock"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': int can't hold field 'clock' (free text); use string")
        #expect(rejection(Self.scoreWith("int home_score", "bool home_score"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': bool can't hold field 'home_score' (an integer); use string")
        #expect(rejection(Self.scoreWith("int home_score", "date clock"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': date can't hold field 'clock' (free text); "
            + "date needs a time in Unix ms such as ts, kickoff or eta")
        #expect(rejection(Self.scoreWith("int home_score", "double period"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': double can't hold field 'period' "
            + "(one of first_half, half_time, second_half, extra_time, penalties, full_time); use string")
    }

    @Test func badConstantsAndFallbacks() {
        #expect(rejection(Self.scoreWith("int home_score", "string first_half"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': unknown field 'first_half' for match.score "
            + "(a text constant is quoted: string \"first_half\")")
        #expect(rejection(Self.scoreWith("int home_score", "int \"3\""))
            == "test.yaml:9:18: match.score: content-state 'homeScore': the constant of an int must be a whole number such as 0")
        #expect(rejection(Self.scoreWith("int home_score", "string true"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': the constant of a string must be quoted: \"text\"")
        #expect(rejection(Self.scoreWith("int home_score", "bool yes"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': unknown field 'yes' for match.score "
            + "(a bool constant is true or false)")
        #expect(rejection(Self.scoreWith("int home_score", "date 5"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': date takes a field, not a constant")
        #expect(rejection(Self.scoreWith("int home_score", "int home_score ?? away_score"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': the fallback after '??' must be a constant, not a field")
        #expect(rejection(Self.scoreWith("int home_score", "int home_score ?? \"x\""))
            == "test.yaml:9:18: match.score: content-state 'homeScore': the fallback of an int must be a whole number such as 0")
        #expect(rejection(Self.scoreWith("int home_score", "int home_score extra"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': unexpected 'extra' after the source (only '?? FALLBACK' may follow)")
        #expect(rejection(Self.scoreWith("int home_score", "string \"open"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': the quoted constant is not closed with '\"'")
        #expect(rejection(Self.scoreWith("int home_score", "\"\""))
            == "test.yaml:9:18: match.score: content-state 'homeScore': empty value; a value is TYPE SOURCE "
            + "(such as int home_score or string \"ended\") or a mapping")
        #expect(rejection(Self.scoreWith("int home_score", "[int home_score]"))
            == "test.yaml:9:18: match.score: content-state 'homeScore': a value is TYPE SOURCE (such as int home_score or "
            + "string \"ended\") or a mapping")
    }

    // MARK: Templates

    @Test func placeholderNamingAFieldTheTypeDoesNotHave() {
        #expect(rejection(sportsFile(Self.score + "    alert:\n      title: Goal\n      body: \"{scorer} scores\"\n"))
            == "test.yaml:12:13: match.score: alert body: unknown field 'scorer' for match.score "
            + "(its fields: ts, match, home_score, away_score, clock, period) in '{scorer} scores'")
    }

    @Test func aTextMustAlwaysRender() {
        #expect(rejection(sportsFile(Self.score + "    alert:\n      title: Goal\n      body: \"{clock} played\"\n"))
            == "test.yaml:12:13: match.score: alert body: '{clock} played' uses {clock}, which match.score may lack; "
            + "put that part in [brackets], or give a list of alternatives ending with one that always renders")
        // In a list, the last alternative is the one that must render (at its own column).
        #expect(rejection(sportsFile(Self.score + "    alert:\n      title: Goal\n      body: [\"{clock} played\", \"{period}\"]\n"))
            == "test.yaml:12:32: match.score: alert body: '{period}' uses {period}, which match.score may lack; "
            + "end the list with an alternative that always renders")
        #expect(rejection(sportsFile(Self.score + "    alert:\n      title: a\n      body: b\n      loc-key: K\n      loc-args: [\"{clock}\"]\n"))
            == "test.yaml:14:18: match.score: alert loc-args[0]: '{clock}' uses {clock}, which match.score may lack; "
            + "put that part in [brackets], or give a list of alternatives ending with one that always renders")
    }

    @Test func templateSyntax() {
        func body(_ text: String) -> String {
            rejection(sportsFile(Self.score + "    alert:\n      title: Goal\n      body: \"\(text)\"\n"))
        }
        #expect(body("[{clock} played") == "test.yaml:12:13: match.score: alert body: '[' is not closed "
            + "(write '[[' for a literal bracket) in '[{clock} played'")
        #expect(body("a } b") == "test.yaml:12:13: match.score: alert body: '}' at character 3 has no '{' "
            + "(write '}}' for a literal brace) in 'a } b'")
        #expect(body("a ] b") == "test.yaml:12:13: match.score: alert body: ']' at character 3 has no '[' "
            + "(write ']]' for a literal bracket) in 'a ] b'")
        #expect(body("{match") == "test.yaml:12:13: match.score: alert body: '{' at character 1 is not closed "
            + "(write '{{' for a literal brace) in '{match'")
        #expect(body("{}") == "test.yaml:12:13: match.score: alert body: empty placeholder '{}' at character 1 in '{}'")
        #expect(body("[a [{clock}]]") == "test.yaml:12:13: match.score: alert body: '[' at character 4 is inside another "
            + "optional segment (they don't nest; write '[[' for a literal bracket) in '[a [{clock}]]'")
        #expect(body("[no placeholder]") == "test.yaml:12:13: match.score: alert body: the optional segment ending at character 16 "
            + "has no placeholder, so it would always be shown (write '[[' and ']]' for literal brackets) in '[no placeholder]'")
    }

    @Test func alertNeedsPlainTitleAndBody() {
        #expect(rejection(sportsFile(Self.score + "    alert:\n      body: \"x\"\n"))
            == "test.yaml:11:7: match.score: alert: missing 'title' (plain text is always needed)")
        #expect(rejection(sportsFile(Self.score + "    alert:\n      title: a\n      body: b\n      loc-args: [\"{match}\"]\n"))
            == "test.yaml:13:7: match.score: alert: loc-args without loc-key")
        #expect(rejection(sportsFile(Self.score + "    alert:\n      title: a\n      body: b\n      subtitle: c\n"))
            == "test.yaml:13:7: match.score: alert: unknown alert key 'subtitle' (known: title, body, title-loc-key, "
            + "title-loc-args, loc-key, loc-args, sound)")
    }

    // MARK: What each event may have

    @Test func aStartNeedsAttributesTypeFollowersAndAnAlert() {
        #expect(rejection(Self.start("    followers: [\"team:{home}\"]\n    alert: {title: a, body: b}\n"))
            == "test.yaml:4:3: match.started: a start needs 'attributes-type' (the Swift type name of the app's "
            + "ActivityAttributes, such as MatchActivityAttributes)")
        #expect(rejection(Self.start("    attributes-type: MatchActivityAttributes\n    followers: [\"team:{home}\"]\n"))
            == "test.yaml:4:3: match.started: a start needs an 'alert' (APNs requires one on a start)")
        #expect(rejection(Self.start("    attributes-type: A\n    alert: {title: a, body: b}\n"))
            == "test.yaml:4:3: match.started: a start needs 'followers' (the targets whose followers get it, "
            + "such as [\"team:{home}\", \"team:{away}\"])")
        #expect(rejection(Self.start("    attributes-type: Match-Attributes\n"))
            == "test.yaml:8:22: match.started: attributes-type must be a Swift type name (1-128 of A-Z a-z 0-9 _ .), "
            + "as apps register it in start.token, got 'Match-Attributes'")
        #expect(rejection(Self.start("    attributes-type: A\n    followers: [\"club:{home}\"]\n"))
            == "test.yaml:9:17: match.started: a follow target's kind must be team or route, got 'club'")
        #expect(rejection(Self.start("    attributes-type: A\n    followers: [\"team:{competition}\"]\n"))
            == "test.yaml:9:17: match.started: followers: field 'competition' is free text, but an id must be an identifier "
            + "field (match, home, away)")
    }

    @Test func keysThatDoNotBelongToTheEvent() {
        #expect(rejection(sportsFile(Self.score + "    attributes:\n      homeTeam: string match\n"))
            == "test.yaml:10:5: match.score: attributes are sent only with a start (and kept on an event of none), not with update")
        #expect(rejection(sportsFile(Self.score + "    attributes-type: A\n"))
            == "test.yaml:10:5: match.score: attributes-type is sent only with a start, not with update")
        #expect(rejection(sportsFile(Self.score + "    followers: [\"team:{match}\"]\n"))
            == "test.yaml:10:5: match.score: followers are the audience of a start; an update goes to the key's activities")
        #expect(rejection(sportsFile(Self.score + "    dismiss-after: 60\n")) == "test.yaml:10:5: match.score: dismiss-after applies only to an end")
        #expect(rejection(sportsFile(Self.score + "    stale-after: 99999\n"))
            == "test.yaml:10:18: match.score: stale-after must be 1...28800 seconds (an activity is active at most 8 h), got 99999")
        #expect(rejection(Self.scoreWith("event: update", "event: end") + "    stale-after: 60\n")
            == "test.yaml:10:5: match.score: stale-after has no meaning on an end (use dismiss-after)")
        #expect(rejection(sportsFile("  match.scheduled:\n    key: \"match:{match}\"\n    event: none\n    alert: {title: a, body: b}\n"))
            == "test.yaml:7:5: match.scheduled: alert is sent only with start, update or end, and this event is none")
        #expect(rejection(sportsFile("  match.scheduled:\n    key: \"match:{match}\"\n    event: none\n    relevance: 5\n"))
            == "test.yaml:7:5: match.scheduled: relevance needs an event that is sent, and this event is none")
    }

    // MARK: Variants

    @Test func variantsNeedAChoiceFieldAndItsValues() {
        #expect(rejection(sportsFile(Self.score + "    variant-by: period\n    variants:\n      overtime: ~\n"))
            == "test.yaml:12:7: match.score: 'overtime' is not a value of 'period' "
            + "(first_half, half_time, second_half, extra_time, penalties, full_time)")
        #expect(rejection(sportsFile(Self.score + "    variant-by: clock\n    variants:\n      x: ~\n"))
            == "test.yaml:10:17: match.score: variant-by needs a field with a fixed set of values (period); 'clock' is free text")
        #expect(rejection(sportsFile(Self.score + "    variants:\n      x: ~\n"))
            == "test.yaml:10:5: match.score: variants need 'variant-by: FIELD' (the field whose value picks one)")
        #expect(rejection(sportsFile(Self.score + "    variant-by: period\n"))
            == "test.yaml:10:5: match.score: variant-by without variants")
    }

    @Test func aVariantIsCheckedAsTheRouteItMakes() {
        let moment = "  match.moment:\n    key: \"match:{match}\"\n    event: update\n    priority: critical\n"
            + "    content-state: {clock: string clock}\n    variant-by: moment\n    variants:\n      goal:\n"
        #expect(rejection(sportsFile(moment + "        event: start\n"))
            == "test.yaml:11:7: match.moment (moment=goal): a start needs 'attributes-type' (the Swift type name of the app's "
            + "ActivityAttributes, such as MatchActivityAttributes)")
        #expect(rejection(sportsFile(moment + "        variants: ~\n"))
            == "test.yaml:12:9: match.moment (moment=goal): a variant can't have variants of its own")
        #expect(rejection(sportsFile(moment + "        alert: {title: Goal, body: \"{player} scores\"}\n"))
            == "test.yaml:12:36: match.moment (moment=goal): alert body: '{player} scores' uses {player}, which match.moment "
            + "may lack; put that part in [brackets], or give a list of alternatives ending with one that always renders")
    }

    // MARK: What can never be sent

    @Test func anUpdateWithNothingToSend() {
        let bare = "  match.score:\n    key: \"match:{match}\"\n    event: update\n    priority: critical\n"
        let reason = "match.score: an update needs a content-state with at least one key (or an alert): without either it has nothing to send"
        #expect(rejection(sportsFile(bare)) == "test.yaml:4:3: \(reason)")
        #expect(rejection(sportsFile(bare + "    content-state: ~\n")) == "test.yaml:8:5: \(reason)")
        #expect(rejection(sportsFile(bare + "    content-state: {}\n")) == "test.yaml:8:5: \(reason)")
        // A variant that makes an update of a route of none is checked the same way.
        #expect(rejection(sportsFile("  match.moment:\n    key: \"match:{match}\"\n    event: none\n    variant-by: moment\n"
            + "    variants:\n      goal: {event: update, priority: critical}\n"))
            == "test.yaml:9:7: match.moment (moment=goal): an update needs a content-state with at least one key (or an alert): "
            + "without either it has nothing to send")
        // An alert alone is something to send (the key's state with it); an end always is.
        #expect(rejection(sportsFile(bare + "    alert: {title: a, body: b}\n")) == "<compiled [\"match.score\"]>")
        #expect(rejection(sportsFile("  match.full_time:\n    key: \"match:{match}\"\n    event: end\n    priority: critical\n"))
            == "<compiled [\"match.full_time\"]>")
    }

    @Test func aRouteWhoseConstantsAloneExceedTheDeviceLimit() {
        let long = String(repeating: "x", count: 4100)
        // An update's constants (4,100 bytes of text, the rest of the payload around them).
        #expect(rejection(Self.scoreWith("int home_score", "string \"\(long)\""))
            == "test.yaml:4:3: match.score: its constants alone (content-state and attributes constants, alert texts, "
            + "attributes-type, dates) make every update at least 4173 bytes, and APNs takes at most 4096 in an update to an "
            + "activity token (the same payload goes to the channel): it could never be sent")
        // A start's: attributes, attributes-type and the alert's literal text add up.
        let quarter = String(repeating: "y", count: 1400)
        let start = Self.start("    attributes-type: MatchActivityAttributes\n    followers: [\"team:{home}\"]\n"
            + "    attributes: {matchId: string match, league: string \"\(quarter)\"}\n"
            + "    alert: {title: \"\(quarter)\", body: [\"{home}\", \"\(quarter)[ {away}]\"]}\n")
        #expect(rejection(start) == "<compiled [\"match.started\"]>")  // the body's shortest alternative is "{home}"
        #expect(rejection(start.replacingOccurrences(of: "\"{home}\", ", with: "")).hasPrefix(
            "test.yaml:4:3: match.started: its constants alone (content-state and attributes constants, alert texts, "
            + "attributes-type, dates) make every start at least 4"))
        #expect(rejection(start.replacingOccurrences(of: "\"{home}\", ", with: "")).hasSuffix(
            " bytes, and APNs takes at most 4096 in a push-to-start: it could never be sent"))
        // Fields are not counted: their values come with each event, which the worker checks.
        #expect(rejection(Self.scoreWith("int home_score", "string clock ?? \"\(long)\"")) == "<compiled [\"match.score\"]>")
        // A variant's constants: reported at the variant.
        #expect(rejection(sportsFile(Self.score + "    variant-by: period\n    variants:\n      half_time:\n"
            + "        content-state: {note: string \"\(long)\"}\n")).hasPrefix(
            "test.yaml:12:7: match.score (period=half_time): its constants alone"))
    }

    /// Ten nested objects per level, five levels deep (100,000 leaves) under one key of a
    /// content-state: each line is small, and every alias repeats all the previous one holds.
    static func valueBomb(depth: Int) -> String {
        var lines = "      a0: &a0 {c: string clock}\n"
        for d in 1...depth {
            lines += "      a\(d): &a\(d) {" + (0..<10).map { "k\($0): *a\(d - 1)" }.joined(separator: ", ") + "}\n"
        }
        return sportsFile(Self.score + "    alert: {title: a, body: b}\n    content-state:\n" + lines)
            .replacingOccurrences(of: "    content-state:\n      homeScore: int home_score\n", with: "")
    }

    @Test func aliasesThatExpandPastTheBoundAreAnAliasBomb() {
        // 111,111 nodes once expanded, from a file of 15 lines. The walk stops in a4 (11,111
        // nodes on its own) and names the anchor whose aliases it was expanding: a3.
        #expect(rejection(Self.valueBomb(depth: 5))
            == "test.yaml:13:11: aliases repeat this node until the file has more than 10000 nodes once they are expanded; "
            + "a route file needs far less (an alias bomb?)")
        #expect(rejection(Self.valueBomb(depth: 3)) == "<compiled [\"match.score\"]>")  // 1,111: fine
        // A long text repeated: 6 × 200,000 bytes from a file of 200 kB.
        let long = "string \"" + String(repeating: "z", count: 200_000) + "\""
        #expect(rejection(sportsFile("  match.scheduled:\n    key: \"match:{match}\"\n    event: none\n    attributes:\n"
            + "      a: &t \(long)\n" + (1...5).map { "      a\($0): *t\n" }.joined()))
            == "test.yaml:8:10: aliases repeat this node until the file has more than 1048576 bytes of text once they are "
            + "expanded; a route file needs far less (an alias bomb?)")
    }

    /// A sequence ten times longer per level; the last one is the key given.
    static func keyBomb(depth: Int, key: String) -> String {
        var lines = "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n"
        for d in 1...depth {
            lines += "x\(d): &x\(d) [" + (0..<10).map { _ in "*x\(d - 1)" }.joined(separator: ", ") + "]\n"
        }
        return lines + key.replacingOccurrences(of: "LAST", with: "x\(depth)") + "\nfeed: sports\n"
    }

    @Test func anAliasInAKeyIsRefusedBeforeYamsExpandsIt() {
        // Yams hashes every key while reading a mapping: a bomb in a key (here 1,111,111 nodes,
        // a second of hashing; each further line is ten times that) must be refused before.
        #expect(rejection(Self.keyBomb(depth: 5, key: "*LAST : 1"))
            == "test.yaml:7:1: an alias can't be a key ('*x5'): keys in a route file are text, and an alias "
            + "in a key would be expanded in full while the file is read")
        #expect(rejection(Self.keyBomb(depth: 5, key: "[0, {b: *LAST}]: 1"))
            == "test.yaml:7:13: a list or mapping that holds an alias can't be a key: keys in a route file are text, and an "
            + "alias in a key would be expanded in full while the file is read")
        #expect(rejection(Self.keyBomb(depth: 5, key: "k: {*LAST: 1}"))
            == "test.yaml:7:5: an alias can't be a key ('*x5'): keys in a route file are text, and an alias "
            + "in a key would be expanded in full while the file is read")
        #expect(rejection(Self.keyBomb(depth: 5, key: "? *LAST\n: 1"))
            == "test.yaml:7:1: explicit keys ('? ') can't be used in a route file with aliases: keys in a route file are text, "
            + "and an alias in a key would be expanded in full while the file is read")
        // Aliases as values are fine, and a '*' in text, comments, quoted and block scalars is no alias.
        let text = sportsFile("""
              # *a: not a key
              match.score:
                key: &k "match:{match}"
                event: update
                priority: critical
                content-state:
                  homeScore: int home_score
                  note: 'string "*b: c"'
                alert:
                  title: 'it''s *d: e'
                  body: "5 * 3: [[*x]]: {{*y: z}}"
              match.clock:
                key: *k
                event: update
                priority: routine
                content-state: {clock: string clock, period: string "*q"}
                alert:
                  title: |
                    *e: f
                      [[*g]]: h
                  body: >-
                    ? *i
                  sound: a*b

            """)
        #expect(rejection(text) == "<compiled [\"match.clock\", \"match.score\"]>")
    }

    @Test func everyReasonIsOneLine() {
        let hostile = sportsFile("  match.score:\n    key: \"match:{match}\"\n    event: \"up\\ndate\\u202E\"\n")
        let error = rejection(hostile)
        #expect(error == "test.yaml:6:12: match.score: event must be start, update, end or none, got 'up\\ndate\\u{202E}'")
        #expect(!error.contains("\n"))
    }
}
