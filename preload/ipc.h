/* Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcClose-
 * MemHandle) on gvmshim memory, which is VMM memory the driver cannot
 * export that way.
 *
 * The exporter gives out a 64-byte handle of its own (below) and keeps a
 * POSIX file descriptor for each physical piece of the exported region
 * (core/share.h), exported on the program's thread. The handle is a
 * capability, as natively: whoever holds its bytes may map the memory,
 * whatever its user. The importer connects to the exporter's import
 * socket (ctl/server.h: any user, separate from the control socket), named
 * by the handle's endpoint id, and presents the allocation's secret; the
 * exporter's server thread compares it in constant time with those of the
 * live exports and sends the descriptors (SCM_RIGHTS), or one refusal for
 * every kind of wrong request. The importer imports and maps them in a
 * range of its own and keeps the connection open as its lease: when it
 * closes the handle or dies, the exporter sees EOF.
 *
 * Handle layout (little-endian), CU_IPC_HANDLE_SIZE bytes:
 *    0   "GVMIPC", version (2), 0
 *    8   endpoint id of the exporter's import socket (random per process)
 *   16   the allocation's secret, 16 bytes (128 bits from getrandom, fresh
 *        per exported allocation): both its name and the proof of holding
 *        the handle
 *   32   offset of the allocation in the exported span
 *   40   bytes the program asked for
 *   48   bytes of the span (the importer reserves this much)
 *   56   number of pieces
 *   60   FNV-1a checksum of bytes 0-59 (against corruption, not forgery)
 * A handle without the magic is the driver's and goes to it untouched.
 * Version 1 (a guessable counter for the id, served on the control
 * socket) is refused as a bad handle. */
#ifndef GVM_PRELOAD_IPC_H
#define GVM_PRELOAD_IPC_H

#include "core/cuda_api.h"

#include <stddef.h>
#include <stdint.h>

#define GVM_IPC_VERSION 2
#define GVM_IPC_SECRET 16   /* bytes of an allocation's secret */
#define GVM_IPC_BATCH 64     /* pieces (descriptors) per reply message */

struct gvm_ipc_handle {
    uint64_t endpoint;
    uint8_t id[GVM_IPC_SECRET];   /* the secret */
    uint64_t offset, size, extent;
    uint32_t npieces;
};

enum { GVM_IPC_OK = 0, GVM_IPC_FOREIGN = 1, GVM_IPC_BAD = -1 };

/* Decodes len bytes: GVM_IPC_OK, GVM_IPC_FOREIGN (not a gvmshim handle),
 * or GVM_IPC_BAD (gvmshim's magic, but another version, a bad checksum or
 * fields that do not add up). */
int gvm_ipc_decode(const void *bytes, size_t len, struct gvm_ipc_handle *h);
void gvm_ipc_encode(const struct gvm_ipc_handle *h, uint8_t out[CU_IPC_HANDLE_SIZE]);

/* The OPEN request: endpoint (8) and the allocation's secret (16). */
#define GVM_IPC_OPEN_LEN 24
/* Each reply: status (CUresult, 4), total pieces (4), first piece of this
 * message (4), pieces in it (4), extent (8), then a size (8) per piece,
 * with one descriptor per piece. */
#define GVM_IPC_REPLY_HDR 24

struct gvm_ipc_reply {
    uint32_t status, total, first, count;
    uint64_t extent;
    const uint8_t *sizes;    /* count little-endian u64 */
};

/* Parses a reply payload; -1 when its fields do not add up. */
int gvm_ipc_parse_reply(const uint8_t *p, size_t len, struct gvm_ipc_reply *r);

/* The exporter side: CUDA_ERROR_NOT_FOUND when p is not gvmshim's. */
CUresult gvm_ipc_export(CUipcMemHandle *out, CUdeviceptr p);

/* The importer side: CUDA_ERROR_NOT_FOUND when the handle, or the pointer,
 * is not gvmshim's (the caller passes it through). */
CUresult gvm_ipc_open(CUdeviceptr *out, const CUipcMemHandle *h, unsigned flags);
CUresult gvm_ipc_close(CUdeviceptr p);

/* Diagnostics for tests and gvmctl, exported but not in gvmshim.h:
 * allocations exported (still open to importers) and leases held. */
void gvm_ipc_counts(int *exported, int *leases);

#endif
