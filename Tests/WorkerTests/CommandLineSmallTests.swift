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

    /// Every bench is named in `bench --help`'s overview and in the README's table of commands.
    @Test func everyBenchIsListed() async throws {
        let (status, help, _) = try await runActivitycast(["bench", "--help"], redisURL: "redis://127.0.0.1:1")
        #expect(status == 0)
        let section = try #require(help.components(separatedBy: "SUBCOMMANDS:").last)
        let names = section.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ")
            guard line.hasPrefix("  "), !line.hasPrefix("    "), let first = words.first, first.allSatisfy(\.isLetter), first != "See" else { return nil }
            return String(first)
        }
        #expect(names.count >= 9, "\(names)")
        let overview = try #require(help.components(separatedBy: "USAGE:").first)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        for name in names {
            #expect(overview.contains("`\(name)`"), "bench --help's overview doesn't name \(name)")
            #expect(readme.contains("`bench \(name)`") || readme.contains("`activitycast bench \(name)`"), "README doesn't list bench \(name)")
        }
    }

    /// An empty environment value is no value: `ACTIVITYCAST_APNS_CA_FILE=` is unset, not ''.
    @Test func anEmptyCAFileIsUnset() throws {
        let settings = try SettingsLoader.load(file: nil, environment: ["ACTIVITYCAST_APNS_CA_FILE": "", "ACTIVITYCAST_APNS_ENDPOINT": "development",
                                                                        "ACTIVITYCAST_APNS_KEY_FILE": ""])
        #expect(settings.apns.caFile == nil && settings.apns.keyFile == nil)
    }
}
