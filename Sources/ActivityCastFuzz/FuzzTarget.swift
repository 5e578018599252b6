#if canImport(Glibc)
import Glibc
#endif

/// The fuzz targets in this binary; each takes arbitrary bytes and must neither trap, hang nor use
/// unbounded memory on any of them. docs/fuzzing.md describes what each one checks.
enum FuzzTarget: String, CaseIterable, Sendable {
    /// Bytes framed as a stream entry, through `EntryDecoder` (`DecoderTarget`).
    case decoder
    /// Bytes as a Redis server's replies, through `RESPDecoder` and the stream reply parsers (`RESPTarget`).
    case resp

    func run(_ input: UnsafeBufferPointer<UInt8>) {
        switch self {
        case .decoder: DecoderTarget.run(input)
        case .resp: RESPTarget.run(input)
        }
    }

    static let usage = """
        usage: ActivityCastFuzz --target=decoder|resp FILE|DIR...           (replay inputs; normal build)
               ActivityCastFuzz --target=decoder|resp [libFuzzer flags] [CORPUS_DIR|FILE...]
                                                                           (built with --sanitize=fuzzer)
        scripts/fuzz.sh builds and runs the fuzzer; docs/fuzzing.md explains the targets.
        """

    /// The target named by `--target=NAME`. The `--` form because libFuzzer ignores flags that start
    /// with `--` and keeps them when it re-runs itself (`-minimize_crash`, `-fork`), whereas a bare
    /// word would be taken for a corpus directory.
    static func fromArguments(_ arguments: [String]) -> FuzzTarget? {
        for argument in arguments where argument.hasPrefix("--target=") {
            return FuzzTarget(rawValue: String(argument.dropFirst("--target=".count)))
        }
        return nil
    }
}

/// The target this process runs, read once from the command line; exits with the usage when missing.
let selectedTarget: FuzzTarget = {
    guard let target = FuzzTarget.fromArguments(CommandLine.arguments) else {
        printError(FuzzTarget.usage)
        exit(2)
    }
    return target
}()

/// A broken invariant: a crash, so that libFuzzer saves the input as an artifact.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
           file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("fuzz invariant: \(message())", file: file, line: line) }
}

/// Writes a line to standard error (`stderr` itself is a mutable global that Swift 6 rejects).
func printError(_ text: String) {
    var line = text
    if !line.hasSuffix("\n") { line += "\n" }
    line.utf8CString.withUnsafeBufferPointer { buffer in
        _ = write(2, buffer.baseAddress, buffer.count - 1)
    }
}
