import ActivityCastCore
import APNs
import APNsCore
import Synchronization

/// Which APNs client serves which environment: development tokens go to Apple's development
/// endpoint and production tokens to production; with the local sandbox (or one `host:port`)
/// both go there. Channel management has endpoints of its own at Apple.
public final class APNsRouter: Sendable {
    private let push: [APNsEnvironment: APNsClient]
    private let manage: [APNsEnvironment: APNsClient]

    public init(push: [APNsEnvironment: APNsClient], channels: [APNsEnvironment: APNsClient]) {
        self.push = push
        self.manage = channels
    }

    public func push(_ env: APNsEnvironment) -> APNsClient? { push[env] }
    public func channels(_ env: APNsEnvironment) -> APNsClient? { manage[env] }
    /// The environments pushes can go to, in a fixed order.
    public var environments: [APNsEnvironment] { APNsEnvironment.allCases.filter { push[$0] != nil } }

    public func shutdown() {
        for c in push.values { c.shutdown() }
        for c in manage.values { c.shutdown() }
    }
}

/// Counters of the send path, by kind and outcome (`inspect`, logs, later metrics).
public final class SendStats: Sendable {
    public enum Kind: String, Sendable, CaseIterable { case broadcast, token, start, channelCreate = "channel_create", channelDelete = "channel_delete" }

    private let outcomes = Mutex<[String: Int]>([:])
    public let stale = Atomic<Int>(0)
    public let tokensForgotten = Atomic<Int>(0)
    public let channelFallbacks = Atomic<Int>(0)
    public let failedTokens = Atomic<Int>(0)

    public init() {}

    /// Counts one request of `kind` by its outcome: `ok`, Apple's reason, or `no_answer`.
    public func count(_ kind: Kind, _ result: APNsResult) {
        let outcome: String
        switch result {
        case .response(let r): outcome = (200..<300).contains(r.status) ? "ok" : (r.reason?.rawValue ?? "status_\(r.status)")
        case .failed: outcome = "no_answer"
        }
        outcomes.withLock { $0["\(kind.rawValue) \(outcome)", default: 0] += 1 }
    }

    /// `kind outcome` → count.
    public var byOutcome: [String: Int] { outcomes.withLock { $0 } }
}
