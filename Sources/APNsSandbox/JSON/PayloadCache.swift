import Foundation
import Synchronization

/// Remembers the scan of recently seen push bodies, so that a body sent again is not re-scanned.
///
/// Why: a Live Activity update is encoded once and sent, byte for byte, to every token that
/// follows the activity (our worker's fan-out), and load generators such as h2load send one body
/// over and over. Scanning is a large part of a device push's cost; comparing bytes is far
/// cheaper. The verdict depends only on the bytes, and a hit requires the whole body to be equal,
/// so the cache never changes an answer.
///
/// Sixteen slots, chosen by a fingerprint of the body (its length and first and last eight bytes)
/// mixed with the calling thread, so that threads sending the same body use different slots and
/// rarely wait for each other. Each slot keeps its own copy of the bytes in memory it manages
/// itself: looking up touches no reference count shared between threads.
final class PayloadCache: Sendable {
    /// One remembered body. Plain values: the bytes live in `storage`, owned by the slot and only
    /// read or replaced under its lock (hence `@unchecked Sendable`).
    private struct Entry: @unchecked Sendable {
        var storage: UnsafeMutableRawBufferPointer
        var payload: ScannedPayload?
    }

    private final class Slot: Sendable {
        let entry = Mutex<Entry?>(nil)

        deinit {
            entry.withLock { $0?.storage.deallocate() }
        }
    }

    private static let slotCount = 16
    private let slots: [Slot] = (0..<PayloadCache.slotCount).map { _ in Slot() }

    /// `PayloadScanner.scan(body)`, from the cache when the same bytes were scanned last in
    /// their slot.
    func scan(_ body: [UInt8]) -> ScannedPayload? {
        body.withUnsafeBytes { bytes in
            let slot = slots[Self.fingerprint(bytes) & (Self.slotCount - 1)]
            let cached = slot.entry.withLock { entry -> ScannedPayload?? in
                guard let stored = entry?.storage, stored.count == bytes.count,
                      bytes.isEmpty || memcmp(stored.baseAddress!, bytes.baseAddress!, bytes.count) == 0 else { return nil }
                return .some(entry?.payload)
            }
            if let cached { return cached }
            let payload = PayloadScanner.scan(body)
            // The copy is made and the old one freed outside the lock; the lock only swaps them.
            let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 8)
            if !bytes.isEmpty { copy.copyMemory(from: bytes) }
            let fresh = Entry(storage: UnsafeMutableRawBufferPointer(rebasing: copy[0..<bytes.count]), payload: payload)
            let old = slot.entry.withLock { entry -> UnsafeMutableRawBufferPointer? in
                let old = entry?.storage
                entry = fresh
                return old
            }
            old?.deallocate()
            return payload
        }
    }

    private static func fingerprint(_ raw: UnsafeRawBufferPointer) -> Int {
        var h = UInt64(raw.count) &* 0x9E37_79B9_7F4A_7C15
        if raw.count >= 8 {
            h ^= raw.loadUnaligned(as: UInt64.self)
            h = (h ^ (h >> 29)) &* 0xBF58_476D_1CE4_E5B9
            h ^= raw.loadUnaligned(fromByteOffset: raw.count - 8, as: UInt64.self)
        }
        // Threads sending the same body get different slots.
        h ^= UInt64(UInt(bitPattern: Int(bitPattern: UInt(pthread_self())))) &* 0xD6E8_FEB8_6659_FD93
        h = (h ^ (h >> 32)) &* 0x94D0_49BB_1331_11EB
        return Int(truncatingIfNeeded: h >> 40)
    }
}
