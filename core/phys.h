/* Physical memory: one cuMemCreate handle per gvm_phys, and per-location
 * pools of ready handles. Creating pinned host memory costs ~250 ms/GiB and
 * mapping it ~10 ms/GiB (H100, 2026-11-22), so a migration takes its
 * destination from the pool, where a handle keeps a second "staging"
 * mapping that copy engines can write without a fresh map. */
#ifndef GVM_PHYS_H
#define GVM_PHYS_H

#include "core/cuda_api.h"
#include "core/piece.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Creates a handle at loc with the properties a cudaMalloc-like buffer
 * needs (POSIX_FD export, RDMA where the device supports it). */
CUresult gvm_phys_create(int loc, size_t size, struct gvm_phys **out);

/* gvm_phys_create for bytes the caller has reserved (gvm_held_reserve):
 * on failure the reservation stays the caller's. */
CUresult gvm_phys_create_reserved(int loc, size_t size, struct gvm_phys **out);

/* Gives p its staging mapping if it has none. A move reads its sources
 * through theirs, so that it can remap the region's own addresses while
 * the copy runs (core/move.c). */
CUresult gvm_phys_stage(struct gvm_phys *p);

/* gvm_phys_stage, and the staging mapping granted to device dev, whose
 * copy engine will use it (a move between devices; dev < 0: nothing). A
 * device piece's staging mapping is granted to its own device only at
 * first: every device granted costs as much again. */
CUresult gvm_phys_stage_for(struct gvm_phys *p, int dev);

/* Removes the staging mapping gvm_phys_stage made (a failed move leaves
 * its sources as they were). */
void gvm_phys_unstage(struct gvm_phys *p);

/* Unmaps the staging mapping and releases the handle. A staging mapping
 * that cannot be removed keeps its range and handle (leaked, with a
 * warning): freeing a range under a live mapping would let the next
 * reservation there alias this memory. */
void gvm_phys_destroy(struct gvm_phys *p);

/* cuMemUnmap of [va, va+size), tried twice (a passing fault). A caller
 * whose unmap still failed must neither free the range nor give the
 * memory behind it back (mark the piece stuck). */
CUresult gvm_phys_unmap(CUdeviceptr va, size_t size);

/* Frees an address range nothing is mapped in, trying twice (as unmap
 * and release do: a passing fault must not leave the range reserved for
 * the life of the process); warns when both fail. */
CUresult gvm_phys_free_range(CUdeviceptr va, size_t size);

/* A handle of exactly `size` at loc: from the pool, else created. With
 * staging, it also comes mapped at a staging address. */
CUresult gvm_phys_get(int loc, size_t size, bool staging, struct gvm_phys **out);

/* A pooled piece of exactly `size` at loc, or NULL; with `staging`, one
 * already staged is preferred; `copy_only`: a registered piece will do
 * (it has no handle to map). */
struct gvm_phys *gvm_phys_pool_take(int loc, size_t size, bool staging, bool copy_only);

/* Gives a handle back to its location's pool; where the pool would pass
 * its limit, the handles pooled longest ago are destroyed to make room (one
 * larger than the limit itself is destroyed); a stuck one is leaked. */
void gvm_phys_put(struct gvm_phys *p);

/* Destroys pooled handles at loc until `bytes` are freed (SIZE_MAX: all
 * that were pooled when it began; pieces a prefill adds meanwhile stay).
 * Returns the bytes freed. */
size_t gvm_phys_trim(int loc, size_t bytes);

/* Destroys the host pool's pieces that are the process's pages registered
 * in dev's primary context (a reset of it ended their registration); the
 * created ones stay. Returns the bytes freed. */
size_t gvm_phys_trim_registered(int dev);

/* Destroys every piece pooled at loc when none came or went for idle_ns
 * (and no prefill is filling it). Returns the bytes freed. */
size_t gvm_phys_trim_idle(int loc, uint64_t idle_ns);

/* Bytes held in the pool at loc. */
size_t gvm_phys_pooled(int loc);

/* Pool limits, by location slot (see gvm_loc_slot). */
void gvm_phys_set_limit(int loc, size_t bytes);

/* Raises loc's pool limit to `bytes` if it is lower (never lowers it). */
void gvm_phys_raise_limit(int loc, size_t bytes);

/* Fills loc's pool up to its limit with staged pieces of the block size,
 * on background threads, so that a first move there takes ready memory
 * instead of paying for its creation (pinned host memory: ~250 ms/GiB in
 * the driver). Once per process and location: a later call does nothing.
 * Pieces count as held while they are created; a failed creation (a cap,
 * the driver) ends the fill quietly, and moves create what they miss. */
void gvm_phys_prefill(int loc);

/* A sign that memory may move to loc (a tag pushed, a first move there):
 * fills as gvm_phys_prefill does when the settings say auto, now if the
 * core runs, else when it starts. */
void gvm_phys_prefill_hint(int loc);

/* Whether a hint came before the core started (core.c). */
bool gvm_phys_prefill_hinted(int loc);

/* Moves tell the pool when they begin (+1) and end (-1): the fill steps
 * aside while any runs and for a quiet stretch after (core/move.c calls
 * it; moves come in bursts, a swap, a pause, a program's loop). */
void gvm_phys_moves(int delta);

/* Waits until no fill is running; with `stop`, ends running fills after
 * the piece each is creating (at exit: no driver call may outlive it). */
void gvm_phys_prefill_wait(bool stop);

#endif
