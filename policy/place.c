/* Where allocations go: placement rules, the device limit, and what to do
 * when a device is full (policy/spill.c). Decisions are logged at debug. */
#include "policy/place.h"

#include "core/direct.h"
#include "core/heap.h"
#include "core/held.h"
#include "core/log.h"
#include "core/topo.h"
#include "policy/idle.h"
#include "policy/policy.h"
#include "policy/promote.h"
#include "policy/recur.h"
#include "policy/share.h"
#include "policy/spill.h"
#include "policy/tags.h"

#include <string.h>

CUresult gvm_policy_start(const struct gvm_config *cfg)
{
    gvm_policy_publish(cfg);
    /* The limits are the caps core enforces (policy/derive.c). */
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_policy_set_limit(d, gvm_held_cap(d));
    gvm_policy_set_limit(GVM_LOC_HOST, gvm_held_cap(GVM_LOC_HOST));
    gvm_recur_reset();   /* a new policy learns the program afresh */
    gvm_heap_set_cache_idle(cfg->cache_idle * 1000000u);
    if (cfg->spill.n && cfg->promote) gvm_promoter_start();
    gvm_share_start(cfg);
    return CUDA_SUCCESS;
}

static struct gvm_place rule_place(size_t size, int device, int tag)
{
    struct gvm_place pl = {.loc = device};
    const struct gvm_rule *r = gvm_rule_match(gvm_policy_cfg(), size, device, gvm_tag_name(tag));
    if (!r) return pl;
    switch (r->place) {
    case GVM_RULE_PLACE_HOST:
        if (gvm_topo.host_vmm) pl.loc = GVM_LOC_HOST;
        break;
    case GVM_RULE_PLACE_DEVICE:
        if (gvm_topo_reaches(device, r->place_device) && gvm_topo.dev[r->place_device].vmm)
            pl.loc = r->place_device;
        break;
    case GVM_RULE_PLACE_PEER: {
        int peer = gvm_policy_best_peer(device, size);
        if (peer >= 0) pl.loc = peer;
        break;
    }
    case GVM_RULE_PLACE_INTERLEAVE:
        for (int i = 0; i < (r->ninterleave ? r->ninterleave : gvm_topo.ndev); i++) {
            int d = r->ninterleave ? r->interleave[i] : i;
            if (d < gvm_topo.ndev && gvm_topo_reaches(device, d)) pl.interleave |= 1ull << d;
        }
        break;
    }
    gvm_debug("rule '%s' places %zu bytes from device %d at %d%s", r->name, size, device, pl.loc,
              pl.interleave ? " (interleaved)" : "");
    return pl;
}

CUresult gvm_policy_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    /* Before the charge is rounded (it would wrap) or spilling evicts for it. */
    if (size > GVM_HEAP_ALLOC_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    struct gvm_place pl = rule_place(size, device, tag);
    if (pl.interleave) return gvm_heap_alloc(size, device, ctx, &pl, tag, out);
    size_t need = gvm_policy_charge(size);
    bool spill = gvm_policy_cfg()->spill.n > 0;
    bool limited = pl.loc != device || gvm_policy_limited(device) || spill;
    if (!limited) return gvm_heap_alloc(size, device, ctx, &pl, tag, out);
    if (!gvm_policy_fits(pl.loc, need) && gvm_share_active(pl.loc)) gvm_share_make_room(pl.loc, need);
    if (!gvm_policy_fits(pl.loc, need) && gvm_heap_trim(pl.loc) && gvm_policy_fits(pl.loc, need))
        gvm_debug("released idle memory on %d to fit %zu bytes", pl.loc, size);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (gvm_policy_fits(pl.loc, need)) rc = gvm_heap_alloc(size, device, ctx, &pl, tag, out);
    if (rc != CUDA_ERROR_OUT_OF_MEMORY || !spill || pl.loc != device) return rc;
    return gvm_spill_alloc(size, device, ctx, tag, out);
}

CUresult gvm_policy_free(uintptr_t p)
{
    CUresult rc = gvm_heap_free(p);
    if (rc == CUDA_SUCCESS) gvm_idle_start();
    return rc;
}

/* Room is made for memory the program creates itself as for an
 * allocation: idle memory goes back first, then, with spill on, gvmshim's
 * own allocations leave the device (the program's cannot move). */
CUresult gvm_policy_reserve_direct(int device, size_t bytes)
{
    if (gvm_held_reserve(device, bytes)) return CUDA_SUCCESS;
    size_t cap = gvm_held_cap(device), moved = 0;
    /* gvm_spill_down_to trims idle memory before it moves anything. */
    if (gvm_policy_cfg()->spill.n > 0 && bytes <= cap)
        gvm_spill_down_to(device, cap - bytes, &moved);
    else
        gvm_heap_trim(device);
    if (gvm_held_reserve(device, bytes)) {
        if (moved)
            gvm_debug("spill: moved %zu bytes off device %d for %zu bytes the program creates", moved, device, bytes);
        return CUDA_SUCCESS;
    }
    /* Once: the program (or a library in it, NCCL) sees only an OOM. */
    static bool told;
    if (!__atomic_exchange_n(&told, true, __ATOMIC_RELAXED))
        gvm_warn("device %d: refused %zu bytes the program creates itself (cuMemCreate) under device_limit %zu: "
                 "the process holds %zu, %zu of it its own memory, which cannot be moved",
                 device, bytes, cap, gvm_held_bytes(device), gvm_direct_bytes(device));
    else
        gvm_debug("refused %zu bytes the program creates on device %d: it holds %zu under a cap of %zu", bytes,
                  device, gvm_held_bytes(device), cap);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void gvm_policy_meminfo(int device, size_t *free_bytes, size_t *total_bytes)
{
    size_t idle = gvm_heap_idle_bytes(device);
    size_t f = *free_bytes + idle, t = *total_bytes;
    if (gvm_policy_limited(device)) {
        size_t lim = gvm_policy_limit(device), usage = gvm_policy_usage(device);
        size_t used = usage > idle ? usage - idle : 0;
        t = lim < t ? lim : t;
        size_t room = lim > used ? lim - used : 0;
        if (room < f) f = room;
    }
    *free_bytes = f;
    *total_bytes = t;
}
