/* The message format of gvmshim's per-process sockets (ctl/server.h):
 * one message per SOCK_SEQPACKET datagram, an 8-byte header and a payload:
 *
 *   byte 0      protocol version (GVM_CTL_VERSION)
 *   byte 1      request type (enum gvm_ctl_type); a reply has its request's type
 *   bytes 2-3   flags, little-endian (0 so far)
 *   bytes 4-7   payload length, little-endian; header + payload <= GVM_CTL_MSG_MAX
 *
 * Descriptors travel with a message as SCM_RIGHTS, at most GVM_CTL_FDS_MAX.
 * Parsing takes (bytes, length) and trusts nothing, so it can be fuzzed. */
#ifndef GVM_CTL_PROTO_H
#define GVM_CTL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define GVM_CTL_VERSION 1
#define GVM_CTL_HDR 8
#define GVM_CTL_MSG_MAX 4096
#define GVM_CTL_FDS_MAX 64

enum gvm_ctl_type {
    GVM_CTL_PING = 1,      /* -> pid (u32), uid (u32), endpoint (u64): who serves this socket */
    GVM_CTL_IPC_OPEN = 2,  /* CUDA IPC, on the import socket only: the pieces of an exported allocation (preload/ipc_export.c) */
    /* gvmctl (preload/control.c). Each reply is one or more messages of the
     * request's type: byte 0 is 1 while more follow, bytes 1-4 a status
     * (0, a negative gvm_status or -errno), then text. */
    GVM_CTL_INFO = 3,      /* -> "key value" lines: where the process's bytes are */
    GVM_CTL_STATS = 4,     /* u8 json -> the GVM_STATS summary, live */
    GVM_CTL_SET = 5,       /* "key=value" lines -> applied live, or why not */
    GVM_CTL_PAUSE = 6,     /* u32 flags, tag (may be empty: the whole process) -> done once released; the text
                              is a reason line, then "key value" lines (preload/control.c) */
    GVM_CTL_RESUME = 7,    /* u32 0, tag -> done once back; text as for PAUSE */
    GVM_CTL_MIGRATE = 8,   /* i32 location, u8 all, tag -> done once moved; text as for PAUSE */
    GVM_CTL_TYPES = 32     /* types are 1 .. GVM_CTL_TYPES-1 */
};

struct gvm_ctl_msg {
    uint8_t type;
    uint16_t flags;
    uint32_t len;              /* payload bytes */
    const uint8_t *payload;    /* into the parsed buffer */
};

#define GVM_CTL_REPLY_HDR 5   /* more flag + status of a gvmctl reply */

/* Parses one received message. Returns 0, or -1 when it is malformed: too
 * short or long, another version, an unknown type, a length that does not
 * match what arrived. */
int gvm_ctl_parse(const void *buf, size_t n, struct gvm_ctl_msg *m);

/* Writes header and payload into buf; returns the message's length, or 0
 * when it would not fit in cap or in GVM_CTL_MSG_MAX. */
size_t gvm_ctl_frame(void *buf, size_t cap, uint8_t type, const void *payload, size_t len);

/* Little-endian field access for payloads. */
static inline void gvm_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void gvm_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t gvm_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static inline uint64_t gvm_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

#endif
