import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSettings
import ActivityCastWorker
import APNs
import APNsCore
import ArgumentParser
import Foundation
import HTTP2Kit
import Logging

/// Prints Apple's answer the way an operator wants to read it.
func describe(_ result: APNsResult) -> String {
    switch result {
    case .failed(let e):
        return "no answer: \(e)\naction: \(result.action)"
    case .response(let r):
        var lines = ["status: \(r.status)\(r.reason.map { " \($0.rawValue)" } ?? "")"]
        if let v = r.apnsID { lines.append("apns-id: \(v)") }
        if let v = r.uniqueID { lines.append("apns-unique-id: \(v)") }
        if let v = r.requestID { lines.append("apns-request-id: \(v)") }
        if let v = r.channelID { lines.append("apns-channel-id: \(v)") }
        if let v = r.timestampMillis { lines.append("timestamp: \(v)") }
        if !r.body.isEmpty && (200..<300).contains(r.status) { lines.append("body: \(String(decoding: r.body, as: UTF8.self))") }
        lines.append("action: \(result.action)")
        return lines.joined(separator: "\n")
    }
}

struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send one Live Activity push (start, update or end) to a token or a channel and print Apple's answer.",
        discussion: """
        Examples:
          activitycast send --token 80a1… --event update --content-state '{"homeScore":1,"awayScore":0}'
          activitycast send --channel dHN0… --event end --content-state '{"homeScore":2,"awayScore":1}'
          activitycast send --token 80a1… --event start --attributes-type MatchActivityAttributes \\
              --attributes '{"home":"ars","away":"che"}' --content-state '{"homeScore":0,"awayScore":0}' \\
              --alert-title Kick-off --alert-body "Arsenal v Chelsea"
        With nothing configured it goes to the local sandbox (`activitycast sandbox`).
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "Device (activity or push-to-start) token, hex.") var token: String?
    @Option(help: "Broadcast channel id (base64), instead of --token.") var channel: String?
    @Option(help: "start, update or end.") var event = "update"
    @Option(help: "content-state as a JSON object.") var contentState = "{}"
    @Option(help: "10 (now, spends budget) or 5 (opportunistic); 1 for broadcasts too.") var priority = 10
    @Option(help: "aps.timestamp, seconds since 1970 (default now).") var timestamp: Int64?
    @Option(help: "apns-expiration (default: none for tokens; for channels 0 with --policy 0, 8 h ahead with --policy 1).") var expiration: Int64?
    @Option(help: "The channel's message-storage-policy (0 or 1), for its expiration rule.") var policy = 0
    @Option(help: "stale-date, seconds since 1970.") var staleDate: Int64?
    @Option(help: "dismissal-date (end only), seconds since 1970.") var dismissalDate: Int64?
    @Option var alertTitle: String?
    @Option var alertBody: String?
    @Option(help: "Start only: the ActivityAttributes type name.") var attributesType: String?
    @Option(help: "Start only: attributes as a JSON object.") var attributes: String?
    @Flag(help: "Start only (iOS 18): ask for an update token.") var inputPushToken = false
    @Option(help: "Start only (iOS 18): subscribe the new activity to this channel.") var inputPushChannel: String?

    func run() async throws {
        guard (token == nil) != (channel == nil) else { throw ValidationError("give exactly one of --token and --channel") }
        guard let ev = LiveActivityEvent(rawValue: event) else { throw ValidationError("--event is start, update or end") }
        let settings = try common.settings()
        LineLogHandler.bootstrap(level: "warning", format: "text")
        func object(_ text: String, _ name: String) throws -> [String: JSONValue] {
            guard let data = text.data(using: .utf8), let any = try? JSONSerialization.jsonObject(with: data),
                  case .object(let o) = JSONValue(any: any) else { throw ValidationError("\(name) must be a JSON object") }
            return o
        }
        let alert = alertTitle.map { LiveActivityPayload.Alert(title: $0, body: alertBody ?? "") }
        let payload = LiveActivityPayload(
            event: ev, timestamp: timestamp ?? Int64(Date().timeIntervalSince1970), contentState: try object(contentState, "--content-state"),
            staleDate: staleDate, dismissalDate: dismissalDate, alert: alert, attributesType: attributesType,
            attributes: try attributes.map { try object($0, "--attributes") }, inputPushToken: inputPushToken, inputPushChannel: inputPushChannel)
        let client = try makeAPNsClient(settings, logger: Logger(label: "send"))
        defer { client.shutdown() }
        let result: APNsResult
        if let token {
            result = await client.sendLiveActivity(payload: payload.encoded(), to: [token.lowercased()], bundleID: settings.apns.bundleID,
                                                   priority: priority, expiration: expiration)[0]
        } else {
            result = await client.broadcast(payload: payload.encoded(), channelID: channel!, bundleID: settings.apns.bundleID,
                                            priority: priority, storagePolicy: policy, expiration: expiration)
        }
        print(describe(result))
        if case .response(let r) = result, (200..<300).contains(r.status) { return }
        throw ExitCode(1)
    }
}

struct ChannelsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "Create, list, read and delete broadcast channels (channel-management API).",
        discussion: """
          activitycast channels create [--policy 0|1]   policy 0: no storage (frequent updates), 1: latest message kept
          activitycast channels list
          activitycast channels read <id>
          activitycast channels delete <id>
        """)

    @OptionGroup var common: CommonOptions
    @Argument(help: "create, list, read or delete.") var action: String
    @Argument(help: "The channel id (read, delete).") var id: String?
    @Option(help: "message-storage-policy for create: 0 or 1.") var policy = 0

    func run() async throws {
        let settings = try common.settings()
        LineLogHandler.bootstrap(level: "warning", format: "text")
        let bundle = settings.apns.bundleID
        let result: APNsResult
        switch action {
        case "create":
            guard policy == 0 || policy == 1 else { throw ValidationError("--policy is 0 or 1") }
            let client = try makeAPNsClient(settings, channels: true, logger: Logger(label: "channels"))
            defer { client.shutdown() }
            result = await client.request(method: "POST", path: "/1/apps/\(bundle)/channels", headers: [],
                                          body: Array(#"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#.utf8))
        case "list":
            let client = try makeAPNsClient(settings, channels: true, logger: Logger(label: "channels"))
            defer { client.shutdown() }
            result = await client.request(method: "GET", path: "/1/apps/\(bundle)/all-channels", headers: [])
        case "read", "delete":
            guard let id else { throw ValidationError("\(action) needs a channel id") }
            let client = try makeAPNsClient(settings, channels: true, logger: Logger(label: "channels"))
            defer { client.shutdown() }
            result = await client.request(method: action == "read" ? "GET" : "DELETE", path: "/1/apps/\(bundle)/channels",
                                          headers: [HTTP2Header("apns-channel-id", id)])
        default:
            throw ValidationError("the action is create, list, read or delete")
        }
        print(describe(result))
        if case .response(let r) = result, (200..<300).contains(r.status) { return }
        throw ExitCode(1)
    }
}

extension JSONValue {
    /// From Foundation's JSONSerialization output.
    init(any: Any) {
        switch any {
        case let s as String: self = .string(s)
        case let b as Bool where type(of: any) == Bool.self: self = .bool(b)
        case let n as NSNumber:
            // Foundation reports JSON booleans as NSNumbers of type "c".
            if String(cString: n.objCType) == "c" { self = .bool(n.boolValue) }
            else if n.doubleValue == Double(n.int64Value) { self = .int(n.int64Value) }
            else { self = .double(n.doubleValue) }
        case let a as [Any]: self = .array(a.map(JSONValue.init(any:)))
        case let o as [String: Any]: self = .object(o.mapValues(JSONValue.init(any:)))
        default: self = .null
        }
    }
}
