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

/// One request on its way: shared template and body, its own path and headers, and where its
/// result goes. Cheap to copy: everything big is a shared reference.
struct OutgoingRequest: @unchecked Sendable {
    // Template and body are immutable shared storage (both `@unchecked Sendable` themselves).
    let template: HTTP2RequestTemplate
    let path: String
    let headers: [HTTP2Header]
    let body: HTTP2Body?
    let batch: BatchCompletion
    let index: Int
    var attempts: Int
}

/// Collects a batch's results from any connection thread; resumes its one waiter when the
/// last result is in (one hop per batch).
final class BatchCompletion: Sendable {
    private struct State {
        var results: [APNsResult?]
        var remaining: Int
        var continuation: CheckedContinuation<[APNsResult], Never>?
    }
    private let state: Mutex<State>

    init(count: Int, continuation: CheckedContinuation<[APNsResult], Never>) {
        state = Mutex(State(results: Array(repeating: nil, count: count), remaining: count, continuation: continuation))
    }

    func complete(_ index: Int, _ result: APNsResult) {
        let done: (CheckedContinuation<[APNsResult], Never>, [APNsResult])? = state.withLock { s in
            guard s.results[index] == nil else { return nil }
            s.results[index] = result
            s.remaining -= 1
            guard s.remaining == 0, let c = s.continuation else { return nil }
            s.continuation = nil
            return (c, s.results.map { $0! })
        }
        if let (continuation, results) = done { continuation.resume(returning: results) }
    }
}

/// One HTTP/2 connection to APNs with its own event-loop thread, which owns the socket, the TLS
/// session and the nghttp2 session. Requests arrive in an inbox (one lock and one wake-up per
/// batch slice); responses complete their batch from this thread.
///
/// - Until a request has succeeded on the connection, one stream at a time (APNs allows one
///   stream before it has seen a valid provider token); then SETTINGS_MAX_CONCURRENT_STREAMS,
///   as it changes.
/// - GOAWAY: streams at or below its last stream id finish; the rest (refused) are sent again
///   on a new connection.
/// - A broken connection: requests without an answer are sent again (up to `maxAttempts`), the
///   connection reopens with back-off. Idle connections are kept and PINGed, never churned.
final class APNsConnection: @unchecked Sendable {
    // Only `inbox`/`stopped` are shared (under `lock`); everything else belongs to the thread.
    private let lock = NSLock()
    private var inbox: [OutgoingRequest] = []
    private var stopped = false
    private let wakeup = Wakeup()

    let id: Int
    let configuration: APNsClientConfiguration
    let tlsContext: TLSContext?
    let logger: Logger
    let stats: APNsClientStats

    init(id: Int, configuration: APNsClientConfiguration, tlsContext: TLSContext?, logger: Logger, stats: APNsClientStats) {
        self.id = id
        self.configuration = configuration
        self.tlsContext = tlsContext
        self.logger = logger
        self.stats = stats
        let thread = Thread { [self] in EventLoop(owner: self).run() }
        thread.name = "apns-\(id)"
        thread.start()
    }

    func enqueue(_ requests: [OutgoingRequest]) {
        guard !requests.isEmpty else { return }
        lock.lock()
        if stopped {
            lock.unlock()
            for r in requests { r.batch.complete(r.index, .failed(APNsTransportError(.shutdown, "the APNs client was shut down"))) }
            return
        }
        inbox.append(contentsOf: requests)
        lock.unlock()
        wakeup.signal()
    }

    func stop() {
        lock.lock()
        stopped = true
        lock.unlock()
        wakeup.signal()
    }

    /// Takes the inbox; nil once stopped.
    fileprivate func takeInbox() -> [OutgoingRequest]? {
        lock.lock()
        defer { lock.unlock() }
        if stopped { return nil }
        if inbox.isEmpty { return [] }
        let all = inbox
        inbox = []
        return all
    }

    fileprivate func takeInboxAfterStop() -> [OutgoingRequest] {
        lock.lock()
        defer { lock.unlock() }
        let all = inbox
        inbox = []
        return all
    }

    fileprivate var wakeFD: Int32 { wakeup.readFD }
    fileprivate func drainWakeup() { wakeup.drain() }
}

/// The thread-confined state and loop of one connection.
private final class EventLoop: HTTP2ClientDelegate {
    struct InFlight {
        var request: OutgoingRequest
        var status = 0
        var apnsID: String?
        var uniqueID: String?
        var requestID: String?
        var channelID: String?
        var retryAfter: Duration?
        var body: [UInt8] = []
        var started: Deadline
        var stream: Int32 = 0
        var timedOut = false
    }

    let owner: APNsConnection
    var config: APNsClientConfiguration { owner.configuration }
    var queue: [OutgoingRequest] = []
    var queueHead = 0
    var slots: [InFlight?] = []
    var freeSlots: [Int] = []
    var pump: H2Pump?
    var session: HTTP2ClientSession?
    var succeededOnce = false
    var draining = false
    var connectFailures = 0
    var nextConnectAttempt = Deadline(nanoseconds: 0)
    var lastActivity = Deadline.now()
    var pingSentAt: Deadline?
    var nextHousekeeping = Deadline.now()

    init(owner: APNsConnection) { self.owner = owner }

    var queued: Int { queue.count - queueHead }

    func run() {
        while let incoming = owner.takeInbox() {
            if !incoming.isEmpty { queue.append(contentsOf: incoming) }
            if pump == nil && queued > 0 && Deadline.now() >= nextConnectAttempt { connect() }
            if let pump, let session {
                submitQueued(session)
                do {
                    try pump.flush()
                } catch {
                    connectionLost("write failed: \(error)")
                    continue
                }
            }
            if draining, let session, session.activeStreams == 0 {
                // Everything at or below the GOAWAY's last stream is answered: start afresh.
                closeConnection()
                continue
            }
            waitForEvents()
            housekeeping()
        }
        // Stopped: everything still here fails; the connection closes politely.
        let leftovers = Array(queue[queueHead...]) + owner.takeInboxAfterStop() + slots.compactMap { $0?.request }
        for r in leftovers { r.batch.complete(r.index, .failed(APNsTransportError(.shutdown, "the APNs client was shut down"))) }
        slots.removeAll()
        if let session, let pump {
            session.terminate(errorCode: .noError)
            _ = try? pump.flush()
            pump.close()
        }
    }

    private func submitQueued(_ session: HTTP2ClientSession) {
        guard !draining else { return }
        let limit = succeededOnce ? max(1, min(session.remoteMaxConcurrentStreams, config.maxConcurrentStreams)) : 1
        while queued > 0 && session.activeStreams < limit {
            let request = queue[queueHead]
            queueHead += 1
            let slot = freeSlots.popLast() ?? { slots.append(nil); return slots.count - 1 }()
            slots[slot] = InFlight(request: request, started: Deadline.now())
            do {
                slots[slot]!.stream = try session.submitRequest(request.template, path: request.path, headers: request.headers,
                                                                 body: request.body, context: UInt64(slot))
            } catch {
                slots[slot] = nil
                freeSlots.append(slot)
                queueHead -= 1  // keep it for the next connection
                draining = true
                break
            }
        }
        if queueHead > 4096 && queueHead * 2 > queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
        if queued > 0 { lastActivity = Deadline.now() }
    }

    private func waitForEvents() {
        var fds = [pollfd(fd: owner.wakeFD, events: Int16(POLLIN), revents: 0)]
        if let pump { fds.append(pollfd(fd: pump.socket.fd, events: pump.pollEvents, revents: 0)) }
        var timeout: Int32 = 1000
        if pump == nil && queued > 0 { timeout = max(1, min(timeout, nextConnectAttempt.pollTimeoutMillis)) }
        let n = poll(&fds, nfds_t(fds.count), timeout)
        guard n > 0 else { return }
        if fds[0].revents != 0 { owner.drainWakeup() }
        guard fds.count > 1, let pump else { return }
        let revents = fds[1].revents
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
            do {
                if try !pump.readAvailable() { connectionLost("APNs closed the connection"); return }
                lastActivity = Deadline.now()
            } catch {
                connectionLost("read failed: \(error)")
                return
            }
        }
        if pump.isFinished && !draining { connectionLost("the HTTP/2 session ended") }
    }

    private func housekeeping() {
        let now = Deadline.now()
        guard now >= nextHousekeeping else { return }
        nextHousekeeping = Deadline.after(.milliseconds(250))
        // Requests without an answer for too long: cancel the stream, report a timeout.
        if let session {
            let limit = config.requestTimeout.nanoseconds
            for i in slots.indices {
                guard let f = slots[i], !f.timedOut, now.nanoseconds &- f.started.nanoseconds > limit else { continue }
                slots[i]!.timedOut = true
                try? session.cancel(stream: slots[i]!.stream)
            }
        }
        // Keep idle connections alive with PING, and notice dead ones.
        if let session, let pump {
            if let sent = pingSentAt, now.nanoseconds &- sent.nanoseconds > config.pingTimeout.nanoseconds {
                connectionLost("no PING acknowledgement in \(config.pingTimeout)")
                return
            }
            if pingSentAt == nil, session.activeStreams == 0, now.nanoseconds &- lastActivity.nanoseconds > config.idlePingInterval.nanoseconds {
                try? session.submitPing(payload: UInt64(now.nanoseconds))
                pingSentAt = now
                _ = try? pump.flush()
            }
        }
    }

    // MARK: connecting

    private func connect() {
        let endpoint = config.endpoint
        do {
            let socket = try Socket.connectTCP(host: endpoint.host, port: endpoint.port, timeout: config.connectTimeout)
            var tls: TLSSession?
            if let context = owner.tlsContext {
                tls = try TLSSession(context: context, fd: socket.fd, serverName: endpoint.serverName ?? endpoint.host)
            }
            let session = try HTTP2ClientSession(delegate: self, maxConcurrentStreamsHint: 1)
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
            pingSentAt = nil
            lastActivity = Deadline.now()
            if connectFailures > 0 {
                owner.logger.info("APNs connection re-established", metadata: ["endpoint": "\(endpoint)", "connection": "\(owner.id)"])
            }
            connectFailures = 0
            owner.stats.connects.add(1, ordering: .relaxed)
        } catch {
            connectFailures += 1
            let delay = config.backoff(connectFailures)
            nextConnectAttempt = Deadline.after(delay)
            if connectFailures == 1 || connectFailures % 20 == 0 {
                owner.logger.warning("cannot connect to APNs; retrying", metadata: [
                    "endpoint": "\(endpoint)", "error": "\(error)", "failures": "\(connectFailures)", "next_attempt_ms": "\(delay.milliseconds)"])
            }
            // Requests don't wait forever for a connection that won't come.
            if connectFailures >= config.maxConnectFailuresBeforeFailing {
                let waiting = Array(queue[queueHead...])
                queue.removeAll()
                queueHead = 0
                for r in waiting {
                    r.batch.complete(r.index, .failed(APNsTransportError(.connectionFailed, "cannot connect to \(endpoint): \(error)")))
                }
            }
        }
    }

    private func closeConnection() {
        pump?.close()
        pump = nil
        session = nil
    }

    /// The connection broke: requests without an answer go back in the queue (their outcome is
    /// unknown) unless they have had their tries; the next loop reconnects.
    private func connectionLost(_ why: String) {
        owner.logger.warning("APNs connection lost", metadata: ["endpoint": "\(config.endpoint)", "connection": "\(owner.id)", "reason": "\(why)"])
        owner.stats.connectionsLost.add(1, ordering: .relaxed)
        closeConnection()
        var retry: [OutgoingRequest] = []
        for i in slots.indices {
            guard var f = slots[i] else { continue }
            slots[i] = nil
            freeSlots.append(i)
            f.request.attempts += 1
            if f.request.attempts >= config.maxAttempts {
                f.request.batch.complete(f.request.index, .failed(APNsTransportError(.connectionLost, why)))
            } else {
                retry.append(f.request)
            }
        }
        queue.insert(contentsOf: retry, at: queueHead)
        nextConnectAttempt = Deadline.now()
    }

    // MARK: HTTP2ClientDelegate

    func http2(_ session: HTTP2ClientSession, responseHead stream: Int32, context: UInt64, status: Int, headers: HTTP2HeaderList) {
        let slot = Int(context)
        guard slot < slots.count, slots[slot] != nil else { return }
        slots[slot]!.status = status
        slots[slot]!.apnsID = headers.value(for: "apns-id")
        slots[slot]!.uniqueID = headers.value(for: "apns-unique-id")
        slots[slot]!.requestID = headers.value(for: "apns-request-id")
        slots[slot]!.channelID = headers.value(for: "apns-channel-id")
        if let ra = headers.value(for: "retry-after"), let seconds = Int(ra) { slots[slot]!.retryAfter = .seconds(seconds) }
    }

    func http2(_ session: HTTP2ClientSession, responseBody stream: Int32, context: UInt64, bytes: UnsafeRawBufferPointer) {
        let slot = Int(context)
        guard slot < slots.count, slots[slot] != nil, slots[slot]!.body.count < 64 * 1024 else { return }
        slots[slot]!.body.append(contentsOf: bytes)
    }

    func http2(_ session: HTTP2ClientSession, streamClosed stream: Int32, context: UInt64, errorCode: HTTP2ErrorCode) {
        let slot = Int(context)
        guard slot < slots.count, let f = slots[slot] else { return }
        slots[slot] = nil
        freeSlots.append(slot)
        var request = f.request
        if f.timedOut {
            owner.stats.timeouts.add(1, ordering: .relaxed)
            request.batch.complete(request.index, .failed(APNsTransportError(.timeout, "no answer from APNs within \(config.requestTimeout)")))
            return
        }
        if f.status > 0 && errorCode == .noError {
            var response = APNsResponse(status: f.status, apnsID: f.apnsID, uniqueID: f.uniqueID, requestID: f.requestID,
                                        channelID: f.channelID, retryAfter: f.retryAfter)
            if (200..<300).contains(f.status) {
                succeededOnce = true
                response.body = f.body
                owner.stats.delivered.add(1, ordering: .relaxed)
            } else {
                let (reason, ts) = APNsResponse.parseErrorBody(f.body)
                response.reason = reason
                response.timestampMillis = ts
                owner.stats.rejected.add(1, ordering: .relaxed)
            }
            request.batch.complete(request.index, .response(response))
            return
        }
        // No complete answer. Refused (above a GOAWAY's last stream, or never sent): not
        // processed, so send it again without counting a try. Otherwise the outcome is unknown.
        if errorCode != .refusedStream { request.attempts += 1 }
        owner.stats.retried.add(1, ordering: .relaxed)
        if request.attempts >= config.maxAttempts {
            request.batch.complete(request.index, .failed(APNsTransportError(.connectionLost, "stream closed without an answer (\(errorCode))")))
        } else {
            queue.append(request)
        }
    }

    func http2(_ session: HTTP2ClientSession, goAway lastStreamID: Int32, errorCode: HTTP2ErrorCode, debugData: [UInt8]) {
        draining = true
        owner.stats.goAways.add(1, ordering: .relaxed)
        owner.logger.info("APNs sent GOAWAY", metadata: [
            "endpoint": "\(config.endpoint)", "connection": "\(owner.id)", "last_stream": "\(lastStreamID)",
            "reason": "\(APNsResponse.parseErrorBody(debugData).reason?.rawValue ?? String(decoding: debugData.prefix(100), as: UTF8.self))"])
    }

    func http2(_ session: HTTP2ClientSession, pingAcknowledged payload: UInt64) {
        pingSentAt = nil
        lastActivity = Deadline.now()
    }
}
