import Foundation
import Mustache

/// The console's HTML: mustache templates compiled into the binary (no file is read or fetched
/// at run time: the pages work in an air-gapped cluster), rendered from plain view values. Every
/// `{{value}}` is HTML-escaped by mustache; nothing here uses the unescaped `{{{…}}}` form, so a
/// team name of `<script>` from a feed shows as text.
enum ConsoleViews {
    /// A table as the templates draw it: headers (optionally sort links), rows of cells (numbers
    /// right-aligned, optional links).
    struct Table: Sendable {
        struct Header: Sendable {
            var label: String
            var href: String?
            var num: Bool
        }

        struct Cell: Sendable {
            var text: String
            var href: String?
            var num: Bool
            var cls: String?
        }

        struct Row: Sendable { var cells: [Cell] }

        var title: String?
        var headers: [Header]
        var rows: [Row]
        var empty: String?
        var notes: [String]

        /// Stored, not computed: mustache reads values by reflection.
        var hasRows = false

        /// From text rows, the first the header: a column whose cells all read as numbers (or `-`)
        /// is right-aligned.
        /// `wide`: columns of prose (why, reasons, values), which wrap; the others stay on one line.
        init(title: String?, rows text: [[String]], links: [Int: (String) -> String?] = [:], sort: (String) -> String? = { _ in nil },
             empty: String? = nil, notes: [String] = [], wide: Set<Int> = []) {
            self.title = title
            self.empty = empty
            self.notes = notes
            let header = text.first ?? []
            let body = Array(text.dropFirst())
            let numeric = header.indices.map { i in
                !body.isEmpty && body.allSatisfy { row in i >= row.count || Self.isNumber(row[i]) }
            }
            headers = header.enumerated().map { i, h in Header(label: h, href: sort(h), num: numeric[i]) }
            rows = body.map { row in
                Row(cells: row.enumerated().map { i, c in
                    Cell(text: c, href: links[i].flatMap { $0(c) }, num: i < numeric.count && numeric[i], cls: wide.contains(i) ? "w" : nil)
                })
            }
            hasRows = !rows.isEmpty
        }

        static func isNumber(_ s: String) -> Bool {
            if s == "-" || s == "?" || s.isEmpty { return true }
            var t = Substring(s)
            for unit in ["ms", "s", "m", "h", " MB", " MiB", "%"] where t.hasSuffix(unit) { t = t.dropLast(unit.count); break }
            return Double(t) != nil
        }
    }

    struct NavItem: Sendable {
        var label: String
        var href: String
        var current: Bool
    }

    static let pages: [(String, String)] = [("Overview", "/"), ("Keys", "/keys"), ("Dead letters", "/deadletters"),
                                            ("Budgets", "/budgets"), ("Channels", "/channels")]

    static func nav(_ path: String) -> [NavItem] {
        pages.map { NavItem(label: $0.0, href: $0.1, current: $0.1 == "/" ? path == "/" : path.hasPrefix($0.1)) }
    }

    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in templates {
            do { try library.register(text, named: name) } catch { fatalError("console template \(name): \(error)") }
        }
        return library
    }()

    /// Renders `body` (a template name) with `object` inside the page frame.
    static func render(_ template: String, _ object: Any) -> String {
        guard let html = library.render(object, withTemplate: template) else { return "template \(template) missing" }
        return html
    }

    static let style = """
    *{box-sizing:border-box}body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f4f5f7}
    header{background:#1d2330;color:#fff;padding:0 20px;display:flex;align-items:center;gap:24px;height:44px}
    header b{font-size:15px}header nav a{color:#c9d1e0;text-decoration:none;margin-right:14px}header nav a.cur{color:#fff;border-bottom:2px solid #6ea8fe;padding-bottom:10px}
    header .who{margin-left:auto;color:#c9d1e0}header .who a,header .who button{color:#c9d1e0;background:none;border:0;font:inherit;cursor:pointer;padding:0}
    main{padding:16px 20px;max-width:1600px}h1{font-size:18px;margin:4px 0 12px}h2{font-size:15px;margin:18px 0 6px}
    table{border-collapse:collapse;background:#fff;border:1px solid #dde1e7;margin:4px 0 10px;max-width:100%}
    th,td{padding:4px 10px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top;white-space:nowrap}
    td.w{white-space:normal;min-width:120px;max-width:360px;overflow-wrap:anywhere}
    th{background:#f0f2f5;font-weight:600;white-space:nowrap}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
    .wrap{overflow-x:auto}.muted{color:#6b7385}.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:8px}
    .card{background:#fff;border:1px solid #dde1e7;padding:8px 14px;min-width:150px}.card .v{font-size:20px;font-variant-numeric:tabular-nums}
    .flash{background:#e7f5ea;border:1px solid #9fd3ab;padding:6px 10px;margin-bottom:10px}.err{background:#fdecec;border:1px solid #f1a9a9;padding:6px 10px;margin-bottom:10px}
    form.inline{display:inline}input[type=text],input[type=password]{padding:4px 6px;border:1px solid #c5cad3;min-width:260px}
    button{padding:4px 10px;border:1px solid #9aa3b2;background:#fff;cursor:pointer}button.danger{border-color:#d77;color:#a11}
    pre{background:#fff;border:1px solid #dde1e7;padding:8px;overflow-x:auto;max-width:100%}code{font-size:13px}
    """

    static let templates: [(String, String)] = [
        ("frame", """
        <!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
        <title>{{page.title}} · activitycast</title><link rel="stylesheet" href="/console.css"></head><body>
        <header><b>activitycast</b><nav>{{#page.nav}}<a href="{{href}}"{{#current}} class="cur"{{/current}}>{{label}}</a>{{/page.nav}}</nav>
        <span class="who">{{#page.signedIn}}operator · <form class="inline" method="post" action="/logout"><input type="hidden" name="csrf" value="{{page.csrf}}"><button>sign out</button></form>{{/page.signedIn}}{{^page.signedIn}}{{#page.canSignIn}}<a href="/login">sign in</a>{{/page.canSignIn}}{{^page.canSignIn}}read-only{{/page.canSignIn}}{{/page.signedIn}}</span></header>
        <main>{{#page.flash}}<div class="flash">{{.}}</div>{{/page.flash}}{{#page.error}}<div class="err">{{.}}</div>{{/page.error}}
        {{$body}}{{/body}}</main>
        {{#page.live}}<script src="/console.js"></script>{{/page.live}}
        </body></html>
        """),
        ("table", """
        {{#title}}<h2>{{.}}</h2>{{/title}}{{#hasRows}}<div class="wrap"><table><thead><tr>{{#headers}}<th{{#num}} class="n"{{/num}}>{{#href}}<a href="{{.}}">{{/href}}{{label}}{{#href}}</a>{{/href}}</th>{{/headers}}</tr></thead>
        <tbody>{{#rows}}<tr>{{#cells}}<td{{#num}} class="n"{{/num}}{{#cls}} class="{{.}}"{{/cls}}>{{#href}}<a href="{{.}}">{{/href}}{{text}}{{#href}}</a>{{/href}}</td>{{/cells}}</tr>{{/rows}}</tbody></table></div>{{/hasRows}}
        {{^hasRows}}{{#empty}}<p class="muted">{{.}}</p>{{/empty}}{{/hasRows}}{{#notes}}<p class="muted">{{.}}</p>{{/notes}}
        """),
        ("overview", """
        {{<frame}}{{$body}}<h1>Overview</h1><div id="live" data-src="{{page.live}}" data-ms="{{page.liveMillis}}">{{> overviewLive}}</div>{{/body}}{{/frame}}
        """),
        ("overviewLive", """
        <p class="muted" id="stamp">read at {{readAt}} (every {{everySeconds}} s){{#redisError}} · <b>Redis: {{.}}</b>{{/redisError}}</p>
        <div class="cards">{{#cards}}<div class="card"><div class="muted">{{label}}</div><div class="v">{{value}}</div>{{#note}}<div class="muted">{{.}}</div>{{/note}}</div>{{/cards}}</div>
        {{#tables}}{{> table}}{{/tables}}
        """),
        ("keys", """
        {{<frame}}{{$body}}<h1>Activity keys</h1>
        <form method="get" action="/keys"><input type="text" name="q" value="{{query}}" placeholder="match:4711 or part of a key"> <button>search</button></form>
        <p class="muted">{{summary}}</p>{{#table}}{{> table}}{{/table}}{{/body}}{{/frame}}
        """),
        ("key", """
        {{<frame}}{{$body}}<h1>{{key}}</h1>
        <div class="cards">{{#cards}}<div class="card"><div class="muted">{{label}}</div><div class="v">{{value}}</div></div>{{/cards}}</div>
        {{#tables}}{{> table}}{{/tables}}{{/body}}{{/frame}}
        """),
        ("device", """
        {{<frame}}{{$body}}<h1>{{heading}}</h1>{{#summary}}<p>{{.}}</p>{{/summary}}
        {{#tables}}{{> table}}{{/tables}}{{/body}}{{/frame}}
        """),
        ("deadletters", """
        {{<frame}}{{$body}}<h1>Dead letters</h1>
        <form method="get" action="/deadletters"><input type="text" name="reason" value="{{reason}}" placeholder="reason contains…"> <button>filter</button></form>
        <p class="muted">{{summary}}</p>
        {{#actions}}<form method="post" action="/deadletters/action"><input type="hidden" name="csrf" value="{{page.csrf}}"><input type="hidden" name="reason" value="{{reason}}">{{/actions}}
        {{#hasLetters}}<div class="wrap"><table><thead><tr>{{#actions}}<th></th>{{/actions}}<th>id</th><th>at</th><th>reason</th><th>stream</th><th>entry</th><th class="n">deliveries</th><th>replayed</th></tr></thead><tbody>
        {{#letters}}<tr>{{#actions}}<td><input type="checkbox" name="id" value="{{id}}"></td>{{/actions}}<td><a href="/deadletters/{{id}}">{{id}}</a></td><td>{{at}}</td><td class="w">{{reason}}</td><td>{{stream}}</td><td>{{entryID}}</td><td class="n">{{deliveries}}</td><td>{{replayed}}</td></tr>{{/letters}}
        </tbody></table></div>{{/hasLetters}}{{^hasLetters}}<p class="muted">No dead letters{{#reasonText}} whose reason contains “{{.}}”{{/reasonText}} in what was read.</p>{{/hasLetters}}
        {{#actions}}<p><button name="do" value="replay">replay selected</button> <button name="do" value="replay-all">replay all matching</button> <button class="danger" name="do" value="discard">discard selected</button> <button class="danger" name="do" value="discard-all">discard all matching</button>
        {{^reasonText}}<label><input type="checkbox" name="confirm" value="all"> all matching means every letter (no filter)</label>{{/reasonText}}</p></form>{{/actions}}
        {{#next}}<p><a href="{{.}}">older →</a></p>{{/next}}{{/body}}{{/frame}}
        """),
        ("deadletter", """
        {{<frame}}{{$body}}<h1>Dead letter {{id}}</h1>{{#table}}{{> table}}{{/table}}{{#fields}}{{> table}}{{/fields}}
        {{#actions}}<form class="inline" method="post" action="/deadletters/action"><input type="hidden" name="csrf" value="{{page.csrf}}"><input type="hidden" name="id" value="{{id}}">
        <button name="do" value="replay">replay</button> <label><input type="checkbox" name="force" value="1"> again (force)</label> <button class="danger" name="do" value="discard">discard</button></form>{{/actions}}{{/body}}{{/frame}}
        """),
        ("plain", """
        {{<frame}}{{$body}}<h1>{{heading}}</h1>{{#tables}}{{> table}}{{/tables}}
        <p>{{#prev}}<a href="{{.}}">← previous</a> {{/prev}}{{#next}}<a href="{{.}}">next →</a>{{/next}}</p>{{/body}}{{/frame}}
        """),
        ("login", """
        {{<frame}}{{$body}}<h1>Sign in</h1><form method="post" action="/login"><p><input type="password" name="token" placeholder="operator token" autofocus></p>
        <p><button>sign in</button></p></form><p class="muted">The token is the console's ACTIVITYCAST_CONSOLE_TOKEN.</p>{{/body}}{{/frame}}
        """),
    ]
}
