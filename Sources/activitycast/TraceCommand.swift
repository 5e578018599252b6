import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastInspect
import ArgumentParser
import Foundation
import RedisClient

/// `activitycast trace KEY`: what was decided and sent for one activity key, event by event.
struct TraceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trace",
        abstract: "Show an activity key's trail: each feed entry, what the merge did, each audience's decision and budget, and APNs's answers.")

    @OptionGroup var common: CommonOptions

    @Argument(help: "The activity key (match:4711, trip:t-1); with --device alone, every key of the device.")
    var key: String?

    @Option(help: "One device's view: every push it was sent for the key, and why not for the others.")
    var device: String?

    @Option(help: "Only the last N events.")
    var last: Int?

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func validate() throws {
        guard key != nil || device != nil else { throw ValidationError("give an activity key, or --device ID") }
        if let key, ActivityKey(parsing: key) == nil { throw ValidationError("'\(key)' is not an activity key (kind:id, such as match:4711 or trip:t-1)") }
        if let last, last < 1 { throw ValidationError("--last must be 1 or more, got \(last)") }
    }

    func run() async throws {
        let settings = try common.settings()
        let redis = RedisConnection(configuration: settings.redisConfiguration)
        defer { redis.close() }
        let tracer = Tracer(settings: settings, redis: redis)
        do {
            guard let key, let activity = ActivityKey(parsing: key) else {
                // The device across its keys: its registrations, then its last pushes for each.
                let device = self.device!
                let one = try await Inspector(settings: settings, redis: redis).device(device)
                var views: [DeviceTrace] = []
                for k in one.keys { if let parsed = ActivityKey(parsing: k.key) { views.append(try await tracer.device(parsed, device)) } }
                let recent = last ?? 5
                for i in views.indices { views[i].pushes = Array(views[i].pushes.suffix(recent)) }
                if json {
                    print(try SafeJSON.encode(DeviceAcrossKeys(device: one, keys: views)))
                } else {
                    print(InspectOneText.render(one), terminator: "")
                    for v in views { print(TraceText.render(v), terminator: "") }
                }
                return
            }
            if let device {
                let view = try await tracer.device(activity, device)
                print(json ? try SafeJSON.encode(view) : TraceText.render(view), terminator: json ? "\n" : "")
            } else {
                let report = try await tracer.report(activity, last: last)
                print(json ? try SafeJSON.encode(report) : TraceText.render(report), terminator: json ? "\n" : "")
            }
        } catch {
            throw CommandFailure("trace failed: \(error)")
        }
    }
}

/// `trace --device ID` without a key: the device, and its last pushes for each of its keys.
struct DeviceAcrossKeys: Encodable {
    var device: DeviceInspection
    var keys: [DeviceTrace]
}

