import Logging
import RedisClient
import Synchronization

/// The stream entries a worker is working on (feed entries and slices), and what keeps them its
/// own while it does: an entry idle in the group longer than the visibility timeout is claimed by
/// any worker, and every claim counts a delivery against it. A delivery that outlives the
/// timeout — its commands waiting out a Redis failover, its batch retried while Redis is away,
/// APNs slow — would be claimed while still under way, counted again and again, and
/// dead-lettered for running out of deliveries that were never failures. So the worker resets
/// the idle time of what it holds every third of the timeout (`keepClaimed`), and never starts an
/// entry it already holds a second time (its own `XAUTOCLAIM` can hand one back).
///
/// A delivery held longer than `EntriesInHand.longest` (ten visibility timeouts) is no longer
/// kept: a worker stuck on it lets the fleet take it over, as if it had died.
final class EntriesInHand: Sendable {
    private let held = Mutex<[String: [String: ContinuousClock.Instant]]>([:])
    let visibilityTimeout: Duration

    init(visibilityTimeout: Duration) { self.visibilityTimeout = visibilityTimeout }

    var longest: Duration { visibilityTimeout * 10 }

    /// Takes `ids` of `stream` in hand; returns those that were not in hand already.
    func take(_ stream: String, _ ids: [String]) -> Set<String> {
        let now = ContinuousClock.now
        return held.withLock { held in
            var taken = Set<String>()
            for id in ids where held[stream]?[id] == nil {
                held[stream, default: [:]][id] = now
                taken.insert(id)
            }
            return taken
        }
    }

    func release(_ stream: String, _ ids: some Sequence<String>) {
        held.withLock { held in
            for id in ids { held[stream]?[id] = nil }
            if held[stream]?.isEmpty == true { held[stream] = nil }
        }
    }

    /// What to keep claimed now: per stream, the entries held for less than `longest`.
    func toKeep(now: ContinuousClock.Instant = .now) -> [(stream: String, ids: [String])] {
        let oldest = now - longest
        return held.withLock { held in
            held.compactMap { stream, ids in
                let kept = ids.filter { $0.value > oldest }.map(\.key).sorted()
                return kept.isEmpty ? nil : (stream, kept)
            }
        }
    }

    /// Resets the idle time of every entry to keep, every third of the visibility timeout, until
    /// cancelled. Failures are waited out: the next round tries again.
    func keepClaimedLoop(_ redis: RedisConnection, group: String, consumer: String, logger: Logger) -> Task<Void, Never> {
        let every = max(visibilityTimeout / 3, .milliseconds(10))
        return Task {
            var failing = false
            while !Task.isCancelled {
                try? await Task.sleep(for: every)
                var commands: [RedisCommand] = []
                for (stream, ids) in toKeep() {
                    for start in stride(from: 0, to: ids.count, by: 200) {
                        let chunk = Array(ids[start..<min(start + 200, ids.count)])
                        commands.append(EntriesInHand.keepClaimed(stream: stream, group: group, consumer: consumer, ids: chunk))
                    }
                }
                guard !commands.isEmpty else { continue }
                let replies = try? await redis.pipeline(commands)
                let failure = replies == nil ? "no answer" : replies!.lazy.compactMap(\.errorMessage).first
                if let failure, !failing {
                    logger.warning("keeping entries in hand claimed failed; retrying", metadata: ["error": "\(failure)"])
                }
                failing = failure != nil
            }
        }
    }

    /// KEYS[1] = stream; ARGV = group, consumer, ids. For each id still pending with this
    /// consumer, its idle time reset (`XCLAIM … JUSTID` doesn't count a delivery); an id another
    /// worker claimed meanwhile is left to it. Replies how many were kept.
    static let keepClaimedScript = RedisScript("""
    local kept = 0
    for i = 3, #ARGV do
      local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
      if #p == 1 then
        redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
        kept = kept + 1
      end
    end
    return kept
    """)

    static func keepClaimed(stream: String, group: String, consumer: String, ids: [String]) -> RedisCommand {
        .script(keepClaimedScript, keys: [stream], args: [group, consumer] + ids)
    }
}
