#if canImport(Glibc)
import Glibc
#endif
import APNsCore
import Foundation
import HTTP2Kit
import HTTP2Transport
import Logging
import NetIO
import OpenSSLKit
import Synchronization

/// What one batch sends: the shared template and body, the targets, and where results go.
/// Requests refer to it by index, so moving a request around costs one reference.
final class BatchWork: Sendable {
    let template: HTTP2RequestTemplate
    let body: HTTP2Body?
    let targets: APNsClient.Targets
    /// Which of `APNsClientStats.requestDurations` its answers are timed in: 0 priority 10, 1 priority 5.
    let lane: Int
    /// Which of APNs's services its answers show at work (`APNsClientStats.answeredNormally`).
    let service: APNsService
    let completion: BatchCompletion

    init(template: HTTP2RequestTemplate, body: HTTP2Body?, targets: APNsClient.Targets, lane: Int, service: APNsService,
         completion: BatchCompletion) {
        self.template = template
        self.body = body
        self.targets = targets
        self.lane = lane
        self.service = service
        self.completion = completion
    }
}

/// One request on its way.
struct OutgoingRequest: Sendable {
    let work: BatchWork
    let index: Int
}

/// Collects a batch's results from any event-loop thread; resumes its one waiter when the last
/// result is in (one hop per batch).
///
/// Results are moved straight into their final place (no copy per result, no lock per result):
/// `store` writes slot `index`, and only the thread that owns that request does so (a request is
/// in exactly one place at a time: a mailbox, a loop's queue, or a stream slot of that loop's
/// connections, and it leaves that place when it is finished). `finished(_:)` then publishes a
/// count of stored results with one atomic decrement (release); the thread that brings the
/// count to zero (acquire) has seen every write, moves the results into the array it hands to
/// the waiter, and resumes it. Hence `@unchecked Sendable`.
final class BatchCompletion: @unchecked Sendable {
    let count: Int
    private let results: UnsafeMutablePointer<APNsResult>
    /// Which slots of `results` hold a value (each written by the slot's owning thread).
    private let stored: UnsafeMutablePointer<Bool>
    private let remaining: Atomic<Int>
    private let continuation: CheckedContinuation<[APNsResult], Never>
    /// Set by the thread that moved the results out (read in `deinit`, after the last release).
    private var handedOver = false

    init(count: Int, continuation: CheckedContinuation<[APNsResult], Never>) {
        self.count = count
        results = .allocate(capacity: max(count, 1))
        stored = .allocate(capacity: max(count, 1))
        stored.initialize(repeating: false, count: max(count, 1))
        remaining = Atomic(count)
        self.continuation = continuation
    }

    deinit {
        if !handedOver {
            for i in 0..<count where stored[i] { (results + i).deinitialize(count: 1) }
        }
        results.deallocate()
        stored.deallocate()
    }

    /// Moves `result` into slot `index`; false (and nothing stored) if that slot already has
    /// one. Call from the thread that owns the request, then `finished(_:)` with the number stored.
    @inline(__always)
    func store(_ index: Int, _ result: consuming APNsResult) -> Bool {
        guard !stored[index] else { return false }
        (results + index).initialize(to: result)
        stored[index] = true
        return true
    }

    /// `n` more results were stored by this thread; resumes the waiter after the last one.
    func finished(_ n: Int) {
        guard n > 0 else { return }
        guard remaining.subtract(n, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        handedOver = true
        let all = Array<APNsResult>(unsafeUninitializedCapacity: count) { buffer, initialized in
            if let base = buffer.baseAddress { base.moveInitialize(from: results, count: count) }
            initialized = count
        }
        continuation.resume(returning: all)
    }

    /// One result (a request that never reached an event loop).
    func complete(_ index: Int, _ result: APNsResult) {
        if store(index, result) { finished(1) }
    }
}

/// An event-loop thread serving several HTTP/2 connections to one endpoint (as h2load does):
/// one poll over all their sockets, one queue of requests that each connection draws from as its
/// streams free up. Requests arrive through an inbox (one lock and one wake-up per batch slice).
final class APNsEventLoop: Sendable {
    let inbox = Mailbox<OutgoingRequest>()

    let id: Int
    let configuration: APNsClientConfiguration
    let tlsContext: TLSContext?
    let logger: Logger
    let stats: APNsClientStats
    /// `Deadline` nanoseconds of the loop's latest turn (liveness).
    let lastTurn = Atomic<UInt64>(Deadline.now().nanoseconds)

    init(id: Int, connections: Int, configuration: APNsClientConfiguration, tlsContext: TLSContext?, logger: Logger, stats: APNsClientStats) {
        self.id = id
        self.configuration = configuration
        self.tlsContext = tlsContext
        self.logger = logger
        self.stats = stats
        let thread = Thread { [self] in
            nameCurrentThread("apns-\(id)")
            LoopState(owner: self, connections: connections).run()
        }
        thread.name = "apns-\(id)"
        thread.start()
    }

    /// Hands requests `range` of `work` to this loop.
    func enqueue(work: BatchWork, _ range: Range<Int>) {
        var requests: [OutgoingRequest] = []
        requests.reserveCapacity(range.count)
        for index in range { requests.append(OutgoingRequest(work: work, index: index)) }
        if !inbox.post(requests) {
            let error = APNsResult.failed(APNsTransportError(.shutdown, "the APNs client was shut down"))
            for r in requests { r.work.completion.complete(r.index, error) }
        }
    }

    func stop() { inbox.close() }
}

/// The thread-confined state of one event loop.
private final class LoopState {
    let owner: APNsEventLoop
    var config: APNsClientConfiguration { owner.configuration }
    var queue: [OutgoingRequest] = []
    var queueHead = 0
    var connections: [ConnectionState] = []
    /// How many results each batch got during one turn of the loop (stored already, announced
    /// at its end). Results mostly arrive batch by batch, so a run of the same batch skips the
    /// dictionary.
    var finished: [ObjectIdentifier: (BatchCompletion, Int)] = [:]
    var current: BatchCompletion?
    var currentCount = 0
    var nextHousekeeping = Deadline.now()
    /// Request durations counted on this thread since they were last added to the client's stats.
    var durations = [RequestDurations(), RequestDurations()]
    var durationsCounted = false

    init(owner: APNsEventLoop, connections count: Int) {
        self.owner = owner
        connections = (0..<max(1, count)).map { ConnectionState(loop: self, index: $0) }
    }

    var queued: Int { queue.count - queueHead }

    func run() {
        while owner.inbox.take(into: &queue) {
            let now = Deadline.now()
            owner.lastTurn.store(now.nanoseconds, ordering: .relaxed)
            spreadQueued()
            for c in connections {
                if c.pump == nil {
                    if queued > 0 && now >= c.nextConnectAttempt { c.connect() }
                    continue
                }
                c.submit()
                c.flush()
                if c.draining, let s = c.session, s.activeStreams == 0 { c.close() }
            }
            publishResults()
            waitForEvents()
            publishResults()
            housekeeping()
        }
        shutdown()
    }

    /// Gives each open connection an even share of what is queued before any connection takes
    /// more (the loop below then fills whatever room is left, connection by connection). Without
    /// it the first connection took everything up to its stream limit (1000) and a fan-out that
    /// keeps fewer requests in flight than that used one connection, so the server handled it
    /// on one thread (the sandbox did: one of its two loops at ~55%, the other idle), while a
    /// client like h2load keeps every connection busy.
    private func spreadQueued() {
        guard connections.count > 1 else { return }
        var open = 0
        for c in connections where c.session != nil && !c.draining { open += 1 }
        guard open > 1, queued > open else { return }
        let share = (queued + open - 1) / open
        for c in connections where c.session != nil && !c.draining { c.submit(atMost: share) }
    }

    /// Takes the next request for a connection with room, if any.
    func next() -> OutgoingRequest? {
        guard queueHead < queue.count else { return nil }
        let r = queue[queueHead]
        queueHead += 1
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        } else if queueHead > 4096 && queueHead * 2 > queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
        return r
    }

    func requeue(_ requests: [OutgoingRequest]) {
        guard !requests.isEmpty else { return }
        if queueHead == 0 { queue.insert(contentsOf: requests, at: 0) } else {
            queue.replaceSubrange(0..<queueHead, with: [])
            queueHead = 0
            queue.insert(contentsOf: requests, at: 0)
        }
    }

    func finish(_ request: OutgoingRequest, _ result: consuming APNsResult) {
        let completion = request.work.completion
        guard completion.store(request.index, result) else { return }
        if completion !== current {
            parkCurrent()
            current = completion
        }
        currentCount += 1
    }

    private func parkCurrent() {
        guard let current, currentCount > 0 else { return }
        finished[ObjectIdentifier(current), default: (current, 0)].1 += currentCount
        currentCount = 0
    }

    func publishResults() {
        if let current, currentCount > 0, finished.isEmpty {
            let n = currentCount
            currentCount = 0
            self.current = nil
            current.finished(n)
            return
        }
        parkCurrent()
        current = nil
        guard !finished.isEmpty else { return }
        for (_, (completion, n)) in finished { completion.finished(n) }
        finished.removeAll(keepingCapacity: true)
    }

    /// Waiting requests fail (retryable) when no connection could be opened for a while.
    func failWaiting(_ error: APNsTransportError) {
        while let r = next() { finish(r, .failed(error)) }
    }

    private func waitForEvents() {
        var fds = [pollfd(fd: owner.inbox.wakeup.readFD, events: Int16(POLLIN), revents: 0)]
        var timeout: Int32 = 1000
        for c in connections {
            if let pump = c.pump {
                fds.append(pollfd(fd: pump.socket.fd, events: pump.pollEvents, revents: 0))
            } else {
                fds.append(pollfd(fd: -1, events: 0, revents: 0))
                if queued > 0 { timeout = min(timeout, max(1, c.nextConnectAttempt.pollTimeoutMillis)) }
            }
        }
        let n = poll(&fds, nfds_t(fds.count), timeout)
        guard n > 0 else { return }
        if fds[0].revents != 0 { owner.inbox.wakeup.drain() }
        for (i, c) in connections.enumerated() where fds[i + 1].revents != 0 {
            c.readable(fds[i + 1].revents)
        }
    }

    private func housekeeping() {
        let now = Deadline.now()
        guard now >= nextHousekeeping else { return }
        nextHousekeeping = Deadline.after(.milliseconds(250))
        for c in connections { c.housekeeping(now) }
        publishResults()
        publishDurations()
    }

    func publishDurations() {
        guard durationsCounted else { return }
        owner.stats.add(&durations)
        durationsCounted = false
    }

    private func shutdown() {
        let error = APNsTransportError(.shutdown, "the APNs client was shut down")
        for r in queue[queueHead...] { finish(r, .failed(error)) }
        for r in owner.inbox.drain() { finish(r, .failed(error)) }
        for c in connections { c.abandon(error) }
        publishResults()
        publishDurations()
    }
}

/// One HTTP/2 connection of an event loop.
///
/// - Until a request has succeeded on it, one stream at a time (APNs allows one stream before
///   it has seen a valid provider token); then SETTINGS_MAX_CONCURRENT_STREAMS as it changes,
///   capped by the configuration.
/// - GOAWAY: streams at or below its last stream id finish; the rest (refused) go back to the
///   loop's queue, and the connection reopens once its last stream is done.
/// - Broken: requests never processed go back to the queue; the others may have reached APNs
///   and fail (`connectionLost`) for their callers to decide; the connection reopens with
///   back-off. Idle connections are PINGed, never churned.
private final class ConnectionState: HTTP2ClientDelegate {
    struct InFlight {
        var request: OutgoingRequest
        var stream: Int32 = 0
        var status = 0
        var response = APNsResponse(status: 0)
        var body: [UInt8] = []
        var started: Deadline
        var timedOut = false
    }

    // The loop owns its connections (and outlives them): no reference counting on the hot path.
    unowned(unsafe) let loop: LoopState
    let index: Int
    var config: APNsClientConfiguration { loop.config }
    var logger: Logger { loop.owner.logger }
    var stats: APNsClientStats { loop.owner.stats }
    var pump: H2Pump?
    var session: HTTP2ClientSession?
    // Touched several times per request, only from the loop's thread, never across a call that
    // could reach them again: no runtime exclusivity checks (as in HTTP2ClientSession).
    @exclusivity(unchecked) var slots: ContiguousArray<InFlight?> = []
    @exclusivity(unchecked) var freeSlots: [Int] = []
    var succeededOnce = false
    var draining = false
    /// The last stream id of a GOAWAY received on this connection: streams above it were never
    /// processed (RFC 9113 §6.8) and may be sent again as they were.
    var goAwayLastStream: Int32?
    var connectFailures = 0
    var nextConnectAttempt = Deadline(nanoseconds: 0)
    var lastActivity = Deadline.now()
    var pingSentAt: Deadline?

    init(loop: LoopState, index: Int) {
        self.loop = loop
        self.index = index
    }

    var name: String { "\(loop.owner.id).\(index)" }

    /// Starts queued requests while there is room (at most `atMost` of them).
    func submit(atMost: Int = .max) {
        guard let session, !draining else { return }
        let limit = succeededOnce ? max(1, min(session.remoteMaxConcurrentStreams, config.maxConcurrentStreams)) : 1
        var submitted = false
        var now: Deadline?
        var taken = 0
        while taken < atMost, session.activeStreams < limit, let request = loop.next() {
            taken += 1
            let slot = freeSlots.popLast() ?? { slots.append(nil); return slots.count - 1 }()
            let work = request.work
            do {
                let stream = try session.submitRequest(work.template, path: work.targets.paths[request.index],
                                                       headers: work.targets.headers(request.index),
                                                       body: work.body, context: UInt64(slot))
                // One clock read per turn: the timeout check is coarse (housekeeping runs every 250 ms).
                let started = now ?? Deadline.now()
                now = started
                slots[slot] = InFlight(request: request, stream: stream, started: started)
                submitted = true
            } catch {
                freeSlots.append(slot)
                loop.requeue([request])
                draining = true  // GOAWAY received or stream ids used up: finish here, reopen
                break
            }
        }
        if submitted, let now { lastActivity = now }
    }

    func flush() {
        guard let pump else { return }
        do { try pump.flush() } catch { lost("write failed: \(error)") }
    }

    func readable(_ revents: Int16) {
        guard let pump else { return }
        do {
            // The time of this read: answers completed by it are timed with it.
            lastActivity = Deadline.now()
            if try !pump.readAvailable() { lost("APNs closed the connection"); return }
            if pump.isFinished && !draining { lost("the HTTP/2 session ended"); return }
            try pump.flush()
        } catch {
            lost("read failed: \(error)")
        }
    }

    func connect() {
        let endpoint = config.endpoint
        do {
            let socket = try Socket.connectTCP(host: endpoint.host, port: endpoint.port, timeout: config.connectTimeout)
            var tls: TLSSession?
            if let context = loop.owner.tlsContext {
                tls = try TLSSession(context: context, fd: socket.fd, serverName: endpoint.serverName ?? endpoint.host)
            }
            // Unowned delegate: this connection owns the session (and outlives it), and is then
            // never weakly referenced, which keeps its reference counting on the fast path.
            let session = try HTTP2ClientSession(delegate: nil, maxConcurrentStreamsHint: 1)
            session.unownedDelegate = self
            let pump = H2Pump(socket: socket, tls: tls, session: session)
            let deadline = Deadline.after(config.connectTimeout)
            while try !pump.handshake() {
                guard try socket.wait(forWriting: pump.pollEvents & Int16(POLLOUT) != 0, until: deadline) else {
                    throw APNsTransportError(.connectionFailed, "TLS handshake with \(endpoint) timed out")
                }
            }
            if tls != nil && pump.negotiatedProtocol != "h2" {
                throw APNsTransportError(.connectionFailed, "\(endpoint) did not agree to HTTP/2 (ALPN h2)")
            }
            self.pump = pump
            self.session = session
            succeededOnce = false
            draining = false
            goAwayLastStream = nil
            pingSentAt = nil
            lastActivity = Deadline.now()
            if connectFailures > 0 {
                logger.info("APNs connection re-established", metadata: ["endpoint": "\(endpoint)", "connection": "\(name)"])
            }
            connectFailures = 0
            stats.clearTrouble(.unreachable)
            stats.connects.add(1, ordering: .relaxed)
            stats.open.add(1, ordering: .relaxed)
            submit()
            flush()
        } catch {
            connectFailures += 1
            let delay = config.backoff(connectFailures)
            nextConnectAttempt = Deadline.after(delay)
            if connectFailures == 1 || connectFailures % 20 == 0 {
                logger.warning("cannot connect to APNs; retrying", metadata: [
                    "endpoint": "\(endpoint)", "connection": "\(name)", "error": "\(error)", "failures": "\(connectFailures)",
                    "next_attempt_ms": "\(delay.milliseconds)"])
            }
            // No connection of this client open: APNs is out of reach for it, and says why.
            if stats.openConnections == 0 { stats.noteTrouble(.unreachable, "\(error)") }
            // Requests don't wait forever for connections that won't come.
            if connectFailures >= config.maxConnectFailuresBeforeFailing && loop.connections.allSatisfy({ $0.pump == nil }) {
                loop.failWaiting(APNsTransportError(.connectionFailed, "cannot connect to \(endpoint): \(error)"))
            }
        }
    }

    func close() {
        if pump != nil { stats.open.subtract(1, ordering: .relaxed) }
        pump?.close()
        pump = nil
        session = nil
    }

    /// The connection broke. A request never processed (not yet given a stream, or above a
    /// GOAWAY's last stream id) goes back to the queue as it was. Any other unanswered request may
    /// have reached APNs: it fails (`connectionLost`) and its caller decides what to send again —
    /// a Live Activity push goes again without its alert, a push-to-start not at all — because
    /// this layer doesn't know which requests carry an alert. The loop reconnects.
    func lost(_ why: String) {
        logger.warning("APNs connection lost", metadata: ["endpoint": "\(config.endpoint)", "connection": "\(name)", "reason": "\(why)"])
        stats.connectionsLost.add(1, ordering: .relaxed)
        close()
        var retry: [OutgoingRequest] = []
        for i in slots.indices {
            guard let f = slots[i] else { continue }
            slots[i] = nil
            freeSlots.append(i)
            if f.stream <= 0 || goAwayLastStream.map({ f.stream > $0 }) == true {
                retry.append(f.request)
            } else {
                stats.unknownFate.add(1, ordering: .relaxed)
                loop.finish(f.request, .failed(APNsTransportError(.connectionLost, "\(why); no answer, so the request may have reached APNs")))
            }
        }
        stats.retried.add(retry.count, ordering: .relaxed)
        loop.requeue(retry)
        nextConnectAttempt = Deadline.now()
    }

    func abandon(_ error: APNsTransportError) {
        for i in slots.indices { if let f = slots[i] { loop.finish(f.request, .failed(error)) } }
        slots.removeAll()
        if let session, let pump {
            stats.open.subtract(1, ordering: .relaxed)
            self.pump = nil
            session.terminate(errorCode: .noError)
            _ = try? pump.flush()
            pump.close()
        }
    }

    func housekeeping(_ now: Deadline) {
        guard let session, let pump else { return }
        // Requests without an answer for too long: cancel the stream, report a timeout.
        let limit = config.requestTimeout.nanoseconds
        for i in slots.indices {
            guard let f = slots[i], !f.timedOut, now.nanoseconds &- f.started.nanoseconds > limit else { continue }
            slots[i]!.timedOut = true
            try? session.cancel(stream: f.stream)
        }
        // Keep idle connections alive with PING, and notice dead ones.
        if let sent = pingSentAt, now.nanoseconds &- sent.nanoseconds > config.pingTimeout.nanoseconds {
            lost("no PING acknowledgement in \(config.pingTimeout)")
            return
        }
        if pingSentAt == nil, session.activeStreams == 0, now.nanoseconds &- lastActivity.nanoseconds > config.idlePingInterval.nanoseconds {
            try? session.submitPing(payload: now.nanoseconds)
            pingSentAt = now
        }
        _ = try? pump.flush()
    }

    // MARK: HTTP2ClientDelegate

    func http2(_ session: HTTP2ClientSession, responseHead stream: Int32, context: UInt64, status: Int, headers: HTTP2HeaderList) {
        let slot = Int(context)
        guard slot < slots.count, slots[slot] != nil else { return }
        slots[slot]!.status = status
        let ids = status >= 300 || slots[slot]!.request.work.targets.successIDs
        Self.read(headers, status: status, ids: ids, into: &slots[slot]!.response)
    }

    /// The four APNs ids and retry-after, looked up by their bytes: a String only for the values
    /// present (none for the names, none for other headers). Written in place in the slot.
    /// `ids` false: none of it (a success whose caller reads no ids).
    private static func read(_ headers: HTTP2HeaderList, status: Int, ids: Bool, into r: inout APNsResponse) {
        r.status = status
        guard ids, !headers.isEmpty else { return }
        r.apnsID = headers.value(for: "apns-id")
        r.uniqueID = headers.value(for: "apns-unique-id")
        // A device push's answer is exactly these two: skip the other lookups then.
        guard headers.count > 2 || r.apnsID == nil || r.uniqueID == nil else { return }
        r.requestID = headers.value(for: "apns-request-id")
        r.channelID = headers.value(for: "apns-channel-id")
        if let v = headers.value(for: "retry-after"), let s = Int(v) { r.retryAfter = .seconds(s) }
    }

    func http2(_ session: HTTP2ClientSession, responseBody stream: Int32, context: UInt64, bytes: UnsafeRawBufferPointer) {
        let slot = Int(context)
        guard slot < slots.count, slots[slot] != nil, slots[slot]!.body.count < 64 * 1024 else { return }
        slots[slot]!.body.append(contentsOf: bytes)
    }

    func http2(_ session: HTTP2ClientSession, streamClosed stream: Int32, context: UInt64, errorCode: HTTP2ErrorCode) {
        let slot = Int(context)
        guard slot < slots.count, var f = slots[slot].take() else { return }
        freeSlots.append(slot)
        if f.timedOut {
            stats.timeouts.add(1, ordering: .relaxed)
            loop.finish(f.request, .failed(APNsTransportError(.timeout, "no answer from APNs within \(config.requestTimeout)")))
            return
        }
        if f.status > 0 && errorCode == .noError {
            // Swapped out of the slot, not copied: no reference counting for its strings.
            var response = APNsResponse(status: 0)
            swap(&response, &f.response)
            let answeredAt = max(lastActivity.nanoseconds, f.started.nanoseconds)
            loop.durations[f.request.work.lane].record(nanoseconds: answeredAt - f.started.nanoseconds)
            loop.durationsCounted = true
            if (200..<300).contains(f.status) {
                succeededOnce = true
                if !f.body.isEmpty { swap(&response.body, &f.body) }
                stats.delivered.add(1, ordering: .relaxed)
                stats.answeredNormally(f.request.work.service, at: answeredAt)
            } else {
                let (reason, ts) = APNsResponse.parseErrorBody(f.body)
                response.reason = reason
                response.timestampMillis = ts
                stats.rejected.add(1, ordering: .relaxed)
                if (400..<500).contains(f.status) && f.status != 429 && reason?.refusesCredentials != true {
                    stats.answeredNormally(f.request.work.service, at: answeredAt)
                }
                // This connection's first token had another key: only a new connection takes
                // this one (the retried request goes there).
                if reason == .unrelatedKeyIdInToken && !draining {
                    draining = true
                    logger.warning("APNs refused a token signed by another key than this connection's first: reopening it",
                                   metadata: ["endpoint": "\(config.endpoint)", "connection": "\(name)"])
                }
            }
            loop.finish(f.request, .response(response))
            return
        }
        // No complete answer. Refused (above a GOAWAY's last stream, or never sent): not
        // processed, so it goes again as it was. Otherwise it may have reached APNs: its caller
        // decides (see `lost`).
        if errorCode == .refusedStream || goAwayLastStream.map({ stream > $0 }) == true {
            stats.retried.add(1, ordering: .relaxed)
            loop.requeue([f.request])
        } else {
            stats.unknownFate.add(1, ordering: .relaxed)
            loop.finish(f.request, .failed(APNsTransportError(.connectionLost, "stream closed without an answer (\(errorCode)); it may have reached APNs")))
        }
    }

    func http2(_ session: HTTP2ClientSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8]) {
        draining = true
        goAwayLastStream = min(goAwayLastStream ?? .max, lastStreamID)
        stats.goAways.add(1, ordering: .relaxed)
        logger.info("APNs sent GOAWAY", metadata: [
            "endpoint": "\(config.endpoint)", "connection": "\(name)", "last_stream": "\(lastStreamID)",
            "reason": "\(APNsResponse.parseErrorBody(debugData).reason?.rawValue ?? String(decoding: debugData.prefix(100), as: UTF8.self))"])
    }

    func http2(_ session: HTTP2ClientSession, pingAcknowledged payload: UInt64) {
        pingSentAt = nil
        lastActivity = Deadline.now()
    }
}
