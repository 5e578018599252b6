import ActivityCastInspect
import Foundation
import Hummingbird
import Logging

/// The console's POSTs: signing in and out, and the dead-letter actions. Each action needs
/// `console.allow_actions`, the operator token (a session or the bearer header) and, for a
/// session, the form's CSRF token; each is logged with what it did.
extension Console {
    /// A form body's fields in their order (`application/x-www-form-urlencoded`); a name may repeat.
    static func form(_ request: Request) async throws -> [(String, String)] {
        var request = request
        let body = try await request.collectBody(upTo: maxBody)
        let text = String(buffer: body)
        return text.split(separator: "&").compactMap { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String? { String(s).replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let name = parts.first.flatMap(decode) else { return nil }
            return (name, parts.count > 1 ? decode(parts[1]) ?? "" : "")
        }
    }

    func refused(_ request: Request, _ status: HTTPResponse.Status, _ why: String) -> Response {
        logger.warning("console action refused", metadata: ["path": "\(request.uri.path)", "why": "\(why)"])
        return html(status, ConsoleViews.render("plain", frame(request, title: "Refused", access: access(request), extra: [
            "heading": "Refused", "tables": [ConsoleViews.Table](),
        ], error: why)))
    }

    func action(_ request: Request) async throws -> Response {
        let access = access(request)
        guard auth.allowActions else { return refused(request, .forbidden, "This console is read-only (console.allow_actions is off).") }
        guard access.operator_ else { return refused(request, .unauthorized, "Actions need the operator token: sign in first.") }
        let fields = try await Self.form(request)
        func value(_ name: String) -> String? { fields.first { $0.0 == name }?.1 }
        if !access.bearer {
            guard let cookie = request.cookies[ConsoleAuth.cookieName]?.value, auth.isCSRF(value("csrf"), for: cookie) else {
                return refused(request, .forbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
            }
        }
        let tool = DeadLetterTool(settings: settings, redis: redis)
        let reason = value("reason").flatMap { $0.isEmpty ? nil : $0 }
        var ids = fields.filter { $0.0 == "id" }.map(\.1)
        let what = value("do") ?? ""
        if what.hasSuffix("-all"), reason == nil, value("confirm") != "all" {
            return refused(request, .badRequest, "“All matching” without a reason filter is every dead letter read: tick the box that says so, or filter by reason first.")
        }
        if what.hasSuffix("-all") {
            // Every letter matching the filter, within the bounded scan the listing makes.
            ids = try await tool.list(reason: reason, limit: Self.filterScan, scan: Self.filterScan).letters.map(\.id)
        }
        guard !ids.isEmpty else { return refused(request, .badRequest, "No dead letter selected.") }
        let frame = Frame(request: request, access: access, csrf: csrf(request))
        var flash: String
        switch what {
        case "replay", "replay-all":
            let results = try await tool.replay(ids, force: value("force") == "1")
            let done = results.filter { if case .replayed = $0.outcome { true } else { false } }
            let refusals = results.compactMap { r -> String? in if case .refused(let why) = r.outcome { "\(r.id): \(why)" } else { nil } }
            flash = "Replayed \(done.count) of \(results.count)." + (refusals.isEmpty ? "" : " Refused: " + refusals.prefix(5).joined(separator: "; "))
                + (refusals.count > 5 ? " (and \(refusals.count - 5) more)" : "")
            logger.notice("console replayed dead letters", metadata: [
                "replayed": "\(done.map { "\($0.id)" }.joined(separator: " "))", "refused": "\(refusals.count)", "filter": "\(reason ?? "")",
            ])
        case "discard", "discard-all":
            let missing = Set(try await tool.discard(ids))
            let gone = ids.filter { !missing.contains($0) }
            flash = "Discarded \(gone.count) of \(ids.count)." + (missing.isEmpty ? "" : " \(missing.count) were not there (discarded already?).")
            logger.notice("console discarded dead letters", metadata: ["discarded": "\(gone.joined(separator: " "))", "filter": "\(reason ?? "")"])
        default:
            return refused(request, .badRequest, "Unknown action “\(what)”.")
        }
        return html(.ok, try await deadLetters(frame, reason: reason, before: nil, flash: flash))
    }

    func login(_ request: Request) async throws -> Response {
        guard auth.hasToken else { return refused(request, .notFound, "This console has no operator token (ACTIVITYCAST_CONSOLE_TOKEN): nothing to sign in to.") }
        let fields = try await Self.form(request)
        guard let token = fields.first(where: { $0.0 == "token" })?.1, auth.isToken(token), let session = auth.session(nowMillis: Self.nowMillis()) else {
            logger.warning("console sign-in refused: wrong token")
            return html(.unauthorized, ConsoleViews.render("login", frame(request, title: "Sign in", access: access(request), error: "That is not the operator token.")))
        }
        logger.notice("console sign-in")
        var headers = HTTPFields()
        headers[.setCookie] = Cookie(name: ConsoleAuth.cookieName, value: session, maxAge: Int(ConsoleAuth.sessionMillis / 1000), path: "/",
                                     httpOnly: true, sameSite: .strict).description
        return Self.redirect("/", headers: headers)
    }

    func logout(_ request: Request) async throws -> Response {
        let fields = try await Self.form(request)
        if let cookie = request.cookies[ConsoleAuth.cookieName]?.value, !auth.isCSRF(fields.first { $0.0 == "csrf" }?.1, for: cookie) {
            return refused(request, .forbidden, "The form's CSRF token is missing or wrong.")
        }
        var headers = HTTPFields()
        headers[.setCookie] = Cookie(name: ConsoleAuth.cookieName, value: "", maxAge: 0, path: "/", httpOnly: true, sameSite: .strict).description
        return Self.redirect(auth.loopbackOnly ? "/" : "/login", headers: headers)
    }
}
