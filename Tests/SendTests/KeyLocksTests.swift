import ActivityCastCore
import ActivityCastSend
import Synchronization
import Testing

/// A worker's per-key line: events run one at a time per key, in the order their tickets were
/// taken, whatever order their tasks reach the line in.
@Suite struct KeyLocksTests {
    final class Log: Sendable {
        let ran = Mutex<[Int]>([])
        let inside = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
    }

    @Test func ticketsRunInTheOrderTheyWereTakenNotTheOrderTheyArrive() async throws {
        let locks = KeyLocks()
        let key = ActivityKey(kind: .match, id: "m1")
        let other = ActivityKey(kind: .match, id: "m2")
        let tickets = (0..<20).map { _ in locks.take(key) }
        let log = Log()
        try await withThrowingTaskGroup(of: Void.self) { group in
            // The last ticket's task starts first, the first ticket's last.
            for i in (0..<20).reversed() {
                if i == 0 {
                    // Another key isn't held up by this one's line.
                    try await locks.withLock(other) { log.ran.withLock { $0.append(-1) } }
                }
                group.addTask {
                    try await locks.withTicket(tickets[i]) {
                        if log.inside.add(1, ordering: .relaxed).newValue > 1 { log.overlapped.store(true, ordering: .relaxed) }
                        try await Task.sleep(for: .milliseconds(1))
                        log.ran.withLock { $0.append(i) }
                        log.inside.subtract(1, ordering: .relaxed)
                    }
                }
                try await Task.sleep(for: .milliseconds(2))
            }
            try await group.waitForAll()
        }
        let order = log.ran.withLock { $0 }
        #expect(order.filter { $0 >= 0 } == Array(0..<20))
        #expect(order.first == -1, "the other key waited behind this one: \(order)")
        let overlap = log.overlapped.load(ordering: .relaxed)
        #expect(!overlap, "two events of one key ran at once")
    }

    @Test func aTicketReleasedUnusedLetsTheNextOneGo() async throws {
        let locks = KeyLocks()
        let key = ActivityKey(kind: .trip, id: "t1")
        let first = locks.take(key), second = locks.take(key), third = locks.take(key)
        locks.release(second)
        locks.release(first)
        let ran = try await locks.withTicket(third) { true }
        #expect(ran)
        // And the line is empty again: a new ticket goes at once.
        #expect(try await locks.withLock(key) { 1 } == 1)
    }
}
