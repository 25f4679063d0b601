/* A paused region's contents kept in host memory that is not mapped at
 * the region's addresses (gvm_pause with GVM_PAUSE_UNMAPPED). A pause that
 * keeps its copy readable maps host memory at the region's addresses, and
 * the driver builds device page tables for it at ~12 µs/MiB, as slow as the
 * copy itself; a shelved region skips that: its copy waits in host pieces
 * mapped only at their own staging addresses, and its blocks are unmapped
 * (phys NULL, as after a discarding pause), so touching it faults until it
 * is taken back. The caller holds r->op and has entered the move. */
#ifndef GVM_SHELF_H
#define GVM_SHELF_H

#include "core/region.h"

/* Copies r into host pieces, then unmaps its blocks and gives their memory
 * back; `quiesced`: the caller has just waited for queued work. On failure
 * r is as it was (mapped, contents in place) and nothing is held. */
CUresult gvm_shelf_put(struct gvm_region *r, bool quiesced);

/* Maps fresh memory on dev at r's addresses and copies the shelved
 * contents into it; the host pieces go back to the pool. On failure r is
 * still shelved, its copy intact. */
CUresult gvm_shelf_take(struct gvm_region *r, int dev);

/* The shelf's pieces are the region's own (region.h): it counts them
 * (gvm_region_shelf_bytes) and releases them when destroyed. */

#endif
