#ifndef CHIREDIS_H
#define CHIREDIS_H
// hiredis 0.14 (Debian 12): used as a RESP codec only (reader + command formatter).
// The sockets are ours, so TLS (rediss://) can carry the same bytes.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

/// The reader's error text, or NULL (replaces the redisReaderGetError macro).
const char *chiredis_reader_error(redisReader *reader);

/// A nested reply that exceeded the reader's limits and was not kept: `len` holds the bytes of
/// the strings it had (or, for a string, its length), `integer` the element count it announced
/// (-1 for a string). Never has `str` or `element`.
#define CHIREDIS_REPLY_OVERSIZED 100

/// Limits for nested values (never the top-level reply). 0 means unlimited.
typedef struct chiredis_limits {
    long long max_elements;    // an array announcing more elements is not kept
    long long max_string;      // a string longer than this is not kept
    long long max_array_bytes; // an array whose strings add up to more is not kept
} chiredis_limits;

/// A reader whose reply objects honour `limits` (read at each reply, so they may change between
/// replies). Free it with redisReaderFree, its replies with chiredis_free_reply.
redisReader *chiredis_reader_create(chiredis_limits *limits);

/// Frees a reply made by a chiredis reader (including oversized markers).
void chiredis_free_reply(void *reply);
#endif
