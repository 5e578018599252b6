import ActivityCastCore
import Testing

/// Free text for people is repaired, not refused (issue 40): invalid UTF-8 replaced, controls
/// and bidirectional overrides removed, oversized values trimmed at a scalar boundary.
@Suite struct FreeTextTests {
    func repair(_ bytes: [UInt8], max: Int = 256) -> (String, [FreeText.Repair])? {
        FreeText.repaired(bytes, maxBytes: max).map { (String(decoding: $0.0, as: UTF8.self), $0.1) }
    }

    @Test func goodTextIsLeftAlone() {
        #expect(repair(Array("B. Saka".utf8)) == nil)
        #expect(repair(Array("Zürich Hbf\tGleis 3 — 東京".utf8)) == nil, "tab and any printable scalar are fine")
        #expect(repair(Array(String(repeating: "é", count: 128).utf8)) == nil, "exactly at the limit")
    }

    @Test func invalidUTF8BecomesTheReplacementCharacter() {
        let r = repair([0x42, 0xFF, 0x43, 0xC3])
        #expect(r?.0 == "B\u{FFFD}C\u{FFFD}" && r?.1 == [.invalidUTF8])
    }

    @Test func controlsAndBidiOverridesAreRemoved() {
        let r = repair(Array("Sa\u{1B}[31mka\u{7F}\u{85}".utf8))
        #expect(r?.0 == "Sa[31mka" && r?.1 == [.control])
        // Trojan Source: an override that would show "ABC" as "CBA", and an isolate.
        let b = repair(Array("A\u{202E}CBA\u{202C} \u{2066}x\u{2069}".utf8))
        #expect(b?.0 == "ACBA x" && b?.1 == [.bidi])
        // A left-to-right mark is not an override: kept.
        #expect(repair(Array("a\u{200E}b".utf8)) == nil)
    }

    @Test func anOversizedValueIsTrimmedAtAScalarBoundaryWithAnEllipsis() throws {
        let long = String(repeating: "ab", count: 600)
        let r = try #require(repair(Array(long.utf8), max: 100))
        #expect(r.0.utf8.count <= 100 && r.0.hasSuffix("\u{2026}") && r.0.hasPrefix("abab") && r.1 == [.trimmed])
        // Multi-byte scalars are never cut in half.
        let wide = try #require(repair(Array(String(repeating: "東", count: 100).utf8), max: 20))
        #expect(wide.0 == String(repeating: "東", count: 5) + "\u{2026}")
        // Everything at once, in a fixed order.
        let all = try #require(repair([0xFF] + Array("\u{202E}\u{7}".utf8) + Array(String(repeating: "x", count: 300).utf8)))
        #expect(all.1 == [.bidi, .control, .invalidUTF8, .trimmed] && all.0.utf8.count <= 256 && all.0.hasPrefix("\u{FFFD}xxx"))
    }

    @Test func onlyFreeTextFieldsOfAnEntryAreRepaired() {
        var entry = [RawField("type", "match.moment"), RawField("match", "m\u{7}1"), RawField("player", "P\u{7}"),
                     RawField("clock", "4\u{7}5'"), RawField("competition", String(repeating: "c", count: 300))]
        let repairs = FreeText.repair(&entry, maxBytes: 256)
        #expect(repairs == [.init(field: "player", repairs: [.control]), .init(field: "competition", repairs: [.trimmed])])
        #expect(entry[1].value == Array("m\u{7}1".utf8), "identifiers stay strict: the decoder refuses them")
        #expect(entry[3].value == Array("4\u{7}5'".utf8), "so does the clock")
        #expect(entry[2].value == Array("P".utf8) && entry[4].value.count <= 256)
        #expect(FreeText.values(of: entry) == ["P", String(decoding: entry[4].value, as: UTF8.self)])
    }

    /// A merged state over a push's room sheds bytes from its free text, the longest first,
    /// and nothing else changes.
    @Test func aStateShedsBytesFromItsFreeTextLongestFirst() throws {
        let player = String(repeating: "P", count: 200), competition = String(repeating: "C", count: 100)
        let state: [String: JSONValue] = ["homeScore": 1, "awayScore": 2, "lastEvent": .object(["player": .string(player), "kind": "goal"]),
                                          "competition": .string(competition), "note": .string(player + "x")]
        let size = { (s: [String: JSONValue]) in JSONValue.object(s).encoded().count }
        let fitted = try #require(FreeText.fit(state, freeText: [player, competition], shedding: 150))
        #expect(size(state) - size(fitted) >= 150)
        #expect(fitted["homeScore"] == 1 && fitted["awayScore"] == 2 && fitted["note"] == .string(player + "x"), "only free text is cut")
        guard case .object(let last)? = fitted["lastEvent"], case .string(let p)? = last["player"], case .string(let c)? = fitted["competition"] else {
            Issue.record("\(fitted)"); return
        }
        #expect(p.hasSuffix("\u{2026}") && p.utf8.count < 200 && last["kind"] == "goal")
        // The longest went first: the competition is cut only once the player is down to its length.
        #expect(c == competition || p.utf8.count <= 100)
        // Not enough free text to shed that much: nil.
        #expect(FreeText.fit(state, freeText: [competition], shedding: 1000) == nil)
        #expect(FreeText.fit(["homeScore": 1], freeText: [], shedding: 10) == nil)
    }
}
