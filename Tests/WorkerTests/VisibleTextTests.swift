import ActivityCastSettings
import ActivityCastWorker
import Testing

@Suite struct VisibleTextTests {
    @Test func controlAndInvisibleCharactersBecomeEscapes() {
        #expect(VisibleText.escaped("a\u{1b}[2Jb") == "a\\x1b[2Jb")
        #expect(VisibleText.escaped("line\nnext\r\tend\u{7f}\u{0}") == "line\\nnext\\r\\tend\\x7f\\x00")
        #expect(VisibleText.escaped("csi\u{9b}31m") == "csi\\u{9B}31m")
        #expect(VisibleText.escaped("abc\u{202E}fed\u{200B}\u{2028}\u{FEFF}") == "abc\\u{202E}fed\\u{200B}\\u{2028}\\u{FEFF}")
        // A backslash is doubled, so "\x1b" in the output can only mean the character.
        #expect(VisibleText.escaped("a\\x1b") == "a\\\\x1b")
        // Printable text, ASCII or not, is unchanged.
        #expect(VisibleText.escaped("wörker 🚋 ac:feed:sports") == "wörker 🚋 ac:feed:sports")
    }

    @Test func longTextIsCutWithItsSize() {
        #expect(VisibleText.escaped(String(repeating: "a", count: 300), limit: 200) == String(repeating: "a", count: 200) + "… (300 bytes)")
        #expect(VisibleText.escaped(String(repeating: "a", count: 200), limit: 200) == String(repeating: "a", count: 200))
        // The limit counts the escaped form: 50 ESCs are 200 characters shown.
        #expect(VisibleText.escaped(String(repeating: "\u{1b}", count: 60), limit: 200)
            == String(repeating: "\\x1b", count: 50) + "… (60 bytes)")
        #expect(VisibleText.escaped("abcdef", limit: 3, totalBytes: 100_000) == "abc… (100000 bytes)")
        // One grapheme cluster of 5,001 scalars is still cut at the limit.
        let cluster = "a" + String(repeating: "\u{301}", count: 5000)
        #expect(cluster.count == 1)
        #expect(VisibleText.escaped(cluster, limit: 200).unicodeScalars.count < 220)
    }
}
