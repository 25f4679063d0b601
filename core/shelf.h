/* A region's contents kept in host memory that is not mapped at the
 * region's addresses: a pause with GVM_PAUSE_UNMAPPED, or a spill to host
 * with spill_host_map=lazy. Mapping host memory at a region's addresses
 * makes the driver build device page tables for it at ~12 µs/MiB (20 beside
 * a copy), as slow as the copy itself; a shelved region skips that: its
 * copy waits in host pieces mapped only at their own staging addresses,
 * and its blocks are unmapped (phys NULL, as after a discarding pause), so
 * touching it faults until it is taken back or mapped in place. The caller
 * holds r->op and has entered the move. */
#ifndef GVM_SHELF_H
#define GVM_SHELF_H

#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

/* A put or a take in two halves, so that a swap runs one of each at once
 * on the copy engines: begin issues the copies (a take also maps fresh
 * memory at the addresses, nothing reads it before end returns), end waits
 * for them and finishes. end must follow every begin, failed or not; it
 * returns the operation's result. */
struct gvm_shelf_op {
    struct gvm_region *r;
    const char *why;             /* as the trace names it */
    uint64_t t0;
    int from, dev;               /* put with hand-off: dev is where all its blocks are, else -1 */
    int n;                       /* put: the pieces */
    size_t *sizes;
    struct gvm_phys **pieces, **old;
    bool got;                    /* put: pieces may have been taken */
    struct gvm_phys_batch *batch; /* put: pieces still being made (core/phys.h) */
    bool spill;                  /* put: a lazy spill (else a pause) */
    int mapped;                  /* take: blocks mapped so far */
    uint32_t streams;            /* devices whose copy streams carry its copies */
    /* put with hand-off: its blocks in units, each with an event after its
     * copies; the first `handed` blocks (`released` units) already gave
     * their device memory to the take of the same swap. */
    int nunits, released, handed;
    int *unit_end;               /* the block past each unit */
    CUevent *unit_done;
    /* take: the swap's puts whose device memory it may take (hand-off). */
    struct gvm_shelf_op *puts;
    int nputs;
    CUresult rc;
};

/* Copies r into host pieces, then unmaps its blocks and gives their memory
 * back; `quiesced`: the caller has just waited for queued work; `spill`:
 * a lazy spill (region.h, shelf_spill), else a pause. On failure
 * r is as it was (mapped, contents in place) and nothing is held. */
CUresult gvm_shelf_put(struct gvm_region *r, bool quiesced, bool spill, const char *why);
/* `hand_off`: a take of the same swap may take r's device memory unit by
 * unit as its copies finish, before put_end (gvm_shelf_take_begin). On
 * failure a block already handed off gets fresh device memory and its
 * copy back, or, when the device has no room left for it, its host piece
 * mapped in place: the contents stay in place either way. */
void gvm_shelf_put_begin(struct gvm_shelf_op *op, struct gvm_region *r, bool quiesced, bool spill, bool hand_off,
                         const char *why);
CUresult gvm_shelf_put_end(struct gvm_shelf_op *op);

/* Maps fresh memory on dev at r's addresses and copies the shelved
 * contents into it; the host pieces go back to the pool. On failure r is
 * still shelved, its copy intact. */
CUresult gvm_shelf_take(struct gvm_region *r, int dev, const char *why);
/* puts[0..nputs): the puts of the same swap begun with hand_off (zeroed
 * entries are skipped). A block that does not fit under dev's cap waits
 * for the next unit of theirs whose copy is done and takes its memory:
 * the swap then needs room for one unit, not for the whole region, and
 * both directions still copy at once. */
void gvm_shelf_take_begin(struct gvm_shelf_op *op, struct gvm_region *r, int dev, const char *why,
                          struct gvm_shelf_op *puts, int nputs);
CUresult gvm_shelf_take_end(struct gvm_shelf_op *op);

/* The room a lazy swap bringing in `need` bytes needs to copy both ways
 * at once: one unit (the block size), as the puts hand off the rest. */
size_t gvm_shelf_swap_room(size_t need);

/* Maps the shelf's pieces at r's addresses: r is then host memory that
 * every pointer reaches, as a spill that maps it leaves it. On failure r
 * is still shelved, its copy intact. */
CUresult gvm_shelf_map_in_place(struct gvm_region *r);

/* The shelf's pieces are the region's own (region.h): it counts them
 * (gvm_region_shelf_bytes) and releases them when destroyed. */

#endif
