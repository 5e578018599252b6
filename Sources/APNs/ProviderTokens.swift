import APNsCore
import Foundation
import RedisClient
import Synchronization

/// Where the client gets its provider token (JWT).
public protocol ProviderTokenSource: Sendable {
    /// A token valid now. Cheap when cached: called once per batch.
    func currentToken() async throws -> ProviderToken
    /// APNs refused `rejected` (ExpiredProviderToken, InvalidProviderToken): return a newer one,
    /// minting it if nobody has yet — or `rejected` itself when it may not be replaced yet
    /// (`TokenRefreshPolicy.mayReplace`).
    func refresh(rejected: ProviderToken) async throws -> ProviderToken
}

/// When to mint: Apple wants a token refreshed no more than once per 20 minutes and at least
/// once per hour; `refreshAfter` (default 40 min) sits between.
public struct TokenRefreshPolicy: Sendable {
    public var refreshAfter: Duration
    public static let minimumAge = Duration.seconds(20 * 60)
    public static let maximumAge = Duration.seconds(60 * 60)

    public init(refreshAfter: Duration = .seconds(40 * 60)) {
        self.refreshAfter = min(max(refreshAfter, TokenRefreshPolicy.minimumAge), .seconds(55 * 60))
    }

    /// Whether a token APNs refused may be replaced: once it is `minimumAge` old, or when it
    /// claims to come from the future (a clock put right since). A younger one stays: Apple
    /// answers `TooManyProviderTokenUpdates` to refreshes more often than that, and a new token
    /// signed by the same key for the same team can't mend a wrong key, team or clock — so a
    /// misconfigured fleet doesn't mint a token for every request APNs refuses.
    public static func mayReplace(_ rejected: ProviderToken, now: Int64) -> Bool {
        let age = rejected.age(now: now)
        return age < 0 || age >= Int64(minimumAge.components.seconds)
    }
}

/// Seconds since 1970, the clock provider tokens are issued by.
public func nowSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }

/// Mints and caches tokens in this process only (one sender, or the CLI).
public final class LocalProviderTokens: ProviderTokenSource {
    private let signer: ProviderTokenSigner
    private let policy: TokenRefreshPolicy
    private let clock: @Sendable () -> Int64
    private let cached = Mutex<ProviderToken?>(nil)

    public init(signer: ProviderTokenSigner, policy: TokenRefreshPolicy = .init(), clock: @escaping @Sendable () -> Int64 = nowSeconds) {
        self.signer = signer
        self.policy = policy
        self.clock = clock
    }

    public func currentToken() async throws -> ProviderToken {
        let now = clock()
        if let t = cached.withLock({ $0 }), t.age(now: now) < Int64(policy.refreshAfter.components.seconds) { return t }
        let t = try signer.token(issuedAt: now)
        cached.withLock { $0 = t }
        return t
    }

    public func refresh(rejected: ProviderToken) async throws -> ProviderToken {
        let now = clock()
        if let t = cached.withLock({ $0 }), t != rejected { return t }
        guard TokenRefreshPolicy.mayReplace(rejected, now: now) else { return rejected }
        let t = try signer.token(issuedAt: now)
        cached.withLock { $0 = t }
        return t
    }
}

/// One provider token for the whole fleet, kept in Redis: the first worker that needs a fresh
/// token mints it under a short lock and stores it; the others read and reuse it. Fifty
/// workers therefore refresh as one (no `TooManyProviderTokenUpdates`). Each worker keeps a
/// local copy until it is due, so Redis sees about one read per worker per refresh period.
///
/// Layout: `<prefix>:apns:jwt:<team>:<kid>` = `<iat> <token>` (expires after 55 min),
/// `…:lock` while one worker mints. The key is never stored, only the signed token.
public final class RedisSharedProviderTokens: ProviderTokenSource {
    private let signer: ProviderTokenSigner
    private let redis: RedisConnection
    private let key: String
    private let policy: TokenRefreshPolicy
    private let clock: @Sendable () -> Int64
    private let cached = Mutex<ProviderToken?>(nil)
    private let owner = UUID().uuidString
    private let minted = Atomic<Int>(0)

    public init(signer: ProviderTokenSigner, redis: RedisConnection, prefix: String, policy: TokenRefreshPolicy = .init(),
                clock: @escaping @Sendable () -> Int64 = nowSeconds) {
        self.signer = signer
        self.redis = redis
        self.key = "\(prefix):apns:jwt:\(signer.identity.teamID):\(signer.identity.keyID)"
        self.policy = policy
        self.clock = clock
    }

    /// Tokens this process minted (the rest it took from the fleet).
    public var mintedHere: Int { minted.load(ordering: .relaxed) }

    private var refreshAfterSeconds: Int64 { Int64(policy.refreshAfter.components.seconds) }

    public func currentToken() async throws -> ProviderToken {
        let now = clock()
        let local = cached.withLock { $0 }
        if let t = local, t.age(now: now) < refreshAfterSeconds { return t }
        do {
            return try await obtain(replacing: nil)
        } catch {
            // Redis away when the token is due: the local copy is still good for APNs until its
            // hour is nearly over, so pushes go on meanwhile.
            if let t = local, t.age(now: now) >= 0, t.age(now: now) < Self.lastUsableSeconds { return t }
            throw error
        }
    }

    /// The age past which a token is not used even when a fresh one can't be had (APNs refuses
    /// tokens older than an hour: `ExpiredProviderToken`).
    static let lastUsableSeconds: Int64 = 55 * 60

    public func refresh(rejected: ProviderToken) async throws -> ProviderToken {
        let now = clock()
        guard TokenRefreshPolicy.mayReplace(rejected, now: now) else {
            // Not to be replaced yet, unless this worker or another already has (a newer token
            // cached here stands when Redis can't be read).
            if let local = usable(cached.withLock({ $0 }), unlike: rejected, now: now) { return local }
            if let shared = usable(try? await readShared(), unlike: rejected, now: now) {
                cached.withLock { $0 = shared }
                return shared
            }
            return rejected
        }
        return try await obtain(replacing: rejected)
    }

    /// `token` when it is due for use (not the rejected one, not due for a refresh, not from
    /// the future).
    private func usable(_ token: ProviderToken?, unlike rejected: ProviderToken?, now: Int64) -> ProviderToken? {
        guard let token, token != rejected, token.age(now: now) < refreshAfterSeconds, token.age(now: now) >= 0 else { return nil }
        return token
    }

    /// Reads the shared token; mints one (under the lock) if there is none, it is due, or it is
    /// the one APNs just rejected.
    private func obtain(replacing rejected: ProviderToken?) async throws -> ProviderToken {
        for attempt in 0..<50 {
            let now = clock()
            if let shared = usable(try await readShared(), unlike: rejected, now: now) {
                cached.withLock { $0 = shared }
                return shared
            }
            let lock = try await redis.send(RedisCommand("SET", key + ":lock", owner, "NX", "PX", 5000))
            if lock == .status("OK") {
                defer { Task { [redis, key, owner] in
                    _ = try? await redis.send(.script(Self.release, keys: [key + ":lock"], args: [owner]))
                } }
                // Someone may have stored a fresh one between our read and the lock.
                if let shared = usable(try await readShared(), unlike: rejected, now: now) {
                    cached.withLock { $0 = shared }
                    return shared
                }
                let token = try signer.token(issuedAt: now)
                try await redis.send(RedisCommand("SET", key, "\(token.issuedAt) \(token.value)", "EX", 55 * 60))
                minted.add(1, ordering: .relaxed)
                cached.withLock { $0 = token }
                return token
            }
            // Another worker is minting: give it a moment.
            try await Task.sleep(for: .milliseconds(min(20 * (attempt + 1), 200)))
        }
        throw APNsTransportError(.providerToken, "could not obtain a shared provider token from Redis (lock held too long)")
    }

    private func readShared() async throws -> ProviderToken? {
        guard let text = try await redis.send(RedisCommand("GET", key)).string,
              let space = text.firstIndex(of: " "), let iat = Int64(text[..<space]) else { return nil }
        return ProviderToken(value: String(text[text.index(after: space)...]), issuedAt: iat)
    }

    private static let release = RedisScript("""
    if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
    return 0
    """)
}
