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

/// Tells an APNs outage from a request APNs fails for itself alone: started before a send's
/// first attempt, asked once its attempts have all failed.
struct APNsOutageWatch {
    /// How long before a send's first attempt a normal answer still shows APNs at work: a
    /// slice's round is one attempt of a few milliseconds, so answers to others just before it
    /// count too.
    static let grace: Duration = .seconds(2)
    let clients: [APNsClient]
    let since: APNsMoment

    /// `clients`: the one the send uses, and others whose answers also show APNs at work (channel
    /// management, which sees little traffic of its own, watches the environment's pushes too).
    init(_ clients: APNsClient?...) {
        var seen = Set<ObjectIdentifier>()
        self.clients = clients.compactMap { $0 }.filter { seen.insert(ObjectIdentifier($0)).inserted }
        since = APNsClientStats.moment(ago: Self.grace)
    }

    /// `unreached`: none of the last attempt's requests left for want of a connection. Else an
    /// outage only if APNs answered nothing normally (2xx, 4xx but 429 and a refusal of our
    /// credentials), to anyone on these clients, from `grace` before the watch began, nor to a
    /// probe (`APNsClient.probe`) sent when nothing else was answered: a request that fails while
    /// APNs answers others counts against its work, so one that APNs rejects for itself alone
    /// can't be retried forever — also on a worker with no other traffic.
    func isOutage(unreached: Bool) async -> Bool {
        if unreached { return true }
        if answered { return false }
        for client in clients {
            _ = await client.probe()
            if answered { return false }
        }
        return true
    }

    private var answered: Bool { clients.contains { $0.stats.answeredNormally(since: since) } }
}
