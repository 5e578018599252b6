import Foundation
import RedisClient

/// One reading: Inspector's report and every worker's /metrics, at the same time.
public struct TopReader: Sendable {
    let inspector: Inspector
    let endpoints: [MetricsEndpoint]
    let timeout: Duration

    public init(inspector: Inspector, endpoints: [MetricsEndpoint], timeout: Duration) {
        self.inspector = inspector
        self.endpoints = endpoints
        self.timeout = timeout
    }

    public func read() async -> TopReading {
        let at = ContinuousClock.now
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
