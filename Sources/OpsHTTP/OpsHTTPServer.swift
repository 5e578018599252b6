import Foundation
import NetIO
import Synchronization

/// A minimal HTTP/1.1 server for a few fixed GET routes (`/metrics`, `/healthz`, `/readyz`).
///
/// One thread of its own runs a poll loop over the listening socket and every open connection, so
/// neither a slow client nor a slow scrape can hold up the worker, and one slow client can't hold
/// up another (a Kubernetes probe included). Each connection sends one request head (at most
/// `maxHeadBytes`, within `readTimeout` of being accepted), gets one response with
/// `Content-Length` and `Connection: close`, and is closed. Unknown paths get 404, other methods
/// on a known path 405 (`Allow: GET`), a malformed head 400, a head too large 431; a connection
/// that doesn't finish its head in time is closed. At most `maxConnections` are open at once: one
/// more closes the oldest that is still waiting for its head, so idle or slow clients can't keep
/// a probe from being answered at once.
///
/// Route handlers run on the server's thread: they must answer at once from state kept up to date
/// elsewhere, never wait for I/O.
public final class OpsHTTPServer: Sendable {
    public typealias Handler = @Sendable () -> HTTPResponse

    public struct Limits: Sendable {
        public var maxHeadBytes = 8192
        public var readTimeout: Duration = .seconds(2)
        public var writeTimeout: Duration = .seconds(5)
        public var maxConnections = 64
        public init() {}
    }

    public let host: String
    private let routes: [String: Handler]
    private let limits: Limits
    private let stopping = Atomic<Bool>(false)
    private let boundPort = Atomic<Int>(0)
    private let finished = DispatchSemaphore(value: 0)
    /// Requests answered, by status class, for tests and the server's own metrics.
    public let requests = Atomic<Int>(0)
    /// Connections closed before their head came, to make room for a newer one.
    public let evicted = Atomic<Int>(0)

    public init(host: String, routes: [String: Handler], limits: Limits = Limits()) {
        self.host = host
        self.routes = routes
        self.limits = limits
    }

    /// The port it listens on, once `start` returned (useful with port 0).
    public var port: Int { boundPort.load(ordering: .relaxed) }

    /// Binds `host:port` and starts serving on a thread of its own. Throws when it can't listen
    /// (the address is taken, the host is not local): the caller decides whether that is fatal.
    public func start(port: Int) throws {
        let ready = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<Int, StreamError>?>(nil)
        let host = self.host
        let thread = Thread { [self] in
            nameCurrentThread("ops-http")
            let listener: Socket
            do {
                listener = try Socket.listenTCP(host: host, port: port)
            } catch {
                outcome.withLock { $0 = .failure(error as? StreamError ?? .system(SystemError("listen", errno: 0, context: "\(error)"))) }
                ready.signal()
                finished.signal()
                return
            }
            outcome.withLock { $0 = .success(listener.localPort) }
            ready.signal()
            serve(listener)
            listener.close()
            finished.signal()
        }
        thread.name = "ops-http"
        thread.start()
        ready.wait()
        switch outcome.withLock({ $0 }) {
        case .success(let p)?: boundPort.store(p, ordering: .relaxed)
        case .failure(let e)?: throw e
        case nil: throw StreamError.system(SystemError("listen", errno: 0, context: "the ops server did not start"))
        }
    }

    /// Stops accepting, closes every connection and waits (up to a second) for the thread to end.
    public func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        _ = finished.wait(timeout: .now() + 1)
    }

    // MARK: The loop (server thread only)

    private final class Connection {
        let socket: Socket
        var input: [UInt8] = []
        var output: [UInt8] = []
        var written = 0
        var writing = false
        var deadline: Deadline
        init(socket: Socket, deadline: Deadline) { self.socket = socket; self.deadline = deadline }
    }

    private func serve(_ listener: Socket) {
        var connections: [Connection] = []
        var scratch = [UInt8](repeating: 0, count: 4096)
        while !stopping.load(ordering: .relaxed) {
            // At the cap a new connection still comes in if an open one can make room: the oldest
            // still waiting for its head goes (idle or slow clients never keep a probe waiting).
            let accepting = connections.count < limits.maxConnections || connections.contains { !$0.writing }
            var interests = connections.map { PollInterest(fd: $0.socket.fd, writing: $0.writing) }
            if accepting { interests.append(PollInterest(fd: listener.fd, writing: false)) }
            // Wake at least every 200 ms to notice `stop()`, and at the nearest connection deadline.
            var wake = Deadline.after(.milliseconds(200))
            for c in connections where c.deadline < wake { wake = c.deadline }
            guard let ready = try? pollSockets(interests, until: wake) else {
                Thread.sleep(forTimeInterval: 0.05)
                continue
            }
            var open: [Connection] = []
            for (index, c) in connections.enumerated() {
                if ready[index], !step(c, scratch: &scratch) { continue }
                if c.deadline.hasPassed { continue }  // too slow to send its head or take its answer
                open.append(c)
            }
            connections = open
            if accepting, ready.last == true {
                // At most a cap's worth per pass: a flood can't keep the loop from the others, nor
                // evict a probe with the connections queued behind it.
                var accepted = 0
                while accepted < limits.maxConnections, let socket = try? listener.accept() {
                    accepted += 1
                    if connections.count >= limits.maxConnections {
                        guard let oldest = connections.firstIndex(where: { !$0.writing }) else {
                            socket.close()
                            break
                        }
                        connections.remove(at: oldest).socket.close()
                        evicted.add(1, ordering: .relaxed)
                    }
                    connections.append(Connection(socket: socket, deadline: .after(limits.readTimeout)))
                }
            }
        }
        for c in connections { c.socket.close() }
    }

    /// Reads or writes what the connection is ready for; false when it is done with (answered or
    /// gone), so the caller drops it (closing its socket).
    private func step(_ c: Connection, scratch: inout [UInt8]) -> Bool {
        if !c.writing {
            let io = scratch.withUnsafeMutableBytes { try? c.socket.read(into: $0) }
            switch io {
            case .bytes(let n)?:
                let before = c.input.count
                c.input += scratch[0..<n]
                if let end = HTTPRequestHead.endOfHead(in: c.input, from: before) {
                    respond(c, answer(HTTPRequestHead.parse(c.input[0..<end])))
                } else if c.input.count > limits.maxHeadBytes {
                    respond(c, HTTPResponse(status: 431, text: "request head too large\n"))
                } else {
                    return true
                }
            case .wouldBlock?:
                return true
            case .closed?, nil:
                return false
            }
        }
        while c.written < c.output.count {
            let io = c.output[c.written...].withUnsafeBytes { try? c.socket.write($0) }
            switch io {
            case .bytes(let n)?: c.written += n
            case .wouldBlock?: return true
            case .closed?, nil: return false
            }
        }
        return false
    }

    private func respond(_ c: Connection, _ response: HTTPResponse) {
        c.output = response.serialized
        c.writing = true
        c.deadline = .after(limits.writeTimeout)
        requests.add(1, ordering: .relaxed)
    }

    private func answer(_ head: HTTPRequestHead?) -> HTTPResponse {
        guard let head else { return HTTPResponse(status: 400, text: "bad request\n") }
        guard let handler = routes[head.path] else { return HTTPResponse(status: 404, text: "not found\n") }
        guard head.method == "GET" else {
            return HTTPResponse(status: 405, body: Array("method not allowed\n".utf8), headers: [("Allow", "GET")])
        }
        return handler()
    }
}
