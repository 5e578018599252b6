@testable import ActivityCastWorker
import Synchronization
import Testing

/// Batches take their keys' places in the order they were read, however their processing
/// interleaves before that; a batch that never sends doesn't hold the others up.
@Suite struct ReadOrderTests {
    final class Log: Sendable { let turns = Mutex<[UInt64]>([]) }

    @Test func turnsFollowReadOrderAndSkipBatchesThatEndEarly() async {
        let order = ReadOrder()
        let numbers = (0..<10).map { _ in order.number() }
        let log = Log()
        await withTaskGroup(of: Void.self) { group in
            // Later batches get to their turn first; batch 4 ends without sending (never waits).
            for n in numbers.reversed() {
                group.addTask {
                    if n == numbers[4] { order.done(n); return }
                    await order.waitTurn(n)
                    log.turns.withLock { $0.append(n) }
                    order.done(n)
                    order.done(n)  // twice: idempotent (the batch's own `defer` does it again)
                }
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
        #expect(log.turns.withLock { $0 } == numbers.filter { $0 != numbers[4] })
    }
}
