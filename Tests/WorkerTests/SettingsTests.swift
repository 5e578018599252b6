import ActivityCastCore
import ActivityCastWorker
import Foundation
import Testing
import TestSupport

@Suite struct SettingsTests {
    @Test func defaultsAreSensible() throws {
        let s = try SettingsLoader.load(file: nil, environment: [:])
        #expect(s.redisURL.host == "127.0.0.1" && s.redisURL.port == 6379)
        #expect(s.prefix == "ac" && s.group == "activitycast")
        #expect(s.registrationsStream == "ac:registrations" && s.deadLetterStream == "ac:deadletter")
        #expect(s.feeds == [.init(kind: .sports, stream: "ac:feed:sports"), .init(kind: .transit, stream: "ac:feed:transit")])
        #expect(s.maxDeliveries == 5 && s.batchSize == 256)
    }

    @Test func fileThenEnvironmentThenCommandLine() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/ac.yaml"
        try """
        redis:
          url: redis://10.0.0.1:7000
        prefix: live
        worker:
          batch_size: 100
          max_deliveries: 3
        streams:
          feeds:
            - kind: sports
              stream: scores
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let s = try SettingsLoader.load(file: file, environment: ["ACTIVITYCAST_WORKER_BATCH_SIZE": "50"],
                                        overrides: ["redis.url": "redis://127.0.0.1:7001"])
        #expect(s.redisURL.port == 7001)              // command line wins
        #expect(s.batchSize == 50)                    // environment beats the file
        #expect(s.maxDeliveries == 3 && s.prefix == "live")
        #expect(s.feeds == [.init(kind: .sports, stream: "scores")])
        #expect(s.registrationsStream == "live:registrations")  // derived from the prefix
    }

    @Test func errorsNameTheKeyTheSourceAndWhy() throws {
        func failure(_ env: [String: String]) -> String {
            do { _ = try SettingsLoader.load(file: nil, environment: env); return "no error" } catch { return "\(error)" }
        }
        #expect(failure(["ACTIVITYCAST_WORKER_BATCH_SIZE": "lots"]) == "setting worker.batch_size (from ACTIVITYCAST_WORKER_BATCH_SIZE): must be a whole number, got 'lots'")
        #expect(failure(["ACTIVITYCAST_WORKER_MAX_DELIVERIES": "0"]).contains("must be between 1 and 1000, got 0"))
        #expect(failure(["ACTIVITYCAST_REDIS_URL": "http://x"]).contains("setting redis.url (from ACTIVITYCAST_REDIS_URL)"))
        #expect(failure(["ACTIVITYCAST_STREAMS_FEEDS": "cricket=x"]).contains("kind sports or transit"))
        #expect(failure(["ACTIVITYCAST_STREAMS_FEEDS": "sports=ac:registrations"]).contains("must be distinct"))
        #expect(failure(["ACTIVITYCAST_LOG_LEVEL": "loud"]).contains("log.level"))
        #expect(failure(["ACTIVITYCAST_PREFIX": "a{b}"]).contains("hash tags"))
        #expect(failure(["ACTIVITYCAST_WORKER_MAX_IN_FLIGHT": "10"]).contains("at least worker.batch_size"))
    }

    @Test func unknownFileKeysAreRejectedWithAHint() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/bad.yaml"
        try "worker:\n  batchsize: 10\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect {
            try SettingsLoader.load(file: file, environment: [:])
        } throws: { error in
            "\(error)" == "\(file): unknown setting 'worker.batchsize' (did you mean worker.batch_size?)"
        }
        try "worker: [1, 2\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(throws: SettingsError.self) { try SettingsLoader.load(file: file, environment: [:]) }
        #expect(throws: SettingsError.self) { try SettingsLoader.load(file: dir.path + "/missing.yaml", environment: [:]) }
    }
}
