import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// All of `activitycast top`'s terminal control: the alternate screen, the hidden cursor, raw
/// input (keys without Enter, no echo), the window size, and the signals that end or resize the
/// view. `restore()` undoes everything `enter()` did, once, whoever calls it first.
final class Terminal: Sendable {
    enum Event: Sendable {
        case key(UInt8)
        /// SIGINT, SIGTERM, SIGHUP or SIGQUIT: restore and exit.
        case signal(Int32)
        /// SIGWINCH: draw again at the new size.
        case resize
        /// stdin reached its end (the terminal went away).
        case inputClosed
    }

    private struct State {
        var saved: termios?
        var entered = false
    }

    private let state = Mutex(State())

    static var isInteractive: Bool { isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1 }

    /// Switches to the alternate screen, hides the cursor, puts stdin in raw mode (no line
    /// buffering, no echo; Ctrl-C still raises SIGINT; Ctrl-Z and Ctrl-\ are turned off so the
    /// view can't be suspended or dumped with the terminal left as it is), and starts delivering
    /// keys and signals as events.
    func enter() -> AsyncStream<Event> {
        let (events, continuation) = AsyncStream.makeStream(of: Event.self)
        _ = SignalWatcher(signals: [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH]) {
            continuation.yield($0 == SIGWINCH ? .resize : .signal($0))
        }
        var saved = termios()
        let haveSaved = tcgetattr(STDIN_FILENO, &saved) == 0
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | IEXTEN)
        raw.c_iflag &= ~tcflag_t(IXON | ICRNL)
        withUnsafeMutableBytes(of: &raw.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
            cc[Int(VSUSP)] = 0  // _POSIX_VDISABLE
            cc[Int(VQUIT)] = 0
        }
        state.withLock {
            $0.saved = haveSaved ? saved : nil
            $0.entered = true
        }
        if haveSaved { tcsetattr(STDIN_FILENO, TCSANOW, &raw) }
        Self.write("\u{1b}[?1049h\u{1b}[?25l\u{1b}[H\u{1b}[2J")
        // Keys: a thread of its own blocks in read(2); it dies with the process.
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 64)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
                if n > 0 {
                    for byte in buffer[..<n] { continuation.yield(.key(byte)) }
                } else if n == 0 || errno != EINTR {
                    continuation.yield(.inputClosed)
                    return
                }
            }
        }
        reader.name = "top-keys"
        reader.start()
        return events
    }

    /// Leaves the alternate screen, shows the cursor and puts the terminal modes back. Safe to call
    /// more than once and from any thread; only the first call after `enter()` does anything.
    func restore() {
        let saved: termios?? = state.withLock { s in
            guard s.entered else { return nil }
            s.entered = false
            return .some(s.saved)
        }
        guard let saved else { return }
        Self.write("\u{1b}[?25h\u{1b}[?1049l")
        if var modes = saved { tcsetattr(STDIN_FILENO, TCSADRAIN, &modes) }
    }

    /// Columns and rows (TIOCGWINSZ on stdout); 80 × 24 when the terminal doesn't say.
    static func size() -> (columns: Int, rows: Int) {
        var ws = winsize()
        let ok = withUnsafeMutablePointer(to: &ws) { ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), $0) } == 0
        guard ok, ws.ws_col > 0, ws.ws_row > 0 else { return (80, 24) }
        return (Int(ws.ws_col), Int(ws.ws_row))
    }

    /// Draws `lines` (already cut to the width and height) from the top left, each on a cleared
    /// row, and clears the rows below. One write, so a frame never shows half drawn.
    static func draw(_ lines: [String], rows: Int) {
        var out = "\u{1b}[?25l"
        for (i, line) in lines.prefix(rows).enumerated() { out += "\u{1b}[\(i + 1);1H\u{1b}[2K" + line }
        // Not after a full-width last row: the cursor waits in the last column and an erase
        // from there would take its character.
        if lines.count < rows { out += "\u{1b}[\(lines.count + 1);1H\u{1b}[J" }
        write(out)
    }

    /// Writes all of `text` to stdout (retrying short writes and EINTR; gives up on other errors).
    static func write(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if n > 0 { bytes = bytes.dropFirst(n) } else if n < 0 && (errno == EINTR || errno == EAGAIN) { continue } else { return }
        }
    }
}
