import ActivityCastSettings
import ActivityCastWorker
import ArgumentParser
import Logging

/// Options every Redis-facing command takes.
package struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: "Configuration file (YAML). Also ACTIVITYCAST_CONFIG.")
    var config: String?

    @Option(name: .long, help: "Redis URL: redis://[user[:password]@]host:port[/db] or rediss://… Also ACTIVITYCAST_REDIS_URL.")
    var redis: String?

    package init() {}

    /// Loads the settings, stopping with a usage error when one is wrong, and logs their warnings
    /// (a misspelt `ACTIVITYCAST_*` variable) to stderr at once, in the configured log format.
    package func settings(extra: [String: String] = [:]) throws -> Settings {
        var overrides = extra
        if let redis { overrides["redis.url"] = redis }
        let settings: Settings
        do {
            settings = try SettingsLoader.load(file: config, overrides: overrides)
        } catch let error as SettingsError {
            throw ValidationError(error.description)
        }
        if !settings.warnings.isEmpty {
            // Its own handler, not the bootstrapped one: most commands bootstrap logging only
            // after this, and some never do.
            let format = LineLogHandler.Format(rawValue: settings.logFormat) ?? .text
            let logger = Logger(label: "settings") { LineLogHandler(label: $0, level: .warning, format: format) }
            for warning in settings.warnings { logger.warning("\(warning)") }
        }
        return settings
    }
}
