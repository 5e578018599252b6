import ActivityCastCore

/// A 64-bit hash of what a JSON value means, not of how it is spelled: object members in any
/// order, whitespace, string escapes (`"\u0041"` is `"A"`) and number spellings (`1`, `1.0`,
/// `1e0`) hash the same; a key given twice counts once, with its last value (as a decoder reads
/// it). Strings compare by code points. Values that differ hash differently except by a 2⁻⁶⁴
/// chance: the device views compare content-states and alerts by it (`DeviceView`), without
/// parsing anything under the sandbox's lock.
///
/// Computed with the payload's scan, so a body sent again (`PayloadCache`) costs nothing more.
enum JSONFingerprint {
    /// The fingerprint of the valid JSON value at `range` of `body` (a range `PayloadScanner`
    /// found), or nil if it isn't one.
    static func of(_ body: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> UInt64? {
        var reader = JSONReader(UnsafeBufferPointer(rebasing: body[range]))
        guard let h = value(&reader) else { return nil }
        reader.skipWhitespace()
        return reader.atEnd ? h : nil
    }

    private static let stringTag: UInt64 = 0x5354_5249_4E47_0001
    private static let numberTag: UInt64 = 0x4E55_4D42_4552_0002
    private static let doubleTag: UInt64 = 0x444F_5542_4C45_0003
    private static let arrayTag: UInt64 = 0x4152_5241_5900_0004
    private static let objectTag: UInt64 = 0x4F42_4A45_4354_0005
    private static let trueHash = SplitMix64.mix(0x5452_5545_0000_0006)
    private static let falseHash = SplitMix64.mix(0x4641_4C53_4500_0007)
    private static let nullHash = SplitMix64.mix(0x4E55_4C4C_0000_0008)

    private static func value(_ reader: inout JSONReader) -> UInt64? {
        reader.skipWhitespace()
        guard !reader.atEnd else { return nil }
        switch reader.current {
        case UInt8(ascii: "\""):
            guard let (range, escaped) = reader.scanString() else { return nil }
            return string(reader, range, escaped: escaped)
        case UInt8(ascii: "{"):
            // Members in any order: their hashes are added. A key given twice keeps its last
            // value, as `JSONValue.parse` and Foundation's decoders do.
            var members: [UInt64: UInt64] = [:]
            guard var more = reader.enterObject() else { return nil }
            while more {
                guard let (key, escaped) = reader.memberKey() else { return nil }
                let keyHash = string(reader, key, escaped: escaped)
                guard let v = value(&reader), let next = reader.nextMember() else { return nil }
                members[keyHash] = v
                more = next
            }
            var sum: UInt64 = 0
            for (k, v) in members { sum &+= SplitMix64.mix(k ^ SplitMix64.mix(v &+ objectTag)) }
            return SplitMix64.mix(objectTag ^ sum ^ (UInt64(members.count) &* 0x9E37_79B9_7F4A_7C15))
        case UInt8(ascii: "["):
            var h = arrayTag
            guard var more = reader.enterArray() else { return nil }
            while more {
                guard let v = value(&reader), let next = reader.nextElement() else { return nil }
                h = SplitMix64.mix(h ^ v) &+ 0x9E37_79B9_7F4A_7C15
                more = next
            }
            return SplitMix64.mix(h)
        case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
            let first = reader.current
            guard reader.skipValue() else { return nil }
            return first == UInt8(ascii: "t") ? trueHash : first == UInt8(ascii: "f") ? falseHash : nullHash
        default:
            guard let (range, integer) = reader.scanNumber() else { return nil }
            // An integral value that fits Int64, however spelled, hashes as that integer;
            // anything else as its Double.
            if integer, let i = exactInteger(reader, range) { return SplitMix64.mix(numberTag ^ UInt64(bitPattern: i)) }
            guard let d = reader.double(range, integer: false) else { return nil }
            if d == d.rounded(), d > -9.2e18, d < 9.2e18 {
                return SplitMix64.mix(numberTag ^ UInt64(bitPattern: Int64(d)))
            }
            return SplitMix64.mix(doubleTag ^ d.bitPattern)
        }
    }

    /// A string's decoded UTF-8 bytes, hashed.
    private static func string(_ reader: JSONReader, _ range: Range<Int>, escaped: Bool) -> UInt64 {
        if escaped {
            var s = reader.string(range, escaped: true)
            return s.withUTF8 { bytes(UnsafeRawBufferPointer($0)) }
        }
        return bytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: reader.bytes[range])))
    }

    /// An integer token's value if it fits Int64 (as `JSONValue.parse` reads it), else nil.
    private static func exactInteger(_ reader: JSONReader, _ range: Range<Int>) -> Int64? {
        var k = range.lowerBound
        let negative = reader.bytes[k] == UInt8(ascii: "-")
        if negative { k += 1 }
        var value: Int64 = 0
        while k < range.upperBound {
            let digit = Int64(reader.bytes[k] &- 0x30)
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) = negative ? times10.subtractingReportingOverflow(digit) : times10.addingReportingOverflow(digit)
            if o1 || o2 { return nil }
            value = next
            k += 1
        }
        return value
    }

    private static func bytes(_ raw: UnsafeRawBufferPointer) -> UInt64 {
        var h = stringTag ^ (UInt64(raw.count) &* 0x9E37_79B9_7F4A_7C15)
        var i = 0
        while i + 8 <= raw.count {
            h = SplitMix64.mix(h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            i += 8
        }
        if i < raw.count {
            var tail: UInt64 = 0
            var shift: UInt64 = 0
            while i < raw.count { tail |= UInt64(raw[i]) << shift; shift += 8; i += 1 }
            h = SplitMix64.mix(h ^ tail ^ 0x8000_0000_0000_0000)
        }
        return SplitMix64.mix(h)
    }
}
