#include "ctl/proto.h"

#include <string.h>

int gvm_ctl_parse(const void *buf, size_t n, struct gvm_ctl_msg *m)
{
    const uint8_t *b = buf;
    if (!b || n < GVM_CTL_HDR || n > GVM_CTL_MSG_MAX) return -1;
    if (b[0] != GVM_CTL_VERSION || b[1] == 0 || b[1] >= GVM_CTL_TYPES) return -1;
    uint32_t len = gvm_get_u32(b + 4);
    if (len != n - GVM_CTL_HDR) return -1;
    m->type = b[1];
    m->flags = (uint16_t)(b[2] | b[3] << 8);
    m->len = len;
    m->payload = b + GVM_CTL_HDR;
    return 0;
}

size_t gvm_ctl_frame(void *buf, size_t cap, uint8_t type, const void *payload, size_t len)
{
    size_t n = GVM_CTL_HDR + len;
    if (len > GVM_CTL_MSG_MAX - GVM_CTL_HDR || n > cap) return 0;
    uint8_t *b = buf;
    b[0] = GVM_CTL_VERSION;
    b[1] = type;
    b[2] = b[3] = 0;
    gvm_put_u32(b + 4, (uint32_t)len);
    if (len) memcpy(b + GVM_CTL_HDR, payload, len);
    return n;
}
