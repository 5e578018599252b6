import APNs

/// Why a send can't finish now (the entry stays pending and is retried).
public struct SendFailure: Error, CustomStringConvertible, Sendable {
    public var description: String
    /// APNs's outage, not the work's fault, so it doesn't count against the entry's deliveries:
    /// every request it stands for failed, and either none of them left for want of a
    /// connection or the client got no normal answer to anything while they were tried
    /// (`APNsOutageWatch`).
    public var apnsOutage: Bool

    public init(_ description: String, apnsOutage: Bool = false) {
        self.description = description
        self.apnsOutage = apnsOutage
    }
}

/// Tells an outage of an APNs service from a request it fails for itself alone: started
/// before a send's first attempt, asked once its attempts have all failed.
struct APNsOutageWatch {
    /// How long before a send's first attempt a normal answer still shows the service at work: a
    /// slice's round is one attempt of a few milliseconds, so answers to others just before it
    /// count too.
    static let grace: Duration = .seconds(2)
    let client: APNsClient
    let service: APNsService
    let bundleID: String
    let since: APNsMoment

    init(_ client: APNsClient, _ service: APNsService, bundleID: String) {
        self.client = client
        self.service = service
        self.bundleID = bundleID
        since = APNsClientStats.moment(ago: Self.grace)
    }

    /// `unusable`: every request of the last attempt failed for reasons outside it (no
    /// connection, our credentials refused: `APNsResult.apnsUnusable`). Else an outage only if
    /// the service answered nothing normally (2xx, 4xx but 429 and a refusal of our
    /// credentials) on this client from `grace` before the watch began, nor a probe
    /// (`APNsClient.probe`) sent when nothing else was answered: a request that fails while the
    /// service answers others counts against its work, so one that APNs fails for itself alone
    /// can't be retried forever — also on a worker with no other traffic. Credential refusals
    /// are never probed: a probe's 4xx might be answered before the credentials are checked.
    func isOutage(unusable: Bool) async -> Bool {
        if unusable { return true }
        if answered { return false }
        _ = await client.probe(service, bundleID: bundleID)
        return !answered
    }

    private var answered: Bool { client.stats.answeredNormally(service, since: since) }
}
