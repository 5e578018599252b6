/// How a pipeline is cut up for a cluster: the hash slot each command goes by, its commands
/// grouped by node in pipeline order, and the nodes' replies put back in the caller's order.
/// Pure: tested with plain commands and replies.
package struct ClusterPipelinePlan: Sendable, Equatable {
    /// Per command, the slot it is routed by; nil for a command that may go to any node (a
    /// pipeline without a single keyed command).
    package let slots: [Int?]

    /// Each command's slot from its keys (`CommandKeys`). A command without keys goes with its
    /// neighbours: the keyed command before it (a `WAIT` follows the writes it waits for), or, at
    /// the start of the pipeline, the one after it. A transaction (`MULTI` … `EXEC`/`DISCARD`)
    /// goes as a whole to its keys' one slot.
    ///
    /// Throws `unroutable` for a command whose keys span slots (Redis would answer `CROSSSLOT`), a
    /// transaction whose commands do, and a command `CommandKeys` doesn't know.
    package init(_ commands: [RedisCommand]) throws(RedisError) {
        var slots: [Int?] = []
        slots.reserveCapacity(commands.count)
        for command in commands { slots.append(try ClusterPipelinePlan.slot(of: command)) }

        // Transactions: MULTI up to EXEC or DISCARD (or the end) share one slot.
        var index = 0
        while index < commands.count {
            // (The length first: `name` makes a String, and this runs for every command sent.)
            guard commands[index].arguments[0].count == 5, commands[index].name == "MULTI" else { index += 1; continue }
            var end = index + 1
            while end < commands.count, !["EXEC", "DISCARD"].contains(commands[end].name) { end += 1 }
            let last = min(end, commands.count - 1)
            let keyed = Set(slots[index...last].compactMap { $0 })
            guard keyed.count <= 1 else {
                throw RedisError(.unroutable, "a transaction's keys span \(keyed.count) hash slots: a Redis Cluster runs MULTI … EXEC on one slot only (use a {hash tag})")
            }
            if let slot = keyed.first { for i in index...last { slots[i] = slot } }
            index = last + 1
        }

        // Keyless commands: the slot before them, else the first one after.
        var previous: Int? = nil
        var unassigned: [Int] = []
        for i in slots.indices {
            if let slot = slots[i] {
                for j in unassigned { slots[j] = slot }
                unassigned = []
                previous = slot
            } else if let previous {
                slots[i] = previous
            } else {
                unassigned.append(i)
            }
        }
        self.slots = slots
    }

    package init(slots: [Int?]) { self.slots = slots }

    /// The one hash slot of a command's keys; nil for a command without keys.
    package static func slot(of command: RedisCommand) throws(RedisError) -> Int? {
        guard let keys = command.keys else {
            throw RedisError(.unroutable, "\(command.name): not in CommandKeys.table, so a cluster client can't tell which node it goes to")
        }
        guard let first = keys.first else { return nil }
        let slot = CommandKeys.slot(first)
        for key in keys.dropFirst() where CommandKeys.slot(key) != slot {
            throw RedisError(.unroutable, "\(command.name): its keys span hash slots (\(slot) and \(CommandKeys.slot(key))), which a Redis Cluster refuses (CROSSSLOT); give keys used together one {hash tag}")
        }
        return slot
    }

    /// `indices` grouped by where each goes, each group in pipeline order, the groups in the
    /// order their first command appears.
    package static func group<Node: Hashable>(_ indices: [Int], by node: (Int) -> Node) -> [(node: Node, indices: [Int])] {
        var order: [Node: Int] = [:]
        var groups: [(node: Node, indices: [Int])] = []
        for i in indices {
            let n = node(i)
            if let g = order[n] {
                groups[g].indices.append(i)
            } else {
                order[n] = groups.count
                groups.append((n, [i]))
            }
        }
        return groups
    }

    /// Puts one group's replies (one per index, in the group's order) into `replies`, the
    /// caller's order.
    package static func merge(_ groupReplies: [RESPValue], at indices: [Int], into replies: inout [RESPValue?]) {
        precondition(groupReplies.count == indices.count, "a node answered \(groupReplies.count) replies for \(indices.count) commands")
        for (i, reply) in zip(indices, groupReplies) { replies[i] = reply }
    }
}
