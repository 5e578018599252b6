#ifndef COPENSSL_H
#define COPENSSL_H

// C shim for OpenSSLKit, the only module that imports this one.
//
// OpenSSL 3 spells much of its API as function-like macros (SSL_CTX_set_mode, BIO_get_mem_data,
// OPENSSL_free, ...), which Swift cannot import. Each such macro we need becomes a real function
// here, prefixed `copenssl_`. A few small pieces that must run inside OpenSSL callbacks (ALPN
// selection, the client-hello check) or that need C-only constructs (ERR_raise, X509V3_CTX) live
// here too, so that no C callback has to be written in Swift.

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>

// MARK: Macros turned into functions

/// SSL_set_tlsext_host_name: sets the SNI host name. Returns 1 on success.
int copenssl_SSL_set_tlsext_host_name(SSL *ssl, const char *name);

/// SSL_CTX_set_min_proto_version (TLS1_2_VERSION, TLS1_3_VERSION). Returns 1 on success.
int copenssl_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);

/// SSL_CTX_set_mode / SSL_CTX_clear_mode / SSL_CTX_get_mode: return the resulting mode bits.
long copenssl_SSL_CTX_set_mode(SSL_CTX *ctx, long mode);
long copenssl_SSL_CTX_clear_mode(SSL_CTX *ctx, long mode);
long copenssl_SSL_CTX_get_mode(SSL_CTX *ctx);

/// SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION): SSL_OP_* are spelled with a function-like
/// macro (SSL_OP_BIT), so Swift cannot see them.
void copenssl_SSL_CTX_disable_renegotiation(SSL_CTX *ctx);

/// SSL_CTX_add1_chain_cert: appends an intermediate certificate (reference count bumped).
int copenssl_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *cert);

/// BIO_get_mem_data: points *data at the memory BIO's contents and returns their length.
long copenssl_BIO_get_mem_data(BIO *bio, char **data);

/// OPENSSL_free.
void copenssl_OPENSSL_free(void *ptr);

/// ERR_GET_LIB / ERR_GET_REASON (static inline in the headers; wrapped to be safe).
int copenssl_ERR_GET_LIB(unsigned long code);
int copenssl_ERR_GET_REASON(unsigned long code);

// MARK: Helpers

/// Installs server-side ALPN: `wire` is the server's protocol list in wire format (each name
/// prefixed by its length byte), in order of preference. The list is copied and owned by the
/// SSL_CTX (freed with it). When a client offers ALPN, the server picks the first of its own
/// protocols that the client also offered; with no overlap the handshake fails with the
/// no_application_protocol alert. If `require_alpn` is non-zero, a client that sends no ALPN
/// extension at all is rejected with the same alert. Returns 1 on success.
int copenssl_SSL_CTX_set_alpn_server_protocols(SSL_CTX *ctx, const unsigned char *wire,
                                               unsigned int wire_len, int require_alpn);

/// A socket BIO like BIO_new_socket(fd, BIO_NOCLOSE) that writes with send(MSG_NOSIGNAL), so a
/// peer that has gone away yields EPIPE instead of a process-killing SIGPIPE. Never closes fd.
BIO *copenssl_BIO_new_socket_nosigpipe(int fd);

/// PEM_read_bio_PrivateKey with a password callback that refuses: an encrypted key fails instead
/// of prompting on the terminal.
EVP_PKEY *copenssl_PEM_read_bio_PrivateKey_nopass(BIO *bio);

/// PEM_read_bio_X509 / PEM_read_bio_PUBKEY without password prompts.
X509 *copenssl_PEM_read_bio_X509_nopass(BIO *bio);
EVP_PKEY *copenssl_PEM_read_bio_PUBKEY_nopass(BIO *bio);

/// Adds an X509v3 extension given in openssl.cnf text form (e.g. nid NID_subject_alt_name,
/// value "DNS:localhost,IP:127.0.0.1") to a self-signed certificate (subject = issuer = cert).
/// Returns 1 on success.
int copenssl_X509_add_ext_text(X509 *cert, int nid, const char *value);

/// 1 when OpenSSL was initialised, before anything else in the process used it, without its
/// atexit cleanup (see shim.c); 0 if that first initialisation failed.
int copenssl_exit_cleanup_disabled(void);

#endif
