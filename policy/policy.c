#include "policy/policy.h"

#include "core/held.h"
#include "core/phys.h"
#include "core/topo.h"
#include "policy/derive.h"

#include <stdint.h>

struct gvm_policy gvm_policy;

/* The flag first: a launch that sees the new configuration scans (a
 * launch scanned a moment early costs only its scan). */
void gvm_policy_publish(const struct gvm_config *cfg)
{
    __atomic_store_n(&gvm_policy.scans_launches, gvm_policy_tracks_launches(cfg), __ATOMIC_RELAXED);
    __atomic_store_n(&gvm_policy.cfg, cfg, __ATOMIC_RELEASE);
}

/* On a device, everything gvmshim holds there counts, idle memory too (it
 * occupies the device all the same; the allocation path gives it back
 * when it is in the way). On host, pooled pieces do not: a move that
 * needs room destroys them first (core/phys.c). */
size_t gvm_policy_usage(int loc)
{
    size_t held = gvm_held_bytes(loc);
    if (loc >= 0) return held;
    size_t pooled = gvm_phys_pooled(loc);
    return held > pooled ? held - pooled : 0;
}

size_t gvm_policy_limit(int loc)
{
    if (loc == GVM_LOC_HOST) return __atomic_load_n(&gvm_policy.host_limit, __ATOMIC_RELAXED);
    return __atomic_load_n(&gvm_policy.limit[loc], __ATOMIC_RELAXED);
}

void gvm_policy_set_limit(int loc, size_t bytes)
{
    gvm_held_set_cap(loc, bytes);
    if (loc == GVM_LOC_HOST) {
        __atomic_store_n(&gvm_policy.host_limit, bytes, __ATOMIC_RELAXED);
        return;
    }
    size_t total = gvm_topo.dev[loc].total;
    __atomic_store_n(&gvm_policy.limit[loc], bytes < total ? bytes : total, __ATOMIC_RELAXED);
    __atomic_store_n(&gvm_policy.limited[loc], bytes < total, __ATOMIC_RELAXED);
}

size_t gvm_policy_room(int loc)
{
    size_t lim = gvm_policy_limit(loc);
    if (lim == SIZE_MAX) return SIZE_MAX;
    size_t used = gvm_policy_usage(loc);
    return lim > used ? lim - used : 0;
}

bool gvm_policy_fits(int loc, size_t bytes) { return bytes <= gvm_policy_room(loc); }

int gvm_policy_best_peer(int device, size_t bytes)
{
    int best = -1;
    size_t best_room = 0;
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (d == device || !gvm_topo.dev[d].vmm || !gvm_topo_reaches(device, d)) continue;
        size_t room = gvm_policy_room(d);
        if (room >= bytes && room > best_room) {
            best = d;
            best_room = room;
        }
    }
    return best;
}

size_t gvm_policy_charge(size_t size)
{
    size_t g = gvm_topo.gran;
    return (size + g - 1) / g * g;
}
