/* The live regions: every large allocation's region and every slab chunk
 * the program uses, in one list the policy walks to choose what to move
 * (and gvm_pause to find a tag's memory). */
#ifndef GVM_LIVE_H
#define GVM_LIVE_H

#include "core/region.h"

/* Registers a live region in the list (and removes it). */
void gvm_live_add(struct gvm_region *r);
void gvm_live_remove(struct gvm_region *r);

/* Calls fn on every listed region; fn runs with the list's lock held and
 * must not call into the heap or lock a region. */
void gvm_live_for_each(void (*fn)(struct gvm_region *r, void *arg), void *arg);

#endif
