import ActivityCastCore
import ActivityCastSend
import APNs
import Foundation
import Logging
import RedisClient

/// Flushes coalesced states when they come due. The schedule (`<prefix>:budget-due`) is the
/// fleet's: any worker takes due members (claiming each for a lease, so a worker that dies
/// mid-flush leaves it to the others), sends the key's newest state to that audience at
/// priority 5 (`Sender.flush`), and settles the member: removed, moved to its new due time, or
/// retried shortly when a fan-out of the key is under way.
final class BudgetFlusher: Sendable {
    let sender: Sender
    let redis: RedisConnection
    let keys: RedisKeys
    let logger: Logger
    let stop: StopSignal
    let interval: Duration
    /// How long a taken member stays claimed: a flush's first slice has this long.
    let lease: Duration
    let conditions: ConditionLog

    init(sender: Sender, redis: RedisConnection, keys: RedisKeys, logger: Logger, stop: StopSignal, interval: Duration = .milliseconds(100),
         lease: Duration = .seconds(30)) {
        self.sender = sender
        self.redis = redis
        self.keys = keys
        self.logger = logger
        self.stop = stop
        self.interval = interval
        self.lease = lease
        self.conditions = ConditionLog(logger: logger)
    }

    func run() async {
        while !stop.isStopped {
            let taken = await takeDue()
            // A full round may have more behind it; otherwise wait (members rescheduled a moment
            // later, a fan-out under way, must not make this loop spin).
            if taken < 16 { _ = await stop.sleep(for: interval) }
        }
    }

    /// One round: takes up to 16 due members and flushes them side by side. Returns how many.
    func takeDue() async -> Int {
        let claim: String, members: [String]
        let lease = sender.budgetSpan(self.lease)
        do {
            let reply = try await redis.send(.script(BudgetScripts.takeDue, keys: [keys.budgetDue],
                                                     args: [lease, 16, sender.budgetNow().map { String($0) } ?? "-"]))
            if let e = reply.errorMessage { throw RedisError(.server, "taking due flushes: \(e)") }
            let parts = reply.array ?? []
            guard parts.count == 2, let c = parts[0].string else { throw RedisError(.unexpectedReply, "taking due flushes: unexpected reply") }
            claim = c
            members = (parts[1].array ?? []).compactMap(\.string)
            conditions.clear("flush", "taking due flushes again")
        } catch {
            conditions.report("flush", level: .warning, "cannot take due flushes; retrying", ["error": "\(error)"])
            return 0
        }
        await withTaskGroup(of: Void.self) { group in
            // The schedule's clock now (the claim is now + lease on it): reschedules count from it,
            // not from this worker's clock.
            let now = (Int64(claim) ?? 0) - lease
            for member in members { group.addTask { await self.flush(member, claim: claim, now: now) } }
        }
        return members.count
    }

    private func flush(_ member: String, claim: String, now: Int64) async {
        guard let bar = member.lastIndex(of: "|"), let key = ActivityKey(parsing: String(member[..<bar])) else {
            logger.warning("not a due flush; removed", metadata: ["member": "\(member.prefix(200))"])
            _ = try? await redis.send(.script(BudgetScripts.settleDue, keys: [keys.budgetDue], args: [member, claim, ""]))
            return
        }
        let audience = String(member[member.index(after: bar)...])
        var next = ""
        do {
            switch try await sender.flush(key, audience) {
            case .sent:
                logger.info("flushed a coalesced state", metadata: ["key": "\(key)", "audience": "\(audience)"])
            case .nothing: break
            case .later(let due): next = String(due)
            case .busy: next = String(now + sender.budgetSpan(.milliseconds(250)))
            }
        } catch {
            // The state is pending again (`Sender.flush` undid its decision): retried in a second
            // (or, if even this can't be written, when the claim ends).
            logger.warning("flushing a coalesced state failed; it is retried", metadata: ["key": "\(key)", "audience": "\(audience)", "error": "\(error)"])
            next = String(now + sender.budgetSpan(.seconds(1)))
        }
        _ = try? await redis.send(.script(BudgetScripts.settleDue, keys: [keys.budgetDue], args: [member, claim, next]))
    }
}
