/// Where APNs requests go. Apple's hosts for the two environments, or a custom host and port
/// (the sandbox).
public struct APNsEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The name checked against the server certificate (default: `host`).
    public var serverName: String?

    public init(host: String, port: Int, serverName: String? = nil) {
        self.host = host
        self.port = port
        self.serverName = serverName
    }

    /// Device pushes and broadcasts (`/3/device`, `/4/broadcasts`).
    public static let developmentPush = APNsEndpoint(host: "api.sandbox.push.apple.com", port: 443)
    public static let productionPush = APNsEndpoint(host: "api.push.apple.com", port: 443)
    /// Channel management (`/1/apps/<bundle>/channels`).
    public static let developmentChannels = APNsEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
    public static let productionChannels = APNsEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)

    /// `host:port`, or a known environment name: `development`, `production`, and the
    /// channel-management variants `development-channels`, `production-channels`.
    public init(parsing text: String) throws {
        switch text {
        case "development": self = .developmentPush
        case "production": self = .productionPush
        case "development-channels": self = .developmentChannels
        case "production-channels": self = .productionChannels
        default:
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port),
                  colon != text.startIndex else {
                throw APNsTransportError(.configuration, "an APNs endpoint is development, production, or host:port; got '\(text)'")
            }
            var host = String(text[..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            self.init(host: host, port: port)
        }
    }

    public var description: String { "\(host):\(port)" }
}

/// Why a request got no answer from APNs.
public struct APNsTransportError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        case connectionFailed, connectionLost, timeout, configuration, providerToken, shutdown
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}
