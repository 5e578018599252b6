import ActivityCastCore
import Foundation
import RedisClient

/// One entry the soak adds to a stream: its fields without `ts` (added when it is sent), and the
/// number of a measured `match.score` (carried in `clock`).
struct SoakEntry: Sendable {
    enum Stream: Sendable { case sports, transit, registrations }
    var stream: Stream
    var fields: [String]
    var number: Int? = nil

    var type: String { fields[1] }

    func command(stream name: String, ts: Int64) -> RedisCommand {
        RedisCommand("XADD", [name, "*", "ts", String(ts)] + fields)
    }
}

/// The soak's feed: what a sports and a transit provider and an app backend add over time, slot
/// by slot (one slot per measured score, `rate` slots a second). Deterministic for a seed.
///
/// - **Matches** (`keys` at any time, broadcast only): slot i is position `i % keys`'s turn, so
///   each match gets a `match.score` every `keys / rate` seconds, numbered in `clock` (that is what
///   the bench measures). Every 20th slot also carries a clock tick (routine) or, one in ten, a
///   moment (goal, red card, penalty; critical, with an alert) for the position half a round
///   away, so no two events of a match are closer than half a round (an event processed after a
///   newer one of its key is stale and would not be sent as itself). `endsPerMinute` matches end
///   (`match.full_time`) and their position takes a new match: a viewer's registration on
///   broadcast (so the key has channels even when every follower is out of push-to-start budget),
///   `match.scheduled` (its channels are made) and `match.started` (push-to-start to the
///   followers of both teams) in its next turns, then scores.
/// - **Audience matches** (`audienceKeys`, besides the others): each has `audienceTokens`
///   activity tokens registered (a third on the broadcast channel, the rest per token, both
///   environments, both tiers) and gets an event every 5 s (a numbered score, then a clock tick).
///   `churnPerSecond` of their registrations are replaced each second (unregister the activity,
///   register a new one with a new token, same device). Each lasts `audienceSeconds`: then it ends,
///   its devices unregister, and a new match with a new audience takes its place.
/// - **Fans** follow one or two of `teams` teams and have push-to-start tokens (on broadcast,
///   iOS 18); two a second unfollow a team and follow another.
/// - **Trips** (`trips` at any time): a step every 4 s (positions, ETAs, arriving, departed),
///   2 to 4 minutes each, then `trip.ended` and a new trip (`trip.started`: push-to-start to the
///   route's riders; the riders off broadcast then register their activity token, and unregister
///   it at the end). A route-wide `trip.disruption` every 30 s.
///
/// Registrations wait in a queue that `100 + 4 × churnPerSecond` a second leave, as an app
/// backend would send them: the 4,000 unregisters and registrations of an audience match that
/// ends and the next that starts trickle in over about a minute (devices dismiss activities and
/// users open the app over minutes), not as a burst.
struct SoakFeed {
    struct Options: Sendable {
        var rate: Double
        var keys: Int
        var endsPerMinute: Double
        var audienceKeys: Int
        var audienceTokens: Int
        var audienceSeconds: Double
        var churnPerSecond: Double
        var teams: Int
        var fans: Int
        var trips: Int
        var routes: Int
        var riders: Int
    }

    /// `viewer`: the new match's viewer on broadcast registers (its next turn schedules it).
    enum Phase { case viewer, scheduled, live, ended }

    struct Match {
        var id: String
        var home: Int
        var away: Int
        var homeScore = 0
        var awayScore = 0
        var minute = 1
        var phase = Phase.live
        var ending = false
    }

    struct Audience {
        var match: Match
        /// Each member's activity generation (a new activity and token each time it is replaced).
        var generations: [UInt32]
        var endsAtSlot: Int
        var step = 0
    }

    struct Trip {
        var id = ""
        var route = 0
        var step = 0
        var life = 0
        var live = false
        var serial = 0
    }

    let options: Options
    /// A run id in every name, so runs never share keys.
    let run: String
    private var rng: SplitMix64
    private let tokenSeed: UInt64
    private(set) var nextNumber = 0
    private var serial = 0
    private var viewers = 0
    private var matches: [Match] = []
    private var audiences: [Audience] = []
    private var tripList: [Trip] = []
    private var fanTeams: [[Int]] = []
    private var extras = 0
    private var queue: [SoakEntry] = []
    private var queueHead = 0
    /// Registrations the queue may send: `registrationsPerSlot` more each slot, one per entry sent.
    private var registrationCredit = 0.0
    /// Entries by type, for the report.
    private(set) var counts: [String: Int] = [:]

    private let extraEvery = 20
    private let endEvery: Int
    private let audienceEvery: Int
    private let audienceLife: Int
    private let churnEvery: Int
    private let followChurnEvery: Int
    private let tripEvery: Int
    private let disruptionEvery: Int
    private let registrationsPerSlot: Double

    init(options o: Options, seed: UInt64) {
        options = o
        rng = SplitMix64(seed: seed)
        tokenSeed = rng.next()
        run = String(rng.next() % 1_000_000_000, radix: 36)
        let r = o.rate
        endEvery = o.endsPerMinute > 0 ? max(1, Int(r * 60 / o.endsPerMinute)) : 0
        audienceEvery = o.audienceKeys > 0 ? max(1, Int(r * 5 / Double(o.audienceKeys))) : 0
        audienceLife = max(1, Int(o.audienceSeconds * r))
        churnEvery = o.churnPerSecond > 0 ? max(1, Int(r / o.churnPerSecond)) : 0
        followChurnEvery = max(1, Int(r / 2))
        tripEvery = o.trips > 0 ? max(1, Int(r * 4 / Double(o.trips))) : 0
        disruptionEvery = max(1, Int(r * 30))
        registrationsPerSlot = (100 + 4 * o.churnPerSecond) / r
        for _ in 0..<o.keys { matches.append(newMatch()) }
        for a in 0..<o.audienceKeys {
            audiences.append(Audience(match: newMatch(), generations: Array(repeating: 0, count: o.audienceTokens),
                                      endsAtSlot: audienceLife * (a + 1) / o.audienceKeys))
        }
        tripList = Array(repeating: Trip(), count: o.trips)
        for f in 0..<o.fans {
            let first = f % o.teams
            fanTeams.append(f % 2 == 0 ? [first] : [first, (first + 1 + Int(rng.next() % UInt64(max(1, o.teams - 1)))) % o.teams])
        }
    }

    // MARK: - Before the soak

    /// Fans (push-to-start tokens, follows), riders, and every audience match's tokens.
    mutating func setupRegistrations() -> [SoakEntry] {
        var out: [SoakEntry] = []
        for f in 0..<options.fans {
            out.append(registration("start.token", "device", "f\(f)", "activity_type", "MatchActivityAttributes", "token", token(1, f, 0, 0),
                                    "env", env(f), "tier", f % 4 == 0 ? "frequent" : "standard", "broadcast", "true"))
            for t in fanTeams[f] { out.append(registration("follow", "device", "f\(f)", "target", "team:t\(t)")) }
        }
        for r in 0..<options.riders {
            out.append(registration("start.token", "device", "r\(r)", "activity_type", "TripActivityAttributes", "token", token(2, r, 0, 0),
                                    "env", env(r), "broadcast", r % 10 >= 3 ? "true" : "false"))
            out.append(registration("follow", "device", "r\(r)", "target", "route:r\(r % max(1, options.routes))"))
        }
        for a in audiences.indices { out += audienceRegistrations(a) }
        // A viewer on broadcast for each match live from the start (its activity started by the
        // app on the key's channel): a key nobody follows on broadcast has no channel, and every
        // score is measured by its broadcasts. Matches that start later register theirs first
        // (`viewer`): their followers may all be out of push-to-start budget.
        for (i, m) in matches.enumerated() { out.append(viewer(i, m)) }
        return out
    }

    /// A device whose app started the match's activity on its channel (`broadcast`).
    private mutating func viewer(_ slot: Int, _ m: Match) -> SoakEntry {
        viewers += 1
        return registration("activity.token", "device", "v\(slot)", "key", "match:\(m.id)", "activity", "V\(m.id)",
                            "token", token(5, slot, viewers, 0), "env", env(slot), "broadcast", "true")
    }

    /// `match.scheduled` for every match live from the start (they are already under way: no
    /// start), which makes their channels (their viewers on broadcast registered before).
    mutating func schedules(nowMillis: Int64) -> [SoakEntry] {
        var out: [SoakEntry] = []
        for m in matches + audiences.map(\.match) { out.append(scheduled(m, kickoff: nowMillis - 1_800_000)) }
        return out
    }

    /// One numbered score per match (the warm-up: the bench checks each reaches every channel).
    mutating func warmScores() -> [SoakEntry] {
        var out: [SoakEntry] = []
        for i in matches.indices { out.append(onMatch(i) { $0.score(&$1) }) }
        for a in audiences.indices { out.append(onAudience(a) { $0.score(&$1) }) }
        return out
    }

    // MARK: - The soak

    /// The entries of slot `i`, due at `i / rate` s; `nowMillis` is the wall clock (for times
    /// the events carry).
    mutating func slot(_ i: Int, nowMillis: Int64) -> [SoakEntry] {
        var out: [SoakEntry] = []
        let k = options.keys
        if k > 0 {
            out.append(primary(i % k, nowMillis: nowMillis))
            if i % extraEvery == extraEvery / 2 { if let e = extra((i % k + k / 2) % k) { out.append(e) } }
            if endEvery > 0, i % endEvery == endEvery - 1 { markEnding() }
        }
        if audienceEvery > 0, i % audienceEvery == 0 {
            out.append(audienceStep((i / audienceEvery) % audiences.count, slot: i, nowMillis: nowMillis))
        }
        if churnEvery > 0, i % churnEvery == churnEvery / 3 { churnAudience() }
        if options.fans > 0, i % followChurnEvery == followChurnEvery / 4 { churnFollow() }
        if tripEvery > 0, i % tripEvery == tripEvery / 5 { out.append(tripStep((i / tripEvery) % tripList.count, nowMillis: nowMillis)) }
        if options.routes > 0, i % disruptionEvery == disruptionEvery / 2 {
            let route = Int(rng.next() % UInt64(options.routes))
            out.append(count(SoakEntry(stream: .transit, fields: ["type", "trip.disruption", "route", "r\(route)", "message", "Diversion on route r\(route)",
                                                                    "severity", rng.next() % 2 == 0 ? "info" : "warning"])))
        }
        registrationCredit = min(registrationCredit + registrationsPerSlot, 10)
        while registrationCredit >= 1, queueHead < queue.count {
            out.append(queue[queueHead])
            queueHead += 1
            registrationCredit -= 1
        }
        if queueHead > 4096, queueHead * 2 > queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
        return out
    }

    /// Registrations waiting to be sent.
    var queued: Int { queue.count - queueHead }

    private mutating func primary(_ p: Int, nowMillis: Int64) -> SoakEntry {
        switch matches[p].phase {
        case .live where matches[p].ending:
            matches[p].phase = .ended
            let m = matches[p]
            return count(SoakEntry(stream: .sports, fields: ["type", "match.full_time", "match", m.id, "home_score", "\(m.homeScore)", "away_score", "\(m.awayScore)"]))
        case .live:
            return onMatch(p) { $0.score(&$1) }
        case .ended:
            matches[p] = newMatch()
            matches[p].phase = .viewer
            return viewer(p, matches[p])
        case .viewer:
            matches[p].phase = .scheduled
            return scheduled(matches[p], kickoff: nowMillis + 60_000)
        case .scheduled:
            matches[p].phase = .live
            return started(matches[p])
        }
    }

    private mutating func extra(_ q: Int) -> SoakEntry? {
        guard matches[q].phase == .live, !matches[q].ending else { return nil }
        extras += 1
        return extras % 10 == 0 ? onMatch(q) { $0.moment(&$1) } : onMatch(q) { $0.tick(&$1) }
    }

    private mutating func markEnding() {
        for _ in 0..<8 {
            let p = Int(rng.next() % UInt64(matches.count))
            if matches[p].phase == .live, !matches[p].ending { matches[p].ending = true; return }
        }
    }

    private mutating func audienceStep(_ a: Int, slot i: Int, nowMillis: Int64) -> SoakEntry {
        switch audiences[a].match.phase {
        case .live where i >= audiences[a].endsAtSlot:
            audiences[a].match.phase = .ended
            let m = audiences[a].match
            for j in 0..<options.audienceTokens {
                enqueue(registration("unregister", "device", member(a, j), "key", "match:\(m.id)", "activity", activity(a, j, audiences[a].generations[j])))
            }
            return count(SoakEntry(stream: .sports, fields: ["type", "match.full_time", "match", m.id, "home_score", "\(m.homeScore)", "away_score", "\(m.awayScore)"]))
        case .live:
            audiences[a].step += 1
            return audiences[a].step % 2 == 1 ? onAudience(a) { $0.score(&$1) } : onAudience(a) { $0.tick(&$1) }
        case .ended:
            audiences[a].match = newMatch()
            audiences[a].match.phase = .viewer
            for j in 0..<options.audienceTokens { audiences[a].generations[j] &+= 1 }
            for e in audienceRegistrations(a) { enqueue(e) }
            return viewer(matches.count + a, audiences[a].match)
        case .viewer:
            audiences[a].match.phase = .scheduled
            return scheduled(audiences[a].match, kickoff: nowMillis + 60_000)
        case .scheduled:
            audiences[a].match.phase = .live
            audiences[a].endsAtSlot = i + audienceLife
            audiences[a].step = 0
            return started(audiences[a].match)
        }
    }

    private mutating func churnAudience() {
        guard options.audienceTokens > 0 else { return }
        let live = audiences.indices.filter { audiences[$0].match.phase == .live }
        guard !live.isEmpty else { return }
        let a = live[Int(rng.next() % UInt64(live.count))]
        let j = Int(rng.next() % UInt64(options.audienceTokens))
        let key = "match:\(audiences[a].match.id)"
        enqueue(registration("unregister", "device", member(a, j), "key", key, "activity", activity(a, j, audiences[a].generations[j])))
        audiences[a].generations[j] &+= 1
        enqueue(memberRegistration(a, j, key: key))
    }

    private mutating func churnFollow() {
        let f = Int(rng.next() % UInt64(fanTeams.count))
        let old = fanTeams[f].removeFirst()
        var new = Int(rng.next() % UInt64(options.teams))
        if new == old { new = (new + 1) % options.teams }  // same target, same ts: no order between the two
        enqueue(registration("unfollow", "device", "f\(f)", "target", "team:t\(old)"))
        fanTeams[f].append(new)
        if !fanTeams[f].dropLast().contains(new) { enqueue(registration("follow", "device", "f\(f)", "target", "team:t\(new)")) }
    }

    private mutating func tripStep(_ t: Int, nowMillis: Int64) -> SoakEntry {
        var trip = tripList[t]
        defer { tripList[t] = trip }
        guard trip.live else {
            serial += 1
            trip = Trip(id: "\(run)-t\(serial)", route: Int(rng.next() % UInt64(max(1, options.routes))), step: 0,
                        life: 30 + Int(rng.next() % 31), live: true, serial: serial)
            for r in offBroadcastRiders(trip.route) {
                enqueue(registration("activity.token", "device", "r\(r)", "key", "trip:\(trip.id)", "activity", "T\(r)s\(trip.serial)",
                                     "token", token(3, r, trip.serial, 0), "env", env(r), "broadcast", "false"))
            }
            return count(SoakEntry(stream: .transit, fields: ["type", "trip.started", "trip", trip.id, "route", "r\(trip.route)",
                                                               "headsign", "Central Station", "vehicle", "bus-\(trip.serial % 500)"]))
        }
        trip.step += 1
        if trip.step >= trip.life {
            trip.live = false
            for r in offBroadcastRiders(trip.route) {
                enqueue(registration("unregister", "device", "r\(r)", "key", "trip:\(trip.id)", "activity", "T\(r)s\(trip.serial)"))
            }
            return count(SoakEntry(stream: .transit, fields: ["type", "trip.ended", "trip", trip.id]))
        }
        let stop = "s\(trip.step / 6)", name = "Stop \(trip.step / 6)"
        let fields: [String]
        switch trip.step % 6 {
        case 2: fields = ["type", "trip.eta", "trip", trip.id, "stop", stop, "eta", "\(nowMillis + 120_000)", "delay", "\(Int(rng.next() % 240) - 60)", "stop_name", name]
        case 4: fields = ["type", "trip.arriving", "trip", trip.id, "stop", stop, "stop_name", name, "eta", "\(nowMillis + 30_000)"]
        case 5: fields = ["type", "trip.departed", "trip", trip.id, "stop", stop, "stop_name", name]
        default:
            let lat = 52.3 + Double(trip.step) * 0.001, lon = 4.85 + Double(trip.route) * 0.01
            fields = ["type", "trip.position", "trip", trip.id, "lat", String(format: "%.5f", lat), "lon", String(format: "%.5f", lon),
                      "next_stop", stop, "eta", "\(nowMillis + 90_000)"]
        }
        return count(SoakEntry(stream: .transit, fields: fields))
    }

    // MARK: - Entries

    /// `make` with position p's match, which it may change (an entry's numbers and counts
    /// change the feed too).
    private mutating func onMatch(_ p: Int, _ make: (inout SoakFeed, inout Match) -> SoakEntry) -> SoakEntry {
        var m = matches[p]
        let e = make(&self, &m)
        matches[p] = m
        return e
    }

    private mutating func onAudience(_ a: Int, _ make: (inout SoakFeed, inout Match) -> SoakEntry) -> SoakEntry {
        var m = audiences[a].match
        let e = make(&self, &m)
        audiences[a].match = m
        return e
    }

    private mutating func newMatch() -> Match {
        serial += 1
        let t = max(2, options.teams)
        let home = Int(rng.next() % UInt64(t))
        let away = (home + 1 + Int(rng.next() % UInt64(t - 1))) % t
        return Match(id: "\(run)-m\(serial)", home: home, away: away)
    }

    private mutating func scheduled(_ m: Match, kickoff: Int64) -> SoakEntry {
        count(SoakEntry(stream: .sports, fields: ["type", "match.scheduled", "match", m.id, "home", "t\(m.home)", "away", "t\(m.away)",
                                                  "kickoff", "\(kickoff)", "competition", "Soak League"]))
    }

    private mutating func started(_ m: Match) -> SoakEntry {
        count(SoakEntry(stream: .sports, fields: ["type", "match.started", "match", m.id, "home", "t\(m.home)", "away", "t\(m.away)",
                                                  "competition", "Soak League"]))
    }

    private mutating func score(_ m: inout Match) -> SoakEntry {
        let number = nextNumber
        nextNumber += 1
        return count(SoakEntry(stream: .sports, fields: ["type", "match.score", "match", m.id, "home_score", "\(m.homeScore)", "away_score", "\(m.awayScore)",
                                                         "clock", String(number), "period", m.minute <= 45 ? "first_half" : "second_half"],
                               number: number))
    }

    private mutating func tick(_ m: inout Match) -> SoakEntry {
        m.minute = min(90, m.minute + 1)
        return count(SoakEntry(stream: .sports, fields: ["type", "match.clock", "match", m.id, "clock", "\(m.minute)'",
                                                         "period", m.minute <= 45 ? "first_half" : "second_half"]))
    }

    private mutating func moment(_ m: inout Match) -> SoakEntry {
        let side = rng.next() % 2 == 0 ? "home" : "away"
        let player = "Player \(rng.next() % 30)"
        let clock = "\(m.minute)'"
        switch rng.next() % 5 {
        case 0:
            return count(SoakEntry(stream: .sports, fields: ["type", "match.moment", "match", m.id, "moment", "red_card", "team", side, "player", player, "clock", clock]))
        case 1:
            return count(SoakEntry(stream: .sports, fields: ["type", "match.moment", "match", m.id, "moment", "penalty", "team", side, "player", player, "clock", clock]))
        default:
            if side == "home" { m.homeScore += 1 } else { m.awayScore += 1 }
            return count(SoakEntry(stream: .sports, fields: ["type", "match.moment", "match", m.id, "moment", "goal", "team", side, "player", player, "clock", clock,
                                                             "home_score", "\(m.homeScore)", "away_score", "\(m.awayScore)"]))
        }
    }

    private mutating func audienceRegistrations(_ a: Int) -> [SoakEntry] {
        let key = "match:\(audiences[a].match.id)"
        return (0..<options.audienceTokens).map { memberRegistration(a, $0, key: key) }
    }

    /// Member j of audience a: a third on the broadcast channel, both environments, one in four
    /// with frequent updates.
    private mutating func memberRegistration(_ a: Int, _ j: Int, key: String) -> SoakEntry {
        let g = audiences[a].generations[j]
        return registration("activity.token", "device", member(a, j), "key", key, "activity", activity(a, j, g), "token", token(4, a, j, g),
                            "env", env(j), "tier", j % 4 == 0 ? "frequent" : "standard", "broadcast", j % 3 == 0 ? "true" : "false")
    }

    private func member(_ a: Int, _ j: Int) -> String { "a\(a)x\(j)" }
    private func activity(_ a: Int, _ j: Int, _ g: UInt32) -> String { "A\(a)x\(j)g\(g)" }
    private func env(_ n: Int) -> String { n % 2 == 0 ? "development" : "production" }

    private func offBroadcastRiders(_ route: Int) -> [Int] {
        stride(from: route, to: options.riders, by: max(1, options.routes)).filter { $0 % 10 < 3 }
    }

    private mutating func registration(_ type: String, _ fields: String...) -> SoakEntry {
        count(SoakEntry(stream: .registrations, fields: ["type", type] + fields))
    }

    private mutating func enqueue(_ e: SoakEntry) { queue.append(e) }

    private mutating func count(_ e: SoakEntry) -> SoakEntry {
        counts[e.type, default: 0] += 1
        return e
    }

    /// 64 hex digits, unique per (kind, a, b, generation) within a run.
    private func token(_ kind: UInt64, _ a: Int, _ b: Int, _ g: UInt32) -> String {
        hex(tokenSeed) + hex(kind << 56 | UInt64(a)) + hex(UInt64(b)) + hex(UInt64(g))
    }

    private func hex(_ v: UInt64) -> String {
        let s = String(v, radix: 16)
        return String(repeating: "0", count: 16 - s.count) + s
    }
}
