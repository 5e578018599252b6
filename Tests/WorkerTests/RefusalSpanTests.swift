import Testing
@testable import ActivityCastWorker

/// When Redis refusing the worker's writes starts and ends, from batch outcomes noted in any
/// order (plain values: instants are integers).
@Suite struct RefusalSpanTests {
    typealias Span = RefusalSpan<Int, String>

    @Test func aRefusalStartsTheSpanOnceAndABatchBegunAfterItEndsIt() {
        var span = Span()
        #expect(span.wentThrough(began: 0, now: 1) == .none)
        #expect(span.refused("oom", began: 1, now: 2) == .started)
        #expect(span.refused("oom", began: 1, now: 3) == .ongoing)
        #expect(span.last?.at == 3)
        // Begun before the last refusal: it may have run before Redis filled up, proves nothing.
        #expect(span.wentThrough(began: 2, now: 4) == .none)
        #expect(span.last != nil)
        #expect(span.wentThrough(began: 3, now: 5) == .ended)
        #expect(span.last == nil && span.ended == 5)
    }

    /// CI saw "Redis refuses the worker's writes" twice for one outage: a batch begun before
    /// Redis had room was refused, and noted only after a later batch had gone through.
    @Test func aRefusalNotedLateFromABatchBegunBeforeTheEndIsOldNews() {
        var span = Span()
        #expect(span.refused("oom", began: 0, now: 1) == .started)
        // Batch A begins at 2 and is refused, but is noted only at 6; batch B begins at 3,
        // after Redis got room, and goes through at 5.
        #expect(span.wentThrough(began: 3, now: 5) == .ended)
        #expect(span.refused("oom", began: 2, now: 6) == .none)
        #expect(span.last == nil)
        // Full again: the next batch, begun after the end, says so.
        #expect(span.refused("oom", began: 7, now: 8) == .started)
        #expect(span.last?.reason == "oom" && span.last?.at == 8)
    }
}
