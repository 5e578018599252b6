import ActivityCastCore
import ActivityCastSend
import Logging
import Synchronization

/// Counters a worker keeps while it runs; logged at exit, used by the intake benchmark and
/// exported as metrics (`/metrics`, docs/operations.md).
public final class WorkerStats: Sendable {
    let plans = Atomic<Int>(0)
    /// Free-text values repaired (`FreeText.Repair`), by reason.
    let textRepaired = Mutex<[FreeText.Repair: Int]>([:])
    /// How entries ended, per stream the worker was made with (its input streams and the slices
    /// stream: every stream it reads). Fixed at init, so a lookup takes no lock; the totals are
    /// their sums.
    let streams: [String: StreamCounters]

    public init(streams: [String] = []) {
        self.streams = Dictionary(streams.map { ($0, StreamCounters()) }, uniquingKeysWith: { a, _ in a })
    }

    /// One stream's counts (nil for a stream the worker was not made with).
    func stream(_ name: String) -> StreamCounters? { streams[name] }

    /// How entries of one stream ended (or were taken); atomics only.
    final class StreamCounters: Sendable {
        let read = Atomic<Int>(0)
        let acked = Atomic<Int>(0)
        let ackMissed = Atomic<Int>(0)
        let deadLettered = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
        let refused = Atomic<Int>(0)
        let claimed = Atomic<Int>(0)
        let stale = Atomic<Int>(0)
        /// Entries of a sharded feed found on another shard than their key's (`checkShard`).
        let misplaced = Atomic<Int>(0)

        /// `outcome` label → count, as `activitycast_stream_entries_total` names them.
        var byOutcome: [(String, Int)] {
            [("acked", acked.load(ordering: .relaxed)), ("ack_missed", ackMissed.load(ordering: .relaxed)),
             ("dead_lettered", deadLettered.load(ordering: .relaxed)), ("failed", failed.load(ordering: .relaxed)),
             ("refused", refused.load(ordering: .relaxed)), ("claimed", claimed.load(ordering: .relaxed)),
             ("stale", stale.load(ordering: .relaxed))]
        }
    }

    public struct Snapshot: Sendable, Equatable, Codable {
        /// Entries taken from streams (new reads and claims).
        public var read: Int
        /// Entries this worker acknowledged (XACK answered 1).
        public var acked: Int
        /// Acknowledgements that found the entry already acknowledged: someone else finished it.
        public var ackMissed: Int
        public var deadLettered: Int
        /// Processing attempts that failed and left the entry pending for a retry.
        public var failed: Int
        /// Entries left pending because Redis refused work (out of memory, a permission, not
        /// writable): not their fault, so not counted against them.
        public var refused: Int
        public var claimed: Int
        /// Registrations ignored because a newer one was already stored.
        public var stale: Int
        public var plans: Int
    }

    public var snapshot: Snapshot {
        func total(_ count: (StreamCounters) -> Int) -> Int { streams.values.reduce(0) { $0 + count($1) } }
        return Snapshot(read: total { $0.read.load(ordering: .relaxed) }, acked: total { $0.acked.load(ordering: .relaxed) },
                        ackMissed: total { $0.ackMissed.load(ordering: .relaxed) }, deadLettered: total { $0.deadLettered.load(ordering: .relaxed) },
                        failed: total { $0.failed.load(ordering: .relaxed) }, refused: total { $0.refused.load(ordering: .relaxed) },
                        claimed: total { $0.claimed.load(ordering: .relaxed) }, stale: total { $0.stale.load(ordering: .relaxed) },
                        plans: plans.load(ordering: .relaxed))
    }
}

extension WorkerStats.Snapshot {
    /// The counters a stopped worker logs.
    func logMetadata(sends: SendStats?) -> Logger.Metadata {
        let snapshot = self
        var metadata: Logger.Metadata = [
            "read": "\(snapshot.read)", "acked": "\(snapshot.acked)", "ack_missed": "\(snapshot.ackMissed)",
            "dead_lettered": "\(snapshot.deadLettered)", "failed": "\(snapshot.failed)", "refused": "\(snapshot.refused)",
            "claimed": "\(snapshot.claimed)", "plans": "\(snapshot.plans)", "stale": "\(snapshot.stale)",
        ]
        guard let sends else { return metadata }
        // Requests by kind and outcome (`token ok=17,token Unregistered=1`), and what they caused.
        metadata["pushes"] = "\(sends.byOutcome.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))"
        metadata["tokens_forgotten"] = "\(sends.tokensForgotten.load(ordering: .relaxed))"
        metadata["sends_failed"] = "\(sends.failedTokens.load(ordering: .relaxed))"
        metadata["channel_fallbacks"] = "\(sends.channelFallbacks.load(ordering: .relaxed))"
        metadata["events_stale"] = "\(sends.stale.load(ordering: .relaxed))"
        metadata["events_after_end"] = "\(sends.afterEnd.load(ordering: .relaxed))"
        metadata["resent_quietly"] = "\(sends.quietResends.load(ordering: .relaxed))"
        metadata["starts_unknown_fate"] = "\(sends.startsUnknownFate.load(ordering: .relaxed))"
        metadata["fanouts"] = "\(sends.fanouts.load(ordering: .relaxed))"
        metadata["slices_finished"] = "\(sends.slicesFinished.load(ordering: .relaxed))"
        metadata["slices_superseded"] = "\(sends.slicesSuperseded.load(ordering: .relaxed))"
        metadata["tokens_resent"] = "\(sends.tokensResent.load(ordering: .relaxed))"
        metadata["starts_over_budget"] = "\(sends.startsOverBudget.load(ordering: .relaxed))"
        metadata["rate_waits"] = "\(sends.rateWaits.load(ordering: .relaxed))"
        // Budget decisions by audience and outcome (`standard.p10=3,standard.downgraded=9`).
        metadata["budget"] = "\(sends.budgetDecisions.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))"
        return metadata
    }
}
