import Foundation
import NetIO
import RedisClient

/// One reading: Inspector's report and every worker's /metrics, at the same time.
public struct TopReader: Sendable {
    let inspector: Inspector
    let endpoints: [MetricsEndpoint]
    let timeout: Duration

    /// A headless Service's `host:port`: every address its name resolves to, at each reading, is
    /// a worker's ops port (`/metrics` on it).
    let service: (host: String, port: Int)?

    public init(inspector: Inspector, endpoints: [MetricsEndpoint], timeout: Duration, service: (host: String, port: Int)? = nil) {
        self.inspector = inspector
        self.endpoints = endpoints
        self.timeout = timeout
        self.service = service
    }

    /// The endpoints given, and the Service's pods now (a name that doesn't resolve is one
    /// endpoint that fails with the resolver's words).
    func current() async -> [MetricsEndpoint] {
        guard let service else { return endpoints }
        let found: [MetricsEndpoint] = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let addresses = (try? Socket.addresses(of: service.host)) ?? []
                continuation.resume(returning: addresses.isEmpty ? [MetricsEndpoint(host: service.host, port: service.port)]
                                        : addresses.map { MetricsEndpoint(host: $0, port: service.port) })
            }
        }
        return endpoints + found
    }

    public func read() async -> TopReading {
        let at = ContinuousClock.now
        let endpoints = await current()
        async let scrapes = withTaskGroup(of: (Int, WorkerReading).self) { group in
            for (i, endpoint) in endpoints.enumerated() {
                group.addTask {
                    switch await endpoint.fetch(timeout: timeout) {
                    case .success(let text): (i, WorkerReading(endpoint: endpoint.description, samples: PrometheusText.parse(text), error: nil))
                    case .failure(let error): (i, WorkerReading(endpoint: endpoint.description, samples: nil, error: error.description))
                    }
                }
            }
            var out: [(Int, WorkerReading)] = []
            for await result in group { out.append(result) }
            return out.sorted { $0.0 < $1.0 }.map(\.1)
        }
        do {
            let report = try await inspector.report(latest: 0)
            return TopReading(at: at, report: report, redisError: nil, workers: await scrapes)
        } catch let error as RedisError where error.kind == .server {
            return TopReading(at: at, report: nil, redisError: "Redis refused: \(error)", workers: await scrapes)
        } catch {
            return TopReading(at: at, report: nil, redisError: "Redis unreachable: \(error)", workers: await scrapes)
        }
    }
}
