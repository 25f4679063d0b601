/* What gvmshim's hooks do before a call of the program reaches memory
 * (preload/shim.h, gvm_shim_use_span), for tests whose program is the test
 * itself, reading and writing simulated device memory through the pointer:
 * memory whose host copy is not mapped at its addresses yet (a lazy spill,
 * a pause that maps its copy once reached: core/relocate.h) is mapped
 * first. Returns p. */
#ifndef GVM_TEST_REACH_H
#define GVM_TEST_REACH_H

#include "core/heap.h"
#include "core/move.h"
#include "policy/spill.h"

#include <stdint.h>

static inline uintptr_t reach(uintptr_t p)
{
    uint64_t tick = 0;
    struct gvm_region *r = gvm_heap_region(p);
    if (!r) return p;
    gvm_use_region_in(r, &tick);
    if (gvm_policy_unmapped(r)) r = gvm_policy_use_mapped(r, &tick);
    gvm_use_end(r);
    return p;
}

#endif
