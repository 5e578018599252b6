import Foundation

/// The `activitycast` executable built beside the test bundle.
public func activitycastExecutable() throws -> String {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
    // The test binary sits in .build/<triple>/debug/ActivityCastPackageTests.xctest on Linux.
    for _ in 0..<3 {
        let candidate = dir.appendingPathComponent("activitycast").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    throw RedisServerError(description: "activitycast executable not found near \(exe): run `swift build` first")
}

/// Runs `activitycast` with `ACTIVITYCAST_*` settings as environment variables and JSON logs.
public func startActivitycast(_ arguments: [String], redis: RedisServer, settings: [String: String] = [:], logName: String,
                              output: ChildProcess.Output = .files) throws -> ChildProcess {
    try startActivitycast(arguments, redisURL: redis.urlString, settings: settings, logName: logName, output: output)
}

/// The same against any Redis URL (a cluster's seeds).
public func startActivitycast(_ arguments: [String], redisURL: String, settings: [String: String] = [:], logName: String,
                              output: ChildProcess.Output = .files) throws -> ChildProcess {
    // Ops endpoints off unless a test asks for them: every worker would take the default port.
    var env = ["ACTIVITYCAST_REDIS_URL": redisURL, "ACTIVITYCAST_LOG_FORMAT": "json", "ACTIVITYCAST_OPS_LISTEN": "off"]
    for (k, v) in settings { env["ACTIVITYCAST_" + k.uppercased().replacingOccurrences(of: ".", with: "_")] = v }
    return try ChildProcess(executable: try activitycastExecutable(), arguments: arguments, environment: env, logName: logName, output: output)
}

/// Runs `activitycast` to completion and returns (exit status, stdout, stderr).
public func runActivitycast(_ arguments: [String], redis: RedisServer, settings: [String: String] = [:], timeout: Duration = .seconds(60)) async throws -> (Int32, String, String) {
    try await runActivitycast(arguments, redisURL: redis.urlString, settings: settings, timeout: timeout)
}

/// The same against any Redis URL (a cluster's seeds).
public func runActivitycast(_ arguments: [String], redisURL: String, settings: [String: String] = [:], timeout: Duration = .seconds(60)) async throws -> (Int32, String, String) {
    let child = try startActivitycast(arguments, redisURL: redisURL, settings: settings, logName: "cli")
    defer { child.removeLogs() }
    guard let status = await child.waitForExit(timeout: timeout) else {
        await child.stop()
        throw RedisServerError(description: "activitycast \(arguments.joined(separator: " ")) did not finish in \(timeout)")
    }
    return (status, child.stdout, child.stderr)
}

/// JSON log lines of a child (its stderr), parsed.
public func jsonLogLines(_ text: String) -> [[String: String]] {
    text.split(separator: "\n").compactMap { line in
        guard let data = line.data(using: .utf8),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
        return object.compactMapValues { $0 as? String }
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
public func eventually(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
