import ActivityCastCommandSupport
import ActivityCastRoutes
import ActivityCastWorker
import ArgumentParser
import Foundation
import Logging
import Synchronization

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

        // The first SIGTERM/SIGINT asks the worker to drain (on a thread of its own); a second one
        // ends the process at once, from the signal handler (`StopSignals`).
        StopSignals.install { signal in
            worker.requestStop()
            logger.info("signal received: draining", metadata: ["signal": "\(signal)"])
        }
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

/// A worker's SIGTERM and SIGINT, handled by a plain signal handler installed for the life of the
/// process: the first wakes a thread that asks the worker to drain; the second calls
/// `_exit(128 + signal)` in the handler itself (143 for SIGTERM, 130 for SIGINT, the status a
/// shell reports for a process that signal killed), so nothing else runs first: no log line, no
/// queue, no lock, no atexit handler. Entries in flight stay pending for the other workers to
/// claim after the visibility timeout.
///
/// Why not a dispatch source, as before: both signals went through one serial dispatch queue and
/// the logger. The second waited for the first's log line, and for its own, whenever stderr was
/// slow to take them (a terminal, a log shipper): with stderr read at 10 KB/s during a drain,
/// 0.06–1.2 s from the second SIGTERM to the exit (now 3–11 ms); with a stderr nobody read,
/// never (the first signal's log line blocked the queue). Arming a
/// handler only once the first signal's callback ran was not enough either: under that load
/// libdispatch sometimes delivered both signals to the callback as one.
enum StopSignals {
    /// Signals received so far, and the first one's number.
    private static let received = Atomic<Int>(0)
    private static let first = Atomic<Int32>(0)
    /// The pipe the handler writes to (written end) and the drain thread reads (read end).
    private static let wakeWrite = Atomic<Int32>(-1)

    /// Installs the handler for SIGTERM and SIGINT; `onFirst` runs on a thread of its own after
    /// the first signal.
    static func install(onFirst: @escaping @Sendable (Int32) -> Void) {
        _ = received.load(ordering: .relaxed)
        _ = first.load(ordering: .relaxed)
        // The handler writes once: a second signal exits in the handler itself.
        wakeWrite.store(SignalPipe.open(thread: "stop-signals") { _ in onFirst(first.load(ordering: .sequentiallyConsistent)) },
                        ordering: .sequentiallyConsistent)

        var action = sigaction()
        action.__sigaction_handler.sa_handler = { signal in
            // Async-signal-safe only: atomics, write(2), _exit(2).
            if StopSignals.received.add(1, ordering: .sequentiallyConsistent).oldValue > 0 { _exit(128 + signal) }
            StopSignals.first.store(signal, ordering: .sequentiallyConsistent)
            var byte: UInt8 = 1
            _ = write(StopSignals.wakeWrite.load(ordering: .sequentiallyConsistent), &byte, 1)
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        for sig in [SIGTERM, SIGINT] { _ = sigaction(sig, &action, nil) }
    }
}
