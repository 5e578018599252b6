import ActivityCastCore
import ActivityCastInspect
import Foundation
import Hummingbird
import RedisClient

extension Console {
    typealias Context = BasicRequestContext

    func router() -> Router<Context> {
        let router = Router(context: Context.self)
        // For probes: answers without the token and says nothing of the fleet.
        router.get("/healthz") { _, _ in Self.asset("ok\n", type: "text/plain; charset=utf-8") }
        router.get("/console.css") { _, _ in Self.asset(ConsoleViews.style, type: "text/css; charset=utf-8") }
        router.get("/console.js") { _, _ in Self.asset(Self.script, type: "text/javascript; charset=utf-8") }
        router.get("/") { request, _ in try await self.page(request) { try await self.overview($0, live: false) } }
        router.get("/overview/live") { request, _ in try await self.page(request) { try await self.overview($0, live: true) } }
        router.get("/keys") { request, _ in try await self.page(request) { try await self.keys($0, query: Self.query(request, "q")) } }
        router.get("/keys/:key") { request, context in
            try await self.page(request) { try await self.key($0, Self.parameter(context, "key")) }
        }
        router.get("/keys/:key/devices/:device") { request, context in
            try await self.page(request) { try await self.keyDevice($0, Self.parameter(context, "key"), Self.parameter(context, "device")) }
        }
        router.get("/devices/:device") { request, context in
            try await self.page(request) { try await self.device($0, Self.parameter(context, "device")) }
        }
        router.get("/deadletters") { request, _ in
            try await self.page(request) { try await self.deadLetters($0, reason: Self.query(request, "reason"), before: Self.query(request, "before")) }
        }
        router.get("/deadletters/:id") { request, context in
            try await self.page(request) { try await self.deadLetter($0, Self.parameter(context, "id")) }
        }
        router.post("/deadletters/action") { request, _ in try await self.action(request) }
        router.get("/budgets") { request, _ in
            try await self.page(request) { try await self.table($0, "Budgets", sort: Self.query(request, "sort"), desc: Self.query(request, "desc") != nil,
                                    page: Self.query(request, "page").flatMap { Int($0) } ?? 0) { $0.budgets } }
        }
        router.get("/channels") { request, _ in
            try await self.page(request) { try await self.table($0, "Channels", sort: Self.query(request, "sort"), desc: Self.query(request, "desc") != nil,
                                    page: Self.query(request, "page").flatMap { Int($0) } ?? 0) { $0.channels } }
        }
        router.get("/login") { request, _ in self.html(.ok, ConsoleViews.render("login", self.frame(request, title: "Sign in", access: self.access(request)))) }
        router.post("/login") { request, _ in try await self.login(request) }
        router.post("/logout") { request, _ in try await self.logout(request) }
        return router
    }

    // MARK: The frame, access and responses

    /// A page's answer: the pages need the token beyond loopback (sent to the login form).
    func page(_ request: Request, _ body: (Frame) async throws -> String) async throws -> Response {
        let access = access(request)
        guard access.read else { return Self.redirect("/login") }
        let frame = Frame(request: request, access: access, csrf: csrf(request))
        do {
            return html(.ok, try await body(frame))
        } catch let missing as Missing {
            return html(.notFound, ConsoleViews.render("plain", self.frame(request, title: "Not found", access: access, extra: [
                "heading": missing.what, "tables": [ConsoleViews.Table](),
            ])))
        } catch let error as RedisError {
            return html(.serviceUnavailable, ConsoleViews.render("plain", self.frame(request, title: "Redis", access: access, extra: [
                "heading": "Redis could not be read", "tables": [ConsoleViews.Table](),
            ], error: "\(error)")))
        }
    }

    struct Frame {
        var request: Request
        var access: ConsoleAuth.Access
        var csrf: String
    }

    struct Missing: Error {
        var what: String
    }

    func access(_ request: Request) -> ConsoleAuth.Access {
        auth.access(cookie: request.cookies[ConsoleAuth.cookieName]?.value, authorization: request.headers[.authorization], nowMillis: Self.nowMillis())
    }

    func csrf(_ request: Request) -> String {
        request.cookies[ConsoleAuth.cookieName].map { auth.csrf(for: $0.value) } ?? ""
    }

    /// The values every template gets: the page frame and the stylesheet.
    func frame(_ request: Request, title: String, access: ConsoleAuth.Access, extra: [String: Any] = [:], flash: String? = nil,
               error: String? = nil, live: String? = nil) -> [String: Any] {
        var page: [String: Any] = ["title": title, "nav": ConsoleViews.nav(request.uri.path).map { ["label": $0.label, "href": $0.href, "current": $0.current] },
                                   "signedIn": access.operator_ && !access.bearer, "canSignIn": auth.hasToken, "csrf": csrf(request),
                                   "liveMillis": settings.console.refreshMillis]
        if let flash { page["flash"] = flash }
        if let error { page["error"] = error }
        if let live { page["live"] = live }
        var out = extra
        out["page"] = page
        return out
    }

    func frame(_ f: Frame, title: String, extra: [String: Any], flash: String? = nil, error: String? = nil, live: String? = nil) -> [String: Any] {
        frame(f.request, title: title, access: f.access, extra: extra, flash: flash, error: error, live: live)
    }

    func html(_ status: HTTPResponse.Status, _ body: String, headers extra: HTTPFields = [:]) -> Response {
        var headers = Self.securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        headers.append(contentsOf: extra)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy: "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        .init("X-Content-Type-Options")!: "nosniff",
        .init("Referrer-Policy")!: "no-referrer",
        .cacheControl: "no-store",
    ]

    static func asset(_ text: String, type: String) -> Response {
        var headers = securityHeaders
        headers[.contentType] = type
        headers[.cacheControl] = "max-age=300"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ to: String, headers extra: HTTPFields = [:]) -> Response {
        var headers = securityHeaders
        headers[.location] = to
        headers.append(contentsOf: extra)
        return Response(status: .seeOther, headers: headers)
    }

    static func query(_ request: Request, _ name: String) -> String? {
        request.uri.queryParameters.get(name).flatMap { $0.isEmpty ? nil : $0 }.map { String($0.prefix(500)) }
    }

    static func parameter(_ context: Context, _ name: String) -> String {
        let raw = context.parameters.get(name) ?? ""
        return raw.removingPercentEncoding ?? raw
    }

    static func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A path segment for a link (a key or device id may hold any character).
    static func segment(_ s: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#%")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }

    static func queryValue(_ s: String) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+#%")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }

    /// The live refresh: the overview's `#live` part fetched again every `data-ms`, without a reload.
    static let script = """
    (function(){var el=document.getElementById("live");if(!el)return;var url=el.getAttribute("data-src"),ms=+el.getAttribute("data-ms")||3000;
    function tick(){fetch(url,{credentials:"same-origin",headers:{"X-Requested-With":"console"}}).then(function(r){return r.ok?r.text():Promise.reject(r.status)})
    .then(function(t){el.innerHTML=t}).catch(function(e){var s=document.getElementById("stamp");if(s)s.textContent="refresh failed ("+e+"); retrying"})
    .finally(function(){setTimeout(tick,ms)})}setTimeout(tick,ms)})();
    """
}
