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
/// An event whose fan-out this worker handed to the fleet (its first slice sent, the others
/// queued) stays pending until the worker finishing the last slice acknowledges it: this worker
/// keeps it claimed too (`handOff`), until it is acknowledged or another worker takes it, so
/// nobody claims it and delivers it again just because its fan-out outlasted the timeout.
///
/// A delivery held (or a hand-off kept) longer than `EntriesInHand.longest` (ten visibility
/// timeouts) is no longer kept: a worker stuck on it lets the fleet take it over, as if it had
/// died. That clock stands still while APNs is unusable (`paused`): a delivery waiting out an
/// APNs outage is not stuck, and a claim of it by this worker or another would only count a
/// delivery and send nothing sooner.
final class EntriesInHand: Sendable {
    private let held = Mutex<[String: [String: ContinuousClock.Instant]]>([:])
    /// Entries handed off with their fan-outs: kept claimed, but not in hand (a delivery of one
    /// again, after `longest`, is processed).
    private let handedOff = Mutex<[String: [String: ContinuousClock.Instant]]>([:])
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

    /// Keeps `ids` of `stream` claimed though no delivery of them is under way here: their
    /// fan-outs' slices are (docs/sending.md, "Acknowledged at the end").
    func handOff(_ stream: String, _ ids: [String]) {
        guard !ids.isEmpty else { return }
        let now = ContinuousClock.now
        handedOff.withLock { h in
            for id in ids { h[stream, default: [:]][id] = now }
        }
    }

    /// Handed-off entries no longer pending with this consumer (acknowledged, or taken over).
    func dropHandOffs(_ stream: String, _ ids: some Sequence<String>) {
        handedOff.withLock { h in
            for id in ids { h[stream]?[id] = nil }
            if h[stream]?.isEmpty == true { h[stream] = nil }
        }
    }

    /// While APNs is unusable: every delivery's and hand-off's time restarts now, so `longest`
    /// counts only time in which APNs could be reached.
    func restartClocks(now: ContinuousClock.Instant = .now) {
        func restart(_ m: inout [String: [String: ContinuousClock.Instant]]) {
            m = m.mapValues { ids in ids.mapValues { _ in now } }
        }
        held.withLock { restart(&$0) }
        handedOff.withLock { restart(&$0) }
    }

    /// What to keep claimed now: per stream, the entries held or handed off less than `longest`
    /// ago (hand-offs older than that are forgotten).
    func toKeep(now: ContinuousClock.Instant = .now) -> [(stream: String, ids: [String])] {
        let oldest = now - longest
        var out: [String: [String]] = held.withLock { held in
            held.compactMapValues { ids in
                let kept = ids.filter { $0.value > oldest }.map(\.key)
                return kept.isEmpty ? nil : kept
            }
        }
        handedOff.withLock { h in
            for stream in Array(h.keys) {
                h[stream] = h[stream]!.filter { $0.value > oldest }
                if h[stream]!.isEmpty { h[stream] = nil; continue }
                out[stream, default: []] += h[stream]!.keys
            }
        }
        return out.map { ($0.key, Array(Set($0.value)).sorted()) }.sorted { $0.stream < $1.stream }
    }

    /// Resets the idle time of every entry to keep, every third of the visibility timeout, until
    /// cancelled. Failures are waited out: the next round tries again.
    /// `paused`: whether APNs is unusable now (`restartClocks`).
    func keepClaimedLoop(_ redis: RedisConnection, group: String, consumer: String, logger: Logger,
                         paused: @escaping @Sendable () -> Bool = { false }) -> Task<Void, Never> {
        let every = max(visibilityTimeout / 3, .milliseconds(10))
        return Task {
            var failing = false
            while !Task.isCancelled {
                try? await Task.sleep(for: every)
                if paused() { restartClocks() }
                var commands: [RedisCommand] = [], streams: [String] = []
                for (stream, ids) in toKeep() {
                    for start in stride(from: 0, to: ids.count, by: 200) {
                        let chunk = Array(ids[start..<min(start + 200, ids.count)])
                        commands.append(EntriesInHand.keepClaimed(stream: stream, group: group, consumer: consumer, ids: chunk))
                        streams.append(stream)
                    }
                }
                guard !commands.isEmpty else { continue }
                let replies = try? await redis.pipeline(commands)
                let failure = replies == nil ? "no answer" : replies!.lazy.compactMap(\.errorMessage).first
                if let failure, !failing {
                    logger.warning("keeping entries in hand claimed failed; retrying", metadata: ["error": "\(failure)"])
                }
                failing = failure != nil
                for (stream, reply) in zip(streams, replies ?? []) {
                    dropHandOffs(stream, (reply.array ?? []).compactMap(\.string))
                }
            }
        }
    }

    /// KEYS[1] = stream; ARGV = group, consumer, ids. For each id still pending with this
    /// consumer, its idle time reset (`XCLAIM … JUSTID` doesn't count a delivery); an id another
    /// worker claimed meanwhile, or acknowledged, is left alone. Replies the ids not kept.
    static let keepClaimedScript = RedisScript("""
    local gone = {}
    for i = 3, #ARGV do
      local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
      if #p == 1 then
        redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
      else
        gone[#gone + 1] = ARGV[i]
      end
    end
    return gone
    """)

    static func keepClaimed(stream: String, group: String, consumer: String, ids: [String]) -> RedisCommand {
        .script(keepClaimedScript, keys: [stream], args: [group, consumer] + ids)
    }
}
