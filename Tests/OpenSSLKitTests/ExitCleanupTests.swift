import OpenSSLKit
import Testing

/// OpenSSL is initialised before main without its atexit cleanup (COpenSSL's shim.c says why:
/// a thread still in TLS while the process exits would take a freed lock). The constructor ran,
/// in this process as in every binary linking the module, and its initialisation succeeded.
/// (OpenSSL has nothing to ask whether an earlier initialisation registered the handler anyway:
/// shim.c's comment has the C program that showed the crash and its absence.)
@Suite struct ExitCleanupTests {
    @Test func openSSLHasNoCleanupAtExit() {
        #expect(OpenSSLLibrary.exitCleanupDisabled)
    }
}
