#if canImport(Glibc)
import Glibc
#endif
import ActivityCastCommandSupport
import Foundation
import HiredisCodec
import NetIO
import Synchronization

/// The broadcast bench's `XADD`s, paced by a thread of its own over a socket of its own.
///
/// Paced from Swift tasks (a `Task.sleep` per event, a child task per `XADD`, the reply through
/// the Redis client's I/O thread), the publisher cost 28–40 % of a core at 2,000 events/s on a
/// 2-core VM, nearly all of it threads waking each other — a third of a core taken from the
/// workers, Redis and the sandbox it measures. Here one thread sleeps until each event's slot
/// (`clock_nanosleep` on the monotonic clock), stamps it, writes it, and reads whatever replies
/// have come meanwhile without waiting for them: about one sleep, one write and one read per
/// event. The events, their slots and the stamps are the same as before.
enum PacedXADD {
    struct Result {
        var micros: [Int64]
        var lateness: [Int64]
    }

    /// Sends `count` commands to `host:port`, command i due at `start` + i/`rate` (monotonic, a
    /// late one at once), `command(i, issuedMicros)` building it; every reply must be a stream
    /// entry id. Runs on a thread of its own; returns when every reply is in.
    static func run(host: String, port: Int, count: Int, rate: Double, start: ContinuousClock.Instant,
                    command: @escaping @Sendable (Int, Int64) -> [[UInt8]]) async throws -> Result {
        let startNanos = Deadline.after(start - .now).nanoseconds
        return try await withCheckedThrowingContinuation { (done: CheckedContinuation<Result, Error>) in
            let thread = Thread {
                done.resume(with: Swift.Result {
                    let socket = try Socket.connectTCP(host: host, port: port, timeout: .seconds(3))
                    defer { socket.close() }
                    return try send(socket, count: count, rate: rate, startNanos: startNanos, command: command)
                })
            }
            thread.name = "bench-xadd"
            thread.start()
        }
    }

    private static func send(_ socket: Socket, count: Int, rate: Double, startNanos: UInt64,
                             command: (Int, Int64) -> [[UInt8]]) throws -> Result {
        var micros = [Int64](repeating: 0, count: count)
        var lateness = [Int64](repeating: 0, count: count)
        let decoder = RESPDecoder()
        var replies = 0
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let deadline = Deadline.after(.seconds(Int64(Double(count) / rate) + 30))
        /// Reads what is there (`wait`: until every reply is in).
        func drain(wait: Bool) throws {
            while replies < count {
                let io = try buffer.withUnsafeMutableBytes { try socket.read(into: $0) }
                switch io {
                case .bytes(let n):
                    try buffer.withUnsafeBytes { try decoder.feed(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
                    while let reply = try decoder.next() {
                        guard reply.string != nil else { throw CommandFailure("XADD: \(reply)") }
                        replies += 1
                    }
                case .wouldBlock:
                    guard wait else { return }
                    guard try socket.wait(forWriting: false, until: deadline) else {
                        throw CommandFailure("XADD: \(count - replies) of \(count) replies not in by the deadline")
                    }
                case .closed:
                    throw CommandFailure("XADD: Redis closed the connection after \(replies) of \(count) replies")
                }
            }
        }
        for i in 0..<count {
            let due = startNanos &+ UInt64(slot(i, rate: rate))
            sleep(until: due)
            lateness[i] = (Int64(bitPattern: Deadline.now().nanoseconds) - Int64(bitPattern: due)) / 1000
            let issued = wallMicros()
            micros[i] = issued
            out.removeAll(keepingCapacity: true)
            RESPEncoder.append(command(i, issued), to: &out)
            var at = 0
            while at < out.count {
                switch try out.withUnsafeBytes({ try socket.write(UnsafeRawBufferPointer(rebasing: $0[at...])) }) {
                case .bytes(let n): at += n
                case .wouldBlock:
                    // Redis isn't reading: take its replies meanwhile, so neither side waits on the other.
                    try drain(wait: false)
                    guard try socket.wait(forWriting: true, until: deadline) else {
                        throw CommandFailure("XADD: Redis took no more commands by the deadline (\(i) of \(count) sent)")
                    }
                case .closed: throw CommandFailure("XADD: Redis closed the connection")
                }
            }
            try drain(wait: false)
        }
        try drain(wait: true)
        return Result(micros: micros, lateness: lateness)
    }

    /// Nanoseconds from the start to event `i`'s slot.
    static func slot(_ i: Int, rate: Double) -> Int64 { Int64((Double(i) * 1e9 / rate).rounded()) }

    /// Sleeps until `nanoseconds` on the monotonic clock (`Deadline`'s).
    private static func sleep(until nanoseconds: UInt64) {
        var ts = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
    }
}
