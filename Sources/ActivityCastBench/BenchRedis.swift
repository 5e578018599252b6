import ActivityCastCommandSupport
import ActivityCastCore
import Foundation
import RedisClient

/// What the benches read from Redis about the workers' progress and Redis itself.
enum BenchRedis {
    /// A reply of alternating names and values (`XINFO STREAM`, each group of `XINFO GROUPS`) as a map.
    static func fields(_ reply: RESPValue) -> [String: RESPValue] {
        let items = reply.array ?? []
        var map: [String: RESPValue] = [:]
        var i = 0
        while i + 1 < items.count { if let k = items[i].string { map[k] = items[i + 1] }; i += 2 }
        return map
    }

    /// The fields of `group` in an `XINFO GROUPS` reply; nil when the stream has no such group.
    static func group(_ name: String, in reply: RESPValue) -> [String: RESPValue]? {
        for g in reply.array ?? [] {
            let f = fields(g)
            if f["name"]?.string == name { return f }
        }
        return nil
    }

    /// One numeric field of an `INFO` reply (`used_memory`).
    static func info(_ field: String, in reply: RESPValue) -> Int64? {
        guard let text = reply.string else { return nil }
        let prefix = field + ":"
        // "\r\n" is one Character: split on newlines, not on "\r" or "\n".
        for line in text.split(whereSeparator: \.isNewline) where line.hasPrefix(prefix) {
            return Int64(line.dropFirst(prefix.count))
        }
        return nil
    }

    /// Where Redis's memory is, by kind of key: every key is visited (`SCAN`) and named by its
    /// kind (the hash tag's contents and a fan-out's generation left out:
    /// `ac:{…}:fan:<gen>`, `ac:device:{…}`; keys without a tag are their own kind), and
    /// `MEMORY USAGE` of up to `perKind` keys of each kind, drawn uniformly (reservoir sampling:
    /// sizes within a kind vary), times the kind's count gives its size. Largest first.
    static func memoryByKind(perKind: Int = 500, pipeline: ([RedisCommand]) async throws -> [RESPValue]) async throws
        -> [(kind: String, keys: Int, bytes: Double)] {
        var kinds: [String: (keys: Int, sample: [String])] = [:]
        var random = SplitMix64(seed: 1)
        var cursor = "0"
        repeat {
            let reply = try await pipeline([RedisCommand("SCAN", cursor, "COUNT", 10_000)])[0].orThrow("SCAN")
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else { throw CommandFailure("SCAN: \(reply)") }
            cursor = next
            for name in (parts[1].array ?? []).compactMap(\.string) {
                let kind = kind(of: name)
                var k = kinds[kind] ?? (0, [])
                k.keys += 1
                if k.sample.count < perKind {
                    k.sample.append(name)
                } else {
                    let j = Int(random.next() % UInt64(k.keys))
                    if j < perKind { k.sample[j] = name }
                }
                kinds[kind] = k
            }
        } while cursor != "0"
        var out: [(kind: String, keys: Int, bytes: Double)] = []
        for (kind, k) in kinds {
            let sizes = try await pipeline(k.sample.map { RedisCommand("MEMORY", "USAGE", $0) }).compactMap(\.int)
            let mean = sizes.isEmpty ? 0 : Double(sizes.reduce(0, +)) / Double(sizes.count)
            out.append((kind, k.keys, mean * Double(k.keys)))
        }
        return out.sorted { $0.bytes > $1.bytes }
    }

    static func kind(of key: String) -> String {
        guard let open = key.firstIndex(of: "{"), let close = key[open...].firstIndex(of: "}") else { return key }
        var rest = String(key[key.index(after: close)...])
        if let fan = rest.range(of: ":fan:") { rest = rest[..<fan.upperBound] + "<gen>" }
        return key[..<open] + "{…}" + rest
    }

    /// Waits until `group` has delivered every entry of each of `streams` and has none pending,
    /// and none is pending on any of `slices`: every event the workers read has a final
    /// outcome. `pipeline` sends commands (the bench's own connection). Throws after `timeout`
    /// with where it stood and `hint`.
    static func waitConsumed(streams: [String], slices: [String] = [], group: String, timeout: Duration, poll: Duration = .milliseconds(20),
                             hint: String, pipeline: ([RedisCommand]) async throws -> [RESPValue]) async throws {
        let deadline = ContinuousClock.now + timeout
        var state: [String] = []
        while ContinuousClock.now < deadline {
            var commands = streams.flatMap { [RedisCommand("XINFO", "GROUPS", $0), RedisCommand("XINFO", "STREAM", $0)] }
            commands += slices.map { RedisCommand("XINFO", "GROUPS", $0) }
            let replies = try await pipeline(commands)
            var done = true
            state = []
            for (i, stream) in streams.enumerated() {
                let lastID = fields(replies[2 * i + 1])["last-generated-id"]?.string
                guard let g = Self.group(group, in: replies[2 * i]) else {
                    done = false
                    state.append("\(stream): no consumer group \(group)")
                    continue
                }
                let pending = g["pending"]?.int ?? -1
                let delivered = g["last-delivered-id"]?.string
                if !(pending == 0 && delivered != nil && delivered == lastID) { done = false }
                state.append("\(stream): pending \(pending), last delivered \(delivered ?? "-") of \(lastID ?? "-")")
            }
            for (stream, reply) in zip(slices, replies.suffix(slices.count)) {
                let pending = Self.group(group, in: reply)?["pending"]?.int ?? 0
                if pending != 0 { done = false }
                state.append("\(stream): pending \(pending)")
            }
            if done { return }
            try await Task.sleep(for: poll)
        }
        throw CommandFailure("the workers did not finish the events within \(timeout) (\(state.joined(separator: "; "))): \(hint)")
    }
}
