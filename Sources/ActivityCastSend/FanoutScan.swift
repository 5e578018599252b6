import ActivityCastCore
import RedisClient

/// A batch's range as the caller scanned it (`FanoutScan`), for `FanoutStepCall.scanned`: from
/// where the slice stands to where the scan ended, whether that ended the slice's range, and how
/// many tokens it holds. The step script takes it when `from` is where the slice stands and it
/// ends where a scan ends (`accepted`); `description` is the text it reads.
public struct FanoutScanned: Sendable, Equatable, CustomStringConvertible {
    public var from: UInt64
    public var to: UInt64
    public var ended: Bool
    public var count: Int

    public init(from: UInt64, to: UInt64, ended: Bool, count: Int) {
        self.from = from
        self.to = to
        self.ended = ended
        self.count = count
    }

    public var description: String { "\(from) \(to) \(ended ? 1 : 0) \(count)" }

    /// Whether the step script takes it for a slice standing at `pos` with its range ending at
    /// `hi`: it starts there, moves on, ends the range exactly when it reaches `hi`, and holds
    /// tokens unless it ended the range.
    public func accepted(at pos: UInt64, hi: UInt64) -> Bool {
        from == pos && to > pos && ended == (to >= hi) && (count > 0 || ended)
    }
}

/// The step script's scan of a slice's range (`FanoutScripts.step`), made by the caller with
/// top-level `HSCAN`s instead: an `HSCAN` from Lua costs Redis about twice one from a client
/// (0.52 against 0.24 µs per token on a 100k-entry hash), and the tokens then come back through
/// the script's reply as well. A slice's worker makes it for the next batch while the last one is
/// being sent, and the step that confirms the last one takes it (`FanoutScanned`).
///
/// A hash's `HSCAN` stops once it has `COUNT` fields (with their values) or has visited 20·`COUNT`
/// buckets (Redis doubles a hash's `COUNT` and stops at ten times that). The script bounds its
/// calls so that none can run past the range's end, ever narrower towards it: dozens of calls at
/// each slice's end, for about a third of its tokens. Here a call asks for what the batch still
/// wants, or near the end for what is left at the density seen (`Cursor.next`), and may run past
/// the end: what it brought from there on is exactly what an `HSCAN` from the end finds up to where
/// the call stopped, the next slice's first tokens (in a table that doesn't change size meanwhile),
/// and is dropped (`run`). A slice's last batch costs one or two calls, the one from the end
/// included. Without a bucket width (none seen yet) the script scans (`Cursor.handedOver`).
public struct FanoutScan: Sendable {
    public var scanned: FanoutScanned
    /// The tokens, as the scan gave them: activity, and its `{key}:meta` value.
    public var rows: [(activity: String, meta: [UInt8])]
    /// The bucket width for the next scan: the narrower of the hint and the narrowest seen.
    public var width: Int64

    /// The scan's decisions as a value: which cursor and `COUNT` to ask next, and where the batch ends.
    public struct Cursor: Sendable, Equatable {
        public let stop: UInt64
        public let want: Int
        let start: UInt64
        let hint: UInt64
        public private(set) var pos: UInt64
        /// Tokens so far.
        public private(set) var count = 0
        /// The range's end is reached.
        public private(set) var ended: Bool
        /// The lowest bit of the places seen: no bucket is narrower.
        public private(set) var est: UInt64?

        /// `hint`: the bucket width the last step saw (0: unknown).
        public init(from: UInt64, stop: UInt64, want: Int, hint: Int64) {
            self.pos = from
            self.start = from
            self.ended = from >= stop
            self.stop = stop
            self.want = max(1, want)
            self.hint = UInt64(max(0, hint))
        }

        /// The next `HSCAN`: its cursor and `COUNT`; nil once the batch is complete, the range
        /// ended, or the bucket width isn't known. `COUNT` is what the batch still wants, or what
        /// the buckets left hold (`expected`), so that the call most often ends the range in one go.
        public func next() -> (cursor: UInt64, count: Int)? {
            if ended || count >= want || width == 0 { return nil }
            return (SliceMath.place(cursor: pos), min(want - count, expected(from: pos, to: stop)))
        }

        /// The bucket width: the last step's, or a narrower one seen since (a place's lowest bit
        /// is often a few times the width); 0 when neither is known.
        public var width: UInt64 { hint > 0 ? min(hint, est ?? hint) : est ?? 0 }

        /// Tokens the places `[a, b)` hold at the density this scan saw (one per bucket before it
        /// saw 32 buckets), a quarter more, and 16 at least (a call costs a round trip, a token
        /// scanned twice far less).
        func expected(from a: UInt64, to b: UInt64) -> Int {
            let w = Double(max(1, width))
            let seen = Double(pos - start) / w
            let density = seen >= 32 ? Double(count) / seen : 1
            return max(16, Int((Double(b - a) / w * density * 1.25).rounded(.up)) + 2)
        }

        /// The rest is the script's: tokens are still wanted, but the bucket width isn't known.
        public var handedOver: Bool { !ended && count < want && next() == nil }

        /// The answer to the last `HSCAN`: its next cursor, and how many tokens it brought before
        /// `stop` (`run` drops those after it).
        public mutating func answer(next cursor: UInt64, tokens: Int) {
            let at = SliceMath.reached(cursor: cursor)
            if cursor != 0 {
                let low = at & (~at &+ 1)
                est = min(est ?? low, low)
            }
            if at >= stop { ended = true }
            count += tokens
            pos = at
        }
    }

    /// Scans `{key}:meta` (`meta`) from `from` up to `stop` for about `want` tokens, with the
    /// bucket width `hint` the last step saw. Nil when it handed over before finding anything:
    /// the step scans that batch itself.
    public static func run(_ redis: RedisConnection, meta: String, from: UInt64, stop: UInt64, want: Int, hint: Int64) async throws -> FanoutScan? {
        var cursor = Cursor(from: from, stop: stop, want: want, hint: hint)
        var rows: [(activity: String, meta: [UInt8])] = []
        while let call = cursor.next() {
            var (next, pairs) = try await hscan(redis, meta, cursor: call.cursor, count: call.count)
            let end = SliceMath.reached(cursor: next)
            if end > stop, !pairs.isEmpty {
                pairs = try await before(stop, pairs, redis, meta, end: end, count: min(pairs.count / 2, cursor.expected(from: stop, to: end)))
            }
            cursor.answer(next: next, tokens: pairs.count / 2)
            appendRows(pairs, to: &rows)
        }
        guard cursor.count > 0 || cursor.ended else { return nil }
        return FanoutScan(scanned: FanoutScanned(from: from, to: cursor.pos, ended: cursor.ended, count: cursor.count), rows: rows,
                          width: Int64(cursor.width))
    }

    /// Of a call's elements that ran past `stop` to `end`, those before `stop`: it drops what
    /// scans from `stop` find up to `end` (`count` per call), as the next slice's first scan will
    /// find it (in a table that doesn't change size meanwhile, exactly the buckets from `stop` on).
    static func before(_ stop: UInt64, _ pairs: [RESPValue], _ redis: RedisConnection, _ meta: String, end: UInt64,
                       count: Int) async throws -> [RESPValue] {
        var theirs = Set<[UInt8]>()
        var at = stop
        while at < end {
            let (next, found) = try await hscan(redis, meta, cursor: SliceMath.place(cursor: at), count: max(1, count))
            for i in stride(from: 0, to: found.count - 1, by: 2) { theirs.insert(found[i].bytes ?? []) }
            at = SliceMath.reached(cursor: next)
        }
        guard !theirs.isEmpty else { return pairs }
        var kept: [RESPValue] = []
        kept.reserveCapacity(pairs.count)
        for i in stride(from: 0, to: pairs.count - 1, by: 2) where !theirs.contains(pairs[i].bytes ?? []) {
            kept.append(pairs[i])
            kept.append(pairs[i + 1])
        }
        return kept
    }

    /// An `HSCAN` of `{key}:meta`'s elements (activity, meta, activity, meta, …) as token rows.
    static func appendRows(_ pairs: [RESPValue], to rows: inout [(activity: String, meta: [UInt8])]) {
        rows.reserveCapacity(rows.count + pairs.count / 2)
        var i = 0
        while i + 1 < pairs.count {
            rows.append((pairs[i].string ?? "", pairs[i + 1].bytes ?? []))
            i += 2
        }
    }

    private static func hscan(_ redis: RedisConnection, _ meta: String, cursor: UInt64, count: Int) async throws -> (next: UInt64, pairs: [RESPValue]) {
        let value = try await redis.send(RedisCommand("HSCAN", meta, String(cursor), "COUNT", count))
        guard let parts = value.array, parts.count == 2, let next = parts[0].string.flatMap(UInt64.init), let pairs = parts[1].array,
              pairs.count % 2 == 0 else {
            throw RedisError(.unexpectedReply, "HSCAN of an audience: unexpected reply \(String(describing: value).prefix(200))")
        }
        return (next, pairs)
    }
}
