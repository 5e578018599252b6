import Foundation
import OpenSSLKit

/// Drives `TLSSession`s the way an event loop would, for tests.
enum TLSDriver {
    struct Timeout: Error, CustomStringConvertible {
        let description: String
    }

    /// How both ends of an in-process handshake ended.
    struct PairOutcome {
        var clientDone = false
        var serverDone = false
        var clientError: TLSError?
        var serverError: TLSError?
        var bothDone: Bool { clientDone && serverDone }
    }

    /// Steps a client and a server session (over a socketpair, same thread) alternately until
    /// both finished the handshake or failed. After one side fails the other keeps being stepped
    /// for a while so it can see the alert.
    static func handshake(client: TLSSession, server: TLSSession, maxRounds: Int = 500) -> PairOutcome {
        var outcome = PairOutcome()
        for _ in 0..<maxRounds {
            if !outcome.clientDone && outcome.clientError == nil {
                do throws(TLSError) {
                    outcome.clientDone = try client.handshake() == .done
                } catch {
                    outcome.clientError = error
                }
            }
            if !outcome.serverDone && outcome.serverError == nil {
                do throws(TLSError) {
                    outcome.serverDone = try server.handshake() == .done
                } catch {
                    outcome.serverError = error
                }
            }
            let clientFinished = outcome.clientDone || outcome.clientError != nil
            let serverFinished = outcome.serverDone || outcome.serverError != nil
            if clientFinished && serverFinished { break }
        }
        return outcome
    }

    /// Handshake over a real socket, polling for the wanted readiness.
    static func handshake(_ session: TLSSession, fd: Int32, timeout: TimeInterval = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            switch try session.handshake() {
            case .done: return
            case .wantRead: try wait(fd, readable: true, until: deadline, doing: "handshake")
            case .wantWrite: try wait(fd, readable: false, until: deadline, doing: "handshake")
            }
        }
    }

    /// Writes all of `bytes`, polling as needed.
    static func writeAll(_ session: TLSSession, _ bytes: [UInt8], fd: Int32, timeout: TimeInterval = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        var offset = 0
        while offset < bytes.count {
            let result = try bytes.withUnsafeBytes { raw in
                try session.write(UnsafeRawBufferPointer(rebasing: raw[offset...]))
            }
            switch result {
            case .bytes(let count): offset += count
            case .wantRead: try wait(fd, readable: true, until: deadline, doing: "write")
            case .wantWrite: try wait(fd, readable: false, until: deadline, doing: "write")
            case .closed: throw Timeout(description: "peer closed while writing")
            }
        }
    }

    /// Reads until `enough(received)` holds or the peer closes; returns what arrived and whether
    /// the peer closed.
    static func read(
        _ session: TLSSession, fd: Int32, timeout: TimeInterval = 10,
        until enough: ([UInt8]) -> Bool
    ) throws -> (bytes: [UInt8], closed: Bool) {
        let deadline = Date().addingTimeInterval(timeout)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while !enough(received) {
            let result = try buffer.withUnsafeMutableBytes { try session.read(into: $0) }
            switch result {
            case .bytes(let count): received += buffer.prefix(count)
            case .wantRead: try wait(fd, readable: true, until: deadline, doing: "read")
            case .wantWrite: try wait(fd, readable: false, until: deadline, doing: "read")
            case .closed: return (received, true)
            }
        }
        return (received, false)
    }

    private static func wait(_ fd: Int32, readable: Bool, until deadline: Date, doing what: String) throws {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0, SSLTestSockets.wait(fd, readable: readable, timeout: remaining) else {
            throw Timeout(description: "\(what) timed out waiting for the socket to become \(readable ? "readable" : "writable")")
        }
    }

    /// Deterministic pseudo-random bytes (xorshift), so corruption or reordering is detectable.
    static func pattern(count: Int, seed: UInt64) -> [UInt8] {
        var state = seed | 1
        var bytes = [UInt8](repeating: 0, count: count)
        for index in 0..<count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            bytes[index] = UInt8(truncatingIfNeeded: state)
        }
        return bytes
    }
}
