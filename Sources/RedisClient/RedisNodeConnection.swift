import Foundation
import NetIO
import OpenSSLKit
import Synchronization

/// One connection to one Redis node, with its own I/O thread. `RedisConnection` is what callers
/// use: on a single Redis it is one of these, on a cluster one of these per primary.
///
/// Callers `await` batches of commands; the thread takes everything queued, writes it in one go
/// (pipelining across callers too), reads the replies and resumes each caller once. So there is
/// one thread hop per batch, never per command, and no blocking call ever runs on Swift's
/// cooperative pool. The connection opens lazily and reopens after a failure with capped
/// exponential back-off and jitter; a batch that was in flight when it broke fails with
/// `connectionLost` (its commands may or may not have run), and the caller decides whether to retry.
/// A batch that fails with `connectionFailed` or `closed` was never written.
///
/// A blocking command (`XREADGROUP … BLOCK`) holds the connection until it returns: give such
/// readers a connection of their own.
public final class RedisNodeConnection: Sendable {
    public let configuration: RedisConfiguration
    private let queue: JobQueue
    private let counters: Counters

    public init(configuration: RedisConfiguration) {
        self.configuration = configuration
        self.queue = JobQueue()
        self.counters = Counters()
        let io = IOThreadState(configuration: configuration, queue: queue, counters: counters)
        let thread = Thread { nameCurrentThread("redis-io"); io.run() }
        thread.name = "redis-io"
        thread.start()
    }

    deinit { queue.close() }

    public var stats: RedisConnection.Stats {
        RedisConnection.Stats(roundTrips: counters.roundTrips.load(ordering: .relaxed),
              commands: counters.commands.load(ordering: .relaxed),
              connects: counters.connects.load(ordering: .relaxed), failures: counters.failures.load(ordering: .relaxed))
    }

    /// Sends `commands` as one pipeline and returns one reply per command, error replies
    /// included as `.error` values. `EVALSHA` commands that meet `NOSCRIPT` are resent as `EVAL`.
    /// `blocking` extends the reply timeout for a blocking command's BLOCK time. `limits` caps
    /// what nested values of these replies may cost (bigger ones arrive as `.oversized`).
    public func pipeline(_ commands: [RedisCommand], blocking: Duration = .zero, limits: RESPDecoder.Limits? = nil) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        var bytes: [UInt8] = []
        for command in commands {
            command.checkKeys()
            RESPEncoder.append(command.arguments, to: &bytes)
        }
        var replies = try await submit(bytes: bytes, count: commands.count, extra: blocking, limits: limits)

        // A flushed or restarted Redis forgets scripts: send the source for those that missed.
        let missed = replies.indices.filter { commands[$0].evalFallback != nil && replies[$0].errorMessage?.hasPrefix("NOSCRIPT") == true }
        if !missed.isEmpty {
            var retry: [UInt8] = []
            for i in missed { RESPEncoder.append(commands[i].evalFallback!, to: &retry) }
            let second = try await submit(bytes: retry, count: missed.count, extra: .zero, limits: limits)
            for (i, reply) in zip(missed, second) { replies[i] = reply }
        }
        return replies
    }

    /// Sends one command; an error reply throws `RedisError(.server)`.
    @discardableResult
    public func send(_ command: RedisCommand, blocking: Duration = .zero) async throws -> RESPValue {
        try await pipeline([command], blocking: blocking)[0].orThrow(command.name)
    }

    /// Convenience: `send(RedisCommand(name, args...))`.
    @discardableResult
    public func command(_ name: String, _ args: any RedisArgument...) async throws -> RESPValue {
        try await send(RedisCommand(name, args))
    }

    /// Why Redis refused this connection's `CLIENT SETNAME` (the connection works without the
    /// name), or nil.
    public var clientNameRefusal: String? { counters.clientNameRefusal.withLock { $0 } }

    /// Stops the I/O thread; queued and later commands fail with `closed`.
    public func close() { queue.close() }

    private func submit(bytes: [UInt8], count: Int, extra: Duration, limits: RESPDecoder.Limits?) async throws -> [RESPValue] {
        try await withCheckedThrowingContinuation { continuation in
            queue.push(Job(bytes: bytes, replies: count, extra: extra, limits: limits, continuation: continuation))
        }
    }
}

struct Job: Sendable {
    let bytes: [UInt8]
    let replies: Int
    let extra: Duration
    let limits: RESPDecoder.Limits?
    let continuation: CheckedContinuation<[RESPValue], Error>
}

final class Counters: Sendable {
    let clientNameRefusal = Mutex<String?>(nil)
    let roundTrips = Atomic<Int>(0)
    let commands = Atomic<Int>(0)
    let connects = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
}

/// Jobs waiting for the I/O thread, guarded by a condition variable the thread sleeps on.
final class JobQueue: @unchecked Sendable {
    // All fields are read and written only with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var closed = false

    func push(_ job: Job) {
        condition.lock()
        if closed {
            condition.unlock()
            job.continuation.resume(throwing: RedisError(.closed, "the Redis connection was closed"))
            return
        }
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// Everything queued, waiting for at least one job; nil once closed and drained.
    func takeAll() -> [Job]? {
        condition.lock()
        defer { condition.unlock() }
        while jobs.isEmpty && !closed { condition.wait() }
        if closed {
            let rest = jobs
            jobs = []
            for job in rest { job.continuation.resume(throwing: RedisError(.closed, "the Redis connection was closed")) }
            return nil
        }
        let all = jobs
        jobs = []
        return all
    }

    /// Sleeps until `deadline` unless closed first; returns false if closed.
    func sleep(until deadline: Deadline) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !closed && !deadline.hasPassed {
            let seconds = Double(deadline.nanoseconds &- Deadline.now().nanoseconds) / 1e9
            _ = condition.wait(until: Date(timeIntervalSinceNow: max(0, seconds)))
        }
        return !closed
    }
}

/// The state only the I/O thread touches: the socket, the TLS session and the reply parser.
/// `@unchecked Sendable` because it crosses into the thread once and is confined there after.
final class IOThreadState: @unchecked Sendable {
    let configuration: RedisConfiguration
    let queue: JobQueue
    let counters: Counters
    private var stream: ByteStream?
    private var decoder = RESPDecoder()
    private var failures = 0
    private var nextAttempt = Deadline(nanoseconds: 0)
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var tlsContext: TLSContext?

    init(configuration: RedisConfiguration, queue: JobQueue, counters: Counters) {
        self.configuration = configuration
        self.queue = queue
        self.counters = counters
    }

    func run() {
        while let jobs = queue.takeAll() {
            execute(jobs)
        }
        stream?.close()
        stream = nil
    }

    private func execute(_ jobs: [Job]) {
        let stream: ByteStream
        do {
            stream = try connectedStream()
        } catch {
            counters.failures.add(1, ordering: .relaxed)
            fail(jobs, error)
            return
        }
        var bytes: [UInt8]
        if jobs.count == 1 {
            bytes = jobs[0].bytes
        } else {
            bytes = []
            bytes.reserveCapacity(jobs.reduce(0) { $0 + $1.bytes.count })
            for job in jobs { bytes.append(contentsOf: job.bytes) }
        }
        let extra = jobs.map(\.extra).max() ?? .zero
        let deadline = Deadline.after(configuration.commandTimeout + extra)
        counters.roundTrips.add(1, ordering: .relaxed)
        counters.commands.add(jobs.reduce(0) { $0 + $1.replies }, ordering: .relaxed)
        var index = 0
        do {
            try bytes.withUnsafeBytes { try stream.writeAll($0, deadline: deadline) }
            var replies: [RESPValue] = []
            replies.reserveCapacity(jobs[0].replies)
            decoder.limits = jobs[0].limits
            while index < jobs.count {
                if let reply = try decoder.next() {
                    replies.append(reply)
                    if replies.count == jobs[index].replies {
                        jobs[index].continuation.resume(returning: replies)
                        replies = []
                        index += 1
                        if index < jobs.count {
                            replies.reserveCapacity(jobs[index].replies)
                            decoder.limits = jobs[index].limits
                        }
                    }
                    continue
                }
                let n = try readBuffer.withUnsafeMutableBytes { try stream.readSome(into: $0, deadline: deadline) }
                try readBuffer.withUnsafeBytes { try decoder.feed(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
            }
        } catch {
            // The replies can no longer be matched to commands: drop the connection.
            disconnect()
            let mapped: RedisError
            switch error {
            case StreamError.timedOut(let what): mapped = RedisError(.timeout, "Redis \(configuration.url.host):\(configuration.url.port) timed out \(what)")
            case let e as RESPDecoder.ProtocolError: mapped = RedisError(.connectionLost, e.description)
            default: mapped = RedisError(.connectionLost, "lost the connection to Redis \(configuration.url.host):\(configuration.url.port): \(error)")
            }
            // Jobs before `index` were answered and resumed already; only the rest fail.
            counters.failures.add(1, ordering: .relaxed)
            fail(jobs[index...], mapped)
        }
    }

    private func fail(_ jobs: some Sequence<Job>, _ error: Error) {
        for job in jobs { job.continuation.resume(throwing: error) }
    }

    private func disconnect() {
        stream?.close()
        stream = nil
        decoder = RESPDecoder()
    }

    /// The open stream, reconnecting (after the back-off delay) if there is none or the server
    /// hung up while it was idle.
    private func connectedStream() throws -> ByteStream {
        if let stream, !peerHungUp() { return stream }
        disconnect()
        if failures > 0 {
            guard queue.sleep(until: nextAttempt) else { throw RedisError(.closed, "the Redis connection was closed") }
        }
        do {
            let stream = try open()
            self.stream = stream
            failures = 0
            counters.connects.add(1, ordering: .relaxed)
            return stream
        } catch {
            failures += 1
            let delay = configuration.backoff.delay(afterFailures: failures, random: Double.random(in: 0...1))
            nextAttempt = Deadline.after(delay)
            if let e = error as? RedisError { throw e }
            throw RedisError(.connectionFailed, "cannot connect to Redis \(configuration.url): \(error)")
        }
    }

    /// An idle connection whose server went away (restart, `timeout` config) reads as EOF: find
    /// out before writing a batch into it.
    private func peerHungUp() -> Bool {
        guard let plain = stream as? PlainStream else { return tlsHungUp() }
        var p = pollfd(fd: plain.socket.fd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) > 0  // RESP never sends unsolicited data on a request connection
    }

    private func tlsHungUp() -> Bool {
        guard let tls = stream as? TLSStream else { return false }
        var p = pollfd(fd: tls.socket.fd, events: Int16(POLLIN) | pollRDHUP, revents: 0)
        // TLS 1.3 may deliver session tickets after the handshake; only a hang-up counts.
        return poll(&p, 1, 0) > 0 && (p.revents & (Int16(POLLHUP | POLLERR) | pollRDHUP)) != 0
    }

    private func open() throws -> ByteStream {
        let url = configuration.url
        let deadline = Deadline.after(configuration.connectTimeout)
        let socket = try Socket.connectTCP(host: url.host, port: url.port, timeout: configuration.connectTimeout)
        let stream: ByteStream
        if url.tls {
            if tlsContext == nil {
                do {
                    tlsContext = try TLSContext.client(verifyPeer: url.verifyPeer, caFile: url.caFile, alpn: [])
                } catch {
                    throw RedisError(.connectionFailed, "TLS setup for \(url) failed: \(error)")
                }
            }
            stream = try TLSStream(socket: socket, context: tlsContext!, serverName: url.serverName ?? url.host, deadline: deadline)
        } else {
            stream = PlainStream(socket: socket)
        }
        // AUTH, SELECT and CLIENT SETNAME in one round trip.
        var hello: [(RedisCommand, RedisError.Kind)] = []
        if let password = url.password {
            if let user = url.username { hello.append((RedisCommand("AUTH", user, password), .authentication)) }
            else { hello.append((RedisCommand("AUTH", password), .authentication)) }
        }
        if url.database != 0 { hello.append((RedisCommand("SELECT", url.database), .authentication)) }
        let named = configuration.clientName != nil
        if let name = configuration.clientName { hello.append((RedisCommand("CLIENT", "SETNAME", name), .connectionFailed)) }
        if hello.isEmpty { return stream }
        var bytes: [UInt8] = []
        for (command, _) in hello { RESPEncoder.append(command.arguments, to: &bytes) }
        try bytes.withUnsafeBytes { try stream.writeAll($0, deadline: deadline) }
        var replies: [RESPValue] = []
        while replies.count < hello.count {
            if let reply = try decoder.next() { replies.append(reply); continue }
            let n = try readBuffer.withUnsafeMutableBytes { try stream.readSome(into: $0, deadline: deadline) }
            try readBuffer.withUnsafeBytes { try decoder.feed(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
        }
        for (index, ((command, kind), reply)) in zip(hello, replies).enumerated() {
            if named, index == hello.count - 1, let message = reply.errorMessage {
                // The name only labels the connection in CLIENT LIST: an ACL user without
                // `client|setname` still works, and the owner is told why the name is missing.
                counters.clientNameRefusal.withLock { $0 = String(message.prefix(300)) }
                continue
            }
            if let message = reply.errorMessage {
                stream.close()
                decoder = RESPDecoder()
                // Never echo arguments: AUTH carries the password.
                throw RedisError(kind, "Redis \(url) refused \(command.name): \(message)")
            }
        }
        return stream
    }
}

/// Linux's POLLRDHUP (peer closed its writing half); Glibc's module doesn't export the macro.
private let pollRDHUP: Int16 = 0x2000
