// The entry points. Built with `--sanitize=fuzzer` and `-DLIBFUZZER` (scripts/fuzz.sh),
// libFuzzer supplies `main` and calls the two C functions below; SwiftPM then links its `main`
// rather than ours. Built normally (`swift build`, CI), the binary replays inputs instead, so the
// targets compile and run with every build and a crash file can be replayed without the fuzzer.

#if LIBFUZZER

/// Called once by libFuzzer before any input: fail fast on a missing or unknown `--target=`.
@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(_ argc: UnsafeMutablePointer<Int32>?,
                             _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> Int32 {
    _ = selectedTarget
    return 0
}

/// Called by libFuzzer for every input. The bytes are only valid during the call.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    selectedTarget.run(UnsafeBufferPointer(start: size > 0 ? data : nil, count: size))
    return 0
}

#else

import Foundation

/// `ActivityCastFuzz --target=NAME FILE|DIR...`: runs each file (each file directly in a
/// directory) through the target once, in name order, and says how many ran.
@main
enum ReplayInputs {
    static func main() {
        let paths = CommandLine.arguments.dropFirst().filter { !$0.hasPrefix("-") }
        if paths.isEmpty {
            printError(FuzzTarget.usage)
            exit(2)
        }
        let target = selectedTarget
        var count = 0
        for path in paths {
            for file in inputFiles(path) {
                guard let data = FileManager.default.contents(atPath: file) else {
                    printError("cannot read \(file)")
                    exit(1)
                }
                [UInt8](data).withUnsafeBufferPointer { target.run($0) }
                count += 1
            }
        }
        print("\(target.rawValue): \(count) inputs ran without a crash")
    }

    private static func inputFiles(_ path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            return [path]
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.sorted().map { path + "/" + $0 }.filter { file in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory) && !isDirectory.boolValue
        }
    }
}

#endif
