/* Spilling: when an allocation would pass its device's limit (or the
 * device is out of memory), make room by moving the least recently used
 * allocations to the spill targets, in the order the user gave, or place
 * the new allocation there. Never fail while a target has room; fail as
 * natively (CUDA_ERROR_OUT_OF_MEMORY) when none has. */
#include "policy/spill.h"

#include "core/capture.h"
#include "core/heap.h"
#include "core/log.h"
#include "core/phys.h"
#include "core/relocate.h"
#include "core/topo.h"
#include "policy/policy.h"
#include "policy/victims.h"

#include <stdint.h>
#include <time.h>

static double ms_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The first spill target, in the user's order, with room for bytes. */
static int pick_target(int device, size_t bytes)
{
    const struct gvm_spill_list *s = &gvm_policy.cfg->spill;
    for (int i = 0; i < s->n; i++) {
        if (s->target[i] == GVM_SPILL_PEER) {
            int peer = gvm_policy_best_peer(device, bytes);
            if (peer >= 0) return peer;
        } else if (gvm_topo.host_vmm && gvm_policy_fits(GVM_LOC_HOST, bytes)) {
            return GVM_LOC_HOST;
        }
    }
    return GVM_LOC_NONE;
}

/* Sends one region away from its device `device`. True when it moved. */
static bool evict(struct gvm_region *r, int device, unsigned how)
{
    int to = pick_target(device, GVM_LOAD(r->mapped));
    return to != GVM_LOC_NONE && gvm_relocate(r, to, GVM_RELOC_SPILL | how) == CUDA_SUCCESS;
}

static CUresult try_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    struct gvm_place pl = {.loc = device};
    if (!gvm_policy_fits(device, gvm_policy_charge(size))) return CUDA_ERROR_OUT_OF_MEMORY;
    return gvm_heap_alloc(size, device, ctx, &pl, tag, out);
}

static CUresult evict_then_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    struct gvm_victims v = {0};
    gvm_victims_resident(device, &v);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i <= v.n; i++) {
        gvm_heap_trim(device);   /* what moved out went to the pool: free it */
        if ((rc = try_alloc(size, device, ctx, tag, out)) != CUDA_ERROR_OUT_OF_MEMORY) break;
        if (i == v.n) break;
        evict(v.v[i].r, device, 0);
    }
    gvm_victims_free(&v);
    return rc;
}

static CUresult place_on_target(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    int to = pick_target(device, gvm_policy_charge(size));
    if (to == GVM_LOC_NONE) return CUDA_ERROR_OUT_OF_MEMORY;
    struct gvm_place pl = {.loc = to, .spill = true};
    CUresult rc = gvm_heap_alloc(size, device, ctx, &pl, tag, out);
    if (rc == CUDA_SUCCESS) gvm_debug("spill: placed %zu bytes for device %d at %d", size, device, to);
    return rc;
}

CUresult gvm_spill_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    /* Stream capture open: evicting would wait for the devices, so place. */
    if (gvm_policy.cfg->spill_mode == GVM_CFG_SPILL_EVICT && !gvm_capture_open(-1)) {
        rc = evict_then_alloc(size, device, ctx, tag, out);
        if (rc != CUDA_ERROR_OUT_OF_MEMORY) return rc;
    }
    return place_on_target(size, device, ctx, tag, out);
}

/* ---- demand swap-in ----------------------------------------------------- */

/* A kernel reading spilled memory in place goes at the speed its access
 * pattern gets across the link (a GEMM: 13 GB/s of 55, H100 PCIe 5): a
 * swap moves the same bytes at the link's speed. The regions that make
 * room leave first and the incoming one follows, so the device never
 * holds both: its limit is a cap (core/held.h). One wait for the
 * program's queued work serves every move of the swap. */
static void swap_in(struct gvm_region *r, struct gvm_region *const *used, int n)
{
    int device = GVM_LOAD(r->home);
    if (device < 0 || device >= gvm_topo.ndev) return;
    double t0 = ms_now();
    size_t need = GVM_LOAD(r->mapped), room = gvm_policy_room(device);
    struct gvm_victims v = {0};
    if (need > room && !gvm_victims_for_swap(device, need - room, GVM_LOAD(r->last_use), used, n, &v)) {
        gvm_victims_free(&v);
        return;   /* nothing may leave: the kernel reads it where it is */
    }
    double t1 = ms_now();
    if (gvm_topo_quiesce() != CUDA_SUCCESS) {
        gvm_victims_free(&v);
        return;
    }
    double t2 = ms_now();
    int out = 0;
    for (size_t i = 0; i < v.n; i++) out += evict(v.v[i].r, device, GVM_RELOC_QUIESCED);
    double t3 = ms_now();
    if (v.n) gvm_phys_trim(device, SIZE_MAX);   /* what left went to the pool: free it */
    double t4 = ms_now();
    if (gvm_relocate(r, device, GVM_RELOC_PROMOTE | GVM_RELOC_QUIESCED) == CUDA_SUCCESS)
        gvm_debug("demand: brought %#lx (%zu bytes) back to device %d, %d of %zu region(s) out; victims %.2f "
                  "quiesce %.2f evict %.2f trim %.2f promote %.2f ms",
                  (unsigned long)r->base, need, device, out, v.n, t1 - t0, t2 - t1, t3 - t2, t4 - t3, ms_now() - t4);
    gvm_victims_free(&v);
}

void gvm_policy_before_launch(struct gvm_region *const *used, int n)
{
    if (!gvm_policy.cfg || !gvm_policy.cfg->spill.n || !gvm_policy.cfg->promote) return;
    /* A launch being captured runs at replay: no swap now (it would wait). */
    if (gvm_capture_open(-1)) return;
    for (int i = 0; i < n; i++) {
        struct gvm_region *r = used[i];
        if (!GVM_LOAD(r->spilled_at) || GVM_LOAD(r->kind) == GVM_REGION_ALIAS) continue;
        swap_in(r, used, n);
    }
}
