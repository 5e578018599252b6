import CHiredis

/// Encodes commands as RESP with hiredis's formatter (binary-safe, argv form: the variadic
/// formatter can't be called from Swift).
public enum RESPEncoder {
    /// Appends one command (its arguments as byte strings) to `buffer`.
    public static func append(_ arguments: [[UInt8]], to buffer: inout [UInt8]) {
        precondition(!arguments.isEmpty, "a command needs at least its name")
        // Pack the arguments into one buffer so argv can point into it with a single pin,
        // in O(total bytes); one spare byte keeps every pointer valid even for empty arguments.
        var flat: [UInt8] = []
        flat.reserveCapacity(arguments.reduce(1) { $0 + $1.count })
        var lengths: [Int] = []
        lengths.reserveCapacity(arguments.count)
        for argument in arguments {
            flat.append(contentsOf: argument)
            lengths.append(argument.count)
        }
        flat.append(0)
        flat.withUnsafeBufferPointer { flatBuffer in
            let base = UnsafeRawPointer(flatBuffer.baseAddress!).assumingMemoryBound(to: CChar.self)
            var argv: [UnsafePointer<CChar>?] = []
            argv.reserveCapacity(arguments.count)
            var offset = 0
            for length in lengths {
                argv.append(base + offset)
                offset += length
            }
            var target: UnsafeMutablePointer<CChar>?
            let n = argv.withUnsafeMutableBufferPointer { argvBuffer in
                lengths.withUnsafeBufferPointer { lengthBuffer in
                    redisFormatCommandArgv(&target, Int32(arguments.count), argvBuffer.baseAddress, lengthBuffer.baseAddress)
                }
            }
            guard n > 0, let target else { fatalError("redisFormatCommandArgv: out of memory") }
            buffer.append(contentsOf: UnsafeRawBufferPointer(start: target, count: Int(n)))
            redisFreeCommand(target)
        }
    }

    /// Convenience: encodes one command into a new buffer.
    public static func encode(_ arguments: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        append(arguments, to: &out)
        return out
    }
}
