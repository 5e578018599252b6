import ActivityCastCore

/// The configuration, pre-digested for the hot path. Immutable; a class so that the hot path
/// reads its fields through one reference instead of copying a large struct.
final class SandboxSettings: Sendable {
    let configuration: SandboxConfiguration
    /// The allowed apps. The hot path refers to an app by its index here, so that requests on
    /// several threads don't all bump the reference count of one shared string.
    let bundleNames: [String]
    let bundleIndex: [String: Int]
    /// `<bundle>.push-type.liveactivity` → app index: a short list scanned linearly (one or two
    /// apps is the norm, and comparing strings is cheaper than hashing one), or a dictionary.
    let topicList: [(topic: [UInt8], bundle: Int)]
    let topicTable: [String: Int]
    let bundles: Set<String>
    let broadcastBundles: Set<String>
    let maxTokenAgeMillis: Int64
    let refreshMinimumMillis: Int64
    let clockSkewMillis: Int64
    let development: Bool
    let keyRestrictions: [String: SandboxConfiguration.KeyRestriction]
    let maxConcurrentStreams: Int
    let startBudgetPerHour: Int
    let tokenCacheCapacity: Int
    let maxTrackedDevices: Int

    init(_ c: SandboxConfiguration) {
        configuration = c
        var names: [String] = []
        for bundle in c.bundleIDs where !names.contains(bundle) { names.append(bundle) }
        bundleNames = names
        bundleIndex = Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, $0) })
        topicTable = Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1 + ".push-type.liveactivity", $0) })
        topicList = topicTable.count <= 8 ? topicTable.map { (topic: Array($0.key.utf8), bundle: $0.value) } : []
        bundles = Set(c.bundleIDs)
        broadcastBundles = Set(c.broadcastBundleIDs ?? c.bundleIDs).intersection(bundles)
        maxTokenAgeMillis = c.maxTokenAge.milliseconds
        refreshMinimumMillis = c.tokenRefreshMinimum.milliseconds
        clockSkewMillis = c.clockSkew.milliseconds
        development = c.environment == .development
        keyRestrictions = c.keyRestrictions
        maxConcurrentStreams = c.maxConcurrentStreams
        startBudgetPerHour = c.startBudgetPerHour
        tokenCacheCapacity = max(1, c.tokenCacheCapacity)
        maxTrackedDevices = max(1, c.maxTrackedDevices)
    }

    /// The app (index) of an allowed device topic.
    @inline(__always) func bundle(forTopic topic: UnsafeBufferPointer<UInt8>) -> Int? {
        if topicTable.count <= 8 {
            for entry in topicList where Bytes.equal(entry.topic, topic) { return entry.bundle }
            return nil
        }
        return topicTable[String(decoding: topic, as: UTF8.self)]
    }
}

