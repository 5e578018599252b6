#include "CHiredis.h"

const char *chiredis_reader_error(redisReader *reader) {
    return reader->err ? reader->errstr : NULL;
}
