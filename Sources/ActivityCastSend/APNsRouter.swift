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

    /// Every client once (one may serve pushes and channel management, or two environments).
    public var clients: [APNsClient] {
        var seen = Set<ObjectIdentifier>()
        return (push.sorted { $0.key.rawValue < $1.key.rawValue }.map(\.value) + manage.sorted { $0.key.rawValue < $1.key.rawValue }.map(\.value))
            .filter { seen.insert(ObjectIdentifier($0)).inserted }
    }

    public func shutdown() {
        for c in push.values { c.shutdown() }
        for c in manage.values { c.shutdown() }
    }
}

/// Counters of the send path, by kind and outcome (`inspect`, logs, later metrics).
public final class SendStats: Sendable {
    public enum Kind: String, Sendable, CaseIterable { case broadcast, token, start, channelCreate = "channel_create", channelDelete = "channel_delete" }

    /// `kind outcome priority` → count (priority empty for channel management).
    private let outcomes = Mutex<[String: Int]>([:])
    public let stale = Atomic<Int>(0)
    /// Events of a key that had ended (not an end): not merged, not sent.
    public let afterEnd = Atomic<Int>(0)
    /// Tokens not sent an update because their activity is past Apple's 8 hours.
    public let tokensPastLifetime = Atomic<Int>(0)
    /// Of those, activities started again by push-to-start (`worker.relaunch_past_lifetime`), and
    /// those that could not be: no start token, the key's start not seen, the start budget spent.
    public let relaunched = Atomic<Int>(0)
    public let relaunchesSkipped = Atomic<Int>(0)
    /// Newly registered tokens sent their key's current state (`Sender.catchUp`).
    public let caughtUp = Atomic<Int>(0)
    /// Newly registered tokens not caught up because too many catch-ups were under way.
    public let catchUpsSkipped = Atomic<Int>(0)
    /// Events whose free text was trimmed so that the key's merged state fits a push.
    public let textTrimmedToFit = Atomic<Int>(0)
    /// Pushes sent again without their alert because an earlier request got no answer (it may
    /// have reached APNs): per-token sends and broadcasts.
    public let quietResends = Atomic<Int>(0)
    /// Push-to-starts that got no answer: not sent again (a second start is a second activity).
    public let startsUnknownFate = Atomic<Int>(0)
    /// Fan-outs started, slices finished, slices superseded, tokens sent again after a takeover.
    public let fanouts = Atomic<Int>(0)
    public let slicesFinished = Atomic<Int>(0)
    public let slicesSuperseded = Atomic<Int>(0)
    public let tokensResent = Atomic<Int>(0)
    /// Tokens of a slice's batch still failing after their attempt: they wait for the slice's end.
    public let tokensWaited = Atomic<Int>(0)
    public let tokensForgotten = Atomic<Int>(0)
    public let channelFallbacks = Atomic<Int>(0)
    public let failedTokens = Atomic<Int>(0)
    /// Push-to-starts skipped because the device's start budget was spent.
    public let startsOverBudget = Atomic<Int>(0)
    /// Times a batch waited for the fleet's send-rate guard.
    public let rateWaits = Atomic<Int>(0)
    /// Budget decisions by `<audience>.<outcome>` (outcome: p10, p5, downgraded, coalesced, stale;
    /// a downgrade is a critical event decided at 5).
    private let decisions = Mutex<[String: Int]>([:])

    public init() {}

    public func countDecision(_ audience: BudgetAudience, _ outcome: String) {
        decisions.withLock { $0["\(audience.name).\(outcome)", default: 0] += 1 }
    }

    public var budgetDecisions: [String: Int] { decisions.withLock { $0 } }

    /// Counts one request of `kind` by its outcome: `ok`, Apple's reason, or `no_answer`;
    /// `priority`: the push's apns-priority (nil for channel management).
    public func count(_ kind: Kind, _ result: APNsResult, priority: Int? = nil) { count(kind, CollectionOfOne(result), priority: priority) }

    /// Counts a batch's requests: one lock and no string per request (a batch is mostly `ok`).
    public func count(_ kind: Kind, _ results: some Sequence<APNsResult>, priority: Int? = nil) {
        var ok = 0
        var others: [String: Int] = [:]
        for result in results {
            switch result {
            case .response(let r) where (200..<300).contains(r.status): ok += 1
            case .response(let r): others[r.reason?.rawValue ?? "status_\(r.status)", default: 0] += 1
            case .failed: others["no_answer", default: 0] += 1
            }
        }
        let p = priority.map(String.init) ?? ""
        outcomes.withLock { map in
            if ok > 0 { map["\(kind.rawValue) ok \(p)", default: 0] += ok }
            for (outcome, n) in others { map["\(kind.rawValue) \(outcome) \(p)", default: 0] += n }
        }
    }

    /// `kind outcome` → count, whatever the priority.
    public var byOutcome: [String: Int] {
        var out: [String: Int] = [:]
        for (key, n) in byOutcomeAndPriority { out[String(key[..<(key.lastIndex(of: " ") ?? key.endIndex)]), default: 0] += n }
        return out
    }

    /// `kind outcome priority` → count; the priority is empty for channel management.
    public var byOutcomeAndPriority: [String: Int] { outcomes.withLock { $0 } }
}
