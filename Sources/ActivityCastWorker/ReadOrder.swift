import Synchronization

/// The order a worker read its batches in, kept up to the send path: batches are processed
/// concurrently and their first round trips can finish in any order, so each batch waits for its
/// turn only to take its keys' places in line (`KeyLocks`), which is quick; the sends themselves
/// still run side by side. Without it, an end read after an update could reach its key first,
/// and the update would be sent as stale.
final class ReadOrder: Sendable {
    private struct State {
        var next: UInt64 = 0
        /// Every number below it is done.
        var turn: UInt64 = 1
        var done: Set<UInt64> = []
        var waiting: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Mutex(State())

    /// The next batch's number, taken when it is read.
    func number() -> UInt64 { state.withLock { $0.next += 1; return $0.next } }

    /// Returns when every batch read before `n` is done.
    func waitTurn(_ n: UInt64) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { s in
                if s.turn >= n { return true }
                s.waiting[n] = c
                return false
            }
            if now { c.resume() }
        }
    }

    /// Batch `n` has taken its places (or will never send). Idempotent.
    func done(_ n: UInt64) {
        let next: CheckedContinuation<Void, Never>? = state.withLock { s in
            guard n >= s.turn, !s.done.contains(n) else { return nil }
            s.done.insert(n)
            let before = s.turn
            while s.done.remove(s.turn) != nil { s.turn += 1 }
            return s.turn != before ? s.waiting.removeValue(forKey: s.turn) : nil
        }
        next?.resume()
    }
}
