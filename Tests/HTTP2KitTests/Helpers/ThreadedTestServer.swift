import Foundation
import HTTP2Kit
import OpenSSLKit
#if canImport(Glibc)
import Glibc
#endif

/// A TLS HTTP/2 server on 127.0.0.1 at a kernel-chosen port, built on `HTTP2ServerSession`: one
/// accept thread and one thread per connection, each answering with `apnsLikeAnswer`. For the
/// interop tests (h2load, nghttp) and the benchmarks.
final class ThreadedTestServer: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let context: TLSContext
    private let maxConcurrentStreams: Int
    private let stopFlag = StopFlag()
    /// Requests answered, over all connections (added when a connection ends).
    let requests = SharedCounter()
    let connections = SharedCounter()
    /// Threads still running (accept + connections).
    private let running = SharedCounter()
    /// Failures seen by connection threads.
    let failures = SharedCounter()
    /// CPU time of the connection threads, in microseconds (added when a connection ends).
    let cpuMicroseconds = SharedCounter()

    init(context: TLSContext, maxConcurrentStreams: Int = 1000) throws {
        self.context = context
        self.maxConcurrentStreams = maxConcurrentStreams
        (listener, port) = try TestSockets.listenLoopback()
        running.add()
        Thread { [self] in acceptLoop() }.start()
    }

    /// Stops accepting, ends every connection, and waits (up to 10 s) for the threads to exit.
    /// Idempotent.
    func shutdown() {
        guard !stopFlag.isStopped else { return }
        stopFlag.stop()
        let deadline = Date().addingTimeInterval(10)
        while running.count > 0 && Date() < deadline { usleep(10_000) }
        TestSockets.close(listener)
    }

    private func acceptLoop() {
        defer { running.add(-1) }
        while !stopFlag.isStopped {
            TestSockets.poll([listener], writable: [false], timeoutMillis: 50)
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            do { try TestSockets.setNonBlocking(fd) } catch { TestSockets.close(fd); continue }
            var on: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
            connections.add()
            running.add()
            Thread { [self] in
                defer { running.add(-1) }
                serve(fd)
            }.start()
        }
    }

    private func serve(_ fd: Int32) {
        let cpuStart = threadCPUSeconds()
        defer {
            cpuMicroseconds.add(Int((threadCPUSeconds() - cpuStart) * 1e6))
            TestSockets.close(fd)
        }
        let recorder = ServerRecorder()
        recorder.keepRequests = false
        recorder.answer = apnsLikeAnswer
        do {
            let tls = try TLSSession(serverContext: context, fd: fd)
            try TLSPump.handshake(tls, fd: fd)
            let session = try HTTP2ServerSession(delegate: recorder, maxConcurrentStreams: maxConcurrentStreams)
            let pump = TLSPump(fd: fd, tls: tls, session: session)
            while !stopFlag.isStopped && pump.isActive {
                if try !pump.step() {
                    TestSockets.poll([fd], writable: [pump.hasPendingOutput], timeoutMillis: 50)
                }
            }
            tls.shutdown()
        } catch let error as TLSError where error.code == .unexpectedEOF {
            // Clients such as h2load may close without close_notify.
        } catch {
            failures.note("\(error)")
        }
        for error in recorder.answerErrors { failures.note("answer: \(error)") }
        requests.add(recorder.requestCount)
    }
}
