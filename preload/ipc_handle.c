/* The handle and reply formats of CUDA IPC (preload/ipc.h): pure functions
 * of (bytes, length), so they can be fuzzed. */
#include "preload/ipc.h"

#include "ctl/proto.h"

#include <string.h>

static const uint8_t magic[6] = {'G', 'V', 'M', 'I', 'P', 'C'};

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

void gvm_ipc_encode(const struct gvm_ipc_handle *h, uint8_t out[CU_IPC_HANDLE_SIZE])
{
    memset(out, 0, CU_IPC_HANDLE_SIZE);
    memcpy(out, magic, sizeof magic);
    out[6] = GVM_IPC_VERSION;
    gvm_put_u64(out + 8, h->endpoint);
    memcpy(out + 16, h->id, sizeof h->id);
    gvm_put_u64(out + 32, h->offset);
    gvm_put_u64(out + 40, h->size);
    gvm_put_u64(out + 48, h->extent);
    gvm_put_u32(out + 56, h->npieces);
    gvm_put_u32(out + 60, fnv1a(out, 60));
}

int gvm_ipc_decode(const void *bytes, size_t len, struct gvm_ipc_handle *h)
{
    const uint8_t *b = bytes;
    if (!b || len != CU_IPC_HANDLE_SIZE || memcmp(b, magic, sizeof magic)) return GVM_IPC_FOREIGN;
    if (b[6] != GVM_IPC_VERSION || b[7] || gvm_get_u32(b + 60) != fnv1a(b, 60)) return GVM_IPC_BAD;
    h->endpoint = gvm_get_u64(b + 8);
    memcpy(h->id, b + 16, sizeof h->id);
    h->offset = gvm_get_u64(b + 32);
    h->size = gvm_get_u64(b + 40);
    h->extent = gvm_get_u64(b + 48);
    h->npieces = gvm_get_u32(b + 56);
    /* Pieces are at least 64 KiB (a page of the largest GPU granularity is
     * 2 MiB): a count beyond that is a lie, not a big allocation. */
    if (!h->endpoint || !h->npieces || !h->extent || h->npieces > h->extent >> 16 || !h->size ||
        h->offset >= h->extent || h->size > h->extent - h->offset)
        return GVM_IPC_BAD;
    return GVM_IPC_OK;
}

int gvm_ipc_parse_reply(const uint8_t *p, size_t len, struct gvm_ipc_reply *r)
{
    if (!p || len < GVM_IPC_REPLY_HDR) return -1;
    r->status = gvm_get_u32(p);
    r->total = gvm_get_u32(p + 4);
    r->first = gvm_get_u32(p + 8);
    r->count = gvm_get_u32(p + 12);
    r->extent = gvm_get_u64(p + 16);
    r->sizes = p + GVM_IPC_REPLY_HDR;
    if (r->count > GVM_IPC_BATCH || len != GVM_IPC_REPLY_HDR + (size_t)r->count * 8) return -1;
    if (r->status) return r->count ? -1 : 0;
    if (!r->count || r->first >= r->total || r->count > r->total - r->first) return -1;
    return 0;
}
