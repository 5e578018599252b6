import ActivityCastCore
import APNsCore
import APNsSandbox
import Testing

@Suite struct ConcurrencyTests {
    /// Eight tasks on their own connections hammer one sandbox with a mix of good and bad
    /// requests; afterwards every counter adds up.
    @Test func eightTasksAndConsistentStats() async throws {
        let f = try Fixture()
        let s = f.sandbox { $0.deliveryLogCapacity = 1000 }
        let channel = try f.createChannel(s, policy: 0)
        let tasks = 8, perTask = 3000
        let base = s.stats

        let tallies = try await withThrowingTaskGroup(of: [Int: Int].self) { group in
            for t in 0..<tasks {
                group.addTask {
                    var statuses: [Int: Int] = [:]
                    let good = try f.deviceHeaders()
                    let broadcast = try f.broadcastHeaders(channel: channel)
                    for i in 0..<perTask {
                        // Each task owns 10 tokens; 1 in 10 requests is bad in some way.
                        let token = String(repeating: "a", count: 62) + String(t) + String(i % 10)
                        let request: SandboxRequest
                        switch i % 10 {
                        case 3: request = try f.devicePush(token: "zz", headers: good, connection: UInt64(t))
                        case 5: request = f.broadcast(headers: broadcast, body: update(timestamp: Int64(i)), connection: UInt64(t))
                        default: request = try f.devicePush(token: token, headers: good, body: update(timestamp: Int64(i)), connection: UInt64(t))
                        }
                        let r = s.handle(request, nowMillis: Fixture.now)
                        statuses[r.status, default: 0] += 1
                    }
                    return statuses
                }
            }
            var total: [Int: Int] = [:]
            for try await tally in group { total.merge(tally, uniquingKeysWith: +) }
            return total
        }

        let stats = s.stats
        let n = tasks * perTask
        #expect(tallies[200] == n * 9 / 10 && tallies[400] == n / 10)
        #expect(stats.requests - base.requests == n)
        #expect(stats.delivered == n * 9 / 10)
        #expect(stats.devicePushes == n * 8 / 10 && stats.broadcasts == n / 10)
        #expect(stats.byReason["BadDeviceToken"] == n / 10 && stats.rejected == n / 10)
        #expect(stats.byStatus[200] == n * 9 / 10 && stats.byStatus[201] == 1)
        #expect(stats.byStatus.values.reduce(0, +) == stats.requests)
        #expect(stats.tokenVerifications == 1)
        #expect(s.recentDeliveries(limit: 5000).count == 1000)
        // Every device token got exactly its share.
        var received = 0
        for t in 0..<tasks {
            for k in [0, 1, 2, 4, 6, 7, 8, 9] {
                let view = try #require(s.deviceView(token: String(repeating: "a", count: 62) + String(t) + String(k)))
                #expect(view.pushesReceived == perTask / 10)
                received += view.pushesReceived
            }
        }
        #expect(received == stats.devicePushes)
        #expect(s.channelView(id: channel)?.pushesReceived == n / 10)
    }
}
