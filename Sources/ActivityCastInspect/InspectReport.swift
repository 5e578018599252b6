/// What `activitycast inspect` shows. Read-only: only XINFO, XPENDING (the first
/// `Inspector.pendingSample` entries), XLEN, XREVRANGE (the latest few), ZCARD, SCARD, HLEN,
/// SMEMBERS/ZRANGE on small index sets, one HSCAN of the counters hash, HGETALL of small per-key
/// hashes (channels, budgets), ZSCORE/ZCOUNT of the budget schedule, TIME, TYPE to explain a
/// key of the wrong type, and DBSIZE and INFO memory on each node (every primary of a cluster).
public struct InspectReport: Codable, Sendable {
    public struct Consumer: Codable, Sendable {
        public var name: String
        public var pending: Int64
        public var idleMillis: Int64
    }

    public struct Group: Codable, Sendable {
        public var name: String
        public var consumers: [Consumer]
        public var pending: Int64
        /// The lowest pending id: the entry that has been pending the longest, by id.
        public var oldestPendingID: String?
        /// How long the longest-waiting pending entry has gone since it was last delivered: the
        /// largest idle time among the first `Inspector.pendingSample` pending entries (by id). Not
        /// the age of the id: an entry added long ago but delivered a moment ago shows that moment.
        /// Compare it with `worker.visibility_timeout_ms`: past it, another worker claims the entry
        /// (which delivers it again and restarts this clock).
        public var oldestPendingAgeMillis: Int64?
        /// Entries not yet delivered to the group (`lag` from XINFO GROUPS); nil when Redis can't
        /// tell (after deletions).
        public var lag: Int64?
        public var lastDeliveredID: String
        /// Entries delivered to the group since it was created (`entries-read`, Redis 7); nil when
        /// Redis can't tell. `activitycast top` shows its rate.
        public var entriesRead: Int64? = nil
    }

    public struct Stream: Codable, Sendable {
        public var name: String
        public var kind: String
        public var exists: Bool
        public var length: Int64
        public var firstID: String?
        public var lastID: String?
        public var groups: [Group]
        /// Why the stream could not be read (a key of another type, a refused command); the other
        /// fields are then empty. Nil when it was read.
        public var error: String?
        /// Entries ever added to the stream (`entries-added`, Redis 7), trimmed ones included:
        /// `activitycast top` shows its rate. Nil when Redis doesn't say.
        public var entriesAdded: Int64? = nil
        /// What the workers keep of it once acknowledged (`StreamRetention`, the settings').
        public var retention: String? = nil
        /// The age of its first entry, by its id's time: with trimming on, about the retention
        /// (more while a group lags or an entry stays pending). Nil when it is empty.
        public var oldestEntryAgeMillis: Int64? = nil
        /// The sharded feed this stream is a shard of (`streams.shards`); nil otherwise.
        public var feed: String? = nil
    }

    /// A sharded feed's shards added up: per group, what its shards hold, how many are
    /// pending and not yet delivered (`lag`: nil when a shard's can't be told).
    public struct FeedTotal: Sendable, Equatable {
        public var feed: String
        public var kind: String
        public var shards: Int
        public var length: Int64
        public var entriesAdded: Int64?
        public var groups: [GroupTotal]

        public struct GroupTotal: Sendable, Equatable {
            public var name: String
            public var pending: Int64
            public var lag: Int64?
            public var entriesRead: Int64?
            public var consumers: Int
        }
    }

    /// The sharded feeds' totals, in the order their first shard is listed.
    public var feedTotals: [FeedTotal] {
        var out: [FeedTotal] = []
        for s in streams {
            guard let feed = s.feed else { continue }
            let i = out.firstIndex { $0.feed == feed } ?? {
                out.append(FeedTotal(feed: feed, kind: s.kind, shards: 0, length: 0, entriesAdded: 0, groups: []))
                return out.count - 1
            }()
            out[i].shards += 1
            out[i].length += s.length
            out[i].entriesAdded = Self.sum(out[i].entriesAdded, s.exists ? s.entriesAdded : 0)
            for g in s.groups {
                let j = out[i].groups.firstIndex { $0.name == g.name } ?? {
                    out[i].groups.append(.init(name: g.name, pending: 0, lag: 0, entriesRead: 0, consumers: 0))
                    return out[i].groups.count - 1
                }()
                out[i].groups[j].pending += g.pending
                out[i].groups[j].lag = Self.sum(out[i].groups[j].lag, g.lag)
                out[i].groups[j].entriesRead = Self.sum(out[i].groups[j].entriesRead, g.entriesRead)
                out[i].groups[j].consumers = max(out[i].groups[j].consumers, g.consumers.count)
            }
        }
        return out
    }

    /// nil when either is unknown.
    private static func sum(_ a: Int64?, _ b: Int64?) -> Int64? {
        guard let a, let b else { return nil }
        return a + b
    }

    /// One dead letter's `reason`, `stream` and `id` fields, each cut to its first
    /// `Inspector.deadLetterTextBytes` bytes (its original fields are not read).
    public struct DeadLetter: Codable, Sendable {
        public var id: String
        public var reason: String
        /// The size of the whole `reason` field: more than `reason` holds when it was cut.
        public var reasonBytes: Int
        public var stream: String
        public var entryID: String
    }

    public struct Registrations: Codable, Sendable {
        public var activityKeys: Int64
        public var activityTokens: Int64
        public var pushToStartTokens: Int64
        public var follows: Int64
        /// True when the key or target index was larger than what was counted.
        public var truncated: Bool
        /// Why some counts could not be read (an index or a per-key set of another type); those
        /// counts are 0 or too low. Nil when everything was counted.
        public var error: String?
    }

    /// The fleet-wide counters hash (`RedisKeys.counters`) that workers `HINCRBY`.
    public struct Counters: Codable, Sendable {
        public var key: String
        /// Every field with an integer value (`registrations_stale` → 12).
        public var values: [String: Int64]
        /// True when the hash had more fields than `Inspector.counterLimit`, which were read.
        public var truncated: Bool
        /// Why the hash, or some of its fields, could not be read. Nil when all were.
        public var error: String?
    }

    /// A key's broadcast channel in one environment.
    public struct Channel: Codable, Sendable {
        public var key: String
        public var environment: String
        /// nil for a key on per-token fallback (Apple's channel limit was reached).
        public var id: String?
        public var storagePolicy: Int?
        public var ageMillis: Int64?
        public var broadcasts: Int64
        /// `live`, `ending` (the activity ended; deleted at `deleteAtMillis`), or `fallback`.
        public var state: String
        public var deleteAtMillis: Int64?
    }

    public struct Channels: Codable, Sendable {
        public var channels: [Channel]
        /// Keys looked at: the live keys index and the channels due for deletion (each bounded).
        public var truncated: Bool
        /// Permanent send failures recorded in `<prefix>:send-failures` (capped stream).
        public var sendFailures: Int64
        public var latestSendFailures: [String]
        public var error: String?
    }

    /// One (key, audience)'s budget hash, `<prefix>:{key}:budget:<audience>` (docs/budgets.md).
    public struct Budget: Codable, Sendable {
        public var key: String
        /// `standard`, `frequent` or `channel`: the last part of the hash's name.
        public var audience: String
        /// The settings that size it (`budgets.<policy>.*`): `standard`, `frequent`,
        /// `channel_no_storage` or `channel_latest_message`.
        public var policy: String
        /// False for a channel whose storage policy is not on record any more (its channels were
        /// deleted): the policy is then the routes' for the key's feed.
        public var policyKnown: Bool
        /// Tokens left, refilled to `Budgets.nowMillis` with the policy (`TokenBucket.refill`):
        /// `ticks` / `BudgetState.ticksPerToken`.
        public var tokens: Double
        public var ticks: Int64
        public var capacity: Int
        public var priority10: Int
        public var priority5: Int
        public var downgraded: Int
        public var coalesced: Int
        public var flushed: Int
        public var stale: Int
        public var idleFlushes: Int
        /// Tokens given back: decided at 10, the push never went out.
        public var refunded: Int = 0
        /// Updates and flushes not sent: the audience already showed their state.
        public var unchanged: Int = 0
        /// The event time (ms) of the coalesced state waiting for a flush; nil when none waits.
        public var pendingMillis: Int64?
        /// When the waiting state is due: its score in the schedule (`RedisKeys.budgetDue`), nil
        /// when it is not scheduled.
        public var dueAtMillis: Int64?
        /// The time of the end sent for the key, if any.
        public var endedMillis: Int64?
    }

    public struct Budgets: Codable, Sendable {
        /// The time the tokens are refilled to and due times are measured from: Redis's clock
        /// (`TIME`), the one the decisions and the schedule use, or this machine's when Redis
        /// refused `TIME` (`redisClock` false).
        public var nowMillis: Int64
        public var redisClock: Bool
        public var budgets: [Budget]
        /// True when the key index was larger than what was read.
        public var truncated: Bool
        /// The fleet's schedule of coalesced states (`RedisKeys.budgetDue`).
        public var schedule: String
        /// Due flushes in the schedule (every key, not only those listed).
        public var scheduled: Int64
        /// Of those, how many were due before `nowMillis`.
        public var overdue: Int64
        /// Tiers' budgets not listed: their key has no per-token device of that tier and no
        /// state waiting (`inspect --all-budgets` lists them).
        public var hiddenWithoutDevices: Int = 0
        public var error: String?
    }

    /// One Redis node serving data: the single Redis, or each primary of a cluster.
    public struct Node: Codable, Sendable, Equatable {
        public var address: String
        /// `DBSIZE`: keys on the node.
        public var keys: Int64?
        /// `used_memory` and `maxmemory` (0: no limit) from `INFO memory`.
        public var usedMemory: Int64?
        public var maxMemory: Int64?
        /// Why the node could not be read.
        public var error: String?
    }

    public var redis: String
    public var generatedAtMillis: Int64
    /// The nodes (one on a single Redis; every primary on a cluster).
    public var nodes: [Node] = []
    public var streams: [Stream]
    public var deadLetterStream: String
    public var deadLetterCount: Int64
    public var latestDeadLetters: [DeadLetter]
    /// Why the dead-letter stream could not be read; the count is then 0 and the list empty.
    public var deadLetterError: String?
    public var registrations: Registrations
    public var counters: Counters
    public var channels: Channels
    public var budgets: Budgets
    /// Workers that can't use APNs now (`RedisKeys.apnsUnusable`): which endpoint, since when, why.
    public var apnsUnusable: [APNsUnusable] = []

    public struct APNsUnusable: Codable, Sendable, Equatable {
        public var consumer: String
        public var endpoint: String
        public var sinceMillis: Int64
        /// When the worker last said so: one that stopped saying so for a minute is stale (the
        /// worker died or lost Redis), shown as such.
        public var refreshedMillis: Int64
        public var why: String
        public var error: String
    }

    /// Every section's error, in the order of the report. A report with errors is still a report:
    /// each section says what went wrong with it, and the others are complete.
    public var errors: [String] {
        streams.compactMap(\.error)
            + [deadLetterError, registrations.error, counters.error, channels.error, budgets.error].compactMap { $0 }
    }
}
