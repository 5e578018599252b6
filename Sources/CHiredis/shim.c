#include "CHiredis.h"
#include <stdlib.h>
#include <string.h>

const char *chiredis_reader_error(redisReader *reader) {
    return reader->err ? reader->errstr : NULL;
}

// Reply objects built like hiredis's own (hiredis.c keeps its functions static), with one
// difference: a nested value over the limits becomes a small CHIREDIS_REPLY_OVERSIZED marker and
// its contents are counted, not kept. That keeps a hostile stream entry (a million fields, a huge
// value) at a bounded cost: hiredis still parses every byte, but only bounded objects are made.
//
// Everything below an oversized array is parsed into `skipped`, a shared object that is never
// attached to a parent and never freed.
//
// An array's `element` holds room for at most FIRST_ELEMENTS elements at first and grows as they
// arrive (its capacity is kept in `integer`, which arrays don't use): a header announcing two
// billion elements would otherwise allocate 16 GB before one of them is sent, at the top level
// (never capped) or anywhere without limits. Every reply Redis sends to us fits the first
// allocation, so the hot path never grows.
static redisReply skipped;

#define FIRST_ELEMENTS 1024

static redisReply *new_reply(int type) {
    return calloc(1, sizeof(redisReply));
}

void chiredis_free_reply(void *reply) {
    redisReply *r = reply;
    if (r == NULL || r == &skipped) return;
    switch (r->type) {
    case REDIS_REPLY_ARRAY:
        if (r->element != NULL) {
            // Only the allocated part: a reply abandoned mid-way may not have grown to `elements`.
            size_t n = r->elements < (size_t)r->integer ? r->elements : (size_t)r->integer;
            for (size_t j = 0; j < n; j++) chiredis_free_reply(r->element[j]);
            free(r->element);
        }
        break;
    case REDIS_REPLY_ERROR:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_STRING:
        free(r->str);
        break;
    default:
        break;
    }
    free(r);
}

static const chiredis_limits *limits_of(const redisReadTask *task) {
    return (const chiredis_limits *)task->privdata;
}

/// Turns an array that went over its byte budget into a marker, freeing what it had kept.
static void make_oversized(redisReply *array) {
    if (array->element != NULL) {
        size_t n = array->elements < (size_t)array->integer ? array->elements : (size_t)array->integer;
        for (size_t j = 0; j < n; j++) chiredis_free_reply(array->element[j]);
        free(array->element);
    }
    array->integer = (long long)array->elements;
    array->element = NULL;
    array->elements = 0;
    array->type = CHIREDIS_REPLY_OVERSIZED;
}

/// The parent a new value attaches to, or NULL for the top-level reply. Returns &skipped when
/// the value is inside an oversized array (its bytes are counted there if it is a direct child).
static redisReply *parent_of(const redisReadTask *task, size_t bytes, int *skip) {
    *skip = 0;
    if (task->parent == NULL) return NULL;
    redisReply *parent = task->parent->obj;
    if (parent == &skipped) { *skip = 1; return parent; }
    parent->len += bytes;  // arrays use len to count the bytes of their strings
    if (parent->type == CHIREDIS_REPLY_OVERSIZED) { *skip = 1; return parent; }
    const chiredis_limits *l = limits_of(task);
    int parent_is_top = task->parent->parent == NULL;
    if (!parent_is_top && l && l->max_array_bytes > 0 && (long long)parent->len > l->max_array_bytes) {
        make_oversized(parent);
        *skip = 1;
    }
    return parent;
}

/// Puts `r` at its index in `parent` (if any), growing the parent's elements up to the count it
/// announced. Returns 0 when out of memory.
static int attach(const redisReadTask *task, redisReply *parent, redisReply *r) {
    if (parent == NULL) return 1;
    size_t idx = (size_t)task->idx, capacity = (size_t)parent->integer;
    if (idx >= capacity) {
        size_t grown = capacity * 2 > idx + 1 ? capacity * 2 : idx + 1;
        if (grown > parent->elements) grown = parent->elements;
        redisReply **element = realloc(parent->element, grown * sizeof(redisReply *));
        if (element == NULL) return 0;
        memset(element + capacity, 0, (grown - capacity) * sizeof(redisReply *));
        parent->element = element;
        parent->integer = (long long)grown;
    }
    parent->element[idx] = r;
    return 1;
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
    int skip;
    redisReply *parent = parent_of(task, task->type == REDIS_REPLY_STRING ? len : 0, &skip);
    if (skip) return &skipped;
    const chiredis_limits *l = limits_of(task);
    redisReply *r = new_reply(task->type);
    if (r == NULL) return NULL;
    if (parent != NULL && task->type == REDIS_REPLY_STRING && l && l->max_string > 0 && (long long)len > l->max_string) {
        r->type = CHIREDIS_REPLY_OVERSIZED;
        r->len = len;
        r->integer = -1;
    } else {
        char *buf = malloc(len + 1);
        if (buf == NULL) { free(r); return NULL; }
        memcpy(buf, str, len);
        buf[len] = '\0';
        r->type = task->type;
        r->str = buf;
        r->len = len;
    }
    if (!attach(task, parent, r)) { chiredis_free_reply(r); return NULL; }
    return r;
}

static void *create_array(const redisReadTask *task, int elements) {
    int skip;
    redisReply *parent = parent_of(task, 0, &skip);
    if (skip) return &skipped;
    const chiredis_limits *l = limits_of(task);
    redisReply *r = new_reply(REDIS_REPLY_ARRAY);
    if (r == NULL) return NULL;
    if (parent != NULL && l && l->max_elements > 0 && elements > l->max_elements) {
        r->type = CHIREDIS_REPLY_OVERSIZED;
        r->integer = elements;
    } else {
        r->type = REDIS_REPLY_ARRAY;
        if (elements > 0) {
            size_t first = elements < FIRST_ELEMENTS ? (size_t)elements : FIRST_ELEMENTS;
            r->element = calloc(first, sizeof(redisReply *));
            if (r->element == NULL) { free(r); return NULL; }
            r->integer = (long long)first;
        }
        r->elements = (size_t)(elements > 0 ? elements : 0);
    }
    if (!attach(task, parent, r)) { chiredis_free_reply(r); return NULL; }
    return r;
}

static void *create_integer(const redisReadTask *task, long long value) {
    int skip;
    redisReply *parent = parent_of(task, 0, &skip);
    if (skip) return &skipped;
    redisReply *r = new_reply(REDIS_REPLY_INTEGER);
    if (r == NULL) return NULL;
    r->type = REDIS_REPLY_INTEGER;
    r->integer = value;
    if (!attach(task, parent, r)) { chiredis_free_reply(r); return NULL; }
    return r;
}

static void *create_nil(const redisReadTask *task) {
    int skip;
    redisReply *parent = parent_of(task, 0, &skip);
    if (skip) return &skipped;
    redisReply *r = new_reply(REDIS_REPLY_NIL);
    if (r == NULL) return NULL;
    r->type = REDIS_REPLY_NIL;
    if (!attach(task, parent, r)) { chiredis_free_reply(r); return NULL; }
    return r;
}

static redisReplyObjectFunctions capped_functions = {
    create_string, create_array, create_integer, create_nil, chiredis_free_reply,
};

redisReader *chiredis_reader_create(chiredis_limits *limits) {
    redisReader *r = redisReaderCreateWithFunctions(&capped_functions);
    if (r != NULL) r->privdata = limits;
    return r;
}
