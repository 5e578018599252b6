/// Every reason Apple documents for device pushes, broadcasts and channel management
/// (shared/APNS.md), plus `unknown` for anything new. The raw value is Apple's spelling.
public enum APNsReason: Hashable, Sendable, CustomStringConvertible {
    // 400
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed
    // 400, broadcast and channel management
    case featureNotEnabled, missingChannelId, badChannelId, channelNotRegistered, badRequestParams
    case badRequestPayload, missingPushType, cannotCreateChannelConfig
    // 403
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden
    case invalidProviderToken, missingProviderToken, unrelatedKeyIdInToken, badEnvironmentKeyIdInToken
    // 404, 405, 410, 413, 429, 500, 503
    case badPath, methodNotAllowed, expiredToken, unregistered, payloadTooLarge
    case tooManyProviderTokenUpdates, tooManyRequests, internalServerError, serviceUnavailable, shutdown
    case unknown(String)

    public static let allKnown: [APNsReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed,
        .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered, .badRequestParams,
        .badRequestPayload, .missingPushType, .cannotCreateChannelConfig,
        .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
        .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
        .badPath, .methodNotAllowed, .expiredToken, .unregistered, .payloadTooLarge,
        .tooManyProviderTokenUpdates, .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown,
    ]

    private static let byName: [String: APNsReason] = Dictionary(uniqueKeysWithValues: allKnown.map { ($0.rawValue, $0) })

    /// A reason not in Apple's documentation (`unknown`).
    public var isUnknown: Bool {
        if case .unknown = self { return true }
        return false
    }

    public init(rawValue: String) {
        self = APNsReason.byName[rawValue] ?? .unknown(rawValue)
    }

    public var rawValue: String {
        switch self {
        case .badCollapseId: "BadCollapseId"
        case .badDeviceToken: "BadDeviceToken"
        case .badExpirationDate: "BadExpirationDate"
        case .badMessageId: "BadMessageId"
        case .badPriority: "BadPriority"
        case .badTopic: "BadTopic"
        case .deviceTokenNotForTopic: "DeviceTokenNotForTopic"
        case .duplicateHeaders: "DuplicateHeaders"
        case .idleTimeout: "IdleTimeout"
        case .invalidPushType: "InvalidPushType"
        case .missingDeviceToken: "MissingDeviceToken"
        case .missingTopic: "MissingTopic"
        case .payloadEmpty: "PayloadEmpty"
        case .topicDisallowed: "TopicDisallowed"
        case .featureNotEnabled: "FeatureNotEnabled"
        case .missingChannelId: "MissingChannelId"
        case .badChannelId: "BadChannelId"
        case .channelNotRegistered: "ChannelNotRegistered"
        case .badRequestParams: "BadRequestParams"
        case .badRequestPayload: "BadRequestPayload"
        case .missingPushType: "MissingPushType"
        case .cannotCreateChannelConfig: "CannotCreateChannelConfig"
        case .badCertificate: "BadCertificate"
        case .badCertificateEnvironment: "BadCertificateEnvironment"
        case .expiredProviderToken: "ExpiredProviderToken"
        case .forbidden: "Forbidden"
        case .invalidProviderToken: "InvalidProviderToken"
        case .missingProviderToken: "MissingProviderToken"
        case .unrelatedKeyIdInToken: "UnrelatedKeyIdInToken"
        case .badEnvironmentKeyIdInToken: "BadEnvironmentKeyIdInToken"
        case .badPath: "BadPath"
        case .methodNotAllowed: "MethodNotAllowed"
        case .expiredToken: "ExpiredToken"
        case .unregistered: "Unregistered"
        case .payloadTooLarge: "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: "TooManyProviderTokenUpdates"
        case .tooManyRequests: "TooManyRequests"
        case .internalServerError: "InternalServerError"
        case .serviceUnavailable: "ServiceUnavailable"
        case .shutdown: "Shutdown"
        case .unknown(let s): s
        }
    }

    /// The HTTP status Apple answers with for this reason.
    public var status: Int {
        switch self {
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
             .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken: 403
        case .badPath: 404
        case .methodNotAllowed: 405
        case .expiredToken, .unregistered: 410
        case .payloadTooLarge: 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: 429
        case .internalServerError: 500
        case .serviceUnavailable, .shutdown: 503
        case .unknown: 400
        default: 400
        }
    }

    public var description: String { rawValue }

    /// A 403 that refuses our credentials (the provider token, its key or team, the
    /// certificate), not the request: it says nothing about the device, the channel or the
    /// payload, and every other request of the client meets it too until they are fixed.
    /// Not `BadEnvironmentKeyIdInToken`: a key limited to one environment is a deliberate
    /// setting, and the other environment's work fails for it (`.fail`) while the key's own
    /// environment works.
    public var refusesCredentials: Bool {
        switch self {
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .invalidProviderToken, .missingProviderToken,
             .unrelatedKeyIdInToken: true
        default: false
        }
    }
}

/// What the sender should do with a request after APNs answered.
public enum APNsAction: Hashable, Sendable {
    /// Accepted by APNs (200, or 201/204 for channel management).
    case delivered
    /// Send it again after this delay (429 TooManyRequests; `retry-after` when given).
    case retryAfter(Duration)
    /// Send it again with exponential back-off (5xx, IdleTimeout, a broken connection).
    case retryWithBackoff
    /// The provider token was refused as expired or invalid: mint a new one, then retry.
    case refreshProviderToken
    /// The device token is dead: delete it and never send to it again. For 410, the time (ms)
    /// APNs last knew the token valid; a registration newer than that revives it.
    case forgetToken(invalidSince: Int64?)
    /// A request that can't succeed as it is (bad topic, payload too large, forbidden…): don't
    /// retry; dead-letter it with the reason.
    case fail
}

extension APNsReason {
    /// The action this reason implies. Never retried: BadDeviceToken, DeviceTokenNotForTopic,
    /// Forbidden, ExpiredToken, Unregistered, PayloadTooLarge (shared/APNS.md).
    public func action(retryAfter: Duration? = nil, timestampMillis: Int64? = nil) -> APNsAction {
        switch self {
        case .expiredToken, .unregistered: .forgetToken(invalidSince: timestampMillis)
        case .badDeviceToken, .deviceTokenNotForTopic: .forgetToken(invalidSince: nil)
        case .expiredProviderToken, .invalidProviderToken, .missingProviderToken: .refreshProviderToken
        // Our key, team or certificate refused: nothing wrong with the request, which waits for
        // them to be fixed, as in an outage (`refusesCredentials`). UnrelatedKeyIdInToken
        // holds for the connection only: the client reopens it.
        case .unrelatedKeyIdInToken, .badCertificate, .badCertificateEnvironment: .retryWithBackoff
        // Refreshing more often would make it worse: wait.
        case .tooManyProviderTokenUpdates: .retryAfter(retryAfter ?? .seconds(60))
        case .tooManyRequests: .retryAfter(retryAfter ?? .seconds(1))
        case .internalServerError, .serviceUnavailable, .shutdown, .idleTimeout: .retryWithBackoff
        case .unknown: .fail
        default: .fail
        }
    }
}
