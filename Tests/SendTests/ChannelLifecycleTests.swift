import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import ActivityCastWorker
import Foundation
import Logging
import RedisClient
import Testing
import TestSupport

/// Channels through the registry against the sandbox: created once however many workers ask,
/// deleted by one worker once due, and announced both times.
@Suite struct ChannelLifecycleTests {
    func registry(_ server: RedisServer, _ sandbox: SandboxProcess, _ redis: RedisConnection, prefix: String) throws -> ChannelRegistry {
        var overrides = sandbox.settings
        overrides["redis.url"] = server.urlString
        overrides["prefix"] = prefix
        let settings = try SettingsLoader.load(file: nil, environment: [:], overrides: overrides)
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let router = try APNsSetup.router(settings, redis: redis, logger: logger)
        return ChannelRegistry(redis: redis, apns: router, keys: settings.keys, bundleID: settings.apns.bundleID, ttlSeconds: 3600,
                               logger: logger, stats: SendStats())
    }

    @Test func createdOnceAcrossConcurrentCallersThenDeletedWhenDue() async throws {
        let server = try await RedisServer()
        let sandbox = try await SandboxProcess()
        let redis = server.connection()
        defer { redis.close() }
        let prefix = "c\(UInt32.random(in: 0...UInt32.max))"
        // Four "workers" (registries on their own connections) ask for the same key's channel at once.
        let connections = (0..<4).map { _ in server.connection() }
        defer { connections.forEach { $0.close() } }
        let registries = try connections.map { try registry(server, sandbox, $0, prefix: prefix) }
        let key = ActivityKey(kind: .match, id: "x")
        let states = try await withThrowingTaskGroup(of: ChannelRegistry.State.self) { group in
            for r in registries { group.addTask { try await r.ensure(key, .development, policy: .noStorage) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let ids = Set(states.compactMap { if case .live(let c) = $0 { return c.id } else { return nil } })
        #expect(ids.count == 1, "\(states)")
        let id = try #require(ids.first)
        #expect(try await sandbox.get("/sandbox/stats")?["channelsCreated"] as? Int == 1)
        // On record in the index the metrics count (`activitycast_channels{state="open"}`).
        let index = "\(prefix):channels:index"
        #expect(try await redis.send(RedisCommand("ZRANGE", index, 0, -1)).array?.compactMap(\.string) == ["development match:x"])

        // Due for deletion: exactly one registry deletes it, at APNs and in Redis.
        try await registries[0].scheduleDeletion(key, atMillis: 1)
        let deleted = try await withThrowingTaskGroup(of: Int.self) { group in
            for r in registries { group.addTask { try await r.deleteDue(nowMillis: Int64(Date().timeIntervalSince1970 * 1000)) } }
            return try await group.reduce(0, +)
        }
        #expect(deleted == 1)
        #expect(try await sandbox.get("/sandbox/channels/\(id)")?["deleted"] as? Int == 1)
        #expect(try await registries[1].state(key, .development) == .none)
        #expect(try await redis.send(RedisCommand("ZCARD", index)).int == 0)
        // A channel whose hash expired without an end leaves the index once its TTL has passed.
        try await redis.command("ZADD", index, Int64(Date().timeIntervalSince1970 * 1000) - 3_601_000, "development match:old",
                                Int64(Date().timeIntervalSince1970 * 1000), "development match:new")
        _ = try await registries[2].deleteDue(nowMillis: Int64(Date().timeIntervalSince1970 * 1000))
        #expect(try await redis.send(RedisCommand("ZRANGE", index, 0, -1)).array?.compactMap(\.string) == ["development match:new"])
        let events = try await redis.send(RedisCommand("XRANGE", "\(prefix):channels", "-", "+"))
        let kinds = (events.array ?? []).compactMap { try? StreamReplies.entry($0) }.compactMap { e -> String? in
            guard let f = e.fields, let i = f.firstIndex(of: Array("event".utf8)) else { return nil }
            return String(decoding: f[i + 1], as: UTF8.self)
        }
        #expect(kinds == ["created", "deleted"])
    }
}
