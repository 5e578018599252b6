import Synchronization

/// A one-way stop request that waits can race against: `race` returns nil as soon as stop is
/// requested, even if the operation it waits for (a Redis call stuck on a frozen server) goes on.
final class StopSignal: Sendable {
    private struct State {
        var stoppedAt: ContinuousClock.Instant?
        var waiters: [Int: @Sendable () -> Void] = [:]
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    /// When stop was first requested.
    var stoppedAt: ContinuousClock.Instant? { state.withLock { $0.stoppedAt } }
    var isStopped: Bool { stoppedAt != nil }

    /// Requests the stop (once; later calls do nothing) and wakes every waiter.
    func stop() {
        let waiters: [@Sendable () -> Void] = state.withLock { s in
            guard s.stoppedAt == nil else { return [] }
            s.stoppedAt = .now
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for wake in waiters { wake() }
    }

    /// Calls `wake` when stop is requested (at once if it was). Returns a token for `forget`.
    @discardableResult
    func onStop(_ wake: @escaping @Sendable () -> Void) -> Int? {
        let token: Int? = state.withLock { s in
            guard s.stoppedAt == nil else { return nil }
            s.nextWaiter += 1
            s.waiters[s.nextWaiter] = wake
            return s.nextWaiter
        }
        if token == nil { wake() }
        return token
    }

    func forget(_ token: Int?) {
        guard let token else { return }
        state.withLock { _ = $0.waiters.removeValue(forKey: token) }
    }

    /// The result of `operation`, or nil if stop is requested first (the operation then goes
    /// on unobserved: anything it read stays pending in Redis for another worker).
    func race<T: Sendable>(_ operation: @escaping @Sendable () async -> T) async -> T? {
        await started(operation).value
    }

    /// As `race`, and the task running `operation`, to wait for its value after a stop. The task
    /// itself resumes the waiter: no second task between the operation and its caller.
    func started<T: Sendable>(_ operation: @escaping @Sendable () async -> T) async -> (value: T?, task: Task<T, Never>) {
        let once = Once<T?>()
        let token = onStop { once.resume(nil) }
        let task = Task {
            let value = await operation()
            self.forget(token)
            once.resume(value)
            return value
        }
        return (await withCheckedContinuation { once.set($0) }, task)
    }

    /// The result of `operation`, or nil if `deadline` passes first.
    static func within<T: Sendable>(_ deadline: ContinuousClock.Instant, _ operation: @escaping @Sendable () async -> T) async -> T? {
        let once = Once<T?>()
        return await withCheckedContinuation { continuation in
            once.set(continuation)
            let timer = Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                once.resume(nil)
            }
            Task {
                let value = await operation()
                once.resume(value)
                timer.cancel()
            }
        }
    }

    /// Sleeps for `duration` unless stop is requested first. Returns false if stopped.
    @discardableResult
    func sleep(for duration: Duration) async -> Bool {
        guard !isStopped else { return false }
        let slept: Bool? = await race {
            try? await Task.sleep(for: duration)
            return true
        }
        return slept ?? false
    }
}

/// A continuation resumed once, whoever gets there first; a value that arrives before the
/// continuation is stored is kept for it.
private final class Once<T: Sendable>: Sendable {
    private enum State {
        case empty
        case armed(CheckedContinuation<T, Never>)
        case early(T)
        case done
    }

    private let state = Mutex<State>(.empty)

    func set(_ c: CheckedContinuation<T, Never>) {
        let value: T? = state.withLock { s in
            switch s {
            case .early(let v): s = .done; return v
            case .empty: s = .armed(c); return nil
            case .armed, .done: return nil
            }
        }
        if let value { c.resume(returning: value) }
    }

    func resume(_ value: T) {
        let c: CheckedContinuation<T, Never>? = state.withLock { s in
            switch s {
            case .armed(let c): s = .done; return c
            case .empty: s = .early(value); return nil
            case .early, .done: return nil
            }
        }
        c?.resume(returning: value)
    }
}
