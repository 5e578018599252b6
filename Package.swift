// swift-tools-version:6.0
import PackageDescription

// C libraries are reached only through the small C shim targets (CHiredis, COpenSSL, CNghttp2)
// and the Swift modules that wrap them (HiredisCodec, OpenSSLKit, HTTP2Kit). Nothing above those
// imports a C module.
let package = Package(
    name: "ActivityCast",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "activitycast", targets: ["activitycast"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
    ],
    targets: [
        // C shims: each includes one library's headers and turns its function-like macros into functions.
        .target(name: "CHiredis", linkerSettings: [.linkedLibrary("hiredis")]),
        .target(name: "COpenSSL", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        .target(name: "CNghttp2", linkerSettings: [.linkedLibrary("nghttp2")]),

        // Swift wrappers: the only modules that see C pointers.
        .target(name: "HiredisCodec", dependencies: ["CHiredis"]),
        .target(name: "OpenSSLKit", dependencies: ["COpenSSL"]),
        .target(name: "HTTP2Kit", dependencies: ["CNghttp2"]),

        // Sockets, polling and byte streams (plain or TLS) for the client adapters.
        .target(name: "NetIO", dependencies: ["OpenSSLKit"]),
        .target(name: "RedisClient", dependencies: ["HiredisCodec", "NetIO", "OpenSSLKit"]),
        // A minimal HTTP/1.1 server (GET, Connection: close) for the workers' ops endpoints, on
        // NetIO's listening socket and one poll thread. No C module.
        .target(name: "OpsHTTP", dependencies: ["NetIO"]),
        // A socket + TLS + HTTP/2 session pump for event-loop threads (APNs client and sandbox).
        .target(name: "HTTP2Transport", dependencies: ["HTTP2Kit", "NetIO", "OpenSSLKit"]),

        // The pure core: schema, decoding, planning, key layout. No I/O.
        .target(name: "ActivityCastCore"),
        // Route files: what each feed event sends (docs/routes.md), compiled from YAML once. No I/O.
        // APNsCore: a route's payload is checked against Apple's size limit as it is compiled.
        .target(name: "ActivityCastRoutes", dependencies: [
            "ActivityCastCore", "APNsCore",
            .product(name: "Yams", package: "Yams"),
        ]),
        // APNs protocol values: reasons and actions, responses, provider tokens, payloads. No I/O.
        .target(name: "APNsCore", dependencies: ["ActivityCastCore", "OpenSSLKit"]),
        // The APNs client: connection pools on event-loop threads, batches, provider tokens.
        .target(name: "APNs", dependencies: [
            "APNsCore", "HTTP2Kit", "HTTP2Transport", "NetIO", "OpenSSLKit", "RedisClient",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The APNs sandbox: request validation, device views, faults (pure), and its server loop.
        .target(name: "APNsSandbox", dependencies: ["APNsCore", "ActivityCastCore", "OpenSSLKit", "HTTP2Kit", "HTTP2Transport"]),

        // The send path: key state, channels, per-token and push-to-start sends, outcomes.
        .target(name: "ActivityCastSend", dependencies: [
            "ActivityCastCore", "APNs", "APNsCore", "HTTP2Kit", "RedisClient",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Configuration: the settings every command and the worker run with (defaults, YAML file,
        // environment, flags; docs/configuration.md), each checked as it loads, and the route files
        // they name. Also how text from outside is shown safely (VisibleText).
        // ActivityCastSend: the `budgets.*` settings are its BudgetPolicy.
        .target(name: "ActivityCastSettings", dependencies: [
            "ActivityCastCore", "ActivityCastRoutes", "ActivityCastSend", "RedisClient",
            .product(name: "Yams", package: "Yams"),
        ]),
        // `inspect` and `top`: what Redis holds (streams, groups, dead letters, registrations,
        // channels, budgets), read-only, and the workers' /metrics scraped; the report and its
        // rendering. Reads Redis and the workers' ops endpoints, not the worker's code.
        .target(name: "ActivityCastInspect", dependencies: [
            "ActivityCastCore", "ActivityCastRoutes", "ActivityCastSend", "ActivityCastSettings", "NetIO", "RedisClient",
        ]),
        // The worker: wires the core to Redis (streams, registrations, fan-out slices, the flush
        // schedule, stream trimming) and serves its ops endpoints.
        .target(name: "ActivityCastWorker", dependencies: [
            "ActivityCastCore", "ActivityCastRoutes", "ActivityCastSend", "ActivityCastSettings", "APNs", "APNsCore", "RedisClient", "OpsHTTP",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ]),
        // What every command shares, the command line's and the benchmarks': the Redis options and
        // the settings they load, the failure printed as `Error: …`, an APNs client from the settings.
        .target(name: "ActivityCastConsole", dependencies: [
            "ActivityCastCore", "ActivityCastInspect", "ActivityCastSettings", "OpenSSLKit", "RedisClient",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "Mustache", package: "swift-mustache"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "ActivityCastCommandSupport", dependencies: [
            "ActivityCastSettings", "ActivityCastWorker", "APNs",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The benchmarks, `activitycast bench …` (docs/benchmarks.md, scripts/bench-*.sh): intake,
        // APNs, broadcast, fan-out, priority, budgets, lanes and the soak with its feed.
        .target(name: "ActivityCastBench", dependencies: [
            "ActivityCastCommandSupport", "ActivityCastCore", "ActivityCastInspect", "ActivityCastRoutes", "ActivityCastSend",
            "ActivityCastSettings", "ActivityCastWorker", "APNs", "APNsCore", "HiredisCodec", "NetIO", "RedisClient",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The command line: worker, inspect, top, publish, send, channels, sandbox, routes, and bench
        // from ActivityCastBench.
        .executableTarget(name: "activitycast", dependencies: [
            "ActivityCastBench", "ActivityCastConsole", "ActivityCastCommandSupport", "ActivityCastWorker", "ActivityCastCore", "ActivityCastInspect", "ActivityCastRoutes", "ActivityCastSettings", "RedisClient", "APNs", "APNsCore", "APNsSandbox", "HTTP2Transport", "OpenSSLKit",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], linkerSettings: [
            // jemalloc replaces glibc's malloc process-wide: the stream hot path allocates many
            // small reply objects, and glibc's fastbin consolidation cost half the intake rate
            // (docs/benchmarks.md).
            .linkedLibrary("jemalloc"),
        ]),

        // Fuzz targets for the entry decoder and the RESP reply path (docs/fuzzing.md). A normal
        // build replays inputs; scripts/fuzz.sh builds it with --sanitize=fuzzer for libFuzzer.
        .executableTarget(name: "ActivityCastFuzz", dependencies: ["ActivityCastCore", "HiredisCodec", "RedisClient"]),

        // Helpers for tests: a real redis-server on a free loopback port, child processes by PID.
        .target(name: "TestSupport", dependencies: ["RedisClient"], path: "Tests/TestSupport"),

        // The hard-coded planner the route files replaced, kept as the tests' oracle: the shipped
        // routes must plan exactly as it did.
        .target(name: "PlannerOracle", dependencies: ["ActivityCastCore"], path: "Tests/PlannerOracle"),
        .testTarget(name: "ActivityCastCoreTests", dependencies: ["ActivityCastCore", "PlannerOracle"]),
        .testTarget(name: "ActivityCastRoutesTests", dependencies: ["ActivityCastRoutes", "ActivityCastCore", "PlannerOracle"]),
        .testTarget(name: "APNsSandboxTests", dependencies: ["APNsSandbox", "APNsCore", "ActivityCastCore", "OpenSSLKit", "TestSupport"]),
        .testTarget(name: "APNsClientTests", dependencies: [
            "APNs", "APNsCore", "HTTP2Kit", "HTTP2Transport", "OpenSSLKit", "RedisClient", "TestSupport",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "SandboxIntegrationTests", dependencies: [
            "APNs", "APNsSandbox", "APNsCore", "ActivityCastCore", "HTTP2Kit", "OpenSSLKit", "TestSupport",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "APNsCoreTests", dependencies: ["APNsCore", "ActivityCastCore", "OpenSSLKit", "TestSupport"]),
        .testTarget(name: "OpenSSLKitTests", dependencies: ["OpenSSLKit", "TestSupport"]),
        .testTarget(name: "HTTP2KitTests", dependencies: ["HTTP2Kit", "OpenSSLKit", "NetIO", "TestSupport"]),
        .testTarget(name: "RedisClientTests", dependencies: ["RedisClient", "HiredisCodec", "TestSupport"]),
        .testTarget(name: "OpsHTTPTests", dependencies: ["OpsHTTP", "NetIO", "TestSupport"]),
        .testTarget(name: "SendTests", dependencies: [
            "ActivityCastSend", "ActivityCastCore", "ActivityCastSettings", "ActivityCastWorker", "APNs", "APNsCore", "RedisClient", "TestSupport",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "ConsoleTests", dependencies: ["ActivityCastConsole", "ActivityCastCore", "ActivityCastInspect", "ActivityCastSettings", "OpenSSLKit", "RedisClient", "TestSupport"]),
        .testTarget(name: "WorkerTests", dependencies: [
            "ActivityCastWorker", "APNs", "ActivityCastCore", "ActivityCastInspect", "ActivityCastRoutes", "ActivityCastSend", "ActivityCastSettings", "RedisClient", "TestSupport",
            .product(name: "Logging", package: "swift-log"),
        ]),
    ]
)
