/* Shared state of the policy and its spill/promote machinery. */
#ifndef GVM_POLICY_SPILL_H
#define GVM_POLICY_SPILL_H

#include "core/heap.h"
#include "core/stats.h"
#include "policy/place.h"

struct gvm_policy {
    const struct gvm_config *cfg;
    size_t limit[GVM_MAX_DEVICES];    /* bytes; the device's size when not limited */
    bool limited[GVM_MAX_DEVICES];
    size_t host_limit;                /* SIZE_MAX: none */
};

extern struct gvm_policy gvm_policy;

size_t gvm_policy_usage(int loc);
size_t gvm_policy_limit(int loc);
bool gvm_policy_fits(int loc, size_t bytes);
int gvm_policy_best_peer(int device, size_t bytes);

/* device is at its limit: make room by evicting least recently used
 * allocations to the spill targets (evict mode), or place the allocation
 * on a target (place mode, and evict mode's fallback). */
CUresult gvm_spill_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out);

/* Called before a kernel launch with the regions its arguments reach (not
 * yet announced): spilled ones are brought back to their device now, while
 * the coldest regions the launch does not use leave on the other copy
 * engine. */
void gvm_policy_before_launch(struct gvm_region *const *used, int n);

/* The background thread that brings spilled allocations back. */
CUresult gvm_promoter_start(void);

#endif
