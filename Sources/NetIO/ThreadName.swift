#if canImport(Glibc)
import Glibc
#endif

/// Names the calling thread for the kernel (`/proc/<pid>/task/<tid>/comm`, `top -H`, `perf`),
/// at most 15 bytes. Foundation's `Thread.name` on Linux doesn't reach the kernel, so without
/// this every thread a `Thread` starts shows the name of the thread that started it (a Swift
/// concurrency pool thread, `…root.default-qos`), and a profile can't tell Redis I/O from APNs.
/// (Written to /proc/thread-self/comm: Glibc's Swift module doesn't export `pthread_setname_np`.)
public func nameCurrentThread(_ name: String) {
    #if os(Linux)
    let fd = open("/proc/thread-self/comm", O_WRONLY)
    guard fd >= 0 else { return }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
    #endif
}
