@testable import ActivityCastConsole
import Testing

/// The console's views and its rules of access, as plain values.
@Suite struct ConsoleViewTests {
    @Test func aTableShowsItsRowsEscapedWithNumbersAligned() {
        let table = ConsoleViews.Table(title: "T", rows: [["name", "count"], ["<script>x</script>", "12"], ["b", "-"]])
        let html = ConsoleViews.render("table", table)
        #expect(html.contains("&lt;script&gt;x&lt;/script&gt;") && !html.contains("<script>"), "\(html)")
        #expect(html.contains("<td class=\"n\">12</td>") && html.contains("<th class=\"n\">count</th>") && html.contains("<th>name</th>"), "\(html)")
        let page = ConsoleViews.render("keys", ["table": table, "summary": "S", "page": ["title": "K\"<"]] as [String: Any])
        #expect(page.contains("<title>K&quot;&lt; · activitycast</title>") && page.contains("<td class=\"n\">12</td>"), "\(page)")
    }

    @Test func aSessionIsTheTokensUntilItExpiresAndItsCSRFIsItsOwn() {
        let auth = ConsoleAuth(token: "0123456789abcdef-token", loopbackOnly: false, allowActions: true)
        let cookie = try! #require(auth.session(nowMillis: 1_000))
        #expect(auth.isSession(cookie, nowMillis: 2_000))
        #expect(!auth.isSession(cookie, nowMillis: 1_000 + ConsoleAuth.sessionMillis + 1), "expired")
        let expiry = cookie.prefix { $0 != "." }
        #expect(!auth.isSession("\(Int64(expiry)! + 1)" + cookie.drop { $0 != "." }, nowMillis: 2_000), "a longer life is not signed")
        let other = ConsoleAuth(token: "another-token-0123456789", loopbackOnly: false, allowActions: true)
        #expect(!other.isSession(cookie, nowMillis: 2_000), "another token's console")
        #expect(auth.isCSRF(auth.csrf(for: cookie), for: cookie) && !auth.isCSRF(other.csrf(for: cookie), for: cookie) && !auth.isCSRF(nil, for: cookie))
        #expect(auth.access(cookie: cookie, authorization: nil, nowMillis: 2_000) == .init(read: true, operator_: true, bearer: false))
        #expect(auth.access(cookie: nil, authorization: "Bearer 0123456789abcdef-token", nowMillis: 2_000) == .init(read: true, operator_: true, bearer: true))
        #expect(auth.access(cookie: nil, authorization: "Bearer 0123456789abcdef-tokeX", nowMillis: 2_000).read == false)
        let local = ConsoleAuth(token: nil, loopbackOnly: true, allowActions: false)
        #expect(local.access(cookie: cookie, authorization: nil, nowMillis: 2_000) == .init(read: true, operator_: false, bearer: false))
        #expect(ConsoleAuth.equal(Array("abc".utf8), Array("abc".utf8)) && !ConsoleAuth.equal(Array("abc".utf8), Array("abcd".utf8)))
    }

    @Test func startingIsRefusedBeyondLoopbackWithoutATokenAndActionsWithoutOne() {
        #expect(ConsoleAuth.startProblem(host: "127.0.0.1", token: nil, allowActions: false) == nil)
        #expect(ConsoleAuth.startProblem(host: "0.0.0.0", token: nil, allowActions: false)?.contains("beyond loopback") == true)
        #expect(ConsoleAuth.startProblem(host: "::1", token: nil, allowActions: true)?.contains("needs the operator token") == true)
        #expect(ConsoleAuth.startProblem(host: "0.0.0.0", token: "short", allowActions: false)?.contains("at least 16") == true)
        #expect(ConsoleAuth.startProblem(host: "0.0.0.0", token: "0123456789abcdef", allowActions: true) == nil)
    }
}
