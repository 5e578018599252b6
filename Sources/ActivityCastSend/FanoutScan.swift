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
/// Only wide calls are made here. A hash's `HSCAN` stops once it has `COUNT` elements (a field
/// and its value each) or has visited 10·`COUNT` buckets, so a call can't run past the range's
/// end while 10·`COUNT`+1 buckets are left before it; towards the end the script narrows its calls
/// a tenth at a time, dozens per slice, cheap inside Redis and a round trip each here (at 1,000
/// tokens, 67 round trips per event instead of 11, and more Redis CPU, not less). So once a call
/// could bring fewer than `smallest` elements, the scan stops and returns what it has (a shorter
/// batch), or nothing, and the script scans the rest of the range as before (`Cursor.handedOver`).
public struct FanoutScan: Sendable {
    public var scanned: FanoutScanned
    /// The tokens, as the scan gave them: activity, and its `{key}:meta` value.
    public var rows: [(activity: String, meta: [UInt8])]
    /// The narrowest bucket width the scan saw, for the next scan's first `COUNT`.
    public var width: Int64

    /// The scan's decisions as a value: which cursor and `COUNT` to ask next, and where the batch ends.
    public struct Cursor: Sendable, Equatable {
        public let stop: UInt64
        public let want: Int
        /// The narrowest call worth a round trip (elements).
        public let smallest: Int
        let hint: UInt64
        public private(set) var pos: UInt64
        /// Tokens so far.
        public private(set) var count = 0
        /// The range's end is reached.
        public private(set) var ended: Bool
        /// The lowest bit of the places seen: no bucket is narrower.
        public private(set) var est: UInt64?

        /// `hint`: the bucket width the last step saw (0: unknown). It bounds the calls, as it
        /// bounds the script's first: if the table shrank since (its buckets wider), a call may
        /// run past `stop` (duplicates, never a loss); the width handed on is the one seen here.
        public init(from: UInt64, stop: UInt64, want: Int, hint: Int64, smallest: Int = 128) {
            self.pos = from
            self.ended = from >= stop
            self.stop = stop
            self.want = max(1, want)
            self.hint = UInt64(max(0, hint))
            self.smallest = max(2, smallest)
        }

        /// The next `HSCAN`: its cursor and `COUNT`; nil once the batch is complete, the range
        /// ended, or the rest is handed over.
        public func next() -> (cursor: UInt64, count: Int)? {
            if ended || count >= want { return nil }
            let wanted = 2 * (want - count)
            // The last step's width, or a narrower one seen since (a place's lowest bit is often
            // a few times the width: the script's `est` alone would hand over most batches early).
            let width = hint > 0 ? min(hint, est ?? hint) : est ?? 0
            guard width > 0 else { return nil }
            // The script's bound (doubles, as Lua computes it; these values are exact in them).
            let bound = Int((((Double(stop - pos) / Double(width)) - 1) / 10).rounded(.down))
            let c = min(bound, wanted)
            return c >= min(smallest, wanted) ? (SliceMath.place(cursor: pos), c) : nil
        }

        /// The rest is the script's: tokens are still wanted, but no call worth making here can't
        /// run past `stop` (or the bucket width isn't known).
        public var handedOver: Bool { !ended && count < want && next() == nil }

        /// The answer to the last `HSCAN`: its next cursor, and how many tokens it brought. A
        /// call runs past `stop` only if the table shrank since its width was seen: its tokens
        /// are kept (the next slice sends them again: duplicates, never a loss), as the script does.
        public mutating func answer(next cursor: UInt64, tokens: Int) {
            let at = cursor == 0 ? SliceMath.space : SliceMath.place(cursor: cursor)
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
    public static func run(_ redis: RedisConnection, meta: String, from: UInt64, stop: UInt64, want: Int, hint: Int64,
                           smallest: Int = 128) async throws -> FanoutScan? {
        var cursor = Cursor(from: from, stop: stop, want: want, hint: hint, smallest: smallest)
        var rows: [(activity: String, meta: [UInt8])] = []
        while let call = cursor.next() {
            let (next, pairs) = try Self.reply(await redis.send(RedisCommand("HSCAN", meta, String(call.cursor), "COUNT", call.count)))
            cursor.answer(next: next, tokens: pairs.count / 2)
            appendRows(pairs, to: &rows)
        }
        guard cursor.count > 0 || cursor.ended else { return nil }
        return FanoutScan(scanned: FanoutScanned(from: from, to: cursor.pos, ended: cursor.ended, count: cursor.count), rows: rows,
                          width: Int64(cursor.est ?? cursor.hint))
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

    private static func reply(_ value: RESPValue) throws -> (next: UInt64, pairs: [RESPValue]) {
        guard let parts = value.array, parts.count == 2, let next = parts[0].string.flatMap(UInt64.init), let pairs = parts[1].array,
              pairs.count % 2 == 0 else {
            throw RedisError(.unexpectedReply, "HSCAN of an audience: unexpected reply \(String(describing: value).prefix(200))")
        }
        return (next, pairs)
    }
}
