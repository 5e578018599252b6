import ActivityCastCore
import ActivityCastSend
import ActivityCastSettings
import APNs
import APNsCore
import Foundation
import Logging
import RedisClient

/// Why APNs can't be set up from the settings (a missing key, no sandbox): the worker can't send.
public struct APNsSetupError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

public enum APNsSetup {
    /// An APNs client for the push endpoint, or (`channels`) the channel-management one.
    /// `redis`: share one provider token across the fleet through it (else one per process).
    public static func client(_ settings: Settings, endpoint text: String, channels: Bool = false, redis: RedisConnection? = nil,
                              logger: Logger) throws -> APNsClient {
        let apns = settings.apns
        let endpoint: APNsEndpoint
        do { endpoint = try APNsEndpoint(parsing: text) } catch { throw APNsSetupError(description: "\(error)") }
        if apns.usesLocalSandbox && !FileManager.default.fileExists(atPath: apns.caFile ?? "") {
            throw APNsSetupError(description: "no APNs configured and no local sandbox found in \(apns.sandboxDirectory): start one with `activitycast sandbox`, or set ACTIVITYCAST_APNS_ENDPOINT and the key settings")
        }
        let signer: ProviderTokenSigner
        do {
            let identity = try ProviderIdentity(keyID: apns.keyID, teamID: apns.teamID)
            signer = try ProviderTokenSigner.load(pemFile: apns.keyFile, pem: apns.keyPEM, identity: identity)
        } catch {
            throw APNsSetupError(description: "APNs signing key: \(error)")
        }
        var configuration = APNsClientConfiguration(endpoint: endpoint, connections: channels ? 1 : apns.connections, caFile: apns.caFile,
                                                    verifyPeer: apns.verifyPeer, requestTimeout: apns.requestTimeout,
                                                    maxConcurrentStreams: apns.maxConcurrentStreams)
        configuration.lowPriorityInFlight = apns.priority5InFlight
        let tokens: any ProviderTokenSource = redis.map { RedisSharedProviderTokens(signer: signer, redis: $0, prefix: settings.prefix) }
            ?? LocalProviderTokens(signer: signer)
        do {
            return try APNsClient(configuration: configuration, tokens: tokens, logger: logger)
        } catch {
            throw APNsSetupError(description: "\(error)")
        }
    }

    /// The clients a worker sends through, per environment: `apple` sends development tokens to
    /// Apple's development endpoint and production tokens to production; `development` or
    /// `production` serve that environment only; the sandbox or a `host:port` serves both.
    public static func router(_ settings: Settings, redis: RedisConnection, logger: Logger) throws -> APNsRouter {
        let apns = settings.apns
        var push: [APNsEnvironment: APNsClient] = [:]
        var manage: [APNsEnvironment: APNsClient] = [:]
        switch apns.endpoint {
        case "apple":
            for env in APNsEnvironment.allCases {
                push[env] = try client(settings, endpoint: env.rawValue, redis: redis, logger: logger)
                manage[env] = try client(settings, endpoint: "\(env.rawValue)-channels", channels: true, redis: redis, logger: logger)
            }
        case "development", "production":
            let env = APNsEnvironment(rawValue: apns.endpoint)!
            push[env] = try client(settings, endpoint: apns.endpoint, redis: redis, logger: logger)
            manage[env] = try client(settings, endpoint: apns.channelsEndpoint, channels: true, redis: redis, logger: logger)
        default:
            let one = try client(settings, endpoint: apns.endpoint, redis: redis, logger: logger)
            let channels = apns.channelsEndpoint == apns.endpoint ? one
                : try client(settings, endpoint: apns.channelsEndpoint, channels: true, redis: redis, logger: logger)
            for env in APNsEnvironment.allCases {
                push[env] = one
                manage[env] = channels
            }
        }
        return APNsRouter(push: push, channels: manage)
    }
}
