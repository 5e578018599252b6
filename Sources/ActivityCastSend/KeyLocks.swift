import ActivityCastCore
import Synchronization

/// One worker's per-key serialisation: batches are processed concurrently, but one key's events
/// are merged and sent one at a time, in the order they took their tickets, so a worker never
/// races itself into sending an older state after a newer one.
///
/// A ticket is taken synchronously (`take`) and used later (`withTicket`): the worker takes its
/// tickets in the order it read the entries, whatever order the batches' tasks then reach the send
/// path in. Every ticket taken must be used (or `release`d), or the key's line stops.
public final class KeyLocks: Sendable {
    public struct Ticket: Sendable, Hashable {
        public let key: ActivityKey
        let number: UInt64
    }

    private struct Line {
        /// Tickets in order; the first holds the key.
        var tickets: [UInt64] = []
        var waiting: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private struct State {
        var next: UInt64 = 0
        var lines: [ActivityKey: Line] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    /// A place in `key`'s line, now.
    public func take(_ key: ActivityKey) -> Ticket {
        state.withLock { s in
            s.next += 1
            s.lines[key, default: Line()].tickets.append(s.next)
            return Ticket(key: key, number: s.next)
        }
    }

    /// Waits for the ticket's turn, runs `body`, then hands the key to the next ticket.
    public func withTicket<T: Sendable>(_ ticket: Ticket, _ body: () async throws -> T) async throws -> T {
        await wait(ticket)
        defer { release(ticket) }
        return try await body()
    }

    public func withLock<T: Sendable>(_ key: ActivityKey, _ body: () async throws -> T) async throws -> T {
        try await withTicket(take(key), body)
    }

    private func wait(_ ticket: Ticket) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { s in
                if s.lines[ticket.key]?.tickets.first == ticket.number { return true }
                s.lines[ticket.key]?.waiting[ticket.number] = c
                return false
            }
            if now { c.resume() }
        }
    }

    /// Leaves the line (the ticket's turn is over, or it will never be used).
    public func release(_ ticket: Ticket) {
        let next: CheckedContinuation<Void, Never>? = state.withLock { s in
            guard var line = s.lines[ticket.key], let at = line.tickets.firstIndex(of: ticket.number) else { return nil }
            line.tickets.remove(at: at)
            line.waiting[ticket.number] = nil
            guard at == 0, let head = line.tickets.first else {
                s.lines[ticket.key] = line.tickets.isEmpty ? nil : line
                return nil
            }
            let c = line.waiting.removeValue(forKey: head)
            s.lines[ticket.key] = line
            return c
        }
        next?.resume()
    }
}
