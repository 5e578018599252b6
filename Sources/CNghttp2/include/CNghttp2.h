#ifndef CNGHTTP2_H
#define CNGHTTP2_H

// C shim for HTTP2Kit, the only module that imports this one.
//
// nghttp2 1.52 (Debian 12): the mem_recv/mem_send/submit_request API, not the *2 variants.
//
// Swift can reach most of nghttp2 directly; what lives here is what it cannot reach comfortably:
// - nghttp2_frame is a union of frame structs and nghttp2_data_source a union of an fd and a
//   pointer: small accessors read exactly the member that the frame type says is valid, so the
//   Swift side never pokes at overlapping union fields;
// - the PING payload is 8 opaque bytes in a C array (a tuple in Swift): converted to and from a
//   uint64_t here.
// Every symbol is prefixed `cnghttp2_`. The accessors are `static inline` so that the hot
// callbacks pay no call for them.

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <nghttp2/nghttp2.h>

// MARK: Frame accessors (valid inside nghttp2 callbacks, for the frame they were given)

static inline uint8_t cnghttp2_frame_type(const nghttp2_frame *frame) { return frame->hd.type; }
static inline uint8_t cnghttp2_frame_flags(const nghttp2_frame *frame) { return frame->hd.flags; }
static inline int32_t cnghttp2_frame_stream_id(const nghttp2_frame *frame) { return frame->hd.stream_id; }

/// HEADERS only: NGHTTP2_HCAT_REQUEST / RESPONSE / PUSH_RESPONSE / HEADERS as an int.
static inline int cnghttp2_frame_headers_category(const nghttp2_frame *frame) {
    return (int)frame->headers.cat;
}

/// RST_STREAM only.
static inline uint32_t cnghttp2_frame_rst_stream_error_code(const nghttp2_frame *frame) {
    return frame->rst_stream.error_code;
}

/// GOAWAY only.
static inline int32_t cnghttp2_frame_goaway_last_stream_id(const nghttp2_frame *frame) {
    return frame->goaway.last_stream_id;
}
static inline uint32_t cnghttp2_frame_goaway_error_code(const nghttp2_frame *frame) {
    return frame->goaway.error_code;
}
/// GOAWAY only: the debug data (may be NULL when the length is 0).
static inline const uint8_t *cnghttp2_frame_goaway_debug_data(const nghttp2_frame *frame) {
    return frame->goaway.opaque_data;
}
static inline size_t cnghttp2_frame_goaway_debug_data_length(const nghttp2_frame *frame) {
    return frame->goaway.opaque_data_len;
}

/// PING only: the 8 opaque bytes read as a big-endian integer.
static inline uint64_t cnghttp2_frame_ping_payload(const nghttp2_frame *frame) {
    uint64_t value = 0;
    for (int i = 0; i < 8; i++) {
        value = (value << 8) | frame->ping.opaque_data[i];
    }
    return value;
}

// MARK: Data providers

/// A data provider whose source is the pointer `ptr` (never the fd member of the union).
static inline nghttp2_data_provider cnghttp2_data_provider_make(void *ptr,
                                                                nghttp2_data_source_read_callback callback) {
    nghttp2_data_provider provider;
    memset(&provider, 0, sizeof provider);
    provider.source.ptr = ptr;
    provider.read_callback = callback;
    return provider;
}

/// The pointer member of a data source made by cnghttp2_data_provider_make.
static inline void *cnghttp2_data_source_ptr(const nghttp2_data_source *source) {
    return source ? source->ptr : NULL;
}

// MARK: Submitting

/// nghttp2_submit_ping with the payload written as 8 big-endian bytes.
int cnghttp2_submit_ping(nghttp2_session *session, uint8_t flags, uint64_t payload);

/// The runtime library's version string, e.g. "1.52.0".
const char *cnghttp2_version_string(void);

#endif
