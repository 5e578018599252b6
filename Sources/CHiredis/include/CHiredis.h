#ifndef CHIREDIS_H
#define CHIREDIS_H
// hiredis 0.14 (Debian 12): used as a RESP codec only (reader + command formatter).
// The sockets are ours, so TLS (rediss://) can carry the same bytes.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

/// The reader's error text, or NULL (replaces the redisReaderGetError macro).
const char *chiredis_reader_error(redisReader *reader);
#endif
