import ActivityCastSettings
import Foundation
import Testing
import TestSupport

/// What a hostile test of the command line found (issue 40, item 7).
@Suite struct CommandLineSmallTests {
    @Test func versionAndASubcommandsOwnUsageOnASettingsError() async throws {
        let (status, out, _) = try await runActivitycast(["--version"], redisURL: "redis://127.0.0.1:1")
        #expect(status == 0 && out.hasPrefix("activitycast "), "\(out)")
        // A setting that is wrong, found while the subcommand runs: that subcommand's usage.
        let (bad, _, err) = try await runActivitycast(["inspect"], redisURL: "bogus://")
        #expect(bad == 64, "\(err)")
        #expect(err.contains("Error: setting redis.url (from ACTIVITYCAST_REDIS_URL)"), "\(err)")
        #expect(err.contains("Usage: activitycast inspect [") && err.contains("See 'activitycast inspect --help'"), "\(err)")
        let (_, _, nested) = try await runActivitycast(["bench", "broadcast", "--seconds", "1"], redisURL: "bogus://")
        #expect(nested.contains("Usage: activitycast bench broadcast [") && nested.contains("See 'activitycast bench broadcast --help'"), "\(nested)")
    }

    /// An empty environment value is no value: `ACTIVITYCAST_APNS_CA_FILE=` is unset, not ''.
    @Test func anEmptyCAFileIsUnset() throws {
        let settings = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_APNS_CA_FILE": "", "ACTIVITYCAST_APNS_ENDPOINT": "development",
                                                                        "ACTIVITYCAST_APNS_KEY_FILE": ""])
        #expect(settings.apns.caFile == nil && settings.apns.keyFile == nil)
    }
}
