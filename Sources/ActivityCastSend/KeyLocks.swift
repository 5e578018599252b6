import ActivityCastCore
import Synchronization

/// One worker's per-key serialisation: batches are processed concurrently, but one key's events
/// are merged and sent one at a time, in the order they got here, so a worker never races itself
/// into sending an older state after a newer one.
public final class KeyLocks: Sendable {
    private struct Waiters {
        var held = false
        var queue: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex<[ActivityKey: Waiters]>([:])

    public init() {}

    public func withLock<T: Sendable>(_ key: ActivityKey, _ body: () async throws -> T) async throws -> T {
        await acquire(key)
        defer { release(key) }
        return try await body()
    }

    private func acquire(_ key: ActivityKey) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { map in
                var w = map[key] ?? Waiters()
                defer { map[key] = w }
                if !w.held { w.held = true; return true }
                w.queue.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    private func release(_ key: ActivityKey) {
        let next: CheckedContinuation<Void, Never>? = state.withLock { map in
            guard var w = map[key] else { return nil }
            if w.queue.isEmpty {
                map[key] = nil
                return nil
            }
            let c = w.queue.removeFirst()
            map[key] = w
            return c
        }
        next?.resume()
    }
}
