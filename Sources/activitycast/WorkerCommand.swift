import ActivityCastRoutes
import ActivityCastWorker
import ArgumentParser
import Foundation
import Logging

struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Consume the feed and registration streams until SIGTERM or SIGINT.")

    @OptionGroup var common: CommonOptions

    @Option(help: "Consumer name (default: <hostname>-<pid>). Also ACTIVITYCAST_WORKER_CONSUMER.")
    var consumer: String?

    func run() async throws {
        var extra: [String: String] = [:]
        if let consumer { extra["worker.consumer"] = consumer }
        let settings = try common.settings(extra: extra)
        LineLogHandler.bootstrap(level: settings.logLevel, format: settings.logFormat)
        let logger = Logger(label: "worker")
        // Route files are read and checked at start, so that a broken one stops the worker with
        // its file, line and reason before any entry is read.
        let routes: RouteSet
        do {
            routes = try settings.loadRoutes()
        } catch {
            logger.critical("cannot start: \(error)")
            throw CommandFailure("\(error)")
        }
        let worker = Worker(settings: settings, logger: logger, routes: routes)

        // Signals arrive on a dispatch queue, never interrupting I/O threads: the first asks the
        // worker to drain, a second one ends the process at once.
        let signals = SignalWatcher(signals: [SIGTERM, SIGINT]) { signal, count in
            if count == 1 {
                logger.info("signal received: draining", metadata: ["signal": "\(signal)"])
                worker.requestStop()
            } else {
                logger.warning("second signal: exiting without draining", metadata: ["signal": "\(signal)"])
                Foundation.exit(1)
            }
        }
        defer { signals.cancel() }
        // The ops endpoints (ops.listen) serve from before the first Redis call until the drain
        // ends: readiness fails while Redis is not reachable at start and while draining.
        var ops: OpsService?
        if let listen = settings.opsListen {
            let service = OpsService(worker: worker, listen: listen, logger: logger)
            do {
                try service.start()
            } catch {
                let message = "cannot serve the ops endpoints on \(listen.description) (ops.listen): \(error)"
                logger.critical("cannot start: \(message)")
                throw CommandFailure(message)
            }
            ops = service
        }
        defer { ops?.stop() }
        do {
            _ = try await worker.run()
        } catch let error as Worker.StartError {
            logger.critical("cannot start: \(error.description)")
            throw CommandFailure(error.description)
        }
    }
}

/// Turns POSIX signals into callbacks on a dispatch queue.
final class SignalWatcher: @unchecked Sendable {
    // Sources are created once and only cancelled afterwards.
    private var sources: [DispatchSourceSignal] = []

    init(signals: [Int32], handler: @escaping @Sendable (Int32, Int) -> Void) {
        let queue = DispatchQueue(label: "signals")
        let counter = SignalCounter()
        for sig in signals {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler { handler(sig, counter.increment()) }
            source.resume()
            sources.append(source)
        }
    }

    func cancel() { sources.forEach { $0.cancel() } }
}

/// Counts signals; only touched on the serial signal queue.
final class SignalCounter: @unchecked Sendable {
    private var count = 0
    func increment() -> Int { count += 1; return count }
}
