/* Small allocations (up to small_max) share 2 MiB chunk regions, one size
 * class per chunk, with cudaMalloc's 256-byte alignment. The chunk is the
 * unit that moves: migrating one small allocation moves its neighbours. */
#ifndef GVM_SLAB_H
#define GVM_SLAB_H

#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

#define GVM_SLAB_MAX_SLOTS 8192 /* 2 MiB / 256 B */

struct gvm_slab {
    struct gvm_region *chunk;
    size_t cls;                 /* slot size: 2^cls_shift, times 3 when cls_three */
    unsigned cls_shift;
    bool cls_three;
    unsigned nslots, nfree, hint;
    int device, cidx, tag;
    uint64_t bits[GVM_SLAB_MAX_SLOTS / 64];   /* 1 = slot in use */
    uint32_t *sizes;            /* requested bytes per slot, 0 = free */
    uint64_t *ids;              /* buffer id per slot */
    uint16_t *aliased;          /* aliases per slot: a freed aliased slot stays taken */
    int flushing;               /* scratch mark while pending slots are released */
    bool at_home;               /* its chunk, when last seen under its lock: on its device, not paused */
    struct gvm_slab *next, *prev;   /* the (device, class) list */
};

/* Serves `size` bytes (<= small_max) on device from a chunk of tag `tag`. */
CUresult gvm_slab_alloc(int device, size_t size, int tag, CUcontext ctx, uintptr_t *out);

/* Frees the slot at p (the slot's base) in chunk r: it becomes pending,
 * reused only after a device-wide wait that began after the free (so no
 * kernel queued before the free can see a new owner's data). Returns
 * CUDA_ERROR_INVALID_VALUE for an address that is not a live slot base. */
CUresult gvm_slab_free(struct gvm_region *r, uintptr_t p);

/* The live slot containing p, as base and requested size; false if none. */
bool gvm_slab_find(const struct gvm_region *r, uintptr_t p, uintptr_t *base, size_t *size, int *slot);

/* The bases of chunk r's live slots, up to max of them in out; returns
 * how many there are. Lock-free, like gvm_slab_find. */
size_t gvm_slab_live_bases(const struct gvm_region *r, uintptr_t *out, size_t max);

/* Alias bookkeeping for one slot. */
void gvm_slab_alias_ref(struct gvm_region *r, int slot, int delta);

/* Bytes of empty chunks kept for reuse on device (they count as free). */
size_t gvm_slab_idle_bytes(int device);

/* Waits for device and makes its pending slots free. */
void gvm_slab_flush(int device);

/* Gives back every empty chunk of device (when memory runs short), and
 * returns once those another thread's reap is destroying are gone too
 * (their bytes count as freed), except while this thread makes room for
 * a move. Call it, like gvm_slab_flush and gvm_slab_alloc, holding no
 * region lock. */
size_t gvm_slab_trim(int device);

/* Marks this thread's trims as made to free memory for a move (on), or
 * not (off): gvm_move_make_room sets it around its gvm_heap_trim. A reap
 * then takes a chunk's lock only if it is free at once and leaves a chunk
 * being moved doomed, and gvm_slab_trim does not wait for other threads'
 * reaps: the move may be this thread's own or one it works for. */
void gvm_slab_set_making_room(bool on);

/* New buffer ids for every slot of a chunk (after its memory moved). */
void gvm_slab_renew_ids(struct gvm_region *r);

/* Destroys empty chunks that a reap skipped while they were being moved.
 * A move calls it when it lets go of its region. Cheap when there are none. */
void gvm_slab_reap_skipped(void);

/* The buffer id of a slot (lock-free; 0 if the chunk went meanwhile). */
uint64_t gvm_slab_buffer_id(const struct gvm_region *r, int slot);

#endif
