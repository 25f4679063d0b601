/* The use of each device's default pool as the driver reports it
 * (cuMemPoolGetAttribute) for the stream-ordered allocations gvmshim
 * serves in its place: their memory is gvmshim's, but a program reads the
 * pool's used and reserved bytes (PyTorch's cudaMallocAsync backend as
 * memory_reserved(), CuPy's MemoryAsyncPool as total/used/free bytes) and
 * expects the driver's figures for the same sequence of calls.
 *
 * The driver's model, per pool (as measured on an H200, driver 580.159,
 * by gpu tests gpu-cupy-pools and gpu-torch-async-pool):
 *   used     the live allocations' sizes exactly as requested, unrounded;
 *   reserved the 32 MiB chunks the pool has mapped: where the driver would
 *            have placed each allocation in the pool's address range, and
 *            which chunks a synchronize (down to the release threshold) or
 *            a trim releases, is core/poolarena.h's;
 *   highs    the most of each since the start or the last reset.
 * Freed bytes are reused by any stream: what the default reuse flags give
 * once the free's work has run (opportunistic reuse); with the flags off,
 * the driver maps a new chunk for another stream where this model does
 * not.
 * Pure arithmetic: which pool and when is the caller's (preload/hooks_mem.c).
 * gpu test gpu-cupy-pools compares every figure with the driver's. */
#ifndef GVM_POOLUSE_H
#define GVM_POOLUSE_H

#include "core/location.h"
#include "core/poolarena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The chunk a pool maps and releases memory in (CuPy's MemoryAsyncPool
 * notes the same 32 MiB steps). */
#define GVM_POOLUSE_GRANULE GVM_POOLARENA_CHUNK

enum gvm_pooluse_figure {
    GVM_POOLUSE_USED,
    GVM_POOLUSE_USED_HIGH,
    GVM_POOLUSE_RESERVED,
    GVM_POOLUSE_RESERVED_HIGH,
};

/* An allocation at key (its address) of counted bytes (its size as
 * requested) on dev's default pool, and its free (in stream order or not:
 * settled at a synchronize). */
void gvm_pooluse_alloc(int dev, uintptr_t key, uint64_t counted);
void gvm_pooluse_free(int dev, uintptr_t key, uint64_t counted);

/* Whether a synchronize would change some pool (it keeps more than its
 * live allocations' chunks, or has frees to settle): one load, for the
 * synchronize hooks' fast path; and whether it would change dev's. */
bool gvm_pooluse_releasable(void);
bool gvm_pooluse_keeps_extra(int dev);

/* A synchronize: every free so far is settled, and a pool reserving more
 * than threshold bytes (its RELEASE_THRESHOLD) releases down to it. */
void gvm_pooluse_sync(int dev, uint64_t threshold);

/* cuMemPoolTrimTo(pool, keep): releases settled free chunks until the
 * pool reserves no more than keep. */
void gvm_pooluse_trim(int dev, uint64_t keep);

uint64_t gvm_pooluse_read(int dev, enum gvm_pooluse_figure f);

/* Resetting a high-water mark makes it the current figure. */
void gvm_pooluse_reset_high(int dev, enum gvm_pooluse_figure high);

/* Forgets dev's pool (a reset of its context took its allocations). */
void gvm_pooluse_drop(int dev);

#endif
