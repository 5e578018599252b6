#include "CNghttp2.h"

int cnghttp2_submit_ping(nghttp2_session *session, uint8_t flags, uint64_t payload) {
    uint8_t bytes[8];
    for (int i = 7; i >= 0; i--) {
        bytes[i] = (uint8_t)(payload & 0xff);
        payload >>= 8;
    }
    return nghttp2_submit_ping(session, flags, bytes);
}

const char *cnghttp2_version_string(void) {
    nghttp2_info *info = nghttp2_version(0);
    return info && info->version_str ? info->version_str : "unknown";
}
