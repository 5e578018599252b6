import ActivityCastCore
import Testing

@Suite("Redis keys")
struct RedisKeysTests {
    let keys = RedisKeys()
    let match = ActivityKey(kind: .match, id: "4711")

    @Test func layoutWithDefaultPrefix() {
        #expect(keys.tokens(match) == "ac:{match:4711}:tokens")
        #expect(keys.meta(match) == "ac:{match:4711}:meta")
        #expect(keys.keysIndex == "ac:keys")
        #expect(keys.device("d-1") == "ac:device:{d-1}")
        #expect(keys.followers(FollowTarget(kind: .team, id: "ars")) == "ac:{team:ars}:followers")
        #expect(keys.followers(FollowTarget(kind: .route, id: "42")) == "ac:{route:42}:followers")
        #expect(keys.startTokens(activityType: "MatchActivityAttributes") == "ac:{starttokens:MatchActivityAttributes}:devices")
        #expect(keys.targets == "ac:targets")
        #expect(keys.counters == "ac:counters")
        #expect(keys.tokens(ActivityKey(kind: .trip, id: "t-981")) == "ac:{trip:t-981}:tokens")
    }

    @Test func customPrefix() {
        let staging = RedisKeys(prefix: "stg:ac")
        #expect(staging.tokens(match) == "stg:ac:{match:4711}:tokens")
        #expect(staging.device("d-1") == "stg:ac:device:{d-1}")
        #expect(staging.keysIndex == "stg:ac:keys")
        #expect(staging.targets == "stg:ac:targets")
        #expect(staging.counters == "stg:ac:counters")
        #expect(staging.startTokens(activityType: "T") == "stg:ac:{starttokens:T}:devices")
    }

    @Test func perKeyDataSharesOneHashTag() {
        // Redis Cluster hashes only what is between the first "{" and the next "}".
        func hashTag(_ key: String) -> Substring? {
            guard let open = key.firstIndex(of: "{"),
                  let close = key[open...].firstIndex(of: "}") else { return nil }
            return key[key.index(after: open)..<close]
        }
        #expect(hashTag(keys.tokens(match)) == "match:4711")
        #expect(hashTag(keys.meta(match)) == hashTag(keys.tokens(match)))
        #expect(hashTag(keys.device("d-1")) == "d-1")
        let ars = FollowTarget(kind: .team, id: "ars")
        #expect(hashTag(keys.followers(ars)) == hashTag(keys.followerTimes(ars)))
        #expect(hashTag(keys.startTokens(activityType: "T")) == hashTag(keys.startTokenTimes(activityType: "T")))
    }

    @Test func activityTypesAndParsingBack() {
        #expect(keys.activityTypes == "ac:activity-types")
        #expect(ActivityKey(parsing: "match:4711") == match)
        #expect(FollowTarget(parsing: "route:42") == FollowTarget(kind: .route, id: "42"))
        #expect(ActivityKey(parsing: "team:ars") == nil)
        #expect(ActivityKey(parsing: "match:{x}") == nil)
        #expect(FollowTarget(parsing: "team:") == nil)
    }
}
