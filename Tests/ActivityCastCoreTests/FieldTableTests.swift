@testable import ActivityCastCore
import Testing

/// The internal name tables that the decoder's speed depends on.
@Suite("Name tables")
struct FieldTableTests {
    @Test func everyFieldNameMapsToItsField() {
        for field in Field.allCases {
            #expect(Field.named(Array(field.name.utf8)) == field)
        }
        #expect(Field.allCases.count <= 64, "FieldSet is a 64-bit mask")
    }

    @Test func everyTypeNameMapsToItsType() {
        for type in EntryType.allCases {
            #expect(EntryType.named(Array(type.name.utf8)) == type)
        }
        // The names are the schema's: every example in docs/schema.md's publish list decodes.
        #expect(Set(EntryType.allCases.map(\.name)).count == EntryType.allCases.count)
        #expect(EntryType.named(Array("trip.disruption".utf8)) == .tripDisruption)
        #expect(Field.named(Array("activity_type".utf8)) == .activityType)
    }

    @Test func nearMissesDoNotMatch() {
        for name in ["", "t", "typ", "types", "Type", "match.score ", "home_score\0", "home_scor", "stop_nam",
                     String(repeating: "a", count: 17), "activity_typ"] {
            #expect(Field.named(Array(name.utf8)) == nil, "\(name)")
        }
        #expect(EntryType.named(Array("match.score\0".utf8)) == nil)
        #expect(EntryType.named(Array("match.scor".utf8)) == nil)
    }

    @Test func printableASCIIWordCheckAgreesWithBytes() {
        var rng = SplitMix64(seed: 7)
        let interesting: [UInt8] = [0x00, 0x09, 0x1F, 0x20, 0x21, 0x41, 0x7E, 0x7F, 0x80, 0xC3, 0xFF]
        for _ in 0..<50_000 {
            let bytes = (0..<8).map { _ in
                Bool.random(using: &rng) ? interesting.randomElement(using: &rng)! : UInt8.random(in: 0x20...0x7E, using: &rng)
            }
            let word = bytes.enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
            #expect(UTF8Scanner.isPrintableASCII(word) == bytes.allSatisfy { (0x20...0x7E).contains($0) }, "\(bytes)")
        }
    }

    @Test func requiredFieldsAreAllowedAndTypeRulesAreConsistent() {
        for type in EntryType.allCases {
            #expect(type.required.contains(.ts), "\(type.name)")
            #expect(type.required.subtracting(type.allowed).isEmpty, "\(type.name)")
            #expect(type.required.bits & type.optional.bits == 0, "\(type.name)")
        }
    }
}
