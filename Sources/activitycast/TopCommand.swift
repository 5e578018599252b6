import ActivityCastCommandSupport
import ActivityCastInspect
import ActivityCastWorker
import ArgumentParser
import Foundation
import RedisClient

struct TopCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "A live view of lag, pending, rates, pushes, budgets and channels, read from Redis (and workers' /metrics) every second.",
        discussion: "q, Ctrl-C or SIGTERM quits and restores the terminal. Redis being unreachable is shown, and top keeps trying.")

    @OptionGroup var common: CommonOptions

    @Option(help: "Seconds between readings (0.1-3600).")
    var interval: Double = 1

    @Option(name: .customLong("metrics"), help: ArgumentHelp(
        "A worker's /metrics (its ops.listen): http://127.0.0.1:9464/metrics. Repeat it for several workers.", valueName: "url"))
    var metrics: [String] = []

    @Flag(help: "Print one frame to stdout without escape codes and exit (two readings --interval apart, for the rates); exit 1 if Redis can't be read.")
    var once = false

    func validate() throws {
        guard interval >= 0.1 && interval <= 3600 else { throw ValidationError("--interval must be 0.1-3600 seconds, got \(interval)") }
        for url in metrics where MetricsEndpoint(url) == nil {
            throw ValidationError("--metrics must be http://HOST:PORT/PATH, got '\(url)'")
        }
    }

    func run() async throws {
        let settings = try common.settings()
        var configuration = settings.redisConfiguration
        configuration.clientName = "activitycast-top"
        let redis = RedisConnection(configuration: configuration)
        defer { redis.close() }
        let every = Duration.milliseconds(Int64((interval * 1000).rounded()))
        let reader = TopReader(inspector: Inspector(settings: settings, redis: redis), endpoints: metrics.compactMap(MetricsEndpoint.init),
                               timeout: min(max(every, .milliseconds(500)), .seconds(2)))
        var state = TopState(redisURL: settings.redisURL.description, interval: every)
        if once {
            state.record(await reader.read())
            try await Task.sleep(for: every)
            state.record(await reader.read())
            let lines = state.lines(width: .max, height: .max, now: .now, interactive: false)
            print(lines.joined(separator: "\n"))
            if state.latest?.report == nil { throw ExitCode(1) }
            return
        }
        guard Terminal.isInteractive else {
            throw CommandFailure("top needs a terminal on stdin and stdout; use --once for one frame without escape codes")
        }
        let terminal = Terminal()
        let status = await live(terminal: terminal, reader: reader, state: state, every: every)
        terminal.restore()
        // Not a return: a reading stuck on a frozen Redis must not hold the exit.
        Foundation.exit(status)
    }

    /// Draws a frame for every reading, key and resize until q, Ctrl-C, a signal or the end of
    /// input. Returns the exit status: 0 for q, 128 + the signal otherwise.
    private func live(terminal: Terminal, reader: TopReader, state initial: TopState, every: Duration) async -> Int32 {
        var state = initial
        let events = terminal.enter()
        let (readings, continuation) = AsyncStream.makeStream(of: Update.self)
        // Readings one after another, `every` apart from start to start; ticks redraw meanwhile
        // (the age of a reading stuck on a frozen Redis).
        let refresher = Task {
            while !Task.isCancelled {
                let started = ContinuousClock.now
                continuation.yield(.busy(started))
                continuation.yield(.reading(await reader.read()))
                try? await Task.sleep(until: started + every)
            }
        }
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                continuation.yield(.tick)
            }
        }
        let merged = Task {
            for await event in events { continuation.yield(.terminal(event)) }
        }
        defer { refresher.cancel(); ticker.cancel(); merged.cancel() }
        var busySince: ContinuousClock.Instant?
        for await update in readings {
            switch update {
            case .busy(let since): busySince = since
            case .reading(let reading): state.record(reading); busySince = nil
            case .tick, .terminal(.resize): break
            case .terminal(.key(let key)):
                if key == UInt8(ascii: "q") || key == UInt8(ascii: "Q") { return 0 }
                if key == 3 { return 130 }  // Ctrl-C as a byte, should ISIG be off
                continue
            case .terminal(.signal(let sig)): return 128 + sig
            case .terminal(.inputClosed): return 0
            }
            let size = Terminal.size()
            Terminal.draw(state.lines(width: size.columns, height: size.rows, now: .now, interactive: true, busySince: busySince), rows: size.rows)
        }
        return 0
    }

    enum Update: Sendable {
        case busy(ContinuousClock.Instant)
        case reading(TopReading)
        case tick
        case terminal(Terminal.Event)
    }
}
