import Foundation
import RedisClient

/// What the benches read from Redis about the workers' progress.
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

    /// Waits until `group` has delivered every entry of each of `streams` and has none pending,
    /// and none is pending on `slices` (when given): every event the workers read has a final
    /// outcome. `pipeline` sends commands (the bench's own connection). Throws after `timeout`
    /// with where it stood and `hint`.
    static func waitConsumed(streams: [String], slices: String? = nil, group: String, timeout: Duration, poll: Duration = .milliseconds(20),
                             hint: String, pipeline: ([RedisCommand]) async throws -> [RESPValue]) async throws {
        let deadline = ContinuousClock.now + timeout
        var state: [String] = []
        while ContinuousClock.now < deadline {
            var commands = streams.flatMap { [RedisCommand("XINFO", "GROUPS", $0), RedisCommand("XINFO", "STREAM", $0)] }
            if let slices { commands.append(RedisCommand("XINFO", "GROUPS", slices)) }
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
            if let slices, let last = replies.last {
                let pending = Self.group(group, in: last)?["pending"]?.int ?? 0
                if pending != 0 { done = false }
                state.append("\(slices): pending \(pending)")
            }
            if done { return }
            try await Task.sleep(for: poll)
        }
        throw CommandFailure("the workers did not finish the events within \(timeout) (\(state.joined(separator: "; "))): \(hint)")
    }
}
