import APNsCore
import Foundation
import HTTP2Kit
import HTTP2Transport
import OpenSSLKit

/// The sandbox on the network: an HTTP/2 TLS server (nghttp2 + OpenSSL) whose every request is
/// answered by a `SandboxState`.
public final class SandboxServer: Sendable {
    public let state: SandboxState
    private let server: H2Server

    public var port: Int { server.port }

    /// `streamsBeforeAuthentication` must match the state's configuration: a new connection
    /// starts with that SETTINGS_MAX_CONCURRENT_STREAMS, raised once a provider token is valid.
    public init(state: SandboxState, host: String, port: Int, tls: TLSContext, threads: Int = 2, streamsBeforeAuthentication: Int = 1) throws {
        self.state = state
        self.server = try H2Server(host: host, port: port, tls: tls, threads: threads,
                                   maxConcurrentStreams: streamsBeforeAuthentication,
                                   handler: Adapter(state: state))
    }

    public func stop() { server.stop() }

    struct Adapter: H2RequestHandler {
        let state: SandboxState

        func handle(_ request: HTTP2Request, connectionID: UInt64, openStreams: Int, requestNumber: Int) -> H2Response {
            // The receipt time: the whole request is here (µs, the wall clock, for latency measured
            // from another process on the same machine).
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            let r = state.handle(SandboxRequest(headers: request.headers, body: request.body, connectionID: connectionID),
                                 nowMicros: Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000)
            let fault: H2ConnectionFault? = switch r.connectionFault {
            case .goAway(let debug)?: .goAway(debugData: debug)
            case .reset?: .reset
            case nil: nil
            }
            return H2Response(status: r.status, headerList: r.headers, body: r.body, delay: r.delay,
                              connectionFault: fault, maxConcurrentStreams: r.maxConcurrentStreams)
        }

        func connectionClosed(connectionID: UInt64) { state.connectionClosed(connectionID) }
    }
}
