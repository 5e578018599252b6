@testable import ActivityCastSend
import APNs
import APNsCore
import Testing

/// A batch's answers sorted by what to do with each token, as plain values: which tokens go
/// again, and whether the whole batch found APNs out of reach (then their attempts don't count).
@Suite struct TokenAnswersTests {
    func row(_ n: Int) -> TokenBatches.TokenRow {
        TokenBatches.TokenRow(activity: "a\(n)", token: String(repeating: "\(n)", count: 64), env: .development, onBroadcast: false)
    }

    let unreachable = APNsResult.failed(APNsTransportError(.connectionFailed, "cannot connect to 127.0.0.1:1: connection refused"))

    @Test func eachAnswerGoesWhereItsActionSays() {
        let sent = (0..<7).map { (row: row($0), unsure: $0 == 6) }
        let results: [APNsResult] = [
            .response(APNsResponse(status: 200)),
            .response(APNsResponse(status: 410, reason: .unregistered)),
            .response(APNsResponse(status: 400, reason: .badTopic, apnsID: "id-3")),
            unreachable,
            .response(APNsResponse(status: 503, reason: .serviceUnavailable)),
            .failed(APNsTransportError(.timeout, "no answer from APNs within 30 s")),
            .response(APNsResponse(status: 500, reason: .internalServerError)),
        ]
        let a = TokenBatches.Answers(sent: sent, results: results, attempt: 0, keepDelivered: true)
        #expect(a.deliveredCount == 1 && a.delivered.map(\.activity) == ["a0"])
        #expect(a.dead.map(\.row.activity) == ["a1"])
        #expect(a.failures.map(\.target) == [row(2).token] && a.failureIDs == ["id-3"])
        #expect(a.retry.map(\.row.activity) == ["a3", "a4", "a5", "a6"])
        // Only the request that never left found APNs out of reach, and it goes again with its
        // alert; an unanswered one may have reached APNs (so it goes again without), as may one
        // that went unanswered before.
        #expect(a.retry.map(\.unusable) == [true, false, false, false])
        #expect(a.retry.map(\.unsure) == [false, false, true, true])
        #expect(!TokenBatches.Answers(sent: sent, results: results, attempt: 0, keepDelivered: false).delivered.contains { _ in true })
    }

    /// A batch found APNs unusable (no connection, our credentials refused) only when every one
    /// of its requests did.
    @Test func aBatchFoundAPNsUnusableOnlyWhenAllItsRequestsDid() {
        let sent = (0..<3).map { (row: row($0), unsure: false) }
        let refused = APNsResult.response(APNsResponse(status: 403, reason: .invalidProviderToken))
        func answers(_ results: [APNsResult]) -> TokenBatches.Answers {
            TokenBatches.Answers(sent: sent, results: results, attempt: 0, keepDelivered: false)
        }
        #expect(answers(Array(repeating: unreachable, count: 3)).unusable)
        #expect(answers([unreachable, refused, refused]).unusable)
        #expect(!answers([unreachable, unreachable, .response(APNsResponse(status: 500, reason: .internalServerError))]).unusable)
        #expect(!answers([refused, refused, .response(APNsResponse(status: 200))]).unusable)
        // A key limited to the other environment is a setting: the request fails, APNs works.
        #expect(!answers(Array(repeating: .response(APNsResponse(status: 403, reason: .badEnvironmentKeyIdInToken)), count: 3)).unusable)
    }
}
