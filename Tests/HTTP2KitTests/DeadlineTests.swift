import NetIO
import Testing

/// `Duration.nanoseconds` and `Deadline.after`, on plain values.
@Suite struct DeadlineTests {
    @Test func nanosecondsSaturateAndNegativeDurationsCountAsZero() {
        #expect(Duration.milliseconds(1500).nanoseconds == 1_500_000_000)
        #expect(Duration.nanoseconds(7).nanoseconds == 7)
        #expect(Duration.zero.nanoseconds == 0)
        // A negative duration under a second has whole seconds 0 and negative attoseconds.
        #expect(Duration.milliseconds(-300).nanoseconds == 0)
        #expect(Duration.milliseconds(-1500).nanoseconds == 0)
        #expect(Duration.seconds(Int64.max).nanoseconds == UInt64.max / 2)
    }

    @Test func aDeadlineInThePastIsNow() {
        let before = Deadline.now()
        let d = Deadline.after(.milliseconds(-300))
        #expect(d >= before && d <= Deadline.now())
    }
}
