/// A fixed-capacity ring: appending past capacity overwrites the oldest. Every item appended gets
/// a sequence number (1, 2, …, never reused), so a reader can page through what it has not seen
/// yet and tell how much was overwritten before it came back.
struct Ring<Element> {
    private var items: [Element] = []
    private var next = 0
    let capacity: Int
    /// Items ever appended: the newest item's sequence number.
    private(set) var appended = 0

    init(capacity: Int) {
        self.capacity = max(0, capacity)
        // All of it now: an array that doubles copies every item at once, and the log is appended
        // to under the sandbox's lock (a 300,000-delivery log stalled every request for
        // milliseconds at each doubling). Untouched, the room costs address space, not memory.
        items.reserveCapacity(self.capacity)
    }

    /// Appends `item`, overwriting the oldest when full.
    mutating func append(_ item: consuming Element) {
        guard capacity > 0 else { return }
        if items.count < capacity {
            items.append(item)
        } else {
            items[next] = item
        }
        next = next + 1 == capacity ? 0 : next + 1
        appended += 1
    }

    var count: Int { items.count }

    /// The sequence number of the oldest item kept (`appended + 1` when empty).
    var oldestSequence: Int { appended - items.count + 1 }

    /// The newest `limit` items, oldest first, with their sequence numbers.
    func last(_ limit: Int) -> [(sequence: Int, item: Element)] {
        let n = min(max(0, limit), items.count)
        return range(from: appended - n + 1, count: n)
    }

    /// Up to `limit` items with sequence numbers above `sequence`, oldest first, and how many
    /// items after `sequence` were already overwritten (lost to this reader).
    func after(_ sequence: Int, limit: Int) -> (items: [(sequence: Int, item: Element)], overwritten: Int) {
        let first = max(sequence + 1, oldestSequence)
        let overwritten = max(0, oldestSequence - (sequence + 1))
        let n = min(max(0, limit), max(0, appended - first + 1))
        return (range(from: first, count: n), overwritten)
    }

    /// `count` items from sequence `first` on (all kept).
    private func range(from first: Int, count n: Int) -> [(sequence: Int, item: Element)] {
        guard n > 0 else { return [] }
        var out: [(sequence: Int, item: Element)] = []
        out.reserveCapacity(n)
        // Item `s` (1-based) sits at index (s - 1) % capacity: the ring fills 0..<capacity, then wraps.
        var i = (first - 1) % capacity
        for s in first..<(first + n) {
            out.append((s, items[i]))
            i = i + 1 == capacity ? 0 : i + 1
        }
        return out
    }
}
