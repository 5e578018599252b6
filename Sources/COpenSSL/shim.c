#include "COpenSSL.h"

#include <errno.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/socket.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* Darwin: callers rely on SO_NOSIGPIPE there. */
#endif

// MARK: No cleanup at exit

// OpenSSL 3 frees its global state (its locks included) in an atexit handler unless the first
// initialisation in the process says not to. A thread still using TLS or crypto while the
// process exits (an APNs or Redis I/O thread closing its connections as a worker stops) then
// takes a freed lock: SIGSEGV at exit (a CI run saw a worker exit with 139 that way: NULL
// pthread_rwlock_t in libc). A C program with two threads calling RAND_bytes and SSL_new/SSL_free
// while main exits crashed 30 times in 40 with the handler and 0 in 40 without it. The process's
// memory goes with it anyway: OpenSSL is initialised here, before main, without the handler.
static int exit_cleanup_disabled = 0;

__attribute__((constructor))
static void copenssl_disable_exit_cleanup(void) {
    exit_cleanup_disabled = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL) == 1;
}

int copenssl_exit_cleanup_disabled(void) { return exit_cleanup_disabled; }

// MARK: Macros turned into functions

int copenssl_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

int copenssl_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

long copenssl_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

long copenssl_SSL_CTX_clear_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_clear_mode(ctx, mode);
}

long copenssl_SSL_CTX_get_mode(SSL_CTX *ctx) {
    return SSL_CTX_get_mode(ctx);
}

void copenssl_SSL_CTX_disable_renegotiation(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
}

int copenssl_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *cert) {
    return (int)SSL_CTX_add1_chain_cert(ctx, cert);
}

long copenssl_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

void copenssl_OPENSSL_free(void *ptr) {
    OPENSSL_free(ptr);
}

int copenssl_ERR_GET_LIB(unsigned long code) {
    return ERR_GET_LIB(code);
}

int copenssl_ERR_GET_REASON(unsigned long code) {
    return ERR_GET_REASON(code);
}

// MARK: Server-side ALPN

// The server's protocol list lives in the SSL_CTX's ex_data so it is freed with the context and
// stays valid for as long as any SSL made from it (SSL_select_next_proto points into it).
typedef struct {
    unsigned int len;
    unsigned char bytes[];
} copenssl_alpn_list;

static int copenssl_alpn_index = -1;
static CRYPTO_ONCE copenssl_alpn_once = CRYPTO_ONCE_STATIC_INIT;

static void copenssl_alpn_list_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx,
                                    long argl, void *argp) {
    (void)parent; (void)ad; (void)idx; (void)argl; (void)argp;
    OPENSSL_free(ptr);
}

static void copenssl_alpn_init(void) {
    copenssl_alpn_index = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL_CTX, 0, NULL, NULL, NULL,
                                                  copenssl_alpn_list_free);
}

static int copenssl_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                const unsigned char *in, unsigned int inlen, void *arg) {
    (void)arg;
    const copenssl_alpn_list *list = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), copenssl_alpn_index);
    if (list == NULL || list->len == 0) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    unsigned char *selected = NULL;
    unsigned char selected_len = 0;
    // The first list passed is the preferred one: the server's order wins.
    if (SSL_select_next_proto(&selected, &selected_len, list->bytes, list->len, in, inlen)
            != OPENSSL_NPN_NEGOTIATED) {
        ERR_raise_data(ERR_LIB_SSL, SSL_R_NO_APPLICATION_PROTOCOL,
                       "client offered no protocol this server supports");
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    *out = selected;
    *outlen = selected_len;
    return SSL_TLSEXT_ERR_OK;
}

static int copenssl_require_alpn_hello(SSL *ssl, int *alert, void *arg) {
    (void)arg;
    const unsigned char *ext = NULL;
    size_t ext_len = 0;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation,
                                  &ext, &ext_len) == 1) {
        return SSL_CLIENT_HELLO_SUCCESS;
    }
    ERR_raise_data(ERR_LIB_SSL, SSL_R_NO_APPLICATION_PROTOCOL, "client sent no ALPN extension");
    *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
    return SSL_CLIENT_HELLO_ERROR;
}

int copenssl_SSL_CTX_set_alpn_server_protocols(SSL_CTX *ctx, const unsigned char *wire,
                                               unsigned int wire_len, int require_alpn) {
    if (!CRYPTO_THREAD_run_once(&copenssl_alpn_once, copenssl_alpn_init) ||
        copenssl_alpn_index < 0) {
        return 0;
    }
    copenssl_alpn_list *list = OPENSSL_malloc(sizeof(copenssl_alpn_list) + wire_len);
    if (list == NULL) {
        return 0;
    }
    list->len = wire_len;
    if (wire_len > 0) {
        memcpy(list->bytes, wire, wire_len);
    }
    copenssl_alpn_list *old = SSL_CTX_get_ex_data(ctx, copenssl_alpn_index);
    if (!SSL_CTX_set_ex_data(ctx, copenssl_alpn_index, list)) {
        OPENSSL_free(list);
        return 0;
    }
    OPENSSL_free(old);
    SSL_CTX_set_alpn_select_cb(ctx, copenssl_alpn_select, NULL);
    if (require_alpn) {
        SSL_CTX_set_client_hello_cb(ctx, copenssl_require_alpn_hello, NULL);
    }
    return 1;
}

// MARK: Socket BIO without SIGPIPE
//
// Modelled on OpenSSL's crypto/bio/bss_sock.c (same retry and EOF semantics, so SSL_get_error and
// the "unexpected eof while reading" detection behave exactly as with BIO_s_socket), but writes
// with send(..., MSG_NOSIGNAL) and never owns or closes the descriptor.

static BIO_METHOD *copenssl_socket_method = NULL;
static CRYPTO_ONCE copenssl_socket_once = CRYPTO_ONCE_STATIC_INIT;

static int copenssl_socket_should_retry(int err) {
    switch (err) {
    case EWOULDBLOCK:
#if EAGAIN != EWOULDBLOCK
    case EAGAIN:
#endif
    case ENOTCONN:
    case EINTR:
    case EPROTO:
    case EINPROGRESS:
    case EALREADY:
        return 1;
    default:
        return 0;
    }
}

static int copenssl_socket_fd(BIO *bio) {
    return (int)(intptr_t)BIO_get_data(bio);
}

static int copenssl_socket_read(BIO *bio, char *out, int outl) {
    if (out == NULL || outl <= 0) {
        return 0;
    }
    ssize_t n;
    do {
        errno = 0;
        n = recv(copenssl_socket_fd(bio), out, (size_t)outl, 0);
    } while (n < 0 && errno == EINTR);
    BIO_clear_retry_flags(bio);
    if (n <= 0) {
        if (n < 0 && copenssl_socket_should_retry(errno)) {
            BIO_set_retry_read(bio);
        } else if (n == 0) {
            BIO_set_flags(bio, BIO_FLAGS_IN_EOF);
        }
    }
    return (int)n;
}

static int copenssl_socket_write(BIO *bio, const char *in, int inl) {
    if (in == NULL || inl <= 0) {
        return 0;
    }
    ssize_t n;
    do {
        errno = 0;
        n = send(copenssl_socket_fd(bio), in, (size_t)inl, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    BIO_clear_retry_flags(bio);
    if (n < 0 && copenssl_socket_should_retry(errno)) {
        BIO_set_retry_write(bio);
    }
    return (int)n;
}

static int copenssl_socket_puts(BIO *bio, const char *str) {
    size_t n = strlen(str);
    if (n > INT32_MAX) {
        return -1;
    }
    return copenssl_socket_write(bio, str, (int)n);
}

static long copenssl_socket_ctrl(BIO *bio, int cmd, long num, void *ptr) {
    (void)num;
    switch (cmd) {
    case BIO_C_GET_FD: {
        int fd = copenssl_socket_fd(bio);
        if (ptr != NULL) {
            *(int *)ptr = fd;
        }
        return fd;
    }
    case BIO_CTRL_GET_CLOSE:
        return BIO_NOCLOSE;
    case BIO_CTRL_SET_CLOSE:
    case BIO_CTRL_DUP:
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0;
    default:
        return 0;
    }
}

static int copenssl_socket_create(BIO *bio) {
    BIO_set_data(bio, (void *)(intptr_t)-1);
    BIO_set_init(bio, 0);
    return 1;
}

static int copenssl_socket_destroy(BIO *bio) {
    // The descriptor belongs to the caller: never closed here.
    BIO_set_data(bio, NULL);
    BIO_set_init(bio, 0);
    return 1;
}

static void copenssl_socket_method_init(void) {
    int index = BIO_get_new_index();
    if (index == -1) {
        return;
    }
    BIO_METHOD *method = BIO_meth_new(index | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                      "copenssl socket (MSG_NOSIGNAL)");
    if (method == NULL) {
        return;
    }
    if (!BIO_meth_set_write(method, copenssl_socket_write) ||
        !BIO_meth_set_read(method, copenssl_socket_read) ||
        !BIO_meth_set_puts(method, copenssl_socket_puts) ||
        !BIO_meth_set_ctrl(method, copenssl_socket_ctrl) ||
        !BIO_meth_set_create(method, copenssl_socket_create) ||
        !BIO_meth_set_destroy(method, copenssl_socket_destroy)) {
        BIO_meth_free(method);
        return;
    }
    copenssl_socket_method = method; // lives for the whole process
}

BIO *copenssl_BIO_new_socket_nosigpipe(int fd) {
    if (!CRYPTO_THREAD_run_once(&copenssl_socket_once, copenssl_socket_method_init) ||
        copenssl_socket_method == NULL) {
        return NULL;
    }
    BIO *bio = BIO_new(copenssl_socket_method);
    if (bio == NULL) {
        return NULL;
    }
    BIO_set_data(bio, (void *)(intptr_t)fd);
    BIO_set_init(bio, 1);
    return bio;
}

// MARK: PEM without prompts

static int copenssl_no_password(char *buf, int size, int rwflag, void *userdata) {
    (void)buf; (void)size; (void)rwflag; (void)userdata;
    return 0;
}

EVP_PKEY *copenssl_PEM_read_bio_PrivateKey_nopass(BIO *bio) {
    return PEM_read_bio_PrivateKey(bio, NULL, copenssl_no_password, NULL);
}

X509 *copenssl_PEM_read_bio_X509_nopass(BIO *bio) {
    return PEM_read_bio_X509(bio, NULL, copenssl_no_password, NULL);
}

EVP_PKEY *copenssl_PEM_read_bio_PUBKEY_nopass(BIO *bio) {
    return PEM_read_bio_PUBKEY(bio, NULL, copenssl_no_password, NULL);
}

// MARK: X509v3 extensions

int copenssl_X509_add_ext_text(X509 *cert, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
    if (ext == NULL) {
        return 0;
    }
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok;
}
