@testable import APNs
import Synchronization
import Testing

/// The in-flight window's two lanes: priority 10 is served first, priority 5 is capped so it
/// can't fill the connections, and a priority-5 request that waited too long goes first.
@Suite struct RequestWindowTests {
    final class Order: Sendable { let served = Mutex<[String]>([]) }

    /// Waits until the window has these waiters (tasks start when the machine lets them).
    func until(_ window: RequestWindow, high: Int, low: Int) async throws {
        for _ in 0..<2000 where window.waiting != (high, low) { try await Task.sleep(for: .milliseconds(1)) }
        #expect(window.waiting == (high, low))
    }

    @Test func priorityFiveIsCappedAndPriorityTenIsServedFirst() async throws {
        let window = RequestWindow(size: 10, lowLimit: 4, aging: .seconds(60))
        let order = Order()
        // Priority 5 holds its whole lane: the next priority-5 batch waits, priority 10 doesn't.
        await window.acquire(4, priority: 5)
        await window.acquire(6, priority: 10)  // the window is now full
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await window.acquire(2, priority: 5); order.served.withLock { $0.append("low") } }
            try await until(window, high: 0, low: 1)
            group.addTask { await window.acquire(2, priority: 10); order.served.withLock { $0.append("high") } }
            try await until(window, high: 1, low: 1)
            #expect(order.served.withLock { $0 }.isEmpty)
            // Room for one batch: the priority-10 one, though it came second.
            window.release(2, priority: 10)
            for _ in 0..<2000 where order.served.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(1)) }
            #expect(order.served.withLock { $0 } == ["high"])
            // More room, but the priority-5 lane is still full: the low batch still waits.
            window.release(4, priority: 10)
            try await Task.sleep(for: .milliseconds(20))
            #expect(order.served.withLock { $0 } == ["high"])
            window.release(4, priority: 5)
            try await group.waitForAll()
        }
        #expect(order.served.withLock { $0 } == ["high", "low"])
    }

    @Test func anAgedPriorityFiveWaiterGoesBeforePriorityTen() async throws {
        let window = RequestWindow(size: 4, lowLimit: 4, aging: .milliseconds(30))
        let order = Order()
        await window.acquire(4, priority: 10)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await window.acquire(4, priority: 5); order.served.withLock { $0.append("low") } }
            try await until(window, high: 0, low: 1)
            try await Task.sleep(for: .milliseconds(60))
            group.addTask { await window.acquire(4, priority: 10); order.served.withLock { $0.append("high") } }
            try await until(window, high: 1, low: 1)
            window.release(4, priority: 10)
            for _ in 0..<2000 where order.served.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(1)) }
            #expect(order.served.withLock { $0 } == ["low"], "a priority-5 request that waited past its aging was passed over")
            window.release(4, priority: 5)
            try await group.waitForAll()
        }
        #expect(order.served.withLock { $0 } == ["low", "high"])
    }
}

extension RequestWindowTests {
    /// Priority-10 requests arriving one after another while room keeps coming back don't pass an
    /// aged priority-5 waiter by the fast path: once it has waited past its aging, it goes next.
    @Test func anAgedPriorityFiveWaiterIsNotPassedByNewPriorityTenRequests() async throws {
        let window = RequestWindow(size: 4, lowLimit: 4, aging: .milliseconds(30))
        let order = Order()
        await window.acquire(2, priority: 10)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await window.acquire(4, priority: 5); order.served.withLock { $0.append("low") } }
            try await until(window, high: 0, low: 1)
            try await Task.sleep(for: .milliseconds(60))
            // Room for a new priority-10 batch right now: it must not take it ahead of the aged one.
            group.addTask { await window.acquire(2, priority: 10); order.served.withLock { $0.append("high") } }
            try await until(window, high: 1, low: 1)
            window.release(2, priority: 10)
            for _ in 0..<2000 where order.served.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(1)) }
            #expect(order.served.withLock { $0 } == ["low"])
            window.release(4, priority: 5)
            try await group.waitForAll()
        }
        #expect(order.served.withLock { $0 } == ["low", "high"])
    }
}
