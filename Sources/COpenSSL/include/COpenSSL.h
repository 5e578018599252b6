#ifndef COPENSSL_H
#define COPENSSL_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#endif
