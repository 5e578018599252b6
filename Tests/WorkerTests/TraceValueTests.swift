import ActivityCastCore
import ActivityCastInspect
import Testing

/// A device's view derived from trail records, as plain values: what the trail can't tell is
/// said, never guessed.
@Suite struct TraceValueTests {
    var clock: Int64 = 1000
    mutating func read(_ kind: TrailRecord.Kind, _ fields: [String: String]) -> Tracer.Read {
        clock += 10
        return Tracer.Read(id: "\(clock)-0", atMillis: clock, record: TrailRecord(kind, fields))
    }

    mutating func fanout(_ entry: String, slices: Int, ended: [String], registrationMeanwhile: Bool = false, before: [Tracer.Read] = []) -> [Tracer.Read] {
        var out = before
        out.append(read(.event, ["e": "s/\(entry)", "ty": "match.score", "ts": "5000", "ev": "update", "m": "changed", "a:standard": "p10 7200000 4",
                                 "s:tokens": "standard=10 frequent=10", "pts": "5", "al": "1"]))
        out.append(read(.fanout, ["e": "s/\(entry)", "r": "created", "of": String(slices)]))
        if registrationMeanwhile { out.append(read(.registration, ["what": "token again", "device": "d", "activity": "A"])) }
        for (i, how) in ended.enumerated() { out.append(read(.slice, ["e": "s/\(entry)", "i": String(i), "of": String(slices), "r": how])) }
        return out
    }

    @Test mutating func aFanOutsTokensAreDeliveredOnlyOnceEverySliceEnded() {
        let reg = read(.registration, ["what": "token", "device": "d", "activity": "A", "tier": "standard"])
        let facts = Tracer.DeviceFacts()
        var records = fanout("1-0", slices: 2, ended: ["finished", "finished"], before: [reg])
        #expect(Tracer.device(records, key: "match:1", device: "d", facts: facts).pushes.map(\.fate) == ["delivered"])
        records = fanout("2-0", slices: 2, ended: ["finished"], before: [reg])
        let open = Tracer.device(records, key: "match:1", device: "d", facts: facts).pushes
        #expect(open.map(\.fate) == ["unknown"] && open[0].status == nil)
        records = fanout("3-0", slices: 2, ended: ["finished", "superseded"], before: [reg])
        #expect(Tracer.device(records, key: "match:1", device: "d", facts: facts).pushes.map(\.fate) == ["uncertain"])
        records = fanout("4-0", slices: 1, ended: ["finished"], registrationMeanwhile: true, before: [reg])
        #expect(Tracer.device(records, key: "match:1", device: "d", facts: facts).pushes.map(\.fate) == ["uncertain"])
    }

    @Test mutating func answersNamedOnTheTrailAreThePushesAndARegistrationAfterIsNotSent() {
        let early = read(.event, ["e": "s/0-1", "ty": "match.score", "ts": "4000", "ev": "update", "m": "changed", "a:standard": "p10 7200000 4",
                                  "s:tokens": "standard=10"])
        let reg = read(.registration, ["what": "token", "device": "d", "activity": "A"])
        var records = [early, reg] + fanout("1-0", slices: 1, ended: [])
        records.insert(read(.tokens, ["e": "s/1-0", "what": "retry", "st": "429", "r": "TooManyRequests", "acts": "B A", "al": "1", "n": "1"]), at: records.count)
        records.insert(read(.tokens, ["e": "s/1-0", "what": "delivered", "st": "200", "acts": "A", "al": "0", "n": "2"]), at: records.count)
        records.append(read(.slice, ["e": "s/1-0", "i": "0", "of": "1", "r": "finished"]))
        let view = Tracer.device(records, key: "match:1", device: "d", facts: Tracer.DeviceFacts())
        #expect(view.pushes.map { "\($0.status.map(String.init) ?? "-") \($0.alert)" } == ["429 true", "200 false"], "\(view.pushes)")
        #expect(view.notSent.map(\.entryID) == ["0-1"] && view.notSent[0].reason.contains("not registered"))
        // A coalesced decision: not sent, with why.
        let coalesced = read(.event, ["e": "s/2-0", "ty": "match.score", "ts": "6000", "ev": "update", "m": "changed", "a:standard": "coalesced 0 4",
                                      "w:standard": "within the spacing of routine updates"])
        let later = Tracer.device(records + [coalesced], key: "match:1", device: "d", facts: Tracer.DeviceFacts())
        #expect(later.notSent.last?.reason == "coalesced: within the spacing of routine updates")
    }

    /// An event's record written twice by one delivery (its intent with the merge, its decisions
    /// and first broadcast answers after) is one event; with only its intent (the worker stopped
    /// between), its push is shown with its fate unknown, never as delivered or not sent.
    @Test mutating func anEventsIntentAloneLeavesItsFateUnknown() {
        let reg = read(.registration, ["what": "token", "device": "c", "activity": "C", "broadcast": "1", "env": "development"])
        let intent = read(.event, ["e": "s/1-0", "dv": "x1", "ty": "match.score", "ts": "5000", "ev": "update", "pc": "critical"])
        var decided = intent.record.fields
        decided.merge(["m": "changed", "a:channel": "p10 7200000 4", "s:channel": "10 development=ch1 alert", "pts": "5",
                       "b:development": "200 10 1 ch1 id1 u1 -"]) { _, new in new }
        let decisions = read(.event, decided)
        let both = Tracer.device([reg, intent, decisions], key: "match:1", device: "c", facts: Tracer.DeviceFacts())
        #expect(both.pushes.map { "\($0.via) \($0.status ?? 0) \($0.fate) \($0.channel ?? "-")" } == ["channel 200 delivered ch1"], "\(both.pushes)")
        #expect(Tracer.events([reg, intent, decisions]).count == 1)
        let alone = Tracer.device([reg, intent], key: "match:1", device: "c", facts: Tracer.DeviceFacts())
        #expect(alone.pushes.map(\.fate) == ["unknown"] && alone.notSent.isEmpty, "\(alone)")
        #expect(Tracer.events([reg, intent]).first?.why?.contains("not recorded") == true)
    }
}

