import Foundation

/// What the read loop does on a schedule between reads: claim idle entries (and probe broken
/// streams, delete due channels) every claim interval, trim streams every retention interval.
struct WorkerChores {
    var nextClaim = ContinuousClock.now
    var nextTrim = ContinuousClock.now

    mutating func runDue(_ worker: Worker) async {
        let settings = worker.settings, stop = worker.stop
        if ContinuousClock.now >= nextClaim {
            _ = await stop.race { await worker.claimIdle() }
            await worker.probeBrokenStreams()
            if let sender = worker.sender {
                // Channels whose activity ended and whose dismissal window passed.
                _ = await stop.race { try? await sender.deleteDueChannels() }
            }
            nextClaim = ContinuousClock.now + settings.claimInterval
        }
        if let trimmer = worker.trimmer, let every = settings.retention.interval, ContinuousClock.now >= nextTrim {
            _ = await stop.race { await trimmer.trimOnce() }
            nextTrim = ContinuousClock.now + every
        }
    }
}
