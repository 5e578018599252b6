import OpenSSLKit
import Testing

/// OpenSSL is initialised before main without its atexit cleanup (COpenSSL's shim.c says why:
/// a thread still in TLS while the process exits would take a freed lock). The constructor ran,
/// in this process as in every binary linking the module, and its initialisation succeeded.
@Suite struct ExitCleanupTests {
    @Test func openSSLHasNoCleanupAtExit() {
        #expect(OpenSSLLibrary.exitCleanupDisabled)
    }
}
