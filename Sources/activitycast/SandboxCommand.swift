import ActivityCastCommandSupport
import ActivityCastCore
import ActivityCastSettings
import ActivityCastWorker
import APNsCore
import APNsSandbox
import ArgumentParser
import Foundation
import Logging
import OpenSSLKit

struct SandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract: "Run the APNs sandbox: an APNs-compatible HTTP/2 TLS server that validates requests like APNs, records deliveries and injects faults.",
        discussion: """
        With no keys given, it makes a development signing key (kid SANDBOXK01, team SANDBOXTM1) and a
        self-signed certificate in --dir, and `send`, `channels` and workers with no APNs configuration use
        them. Faults can be set here or at run time: POST /sandbox/faults with a JSON body replaces the
        whole set (omitted faults are turned off), PATCH /sandbox/faults changes only those it names;
        both answer with the faults now in force. Device views:
        GET /sandbox/devices/<token>, GET /sandbox/channels/<id>, GET /sandbox/deliveries, GET /sandbox/stats.
        """)

    @OptionGroup var common: CommonOptions
    @Option(help: "host:port to listen on (default: sandbox.listen, 127.0.0.1:2197).") var listen: String?
    @Option(help: "Directory for the generated certificate and development key (default: sandbox.dir).") var dir: String?
    @Option(help: "Serve this certificate (PEM) instead of a generated one.") var cert: String?
    @Option(help: "Private key of --cert (PEM).") var certKey: String?
    @Option(help: "Trust provider tokens signed by this key: KID=path/to/public.pem or KID=path/to/AuthKey.p8. Repeatable.")
    var trust: [String] = []
    @Option(help: "Team id tokens must carry (with --trust).") var teamID: String?
    @Option(help: "Accepted bundle id (repeatable; default: apns.bundle_id).") var bundleID: [String] = []
    @Option(help: "development (answers carry apns-unique-id) or production.") var environment = "development"
    @Option(help: "Limit the keys it trusts to this environment, as Apple lets a key be: tokens they sign answer 403 BadEnvironmentKeyIdInToken in the other one.")
    var keyEnvironment: String?
    @Option(help: "Event-loop threads (default: one per core, at least 2), so that the sandbox keeps up with senders on the same machine.")
    var threads: Int?
    @Option(help: "Priority-10 pushes per device per hour before a standard-tier device throttles.") var budget = 15
    @Option(help: "Channels an app may have per environment before creation answers CannotCreateChannelConfig (APNs: 10,000).") var maxChannels = 10_000
    @Option(help: "Fraction of requests answered 429 TooManyRequests.") var fault429 = 0.0
    @Option(help: "Fraction answered 500 InternalServerError.") var fault500 = 0.0
    @Option(help: "Fraction answered 503 ServiceUnavailable.") var fault503 = 0.0
    @Option(help: "Send GOAWAY after this many streams on a connection.") var goawayAfter: Int?
    @Option(help: "Fraction of requests that reset the connection instead of answering.") var resetRate = 0.0
    @Option(help: "Fraction of requests processed as usual (an accepted push is shown) whose answer is then lost: the connection resets.")
    var lostAnswerRate = 0.0
    @Option(help: "Fraction of responses delayed by --slow-ms.") var slowRate = 0.0
    @Option var slowMs: Int64 = 1000
    @Option(help: "Kind of request the per-request faults above apply to: device, broadcast or channels (repeatable; default: all).")
    var faultsOnly: [String] = []
    @Option(help: "Device token that answers 410 Unregistered (repeatable).") var unregistered: [String] = []
    @Option(help: "Streams a new connection may open before its provider token is validated (APNs: 1). Benchmarks against clients that don't wait, like h2load, raise it.")
    var streamsBeforeAuth = 1
    @Option(help: "Deliveries kept in the log that GET /sandbox/deliveries reads (a benchmark reading every delivery of a run needs at least that many).")
    var deliveryLog = 10_000

    func run() async throws {
        let settings = try common.settings()
        LineLogHandler.bootstrap(level: settings.logLevel, format: settings.logFormat)
        let logger = Logger(label: "sandbox")
        let directory = dir ?? settings.apns.sandboxDirectory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)

        // The certificate clients verify against (`apns.ca_file`).
        let certPath = cert ?? "\(directory)/cert.pem"
        let keyPath = certKey ?? "\(directory)/cert-key.pem"
        if cert == nil && !FileManager.default.fileExists(atPath: certPath) {
            let made = try SelfSignedCertificate.generate(commonName: "localhost", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1", "::1"], days: 825)
            try writePrivate(made.privateKeyPEM, to: keyPath)
            try made.certificatePEM.write(toFile: certPath, atomically: true, encoding: .utf8)
            logger.info("generated a self-signed certificate", metadata: ["certificate": "\(certPath)"])
        }
        let tls = try TLSContext.server(certificatePEMFile: certPath, keyPEMFile: keyPath, alpn: ["h2"])

        // Provider-token keys it trusts.
        var keys: [String: ES256PublicKey] = [:]
        var team = teamID ?? settings.apns.teamID
        if trust.isEmpty {
            let p8 = "\(directory)/AuthKey_\(APNsSettings.sandboxKeyID).p8"
            let key: ES256PrivateKey
            if FileManager.default.fileExists(atPath: p8) {
                key = try ES256PrivateKey(pemFile: p8)
            } else {
                key = try ES256PrivateKey.generate()
                try writePrivate(try key.pkcs8PEM(), to: p8)
                logger.info("generated a development signing key", metadata: ["key_file": "\(p8)", "kid": "\(APNsSettings.sandboxKeyID)"])
            }
            keys[APNsSettings.sandboxKeyID] = key.publicKey
            if teamID == nil { team = APNsSettings.sandboxTeamID }
        } else {
            for entry in trust {
                guard let eq = entry.firstIndex(of: "=") else { throw ValidationError("--trust is KID=path, got '\(entry)'") }
                let kid = String(entry[..<eq]), path = String(entry[entry.index(after: eq)...])
                let text = try String(contentsOfFile: path, encoding: .utf8)
                keys[kid] = text.contains("PRIVATE KEY") ? try ES256PrivateKey(pem: text).publicKey : try ES256PublicKey(pem: text)
            }
        }
        guard let env = APNsEnvironment(rawValue: environment) else { throw ValidationError("--environment is development or production") }
        var restrictions: [String: SandboxConfiguration.KeyRestriction] = [:]
        if let keyEnvironment {
            guard let limited = APNsEnvironment(rawValue: keyEnvironment) else { throw ValidationError("--key-environment is development or production") }
            for kid in keys.keys { restrictions[kid] = .init(environment: limited) }
        }
        var faults = SandboxFaults(tooManyRequestsRate: fault429, internalErrorRate: fault500, unavailableRate: fault503,
                                   slowResponseRate: slowRate, slowResponseDelayMillis: slowMs, goAwayAfterStreams: goawayAfter, resetRate: resetRate,
                                   lostAnswerRate: lostAnswerRate)
        for kind in faultsOnly {
            guard let k = SandboxFaults.RequestKind(rawValue: kind) else { throw ValidationError("--faults-only is device, broadcast or channels, got '\(kind)'") }
            faults.only.insert(k)
        }
        for token in unregistered { faults.unregisteredTokens[token.lowercased()] = Int64(Date().timeIntervalSince1970 * 1000) }
        if let problem = faults.problem { throw ValidationError(problem) }
        let bundles = bundleID.isEmpty ? [settings.apns.bundleID] : bundleID
        let configuration = SandboxConfiguration(bundleIDs: bundles, teamID: team, keys: keys, environment: env, keyRestrictions: restrictions,
                                                 deviceBudgetPerHour: [.standard: budget, .frequent: budget * 8], maxChannels: maxChannels,
                                                 streamsBeforeAuthentication: max(1, streamsBeforeAuth), deliveryLogCapacity: max(0, deliveryLog),
                                                 faults: faults)
        let state = SandboxState(configuration: configuration)

        let address = listen ?? settings.apns.sandboxListen
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            throw ValidationError("--listen is host:port, got '\(address)'")
        }
        let host = String(address[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let server = try SandboxServer(state: state, host: host, port: port, tls: tls, threads: threads ?? max(2, ProcessInfo.processInfo.activeProcessorCount),
                                       streamsBeforeAuthentication: configuration.streamsBeforeAuthentication)
        logger.info("APNs sandbox listening", metadata: [
            "url": "https://\(host):\(server.port)", "ca_file": "\(certPath)", "bundle_ids": "\(bundles.joined(separator: ","))",
            "team_id": "\(team)", "kids": "\(keys.keys.sorted().joined(separator: ","))", "environment": "\(environment)"])
        // Tell scripts where it listens (useful with port 0).
        FileHandle.standardOutput.write(Data("listening \(host):\(server.port)\n".utf8))

        let done = AsyncStream<Int32>.makeStream()
        let watcher = SignalWatcher(signals: [SIGTERM, SIGINT]) { done.continuation.yield($0) }
        for await _ in done.stream { break }
        watcher.cancel()
        server.stop()
        let stats = state.stats
        logger.info("sandbox stopped", metadata: ["stats": "\(stats)"])
    }

    /// Writes key material readable by the owner only; never logged.
    private func writePrivate(_ text: String, to path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ValidationError("cannot write \(path)")
        }
    }
}
