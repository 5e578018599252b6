import ActivityCastCore
import HiredisCodec
import RedisClient

/// `resp`: fuzzer bytes as what a Redis server sent → `RESPDecoder`, fed in chunks of varying size
/// the way a connection reads them → every complete reply through the stream reply parsers
/// (`StreamReplies.read`, `.autoclaim`, `.pending`, `.entry`), which must return or throw → every
/// entry they return through `EntryDecoder`, paired up as the worker does.
///
/// Input layout:
///
///     byte 0   bits 0-2  the largest chunk per read: 1, 2, 4, … 128 bytes (sizes from a PRNG seeded
///                        by this byte)
///              bits 4-5  reply limits: 0 the worker's, 1 tight, 2 none, 3 the worker's and tight
///                        taking turns reply by reply (as a connection switches them per command)
///     rest     the bytes from the server
///
/// The same bytes are also decoded in one piece and without limits, and compared: where the reads
/// split the bytes must not change anything, and limits may only turn nested values into
/// `.oversized` exactly where `expected(_:limits:)` says. `Fuzz/corpus/resp/` has real
/// `XREADGROUP`, `XAUTOCLAIM` and `XPENDING` replies captured from redis-server 7.
///
/// A protocol error is a fine outcome (the connection drops and reconnects); a trap, a hang, or
/// memory out of proportion to the input (libFuzzer's `-malloc_limit_mb`) is not.
enum RESPTarget {
    /// Entry limits and the reply limits a worker derives from them (`EntryDecoder.readLimits`).
    struct Limits {
        var entry: DecodeLimits
        var reply: RESPDecoder.Limits?

        init(entry: DecodeLimits, batch: Int) {
            self.entry = entry
            let l = EntryDecoder(limits: entry).readLimits(batch: batch)
            reply = RESPDecoder.Limits(maxElements: l.maxElements, maxStringBytes: l.maxStringBytes, maxArrayBytes: l.maxArrayBytes)
        }

        init(none entry: DecodeLimits) {
            self.entry = entry
            reply = nil
        }

        /// The defaults: `limits.*` and `worker.batch_size` 256.
        static let worker = Limits(entry: DecodeLimits(), batch: 256)
        /// Small enough that short inputs cross every limit, large enough for stream names, ids
        /// and a short valid entry (else nothing would reach the oversized-entry paths).
        static let tight = Limits(entry: DecodeLimits(maxFields: 6, maxValueBytes: 24, maxEntryBytes: 96), batch: 3)
        /// No reply limits, as for commands that read no stream entries.
        static let none = Limits(none: DecodeLimits())
    }

    /// The limits for the `index`th reply of an input with control byte `control`.
    static func limitsFor(control: UInt8, reply index: Int) -> Limits {
        switch (control >> 4) & 3 {
        case 0: .worker
        case 1: .tight
        case 2: .none
        default: index % 2 == 0 ? .worker : .tight
        }
    }

    /// The one place the fuzz target makes a decoder, the way a connection does.
    static func makeDecoder(limits: RESPDecoder.Limits?) -> RESPDecoder {
        RESPDecoder(limits: limits)
    }

    /// What a decoder made of the bytes: the complete replies, and whether it then failed.
    struct Outcome: Equatable {
        var replies: [RESPValue] = []
        var failed = false
    }

    static func run(_ input: UnsafeBufferPointer<UInt8>) {
        guard let control = input.first else { return }
        let bytes = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: input[1...]))
        let chunked = decode(bytes, control: control, chunked: true, limited: true)
        let whole = decode(bytes, control: control, chunked: false, limited: true)
        // Where the reads split the bytes must not change the replies.
        check(chunked == whole, "chunked feeding gave \(summary(chunked)), one feed \(summary(whole))")
        // Limits change what is kept, never where replies end or whether the bytes are valid RESP.
        let unlimited = decode(bytes, control: control, chunked: false, limited: false)
        check(chunked.replies.count == unlimited.replies.count && chunked.failed == unlimited.failed,
              "with limits \(summary(chunked)), without \(summary(unlimited))")
        for index in chunked.replies.indices {
            let limits = limitsFor(control: control, reply: index)
            let reply = chunked.replies[index], full = unlimited.replies[index]
            if let replyLimits = limits.reply {
                let expected = expected(full, limits: replyLimits)
                check(reply == expected, "reply \(index) with limits \(replyLimits): \(reply), expected \(expected)")
            }
            parseAsStreamReply(reply, full: full, limits: limits, index: index)
        }
    }

    static func summary(_ o: Outcome) -> String { "\(o.replies.count) replies (failed: \(o.failed))" }

    /// Feeds `bytes` in chunks (sizes from a PRNG seeded by `control`) or all at once, and takes
    /// replies the way `RedisConnection` does: all complete ones before the next read, each
    /// reply's limits set before it starts.
    static func decode(_ bytes: UnsafeRawBufferPointer, control: UInt8, chunked: Bool, limited: Bool) -> Outcome {
        let decoder = makeDecoder(limits: limited ? limitsFor(control: control, reply: 0).reply : nil)
        var outcome = Outcome()
        var random = SplitMix64(seed: UInt64(control))
        let maxChunk = 1 << Int(control & 7)
        var offset = 0
        do {
            while true {
                while let reply = try decoder.next() {
                    outcome.replies.append(reply)
                    if limited { decoder.limits = limitsFor(control: control, reply: outcome.replies.count).reply }
                }
                guard offset < bytes.count else { break }
                let size = chunked ? 1 + Int(random.next() % UInt64(maxChunk)) : bytes.count
                let end = min(bytes.count, offset + size)
                try decoder.feed(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                offset = end
            }
        } catch {
            check(error is RESPDecoder.ProtocolError, "RESPDecoder threw \(type(of: error))")
            check(!"\(error)".isEmpty, "protocol error without a description")
            outcome.failed = true
        }
        return outcome
    }

    /// What `full` (read without limits) must look like when read with `limits`, as documented
    /// on `RESPDecoder.Limits` and `RESPValue.oversized`: the top-level reply is never capped; a
    /// nested string over `maxStringBytes`, and a nested array announcing more than `maxElements`
    /// elements or whose strings add up to more than `maxArrayBytes`, arrive as their size. 0: no cap.
    static func expected(_ full: RESPValue, limits: RESPDecoder.Limits, nested: Bool = false) -> RESPValue {
        switch full {
        case .bulk(let b) where nested && limits.maxStringBytes > 0 && b.count > limits.maxStringBytes:
            return .oversized(elements: nil, bytes: b.count)
        case .array(let items):
            // An array counts the bytes of the strings directly in it (bulk strings, not status or errors).
            let bytes = items.reduce(0) { if case .bulk(let b) = $1 { $0 + b.count } else { $0 } }
            if nested && ((limits.maxElements > 0 && items.count > limits.maxElements)
                || (limits.maxArrayBytes > 0 && bytes > limits.maxArrayBytes)) {
                return .oversized(elements: items.count, bytes: bytes)
            }
            return .array(items.map { expected($0, limits: limits, nested: true) })
        default:
            return full
        }
    }

    /// Any reply may arrive where a stream reply is expected (a wrong type, an error, a proxy's
    /// answer): every parser must return or throw a `RedisError`. `full` is the same reply read
    /// without limits, to check that limits never cost an entry the decoder would accept.
    static func parseAsStreamReply(_ reply: RESPValue, full: RESPValue, limits: Limits, index: Int) {
        let kind = StreamKind.allCases[index % StreamKind.allCases.count]
        if let reads = parse({ try StreamReplies.read(reply) }) {
            let fullReads = try? StreamReplies.read(full)
            for (i, read) in reads.enumerated() {
                checkEntries(read.entries, full: fullReads.map { $0[i].entries }, kind: streamKind(read.stream) ?? kind,
                             limits: limits)
            }
        }
        if let claim = parse({ try StreamReplies.autoclaim(reply) }) {
            checkEntries(claim.entries, full: (try? StreamReplies.autoclaim(full))?.entries, kind: kind, limits: limits)
        }
        if let pending = parse({ try StreamReplies.pending(reply) }) {
            check(pending.count == reply.array?.count, "XPENDING parsed \(pending.count) rows")
        }
        if let entry = parse({ try StreamReplies.entry(reply) }) {
            checkEntries([entry], full: (try? StreamReplies.entry(full)).map { [$0] }, kind: kind, limits: limits)
        }
    }

    /// The kind a stream's name suggests (`ac:feed:transit`), so that real entries decode as what they are.
    static func streamKind(_ name: String) -> StreamKind? {
        StreamKind.allCases.first { name.hasSuffix($0.rawValue) }
    }

    private static func parse<T>(_ body: () throws -> T) -> T? {
        do {
            return try body()
        } catch {
            check(error is RedisError, "a stream reply parser threw \(type(of: error))")
            return nil
        }
    }

    /// Each entry as the worker treats it: one over the reply limits becomes the decoder's
    /// `oversizeError`, any other is paired up (an odd name out is dropped) and decoded.
    private static func checkEntries(_ entries: [StreamEntry], full: [StreamEntry]?, kind: StreamKind, limits: Limits) {
        let decoder = EntryDecoder(limits: limits.entry)
        if let full { check(full.count == entries.count, "\(entries.count) entries with limits, \(full.count) without") }
        for (i, entry) in entries.enumerated() {
            let original = full?[i]
            if let original { check(original.id == entry.id, "entry id \(entry.id) with limits, \(original.id) without") }
            if let big = entry.oversize {
                DecoderTarget.checkReason(decoder.oversizeError(fields: big.fields, bytes: big.bytes, longValue: big.longValue).reason)
                // Limits must keep every entry the decoder would accept. Redis always sends
                // names and values in pairs, so only entries of whole pairs are held to that.
                if let fields = original?.fields, fields.count % 2 == 0 {
                    let result = decoder.decode(kind: kind, fields: pairs(fields))
                    check((try? result.get()) == nil,
                          "an entry the decoder accepts was read as oversized (\(big.fields) fields, \(big.bytes) bytes, "
                          + "long value: \(big.longValue.map { "\($0.bytes) bytes" } ?? "none")): \(result)")
                }
                continue
            }
            if let original { check(original.fields == entry.fields, "entry \(entry.id) differs with limits but is not oversized") }
            guard let fields = entry.fields else { continue }
            DecoderTarget.decodeAndCheck(kind: kind, fields: pairs(fields), limits: limits.entry)
        }
    }

    /// Names and values in pairs, as the worker makes them; an odd one out is dropped.
    static func pairs(_ fields: [[UInt8]]) -> [RawField] {
        var raw: [RawField] = []
        raw.reserveCapacity(fields.count / 2)
        var i = 0
        while i + 1 < fields.count {
            raw.append(RawField(name: fields[i], value: fields[i + 1]))
            i += 2
        }
        return raw
    }
}

