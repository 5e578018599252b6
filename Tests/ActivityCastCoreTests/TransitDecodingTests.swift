import ActivityCastCore
import Testing

@Suite("Decoding transit entries")
struct TransitDecodingTests {
    @Test func started() {
        let entry = decoded(.transit, ["type": "trip.started", "ts": "1732233600000", "trip": "t-981", "route": "42",
                                       "headsign": "Central Station", "vehicle": "Bus 7312"])
        #expect(entry == DecodedEntry(type: "trip.started", timestampMillis: 1_732_233_600_000,
                                      body: .transit(.started(trip: "t-981", route: "42", headsign: "Central Station",
                                                              vehicle: "Bus 7312"))))
    }

    @Test func position() {
        let entry = decoded(.transit, ["type": "trip.position", "ts": "1732233700000", "trip": "t-981",
                                       "lat": "51.5074", "lon": "-0.1278", "next_stop": "s-17",
                                       "eta": "1732233900000"])
        #expect(entry?.body == .transit(.position(trip: "t-981", lat: 51.5074, lon: -0.1278, nextStop: "s-17",
                                                  etaMillis: 1_732_233_900_000)))
    }

    @Test func positionWithManyDigitsAndLimits() {
        let entry = decoded(.transit, ["type": "trip.position", "ts": "1", "trip": "t", "lat": "-90",
                                       "lon": "179.99999999999999999"])
        #expect(entry?.body == .transit(.position(trip: "t", lat: -90, lon: 179.99999999999999999, nextStop: nil,
                                                  etaMillis: nil)))
    }

    @Test func eta() {
        let entry = decoded(.transit, ["type": "trip.eta", "ts": "1732233660000", "trip": "t-981", "stop": "s-17",
                                       "eta": "1732233900000", "delay": "120", "stop_name": "Market Sq"])
        #expect(entry?.body == .transit(.eta(trip: "t-981", stop: "s-17", etaMillis: 1_732_233_900_000,
                                             delaySeconds: 120, stopName: "Market Sq")))
    }

    @Test func etaWithNegativeDelay() {
        let entry = decoded(.transit, ["type": "trip.eta", "ts": "1", "trip": "t", "stop": "s", "eta": "2",
                                       "delay": "-45"])
        #expect(entry?.body == .transit(.eta(trip: "t", stop: "s", etaMillis: 2, delaySeconds: -45, stopName: nil)))
    }

    @Test func arriving() {
        let entry = decoded(.transit, ["type": "trip.arriving", "ts": "1732233880000", "trip": "t-981",
                                       "stop": "s-17", "stop_name": "Market Sq", "eta": "1732233900000"])
        #expect(entry?.body == .transit(.arriving(trip: "t-981", stop: "s-17", stopName: "Market Sq",
                                                  etaMillis: 1_732_233_900_000)))
    }

    @Test func departed() {
        let entry = decoded(.transit, ["type": "trip.departed", "ts": "1732233920000", "trip": "t-981",
                                       "stop": "s-17", "stop_name": "Market Sq"])
        #expect(entry?.body == .transit(.departed(trip: "t-981", stop: "s-17", stopName: "Market Sq")))
    }

    @Test func ended() {
        let entry = decoded(.transit, ["type": "trip.ended", "ts": "1732235000000", "trip": "t-981"])
        #expect(entry == DecodedEntry(type: "trip.ended", timestampMillis: 1_732_235_000_000,
                                      body: .transit(.ended(trip: "t-981"))))
    }

    @Test func cancelled() {
        let entry = decoded(.transit, ["type": "trip.cancelled", "ts": "1732233000000", "trip": "t-981",
                                       "reason": "Driver unavailable"])
        #expect(entry?.body == .transit(.cancelled(trip: "t-981", reason: "Driver unavailable")))
    }

    @Test func disruptionOfARouteDefaultsToInfo() {
        let entry = decoded(.transit, ["type": "trip.disruption", "ts": "1", "route": "42",
                                       "message": "Diversion via High St"])
        #expect(entry?.body == .transit(.disruption(route: "42", trip: nil, message: "Diversion via High St",
                                                    severity: .info)))
    }

    @Test func severeDisruptionOfATrip() {
        let entry = decoded(.transit, ["type": "trip.disruption", "ts": "1", "trip": "t-981", "route": "42",
                                       "message": "Vehicle breakdown", "severity": "severe"])
        #expect(entry?.body == .transit(.disruption(route: "42", trip: "t-981", message: "Vehicle breakdown",
                                                    severity: .severe)))
    }
}
