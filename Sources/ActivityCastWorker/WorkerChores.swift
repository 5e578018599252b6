import ActivityCastSend
import Foundation
import Logging
import RedisClient

/// What the read loop does on a schedule between reads: claim idle entries (and probe broken
/// streams, delete due channels) every claim interval, trim streams every retention interval.
struct WorkerChores {
    var nextClaim = ContinuousClock.now
    var nextTrim = ContinuousClock.now
    var nextRefusedRetry = ContinuousClock.now
    var nextTroubleReport = ContinuousClock.now
    /// The fields this worker has in `RedisKeys.apnsUnusable`.
    var troubleFields: Set<String> = []

    mutating func runDue(_ worker: Worker) async {
        let settings = worker.settings, stop = worker.stop
        // While Redis refuses this worker's writes (out of memory, read-only), the entries it
        // left pending are tried again every second, not only once the visibility timeout hands
        // them to a claim: raising maxmemory is followed by recovery within a second or two.
        if ContinuousClock.now >= nextTroubleReport {
            troubleFields = await worker.reportAPNsTrouble(had: troubleFields)
            nextTroubleReport = ContinuousClock.now + .seconds(5)
        }
        if worker.refusal != nil, ContinuousClock.now >= nextRefusedRetry {
            await worker.retryOwnPending()
            nextRefusedRetry = ContinuousClock.now + .seconds(1)
        }
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

extension RecordSweep {
    /// Acknowledged entries' records, deleted together every 100 ms until the task is cancelled
    /// (after the worker's drain); records that found the list full are logged.
    func loop(_ redis: RedisConnection, logger: Logger) -> Task<Void, Never> {
        Task {
            var reported = 0
            while (try? await Task.sleep(for: .milliseconds(100))) != nil {
                await sweep(redis)
                if dropped > reported {
                    logger.warning("fan-out records left to their TTL: the sweep's list is full", metadata: ["records": "\(dropped)"])
                }
                reported = dropped
            }
        }
    }
}
