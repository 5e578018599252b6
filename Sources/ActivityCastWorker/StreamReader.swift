import Foundation
import RedisClient
import Synchronization

/// The worker's blocking reads of its input streams (`XREADGROUP … BLOCK`).
///
/// On a single Redis, and on a Redis Cluster whose input streams share a hash slot, one command
/// reads them all, as it always did. On a cluster, streams in different slots can't share a
/// command (Redis refuses a cross-slot one even within a node): each slot's streams get a
/// blocking read of their own, on a connection of their own, all in flight side by side. A call
/// returns what the first of them brought (and whatever others are done by then); the rest stay
/// in flight for the next call, so an idle stream's BLOCK never holds back a busy one, and no
/// entry a read brings is dropped.
final class StreamReader: Sendable {
    /// The connection of a single Redis (and of streams in one slot); asked for the layout.
    let main: RedisConnection
    private let configuration: RedisConfiguration
    private let state = Mutex(State())
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>

    private struct State {
        /// On a cluster, a connection per slot (each holds a blocking read).
        var connections: [Int: RedisConnection] = [:]
        /// Slots with a read in flight.
        var reading: Set<Int> = []
        /// Reads that came back since the last call took them.
        var done: [Result<[StreamRead], Error>] = []
    }

    init(configuration: RedisConfiguration) {
        self.configuration = configuration
        main = RedisConnection(configuration: configuration)
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        wake = continuation
        wakes = stream
    }

    func close() {
        main.close()
        for c in state.withLock({ Array($0.connections.values) }) { c.close() }
        wake.finish()
    }

    /// What every connection has sent (for the worker's Redis figures).
    var stats: RedisConnection.Stats {
        var total = main.stats
        for c in state.withLock({ Array($0.connections.values) }) {
            let s = c.stats
            total.roundTrips += s.roundTrips
            total.commands += s.commands
            total.connects += s.connects
            total.failures += s.failures
        }
        return total
    }

    /// Reads `streams` for `group`/`consumer`, at most `count` entries per stream, blocking up to
    /// `block`. Nil when `stop` came first and the reads in flight didn't bring anything back
    /// by `deadline` (what they bring later is read again by a claim).
    func read(_ streams: [String], group: String, consumer: String, count: Int, block: Duration, limits: RESPDecoder.Limits,
              stop: StopSignal, deadline: @escaping @Sendable () -> ContinuousClock.Instant) async -> Result<[StreamRead], Error>? {
        let groups: [RedisKeyGroup]
        do {
            groups = try await main.keyGroups(streams)
        } catch {
            return .failure(error)
        }
        if groups.count <= 1, state.withLock({ $0.reading.isEmpty }) {
            // One command for all of them: the reads of before.
            let (result, read) = await stop.started {
                await Self.read(self.main, streams, group: group, consumer: consumer, count: count, block: block, limits: limits)
            }
            if let result { return result }
            // Stopping with a read in flight: what it delivers is this worker's to finish, so wait
            // for it (it returns within `block`) — unless Redis is frozen past the deadline.
            return await StopSignal.within(deadline()) { await read.value }
        }
        for g in groups {
            // A connection per slot, `main` never: a slot's read must not wait behind another's BLOCK.
            let slot = g.slot ?? -1
            let start = state.withLock { s -> RedisConnection? in
                guard !s.reading.contains(slot) else { return nil }
                s.reading.insert(slot)
                if let c = s.connections[slot] { return c }
                let c = RedisConnection(configuration: configuration)
                s.connections[slot] = c
                return c
            }
            guard let connection = start else { continue }
            Task {
                let result = await Self.read(connection, g.keys, group: group, consumer: consumer, count: count, block: block, limits: limits)
                self.state.withLock { s in
                    s.reading.remove(slot)
                    s.done.append(result)
                }
                self.wake.yield()
            }
        }
        // As above: stopping, what the reads in flight bring is still this worker's.
        let waiting = Task { await self.next() }
        if let result = await stop.race({ await waiting.value }) { return result }
        return await StopSignal.within(deadline()) { await waiting.value }
    }

    /// What the reads still in flight bring, waiting until none is (each returns within its
    /// BLOCK) or `deadline`: Redis delivered those entries to this consumer, so a stopping worker
    /// finishes them instead of leaving them pending under its name. (On a cluster a call of
    /// `read` returns with the first slot's read back; the others may still be out.)
    func finishInFlight(until deadline: ContinuousClock.Instant) async -> [StreamRead] {
        var reads: [StreamRead] = []
        while true {
            let (done, busy) = state.withLock { s in
                defer { s.done = [] }
                return (s.done, !s.reading.isEmpty)
            }
            for case .success(let some) in done { reads += some }
            guard busy, ContinuousClock.now < deadline else { return reads }
            let wakes = self.wakes
            _ = await StopSignal.within(deadline) {
                var iterator = wakes.makeAsyncIterator()
                return await iterator.next() != nil
            }
        }
    }

    /// Waits for a read to come back, then takes every one that did: their entries together,
    /// or the first failure when none brought entries.
    private func next() async -> Result<[StreamRead], Error> {
        while true {
            let done = state.withLock { s in defer { s.done = [] }; return s.done }
            if !done.isEmpty {
                var reads: [StreamRead] = []
                var failure: Error?
                for r in done {
                    switch r {
                    case .success(let some): reads += some
                    case .failure(let error): failure = failure ?? error
                    }
                }
                if let failure, reads.isEmpty { return .failure(failure) }
                return .success(reads)
            }
            // One waiter at a time (the worker's read loop reads once at a time).
            var iterator = wakes.makeAsyncIterator()
            if await iterator.next() == nil { return .success([]) }
        }
    }

    private static func read(_ connection: RedisConnection, _ streams: [String], group: String, consumer: String, count: Int, block: Duration,
                             limits: RESPDecoder.Limits) async -> Result<[StreamRead], Error> {
        do {
            let reply = try await connection.pipeline([.xreadgroup(group: group, consumer: consumer, count: count, block: block,
                                                                   streams: streams.map { ($0, ">") })],
                                                      blocking: block, limits: limits)[0]
            return .success(try StreamReplies.read(reply))
        } catch {
            return .failure(error)
        }
    }
}
