import APNsCore

/// Connection-level and timing side effects that ride along with a response. Plain values only,
/// so that passing it around costs no reference counting.
struct Effects: Sendable {
    enum Fault: UInt8, Sendable { case none, goAway, reset }
    var delay: Duration?
    var fault = Fault.none
    var maxConcurrentStreams: Int?
    /// The request is processed, then the connection reset instead of answering it (`lostAnswerRate`).
    var loseAnswer = false
}

/// What a locked step decided.
struct Outcome: Sendable {
    var status: Int
    var reason: APNsReason?
    /// The 410 body's `timestamp`.
    var timestamp: Int64?
    var effects = Effects()
    var channelID: String?
    var storagePolicy: Int?
    var channelIDs: [String]?

    init(status: Int, reason: APNsReason? = nil, timestamp: Int64? = nil) {
        self.status = status; self.reason = reason; self.timestamp = timestamp
    }

    init(_ reason: APNsReason, timestamp: Int64? = nil) {
        self.init(status: reason.status, reason: reason, timestamp: timestamp)
    }
}

/// The result of a locked step: either an answer, or a provider token to verify outside the
/// lock before trying again.
enum Locked: Sendable {
    case verify([UInt8])
    case done(Outcome)
}

/// What the shared prelude (streams, faults, duplicate headers, provider token) decided.
enum Gate {
    case verify([UInt8])
    case stop(Outcome)
    case pass
}
