import ActivityCastSettings
import ActivityCastCore
@testable import ActivityCastWorker
import RedisClient
import Testing
import TestSupport

/// Registrations applied by a real worker to a real Redis, checked in Redis's own terms.
@Suite struct RegistrationTests {
    let tokenA = String(repeating: "a1", count: 32)
    let tokenB = String(repeating: "b2", count: 32)
    let tokenC = String(repeating: "c3", count: 32)
    let tokenS = String(repeating: "d4", count: 32)

    @Test func appliesInTimestampOrderAndCleansUp() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let keys = settings.keys
        let reg = settings.registrationsStream
        let sports = settings.feeds[0].stream
        let match = ActivityKey(kind: .match, id: "1")

        func add(_ fields: [(String, String)]) async throws { _ = try await xadd(redis, reg, fields) }
        // Added before the worker starts, so they arrive in one batch, in this order.
        try await add([("type", "activity.token"), ("ts", "1000"), ("device", "d-1"), ("key", "match:1"), ("activity", "A1"), ("token", tokenA.uppercased()), ("env", "development")])
        try await add([("type", "activity.token"), ("ts", "3000"), ("device", "d-1"), ("key", "match:1"), ("activity", "A1"), ("token", tokenB)])
        // An older token that arrives late must not undo the rotation.
        try await add([("type", "activity.token"), ("ts", "2000"), ("device", "d-1"), ("key", "match:1"), ("activity", "A1"), ("token", tokenC)])
        try await add([("type", "follow"), ("ts", "1000"), ("device", "d-1"), ("target", "team:ars")])
        try await add([("type", "unfollow"), ("ts", "500"), ("device", "d-1"), ("target", "team:ars")])
        try await add([("type", "start.token"), ("ts", "1000"), ("device", "d-1"), ("activity_type", "MatchActivityAttributes"), ("token", tokenS), ("tier", "frequent"), ("broadcast", "true")])
        try await add([("type", "device"), ("ts", "1000"), ("device", "d-2"), ("env", "production")])
        try await add([("type", "follow"), ("ts", "1000"), ("device", "d-2"), ("target", "route:42")])
        try await add([("type", "start.token"), ("ts", "1000"), ("device", "d-2"), ("activity_type", "TripActivityAttributes"), ("token", tokenS)])
        try await add([("type", "unregister"), ("ts", "2000"), ("device", "d-2")])
        try await add([("type", "follow"), ("ts", "1500"), ("device", "d-2"), ("target", "route:9")])  // older than the unregister

        let stats = try await withWorker(settings) { _ in
            #expect(await eventually { await drained(redis, reg) })

            #expect(try await redis.command("HGETALL", keys.tokens(match)) == .array([.bulk(Array("A1".utf8)), .bulk(Array(tokenB.utf8))]))
            #expect(try await redis.command("HGET", keys.meta(match), "A1").string?.hasPrefix("3000 d-1") == true)
            #expect(try await redis.command("TTL", keys.tokens(match)).int ?? 0 > 3600)
            #expect(try await redis.command("ZSCORE", keys.keysIndex, "match:1") != .null)
            #expect(try await redis.command("SMEMBERS", keys.followers(FollowTarget(kind: .team, id: "ars"))) == .array([.bulk(Array("d-1".utf8))]))
            #expect(try await redis.command("SMEMBERS", keys.startTokens(activityType: "MatchActivityAttributes")) == .array([.bulk(Array("d-1".utf8))]))
            #expect(try await redis.command("HGET", keys.device("d-1"), "tier") == .bulk(Array("frequent".utf8)))
            #expect(try await redis.command("HGET", keys.device("d-1"), "start:MatchActivityAttributes").string == "1000 \(tokenS)")
            // d-2 is forgotten: no follows, no start token, only its tombstone.
            #expect(try await redis.command("SCARD", keys.followers(FollowTarget(kind: .route, id: "42"))) == .integer(0))
            #expect(try await redis.command("SCARD", keys.followers(FollowTarget(kind: .route, id: "9"))) == .integer(0))
            #expect(try await redis.command("SCARD", keys.startTokens(activityType: "TripActivityAttributes")) == .integer(0))
            #expect(try await redis.command("HGETALL", keys.device("d-2")) == .array([.bulk(Array("gone".utf8)), .bulk(Array("2000".utf8))]))

            // The activity ends on the device; a late rotation must not bring it back.
            try await add([("type", "unregister"), ("ts", "4000"), ("device", "d-1"), ("key", "match:1"), ("activity", "A1")])
            try await add([("type", "activity.token"), ("ts", "3500"), ("device", "d-1"), ("key", "match:1"), ("activity", "A1"), ("token", tokenC)])
            #expect(await eventually { await drained(redis, reg) })
            #expect(try await redis.command("HLEN", keys.tokens(match)) == .integer(0))

            // A new activity on the key, then full time: nothing about the key is left behind.
            try await add([("type", "activity.token"), ("ts", "5000"), ("device", "d-1"), ("key", "match:1"), ("activity", "A2"), ("token", tokenA)])
            #expect(await eventually { await drained(redis, reg) })
            _ = try await xadd(redis, sports, [("type", "match.full_time"), ("ts", "6000"), ("match", "1"), ("home_score", "2"), ("away_score", "1")])
            #expect(await eventually { await drained(redis, sports) })
            #expect(try await redis.command("EXISTS", keys.tokens(match), keys.meta(match)) == .integer(0))
            #expect(try await redis.command("ZSCORE", keys.keysIndex, "match:1") == .null)
        }
        #expect(stats.acked == 15 && stats.deadLettered == 0 && stats.failed == 0)
        // The late token, the late unfollow and d-2's late follow came in one batch, in order; the
        // late rotation may be applied before the unregister it follows (then it isn't stale,
        // and the unregister removes it): the end state above is the same either way.
        #expect(stats.stale >= 3)
        #expect(stats.plans == 1)
        // …and the fleet-wide counter that `inspect` shows says the same.
        #expect(try await redis.command("HGET", keys.counters, "registrations_stale").int == Int64(stats.stale))
    }

    /// Two workers may apply a follow and a newer unfollow at the same time, and their set writes
    /// may land in either order: the newest change must win.
    @Test func membershipChangesLandInTimestampOrderWhateverTheWriteOrder() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let registrar = Registrar(keys: settings.keys, activityTTLSeconds: 3600, deviceTTLSeconds: 3600)
        let ars = FollowTarget(kind: .team, id: "ars")
        // Newer unfollow first, older follow second: stays unfollowed.
        _ = try await redis.pipeline([registrar.followMembership("d-1", ars, 2000, follow: false),
                                      registrar.followMembership("d-1", ars, 1000, follow: true)])
        #expect(try await redis.command("SISMEMBER", settings.keys.followers(ars), "d-1") == .integer(0))
        // Older unfollow after a newer follow: stays followed.
        _ = try await redis.pipeline([registrar.followMembership("d-2", ars, 3000, follow: true),
                                      registrar.followMembership("d-2", ars, 2500, follow: false)])
        #expect(try await redis.command("SISMEMBER", settings.keys.followers(ars), "d-2") == .integer(1))
        #expect(try await redis.command("SCARD", settings.keys.followers(ars)) == .integer(1))
    }

    /// A device's unregister applied a second time (its cleanup interrupted — Redis away between
    /// the two pipelines — and its entry delivered again) finds what the device had once more,
    /// so the cleanup runs in full; an older unregister after it finds nothing to do.
    @Test func anUnregisterAppliedAgainCleansUpAgain() async throws {
        let rig = try await RegistrarRig(activityTTLSeconds: 3600, deviceTTLSeconds: 3600)
        let (redis, settings, registrar) = (rig.redis, rig.settings, rig.registrar)
        defer { redis.close() }
        let ars = FollowTarget(kind: .team, id: "ars")
        for reply in try await redis.pipeline(registrar.effects(of: .follow(device: "d-9", target: ars), timestampMillis: 1000).first) {
            _ = try reply.orThrow()
        }
        let forget = registrar.effects(of: .unregisterDevice(device: "d-9"), timestampMillis: 2000)
        let first = try await redis.pipeline(forget.first)
        let cleanup = try #require(forget.second?(first))
        #expect(cleanup.count == 1)
        // The cleanup never ran; the entry comes again.
        let again = try await redis.pipeline(forget.first)
        #expect(again == first)
        for reply in try await redis.pipeline(try #require(forget.second?(again))) { _ = try reply.orThrow() }
        #expect(try await redis.command("SISMEMBER", settings.keys.followers(ars), "d-9") == .integer(0))
        let older = try await redis.pipeline(registrar.effects(of: .unregisterDevice(device: "d-9"), timestampMillis: 1500).first)
        #expect(older == [.integer(-1)])
    }

    /// Each device setting holds the newest value given for it: a registration that sets one
    /// setting does not make an older one that set another stale. (Two registrations of a device
    /// applied out of order — by two workers, or in one batch — lost the older one's `broadcast`,
    /// and the device got per-token pushes while on broadcast.)
    @Test func deviceSettingsAreNewestPerSetting() async throws {
        let rig = try await RegistrarRig(activityTTLSeconds: 3600, deviceTTLSeconds: 3600)
        let (redis, settings) = (rig.redis, rig.settings)
        defer { redis.close() }
        func apply(_ registration: Registration, _ ts: Int64) async throws { try await rig.apply(registration, ts) }
        func value(_ field: String) async throws -> String? { try await redis.command("HGET", settings.keys.device("d-1"), field).string }
        let key = try #require(ActivityKey(parsing: "match:1"))
        // The newer registration (env only) is applied first, the older (broadcast, tier) second.
        try await apply(.activityToken(device: "d-1", key: key, activity: "A", token: tokenA, settings: DeviceSettings(env: .development)), 2000)
        try await apply(.device(device: "d-1", settings: DeviceSettings(env: .production, tier: .frequent, broadcast: true)), 1000)
        #expect(try await value("env") == "development", "the newer env stays")
        #expect(try await value("broadcast") == "1", "the older registration's broadcast is the newest given")
        #expect(try await value("tier") == "frequent")
        // An older value of a setting that was set later is ignored; a newer one replaces it.
        try await apply(.device(device: "d-1", settings: DeviceSettings(broadcast: false)), 500)
        #expect(try await value("broadcast") == "1")
        try await apply(.device(device: "d-1", settings: DeviceSettings(broadcast: false)), 3000)
        #expect(try await value("broadcast") == "0")
        // Unregistering the device still removes its token and leaves only its tombstone.
        try await apply(.unregisterDevice(device: "d-1"), 4000)
        #expect(try await redis.command("HEXISTS", settings.keys.tokens(key), "A") == .integer(0))
        #expect(try await redis.command("HKEYS", settings.keys.device("d-1")) == .array([.bulk(Array("gone".utf8))]))
        // A registration older than the unregister changes nothing.
        try await apply(.device(device: "d-1", settings: DeviceSettings(broadcast: true)), 3500)
        #expect(try await redis.command("HKEYS", settings.keys.device("d-1")) == .array([.bulk(Array("gone".utf8))]))
    }

    /// `{key}:direct` holds the live registrations not on broadcast by their own flag, beside
    /// `meta`, through registrations, rotations, a token taken over, unregisters and a key
    /// registered before `direct` was kept (filled from `meta` once).
    @Test func directHoldsTheLiveRegistrationsNotOnBroadcast() async throws {
        let rig = try await RegistrarRig(activityTTLSeconds: 3600, deviceTTLSeconds: 3600)
        let (redis, settings) = (rig.redis, rig.settings)
        defer { redis.close() }
        func apply(_ registration: Registration, _ ts: Int64) async throws { try await rig.apply(registration, ts) }
        let key = try #require(ActivityKey(parsing: "match:d"))
        func direct() async throws -> Set<String> {
            Set(try await redis.command("HKEYS", settings.keys.direct(key)).array?.compactMap(\.string) ?? [])
        }
        let viewer = DeviceSettings(broadcast: true), plain = DeviceSettings(broadcast: false)
        try await apply(.activityToken(device: "v", key: key, activity: "V", token: tokenA, settings: viewer), 1000)
        #expect(try await direct() == ["_"], "kept, and nobody needs a per-token push")
        try await apply(.activityToken(device: "p", key: key, activity: "P", token: tokenB, settings: plain), 1000)
        try await apply(.activityToken(device: "u", key: key, activity: "U", token: String(repeating: "c", count: 64), settings: DeviceSettings()), 1000)
        #expect(try await direct() == ["_", "P", "U"], "off broadcast, or left to the device's setting")
        #expect(try await redis.command("HGET", settings.keys.direct(key), "P") == (try await redis.command("HGET", settings.keys.meta(key), "P")))
        // The viewer moves off broadcast and back; P unregisters; U's token is taken by another activity.
        try await apply(.activityToken(device: "v", key: key, activity: "V", token: tokenA, settings: plain), 2000)
        #expect(try await direct() == ["_", "P", "U", "V"])
        try await apply(.activityToken(device: "v", key: key, activity: "V", token: tokenA, settings: viewer), 3000)
        try await apply(.unregisterActivity(device: "p", key: key, activity: "P"), 3000)
        try await apply(.activityToken(device: "w", key: key, activity: "W", token: String(repeating: "c", count: 64), settings: viewer), 3000)
        #expect(try await direct() == ["_"])
        // A key registered before `direct` was kept: the next registration fills it from meta.
        let old = try #require(ActivityKey(parsing: "match:old"))
        _ = try await redis.command("HSET", settings.keys.meta(old), "A", "1000 a development standard - \(tokenA)", "B",
                                    "1000 b development standard 1 \(tokenB)", "C", "1000 -")
        try await apply(.activityToken(device: "d", key: old, activity: "D", token: String(repeating: "d", count: 64), settings: viewer), 2000)
        #expect(Set(try await redis.command("HKEYS", settings.keys.direct(old)).array?.compactMap(\.string) ?? []) == ["_", "A"])
    }

    /// A device that stays active for days registers an activity per match: its hash keeps the
    /// activities of one activity TTL, not every one it ever had, and unregistering the device
    /// still removes the tokens that are live.
    @Test func deviceHashKeepsOnlyActivitiesWithinTheActivityTTL() async throws {
        let ttl = 3600
        let rig = try await RegistrarRig(activityTTLSeconds: ttl, deviceTTLSeconds: 30 * 86_400)
        let (redis, settings) = (rig.redis, rig.settings)
        defer { redis.close() }
        func apply(_ registration: Registration, _ ts: Int64) async throws { try await rig.apply(registration, ts) }
        let hour: Int64 = 3_600_000
        // 48 activities, one an hour; the app unregisters every other one ten minutes after it
        // started, and never says anything about the others.
        for i in 0..<48 {
            let key = try #require(ActivityKey(parsing: "match:\(i)"))
            try await apply(.activityToken(device: "d-1", key: key, activity: "A\(i)", token: tokenA, settings: DeviceSettings()), Int64(i) * hour)
            if i % 2 == 0 {
                try await apply(.unregisterActivity(device: "d-1", key: key, activity: "A\(i)"), Int64(i) * hour + 600_000)
                #expect(try await redis.command("HEXISTS", settings.keys.device("d-1"), "act:match:\(i) A\(i)") == .integer(0))
            }
        }
        // A late copy of an unregistered activity's registration brings back neither its token
        // nor (for longer than the activity TTL) its field.
        try await apply(.activityToken(device: "d-1", key: try #require(ActivityKey(parsing: "match:46")), activity: "A46", token: tokenA, settings: DeviceSettings()), 46 * hour)
        #expect(try await redis.command("HEXISTS", settings.keys.tokens(try #require(ActivityKey(parsing: "match:46"))), "A46") == .integer(0))
        // A live one, registered last.
        let live = try #require(ActivityKey(parsing: "match:live"))
        try await apply(.activityToken(device: "d-1", key: live, activity: "L", token: tokenB, settings: DeviceSettings()), 48 * hour)
        let fields = try await redis.command("HKEYS", settings.keys.device("d-1")).array?.compactMap(\.string) ?? []
        // Kept: activities registered within the hour before the newest write and not ended (47, and the live one).
        #expect(Set(fields) == ["act:match:47 A47", "act:match:live L"])
        #expect(try await redis.command("HEXISTS", settings.keys.tokens(live), "L") == .integer(1))
        try await apply(.unregisterDevice(device: "d-1"), 48 * hour + 1)
        #expect(try await redis.command("HEXISTS", settings.keys.tokens(live), "L") == .integer(0))
        #expect(try await redis.command("HKEYS", settings.keys.device("d-1")) == .array([.bulk(Array("gone".utf8))]))
    }

    /// One token registered under two activities of a key (the app reinstalled, a second device
    /// id for the same phone): stored once, by the newest registration, whatever order the two
    /// arrive in; unregistering the holder frees the token.
    @Test func aTokenIsHeldByOneActivityOfItsKey() async throws {
        let rig = try await RegistrarRig(activityTTLSeconds: 3600, deviceTTLSeconds: 3600)
        let (redis, settings) = (rig.redis, rig.settings)
        defer { redis.close() }
        func apply(_ registration: Registration, _ ts: Int64) async throws { try await rig.apply(registration, ts) }
        for (order, key) in [(false, "match:t1"), (true, "match:t2")] {
            let k = try #require(ActivityKey(parsing: key))
            let older = Registration.activityToken(device: "old-id", key: k, activity: "A", token: tokenA, settings: DeviceSettings())
            let newer = Registration.activityToken(device: "new-id", key: k, activity: "B", token: tokenA, settings: DeviceSettings())
            if order { try await apply(newer, 2000); try await apply(older, 1000) } else { try await apply(older, 1000); try await apply(newer, 2000) }
            #expect(try await redis.command("HGETALL", settings.keys.tokens(k)) == .array([.bulk(Array("B".utf8)), .bulk(Array(tokenA.utf8))]), "\(key)")
        }
        // The holder unregisters: the token is free for another activity.
        let k = try #require(ActivityKey(parsing: "match:t1"))
        try await apply(.unregisterActivity(device: "new-id", key: k, activity: "B"), 3000)
        #expect(try await redis.command("HLEN", settings.keys.tokenOwners(k)) == .integer(0))
        try await apply(.activityToken(device: "c", key: k, activity: "C", token: tokenA, settings: DeviceSettings()), 4000)
        #expect(try await redis.command("HGET", settings.keys.tokens(k), "C").string == tokenA)
    }

    @Test func malformedEntriesBecomeDeadLettersWithTheirFields() async throws {
        let server = try await RedisServer()
        let redis = server.connection()
        defer { redis.close() }
        let settings = try testSettings(server)
        let stats = try await withWorker(settings) { _ in
            _ = try await xadd(redis, settings.registrationsStream, [("type", "activity.token"), ("ts", "1"), ("device", "d-1"), ("key", "match:1"), ("activity", "A"), ("token", "xyz")])
            _ = try await xadd(redis, settings.feeds[0].stream, [("type", "no.such.type"), ("ts", "1")])
            let binary = try await redis.send(RedisCommand("XADD", settings.feeds[1].stream, "*", "type", "trip.ended", "ts", "1", "trip", [UInt8]([0xff, 0xfe])))
            let binaryID = binary.string ?? ""
            #expect(await eventually { (try? await redis.command("XLEN", settings.deadLetterStream)) == .integer(3) })
            let all = try await redis.send(RedisCommand("XRANGE", settings.deadLetterStream, "-", "+"))
            let entries = try (all.array ?? []).map(StreamReplies.entry)
            func field(_ e: StreamEntry, _ name: String) -> [UInt8]? {
                guard let f = e.fields else { return nil }
                var i = 0
                while i + 1 < f.count { if f[i] == Array(name.utf8) { return f[i + 1] }; i += 2 }
                return nil
            }
            let reasons = entries.compactMap { field($0, "reason").map { String(decoding: $0, as: UTF8.self) } }
            #expect(reasons.contains { $0.contains("token") })
            #expect(reasons.contains { $0.contains("no.such.type") })
            #expect(reasons.contains { $0.contains("UTF-8") })
            // The original fields travel with the dead letter, byte for byte.
            // Ids are per stream: the same id can exist on two streams.
            let bad = entries.first {
                field($0, "id").map { String(decoding: $0, as: UTF8.self) } == binaryID && field($0, "stream") == Array(settings.feeds[1].stream.utf8)
            }
            #expect(bad.flatMap { field($0, "f:trip") } == [0xff, 0xfe])
            #expect(bad != nil)
            #expect(await eventually {
                let a = await drained(redis, settings.feeds[1].stream)
                let b = await drained(redis, settings.registrationsStream)
                return a && b
            })
        }
        #expect(stats.deadLettered == 3 && stats.acked == 3)
    }
}

/// Applies a registration's effects as the worker does (both phases); an error reply fails.
func applied(_ registrar: Registrar, _ redis: RedisConnection, _ registration: Registration, _ ts: Int64) async throws {
    let effects = registrar.effects(of: registration, timestampMillis: ts)
    let replies = try await redis.pipeline(effects.first)
    for reply in replies { _ = try reply.orThrow() }
    if let second = effects.second { _ = try await redis.pipeline(second(replies)) }
    // What the entry's acknowledgement writes once both phases succeeded.
    if !effects.done.isEmpty { _ = try await redis.pipeline(effects.done) }
}

/// A Redis of a test's own and a registrar on it: what the registration-script tests start from.
struct RegistrarRig {
    let server: RedisServer
    let redis: RedisConnection
    let settings: Settings
    let registrar: Registrar

    init(activityTTLSeconds: Int, deviceTTLSeconds: Int) async throws {
        server = try await RedisServer()
        redis = server.connection()
        settings = try testSettings(server)
        registrar = Registrar(keys: settings.keys, activityTTLSeconds: activityTTLSeconds, deviceTTLSeconds: deviceTTLSeconds)
    }

    func apply(_ registration: Registration, _ ts: Int64) async throws { try await applied(registrar, redis, registration, ts) }
}
