import ActivityCastSettings
import Dispatch
import Foundation
import NetIO

/// One sample of the Prometheus text format: `name{label="value",…} value`.
public struct PrometheusSample: Sendable, Equatable {
    public var name: String
    public var labels: [String: String]
    public var value: Double

    public init(name: String, labels: [String: String] = [:], value: Double) {
        self.name = name
        self.labels = labels
        self.value = value
    }
}

/// The little of the Prometheus text exposition format (0.0.4) that `activitycast top` needs:
/// sample lines, with or without labels, and an optional timestamp. Comments (`# HELP`, `# TYPE`)
/// are skipped, and so is any line that does not parse: a scrape is read for what it can give.
public enum PrometheusText {
    /// The samples whose name starts with `prefix`, in the order of the text.
    public static func parse(_ text: String, prefix: String = "activitycast_") -> [PrometheusSample] {
        var out: [PrometheusSample] = []
        for line in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            if let sample = sample(Substring(line)), sample.name.hasPrefix(prefix) { out.append(sample) }
        }
        return out
    }

    static func sample(_ line: Substring) -> PrometheusSample? {
        var s = line.drop { $0 == " " || $0 == "\t" }
        guard let first = s.first, first != "#" else { return nil }
        let name = s.prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == ":" }
        guard !name.isEmpty else { return nil }
        s = s.dropFirst(name.count)
        var labels: [String: String] = [:]
        if s.first == "{" {
            s = s.dropFirst()
            while true {
                s = s.drop { $0 == " " || $0 == "," }
                if s.first == "}" { s = s.dropFirst(); break }
                let label = s.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                guard !label.isEmpty else { return nil }
                s = s.dropFirst(label.count)
                guard s.first == "=" else { return nil }
                s = s.dropFirst()
                guard s.first == "\"" else { return nil }
                s = s.dropFirst()
                var value = ""
                var closed = false
                while let c = s.first {
                    s = s.dropFirst()
                    if c == "\"" { closed = true; break }
                    if c == "\\", let next = s.first {
                        s = s.dropFirst()
                        value.append(next == "n" ? "\n" : next)
                    } else {
                        value.append(c)
                    }
                }
                guard closed else { return nil }
                labels[String(label)] = value
            }
        }
        let fields = s.split(separator: " ", omittingEmptySubsequences: true)
        guard let text = fields.first, let value = number(text) else { return nil }
        return PrometheusSample(name: String(name), labels: labels, value: value)
    }

    static func number(_ text: Substring) -> Double? {
        switch text {
        case "+Inf", "Inf": .infinity
        case "-Inf": -.infinity
        case "NaN": .nan
        default: Double(text)
        }
    }
}

/// A worker's `/metrics`, fetched over HTTP/1.1 (`http://host:port/path`, no TLS: the ops
/// endpoint is plain HTTP on a private address).
public struct MetricsEndpoint: Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var path: String

    /// `/metrics` on `host:port`.
    public init(host: String, port: Int, path: String = "/metrics") {
        self.host = host
        self.port = port
        self.path = path
    }

    /// Parses `http://HOST[:PORT][/PATH]` (IPv6 as `[::1]`); the port defaults to 80, the path to
    /// `/metrics`. Nil for anything else.
    public init?(_ url: String) {
        guard url.hasPrefix("http://") else { return nil }
        var rest = Substring(url.dropFirst("http://".count))
        let authority = rest.prefix { $0 != "/" }
        rest = rest.dropFirst(authority.count)
        path = rest.isEmpty ? "/metrics" : String(rest)
        guard !path.contains(where: { $0 == " " || $0.isNewline }) else { return nil }
        if authority.first == "[" {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.isEmpty { port = 80 } else if after.first == ":", let p = Int(after.dropFirst()) { port = p } else { return nil }
        } else {
            let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { return nil }
            host = String(parts[0])
            if parts.count == 2 { guard let p = Int(parts[1]) else { return nil }; port = p } else { port = 80 }
        }
        guard !host.isEmpty, (1...65535).contains(port) else { return nil }
    }

    public var description: String {
        "http://\(host.contains(":") ? "[\(host)]" : host):\(port)\(path)"
    }

    /// At most this much of an answer is read.
    static let maxBytes = 4 << 20

    /// The body of a `200` answer within `timeout`, or why there is none. The blocking socket
    /// work runs on a Dispatch thread, not on the caller's.
    public func fetch(timeout: Duration) async -> Result<String, MetricsFetchError> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: fetchBlocking(timeout: timeout)) }
        }
    }

    func fetchBlocking(timeout: Duration) -> Result<String, MetricsFetchError> {
        let deadline = Deadline.after(timeout)
        do {
            let stream = PlainStream(socket: try Socket.connectTCP(host: host, port: port, timeout: timeout))
            defer { stream.close() }
            let request = "GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
            try Array(request.utf8).withUnsafeBytes { try stream.writeAll($0, deadline: deadline) }
            var answer: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while answer.count <= Self.maxBytes {
                let n: Int
                do {
                    n = try buffer.withUnsafeMutableBytes { try stream.readSome(into: $0, deadline: deadline) }
                } catch StreamError.closedByPeer {
                    break
                }
                answer += buffer[..<n]
            }
            guard answer.count <= Self.maxBytes else { return .failure(.init("answer larger than \(Self.maxBytes) bytes")) }
            return Self.body(of: answer)
        } catch {
            return .failure(.init("\(error)"))
        }
    }

    /// The body of an HTTP/1.1 answer read to its end, if its status is 200.
    static func body(of answer: [UInt8]) -> Result<String, MetricsFetchError> {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let end = answer.indices.first(where: { answer[$0...].starts(with: separator) }) else {
            return .failure(.init("not an HTTP answer"))
        }
        let head = String(decoding: answer[..<end], as: UTF8.self)
        let status = head.split(separator: "\r\n").first.map(String.init) ?? ""
        let parts = status.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1] == "200" else {
            return .failure(.init("answered \(VisibleText.escaped(status, limit: 80))"))
        }
        if head.lowercased().contains("transfer-encoding: chunked") { return .failure(.init("chunked answers are not read")) }
        return .success(String(decoding: answer[(end + separator.count)...], as: UTF8.self))
    }
}

public struct MetricsFetchError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
