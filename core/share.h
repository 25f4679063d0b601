/* CUDA IPC, the core's side: exporting an allocation's physical pieces as
 * POSIX file descriptors for other processes to map (preload/ipc_*.c does
 * the rest).
 *
 * What is exported is the allocation's region: a large allocation's own
 * pieces, or, for a small one, the whole 2 MiB chunk it is packed in (an
 * importer can reach its neighbours' bytes in that chunk). From the export
 * on, the region is GVM_RF_SHARED and GVM_RF_PINNED: the other processes
 * map these very pieces, so it never moves again and its pieces never go
 * back to a pool or cache for reuse; when the program frees it, its pieces
 * are released to the driver, which keeps the memory while importers map
 * it. A freed exported chunk slot stays taken until no importer has it
 * open (gvm_share_release), so a new allocation never lands in memory
 * another process still reads. */
#ifndef GVM_SHARE_H
#define GVM_SHARE_H

#include "core/region.h"
#include "core/share_hold.h"

#include <stdbool.h>
#include <stdint.h>

struct gvm_share {
    struct gvm_region *region;   /* the exported span: a large region or a chunk */
    int slot;                    /* the allocation's slot in the chunk, -1 for large */
    uint64_t buffer_id;          /* the allocation (fresh per allocation) */
    size_t offset;               /* of the allocation in the span */
    size_t size;                 /* bytes the program asked for */
    size_t extent;               /* bytes of the span */
    int npieces;
    int *fds;                    /* one per piece (after gvm_share_export) */
    uint64_t *sizes;             /* bytes of each piece */
};

/* Finds the live allocation containing p and locks its region. Returns
 * CUDA_ERROR_NOT_FOUND when p is not gvmshim's. */
CUresult gvm_share_lock(uintptr_t p, struct gvm_share *s);
void gvm_share_unlock(struct gvm_share *s);

/* Region locked: brings host-resident memory to the device first (an
 * allocation on another device is exported where it is), exports every
 * piece, marks the region shared and pinned, and holds a chunk slot.
 * Fails with CUDA_ERROR_INVALID_VALUE for paused memory and with the
 * driver's error otherwise; then nothing is exported or held (a move
 * home that was done stays done). */
CUresult gvm_share_export(struct gvm_share *s);

/* Region locked: undoes gvm_share_export when the export cannot be
 * registered (closes the descriptors, drops the slot's hold). */
void gvm_share_unexport(struct gvm_share *s);

/* Closes and frees the descriptors and sizes of s. */
void gvm_share_drop_fds(struct gvm_share *s);

#endif
