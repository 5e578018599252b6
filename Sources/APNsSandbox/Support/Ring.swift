/// A fixed-capacity ring: appending past capacity overwrites the oldest.
struct Ring<Element> {
    private var items: [Element] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(0, capacity)
        items.reserveCapacity(min(self.capacity, 1024))
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
    }

    var count: Int { items.count }

    /// The newest `limit` items, oldest first.
    func last(_ limit: Int) -> [Element] {
        let n = min(max(0, limit), items.count)
        guard n > 0 else { return [] }
        if items.count < capacity { return Array(items.suffix(n)) }
        // Full: the oldest item is at `next`.
        var out: [Element] = []
        out.reserveCapacity(n)
        var i = (next - n + capacity) % capacity
        for _ in 0..<n {
            out.append(items[i])
            i = i + 1 == capacity ? 0 : i + 1
        }
        return out
    }
}
