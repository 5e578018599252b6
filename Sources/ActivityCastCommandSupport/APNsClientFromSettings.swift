import ActivityCastSettings
import ActivityCastWorker
import APNs
import ArgumentParser
import Logging

/// Builds an APNs client from the settings, as a worker does (`APNsSetup.client`): the push
/// endpoint, or the channel-management one. Its provider tokens are this process's own.
package func makeAPNsClient(_ settings: Settings, channels: Bool = false, logger: Logger) throws -> APNsClient {
    do {
        return try APNsSetup.client(settings, endpoint: channels ? settings.apns.channelsEndpoint : settings.apns.endpoint,
                                    channels: channels, logger: logger)
    } catch let error as APNsSetupError {
        throw ValidationError(error.description)
    }
}
