import Foundation
import Logging

/// Writes one line per record to stderr, as text (`2026-11-21T10:00:00.123Z info worker: msg k=v`)
/// or JSON lines (`{"ts":…,"level":…,"label":…,"msg":…,k:v}`) for log shippers.
public struct LineLogHandler: LogHandler {
    public enum Format: String, Sendable { case text, json }

    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    let label: String
    let format: Format

    public init(label: String, level: Logger.Level, format: Format) {
        self.label = label
        self.logLevel = level
        self.format = format
    }

    /// Installs the handler for the whole process.
    public static func bootstrap(level: String, format: String) {
        let lvl = Logger.Level(rawValue: level) ?? .info
        let fmt = Format(rawValue: format) ?? .text
        LoggingSystem.bootstrap { LineLogHandler(label: $0, level: lvl, format: fmt) }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let level = event.level
        let message = event.message
        var all = metadata
        if let explicit = event.metadata { all.merge(explicit) { _, new in new } }
        if let error = event.error { all["error"] = "\(error)" }
        let time = Self.timestamp()
        var out: String
        switch format {
        case .text:
            out = "\(time) \(level) \(label): \(message)"
            for (k, v) in all.sorted(by: { $0.key < $1.key }) { out += " \(k)=\(Self.textValue(v))" }
        case .json:
            out = "{\"ts\":\(Self.json(time)),\"level\":\(Self.json(level.rawValue)),\"label\":\(Self.json(label)),\"msg\":\(Self.json(message.description))"
            for (k, v) in all.sorted(by: { $0.key < $1.key }) { out += ",\(Self.json(k)):\(Self.json("\(v)"))" }
            out += "}"
        }
        out += "\n"
        LineWriter.shared.write(out)
    }

    static func textValue(_ v: Logger.Metadata.Value) -> String {
        let s = "\(v)"
        return s.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" }) ? json(s) : s
    }

    static func json(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    static func timestamp() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        var tm = tm()
        var seconds = tv.tv_sec
        gmtime_r(&seconds, &tm)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                      tm.tm_hour, tm.tm_min, tm.tm_sec, Int(tv.tv_usec / 1000))
    }
}

/// Serialises whole lines onto stderr so records from different threads never interleave.
final class LineWriter: @unchecked Sendable {
    static let shared = LineWriter()
    private let lock = NSLock()  // guards writes to fd 2

    func write(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        var line = line
        line.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count {
                let n = Foundation.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if n <= 0 { if errno == EINTR { continue }; return }
                offset += n
            }
        }
    }
}
