/// The request line of an HTTP/1.x request, read from its head (everything up to the empty line).
/// Header fields are not kept: the ops endpoints need none.
public struct HTTPRequestHead: Sendable, Equatable {
    public var method: String
    /// The path, without the query string.
    public var path: String
    public var version: String

    public init(method: String, path: String, version: String) {
        self.method = method
        self.path = path
        self.version = version
    }

    /// Where the head ends in `bytes` (the index just past `CRLF CRLF`), or nil if it hasn't yet.
    public static func endOfHead(in bytes: [UInt8], from start: Int = 0) -> Int? {
        guard bytes.count >= 4 else { return nil }
        var i = max(0, start - 3)
        while i + 3 < bytes.count {
            if bytes[i] == 13, bytes[i + 1] == 10, bytes[i + 2] == 13, bytes[i + 3] == 10 { return i + 4 }
            i += 1
        }
        return nil
    }

    /// Parses a complete head (`bytes` up to and including the empty line). Nil when it isn't an
    /// HTTP/1.x request line: `METHOD SP target SP HTTP/1.x`, a token method, a target starting
    /// with `/`, visible ASCII only.
    public static func parse(_ bytes: ArraySlice<UInt8>) -> HTTPRequestHead? {
        guard let lineEnd = bytes.firstIndex(of: 13), lineEnd + 1 < bytes.endIndex, bytes[lineEnd + 1] == 10 else { return nil }
        let parts = bytes[bytes.startIndex..<lineEnd].split(separator: 32, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let method = parts[0], target = parts[1], version = parts[2]
        // Methods are tokens of letters here (GET, POST, …); anything else is not a request.
        guard !method.isEmpty, method.count <= 16, method.allSatisfy({ (65...90).contains($0) }) else { return nil }
        guard target.first == UInt8(ascii: "/"), target.allSatisfy({ (0x21...0x7E).contains($0) }) else { return nil }
        guard Array(version) == Array("HTTP/1.1".utf8) || Array(version) == Array("HTTP/1.0".utf8) else { return nil }
        let path = target.firstIndex(of: UInt8(ascii: "?")).map { target[target.startIndex..<$0] } ?? target
        return HTTPRequestHead(method: String(decoding: method, as: UTF8.self), path: String(decoding: path, as: UTF8.self),
                               version: String(decoding: version, as: UTF8.self))
    }
}

/// A complete response: status, content type and body; always sent with `Content-Length` and
/// `Connection: close`.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    /// Extra header fields (`Allow: GET` on a 405).
    public var headers: [(String, String)] = []

    public init(status: Int, contentType: String = "text/plain; charset=utf-8", body: [UInt8], headers: [(String, String)] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    public init(status: Int, text: String) {
        self.init(status: status, body: Array(text.utf8))
    }

    public static func == (a: HTTPResponse, b: HTTPResponse) -> Bool {
        a.status == b.status && a.contentType == b.contentType && a.body == b.body
            && a.headers.map { "\($0.0): \($0.1)" } == b.headers.map { "\($0.0): \($0.1)" }
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 400: return "Bad Request"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status \(status)"
        }
    }

    /// The bytes on the wire. A HEAD-less server: the body always follows.
    public var serialized: [UInt8] {
        var head = "HTTP/1.1 \(status) \(HTTPResponse.reason(status))\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "Connection: close\r\n\r\n"
        return Array(head.utf8) + body
    }
}
