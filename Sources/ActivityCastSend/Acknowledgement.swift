import ActivityCastCore
import RedisClient

/// The one pipeline that gives stream entries their final outcome, wherever that happens (a
/// feed or registration batch, a fan-out's last slice, a slice entry): `XACK` for the group, the
/// entries' attempt counts and last errors cleared (`RedisKeys.errors`), and for entries nothing
/// reads again (slices) `XDEL`. Records that tell a redelivery the work is over may be written in
/// the same pipeline, before the `XACK` (`before`: whenever the acknowledgement is done, they
/// are too); they go only after the acknowledgement's answer (`unlinkAfter`), never beside it.
public struct Acknowledgement: Sendable {
    public var stream: String
    public var group: String
    public var ids: [String]
    public var errors: String
    /// Delete the entries from the stream too (slices: nothing reads them again).
    public var delete = false
    /// Clear the entries' attempt counts and last errors (false: fresh entries have none).
    public var clearErrors = true
    /// Extra commands for the same pipeline, after the acknowledgement's own.
    public var also: [RedisCommand] = []
    /// Commands for the same pipeline before the acknowledgement (records a redelivery reads).
    public var before: [RedisCommand] = []

    public init(stream: String, group: String, ids: [String], keys: RedisKeys, delete: Bool = false, also: [RedisCommand] = []) {
        self.stream = stream
        self.group = group
        self.ids = ids
        self.errors = keys.errors(stream)
        self.delete = delete
        self.also = also
    }

    public var commands: [RedisCommand] {
        guard !ids.isEmpty else { return before + also }
        var out: [RedisCommand] = before + [.xack(stream: stream, group: group, ids: ids)]
        if delete { out.append(RedisCommand("XDEL", [stream] + ids)) }
        if clearErrors { out.append(RedisCommand("HDEL", [errors] + ids.flatMap { [$0, "\($0)#n"] })) }
        return out + also
    }

    /// How many entries the reply to `commands` says were acknowledged; a Redis error's
    /// message when the `XACK` failed (the entries stay pending and are done again).
    public func acknowledged(_ replies: [RESPValue]) -> Result<Int, RedisError> {
        guard !ids.isEmpty else { return .success(0) }
        guard replies.count > before.count else { return .failure(RedisError(.unexpectedReply, "XACK \(stream): no reply")) }
        let first = replies[before.count]
        if let message = first.errorMessage { return .failure(RedisError(.server, message)) }
        return .success(Int(first.int ?? 0))
    }

    /// Runs it; then, once the entries are acknowledged, unlinks `unlinkAfter` (one command
    /// each: each may be in another slot).
    @discardableResult
    public func run(_ redis: RedisConnection, unlinkAfter records: [String] = []) async throws -> Result<Int, RedisError> {
        let result = acknowledged(try await redis.pipeline(commands))
        if case .success = result, !records.isEmpty { _ = try? await redis.pipeline(records.map { RedisCommand("UNLINK", $0) }) }
        return result
    }

    /// Records why entries failed (`<id>` → message) beside their attempt counts, for a week.
    public static func failures(_ keys: RedisKeys, stream: String, _ messages: [(id: String, message: String)]) -> [RedisCommand] {
        guard !messages.isEmpty else { return [] }
        let errors = keys.errors(stream)
        return [RedisCommand("HSET", [errors] + messages.flatMap { [$0.id, String($0.message.prefix(300))] }),
                RedisCommand("EXPIRE", errors, 7 * 86_400)]
    }
}
