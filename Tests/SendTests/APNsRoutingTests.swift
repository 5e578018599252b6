import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import ActivityCastWorker
import APNs
import Logging
import RedisClient
import Testing
import TestSupport

/// Which APNs endpoint each environment's tokens go to (no connection is made).
@Suite struct APNsRoutingTests {
    func router(_ endpoint: String, sandbox: SandboxProcess, redis: RedisConnection) throws -> APNsRouter {
        let settings = try SettingsLoader.load(file: nil, environment: [:], overrides: [
            "apns.endpoint": endpoint, "apns.team_id": "SANDBOXTM1", "apns.key_id": "SANDBOXK01",
            "apns.key_file": "\(sandbox.directory.path)/AuthKey_SANDBOXK01.p8",
        ])
        return try APNsSetup.router(settings, redis: redis, logger: Logger(label: "t") { _ in SwiftLogNoOpLogHandler() })
    }

    @Test func developmentAndProductionTokensGoToTheirOwnEndpoints() async throws {
        let sandbox = try await SandboxProcess()  // only for its signing key
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let apple = try router("apple", sandbox: sandbox, redis: redis)
        defer { apple.shutdown() }
        #expect(apple.push(.development)?.configuration.endpoint == .developmentPush)
        #expect(apple.push(.production)?.configuration.endpoint == .productionPush)
        #expect(apple.channels(.development)?.configuration.endpoint == .developmentChannels)
        #expect(apple.channels(.production)?.configuration.endpoint == .productionChannels)
        #expect(apple.environments == [.development, .production])

        let onlyProduction = try router("production", sandbox: sandbox, redis: redis)
        defer { onlyProduction.shutdown() }
        #expect(onlyProduction.push(.development) == nil)
        #expect(onlyProduction.push(.production)?.configuration.endpoint == .productionPush)
        #expect(onlyProduction.environments == [.production])
    }
}
