/* Spilling: when an allocation would pass its device's limit (or the
 * device is out of memory), make room by moving the least recently used
 * allocations to the spill targets, in the order the user gave, or place
 * the new allocation there. Never fail while a target has room; fail as
 * natively (CUDA_ERROR_OUT_OF_MEMORY) when none has. */
#include "policy/spill.h"

#include "core/capture.h"
#include "core/heap.h"
#include "core/log.h"
#include "core/move.h"
#include "core/phys.h"
#include "core/relocate.h"
#include "core/shelf.h"
#include "core/topo.h"
#include "policy/policy.h"
#include "policy/prefetch.h"
#include "policy/recur.h"
#include "policy/victims.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double ms_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Spill target i of the user's list, where it has room for bytes, else
 * GVM_LOC_NONE. */
static int target_at(int i, int device, size_t bytes)
{
    if (gvm_policy_cfg()->spill.target[i] == GVM_SPILL_PEER) return gvm_policy_best_peer(device, bytes);
    return gvm_topo.host_vmm && gvm_policy_fits(GVM_LOC_HOST, bytes) ? GVM_LOC_HOST : GVM_LOC_NONE;
}

/* The first spill target, in the user's order, with room for bytes. */
static int pick_target(int device, size_t bytes)
{
    for (int i = 0; i < gvm_policy_cfg()->spill.n; i++) {
        int to = target_at(i, device, bytes);
        if (to != GVM_LOC_NONE) return to;
    }
    return GVM_LOC_NONE;
}

/* GVM_RELOC_SHELVE when spills to host leave their memory unmapped. */
static unsigned lazy_flag(void)
{
    return gvm_policy_cfg()->spill_host_map == GVM_CFG_SPILL_HOST_MAP_LAZY ? GVM_RELOC_SHELVE : 0;
}

/* Every spill of a region goes through here: the first one starts the
 * learning of the program's loop (policy/recur.h). */
static CUresult spill_to(struct gvm_region *r, int to, unsigned how)
{
    gvm_recur_start();
    return gvm_relocate(r, to, GVM_RELOC_SPILL | how | (to == GVM_LOC_HOST ? lazy_flag() : 0));
}

/* Sends one region away from its device `device`. True when it moved. */
static bool evict(struct gvm_region *r, int device, unsigned how)
{
    int to = pick_target(device, GVM_LOAD(r->mapped));
    return to != GVM_LOC_NONE && spill_to(r, to, how) == CUDA_SUCCESS;
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

/* On the first target of the user's list that takes it. A target that
 * seemed to have room may have none by the time the memory is made
 * (another thread's allocation or spill took it: test_preload "threads",
 * peer then host, failed 1 run in 10 with the peer full), so the next one
 * is tried. */
static CUresult place_on_target(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    size_t need = gvm_policy_charge(size);
    for (int i = 0; i < gvm_policy_cfg()->spill.n && rc == CUDA_ERROR_OUT_OF_MEMORY; i++) {
        int to = target_at(i, device, need);
        if (to == GVM_LOC_NONE) continue;
        struct gvm_place pl = {.loc = to, .spill = true};
        gvm_recur_start();
        rc = gvm_heap_alloc(size, device, ctx, &pl, tag, out);
        if (rc == CUDA_SUCCESS) gvm_debug("spill: placed %zu bytes for device %d at %d", size, device, to);
    }
    return rc;
}

CUresult gvm_spill_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    /* Stream capture open: evicting would wait for the devices, so place. */
    if (gvm_policy_cfg()->spill_mode == GVM_CFG_SPILL_EVICT && !gvm_capture_open(-1)) {
        rc = evict_then_alloc(size, device, ctx, tag, out);
        if (rc != CUDA_ERROR_OUT_OF_MEMORY) return rc;
    }
    return place_on_target(size, device, ctx, tag, out);
}

/* Evicts, least recently used first, until device holds at most `limit`:
 * what gvmctl set asks when it lowers the device's limit. Idle memory
 * (caches, pools) goes first, since it counts as held too. */
CUresult gvm_spill_down_to(int device, size_t limit, size_t *moved)
{
    *moved = 0;
    gvm_heap_trim(device);
    if (gvm_policy_usage(device) <= limit) return CUDA_SUCCESS;
    if (gvm_capture_open(-1)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;   /* a move would wait */
    struct gvm_victims v = {0};
    gvm_victims_resident(device, &v);
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < v.n && gvm_policy_usage(device) > limit; i++) {
        size_t bytes = GVM_LOAD(v.v[i].r->mapped);
        int to = pick_target(device, bytes);
        if (to == GVM_LOC_NONE) continue;   /* a smaller one may still fit */
        rc = spill_to(v.v[i].r, to, 0);
        if (rc == CUDA_SUCCESS) {
            *moved += bytes;
            gvm_heap_trim(device);   /* what moved out went to the pool */
        } else if (gvm_relocate_refused(rc)) {
            rc = CUDA_SUCCESS;       /* freed, paused or pinned meanwhile */
        } else {
            break;
        }
    }
    gvm_victims_free(&v);
    if (rc == CUDA_SUCCESS && gvm_policy_usage(device) > limit) rc = CUDA_ERROR_OUT_OF_MEMORY;
    return rc;
}

bool gvm_spill_maps_later(void)
{
    const struct gvm_config *cfg = gvm_policy_cfg();
    return cfg && cfg->pause_host_map == GVM_CFG_SPILL_HOST_MAP_LAZY && cfg->track_launches != GVM_CFG_TRACK_OFF &&
           gvm_topo.host_vmm;
}

/* The least recently used regions of device bound for host that make
 * `excess` bytes, in order, while the host has room for them all; a
 * region whose first target is a peer is left to gvm_spill_down_to. */
static int host_batch(int device, size_t excess, const struct gvm_victims *v, struct gvm_region **out)
{
    size_t sum = 0;
    int n = 0;
    for (size_t i = 0; i < v->n && sum < excess; i++) {
        size_t bytes = GVM_LOAD(v->v[i].r->mapped);
        if (pick_target(device, bytes) != GVM_LOC_HOST || !gvm_policy_fits(GVM_LOC_HOST, sum + bytes)) continue;
        out[n++] = v->v[i].r;
        sum += bytes;
    }
    return n;
}

/* One batch of spills to host (core/relocate.h, gvm_relocate_batch):
 * the bytes that left device, and the first driver failure (its region
 * stays as it was; those skipped or refused are left to the caller). */
static CUresult spill_batch(int device, struct gvm_region **r, int n, size_t *gone)
{
    size_t nd = (size_t)gvm_topo.ndev, cells = (size_t)n * nd;
    CUresult *rc = calloc((size_t)n, sizeof *rc);
    size_t *before = calloc(cells, sizeof *before), *after = calloc(cells, sizeof *after);
    CUresult failed = CUDA_SUCCESS;   /* no room for the tables: the caller moves them one by one */
    if (rc && before && after) {
        unsigned later = GVM_RELOC_SHELVE | GVM_RELOC_MAP_LATER;
        gvm_recur_start();
        gvm_relocate_batch(r, n, GVM_RELOC_SPILL | (gvm_spill_maps_later() ? later : lazy_flag()), rc, before, after,
                           (int)nd);
        for (int i = 0; i < n; i++) {
            size_t was = before[(size_t)i * nd + (size_t)device], now = after[(size_t)i * nd + (size_t)device];
            if (rc[i] == CUDA_SUCCESS && was > now) *gone += was - now;
            bool left_over = rc[i] == GVM_RELOCATE_SKIPPED || gvm_relocate_refused(rc[i]);
            if (rc[i] != CUDA_SUCCESS && !left_over && failed == CUDA_SUCCESS) failed = rc[i];
        }
    }
    free(rc), free(before), free(after);
    return failed;
}

CUresult gvm_spill_release(int device, size_t limit, size_t *moved)
{
    *moved = 0;
    gvm_heap_trim(device);
    size_t usage = gvm_policy_usage(device);
    CUresult rc = CUDA_SUCCESS;
    /* Nothing to move, or a capture open: gvm_spill_down_to answers. */
    if (usage > limit && !gvm_capture_open(-1)) {
        struct gvm_victims v = {0};
        gvm_victims_resident(device, &v);
        struct gvm_region **r = v.n ? calloc(v.n, sizeof *r) : NULL;
        int n = r ? host_batch(device, usage - limit, &v, r) : 0;
        if (n) rc = spill_batch(device, r, n, moved);
        free(r);
        gvm_victims_free(&v);
    }
    if (rc != CUDA_SUCCESS) return rc;
    /* What the batch skipped (busy, refused) or left for a peer; it trims
     * what moved out to the pool first. */
    size_t more = 0;
    rc = gvm_spill_down_to(device, limit, &more);
    *moved += more;
    return rc;
}

/* ---- demand swap-in ----------------------------------------------------- */

/* A kernel reading spilled memory in place goes at the speed its access
 * pattern gets across the link (a GEMM: 13 GB/s of 55, H100 PCIe 5): a
 * swap moves the same bytes at the link's speed. The device never holds
 * more than its limit (core/held.h), so the incoming region needs room
 * before it comes: what must leave for it leaves first, or, with lazy
 * spills, within the swap, handing its memory over unit by unit as its
 * copy finishes (core/shelf.h). Then it comes in
 * while as many bytes again leave, the two directions at once on the copy
 * engines (core/relocate.h, gvm_relocate_swap): that is the room the next
 * swap starts with, so in a loop that sweeps more than fits every swap
 * after the first runs both ways at once. That room costs the device one
 * region's worth of capacity (with lazy spills one block: swap_margin; on
 * the read loop at 1.25x the limit 31 weights stay where 30 did, and a
 * step took 35.4 ms instead of 39.0 on an H100), so it is kept only while
 * other spilled regions wait to come in: a loop one buffer over the limit
 * swaps one buffer per sweep, serially, rather than two at once. One wait
 * for the program's queued work, made once the swap holds its regions,
 * serves every move of the swap; each victim that must leave before it
 * waits once it is taken. */

static size_t add_sat(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

/* The room a swap of `need` bytes should find on the device so that both
 * directions copy at once: with lazy spills one unit, since the regions
 * leaving hand their memory to the one coming in as their copies finish
 * (core/shelf.h); else all of it. */
static size_t swap_margin(size_t need) { return lazy_flag() ? gvm_shelf_swap_room(need) : need; }

/* Victims for a swap of `need` bytes with `room` free: ideally the margin
 * the next swap needs more than the deficit; at least the deficit. Returns
 * how many of v must leave before the incoming region can come (they cover
 * the deficit), or -1 when the device cannot make room. */
static long pick_victims(struct gvm_region *r, size_t need, size_t room, bool may_evict, struct gvm_region *const *used,
                         int n, struct gvm_victims *v)
{
    int device = GVM_LOAD(r->home);
    size_t deficit = need > room ? need - room : 0;
    if (!may_evict) return deficit ? -1 : 0;   /* it comes in alone, or not now */
    uint64_t since = GVM_LOAD(r->last_use);
    /* Room for the next swap is made only where it lacks: with the limit
     * raised (gvmctl set), spilled data comes back without sending other
     * data out (GPU test gvmctl-live, 2026-11-23: each swap-in evicted one
     * region, and the device stayed at the old limit). */
    size_t after = room > need ? room - need : 0, margin = swap_margin(need),
           short_by = margin > after ? margin - after : 0;
    size_t want = gvm_victims_more_spilled(device, r) ? add_sat(deficit, short_by) : deficit;
    if (!want) return 0;
    if (!gvm_victims_for_swap(device, want, since, used, n, v)) {
        if (!deficit) return 0;   /* it fits: it comes in alone */
        if (want == deficit || !gvm_victims_for_swap(device, deficit, since, used, n, v)) return -1;
    }
    size_t first = 0, got = 0;
    while (first < v->n && got < deficit) got += GVM_LOAD(v->v[first++].r->mapped);
    return (long)first;
}

/* Whether the victims v[0..first), which cover the deficit, can leave
 * within r's swap instead of before it: r comes from its shelf and they
 * go to host unmapped, so they hand their memory to r as their copies
 * finish, and the copies of both directions overlap. */
static bool deficit_in_swap(struct gvm_region *r, const struct gvm_victims *v, size_t first, int device)
{
    if (!lazy_flag() || !GVM_LOAD(r->shelf_spill)) return false;
    for (size_t i = 0; i < first; i++)
        if (pick_target(device, GVM_LOAD(v->v[i].r->mapped)) != GVM_LOC_HOST) return false;
    return true;
}

/* The victims v[from..] with a target, for gvm_relocate_swap. */
static int targets(const struct gvm_victims *v, size_t from, int device, struct gvm_region **out, int *to)
{
    int m = 0;
    for (size_t i = from; i < v->n; i++) {
        int t = pick_target(device, GVM_LOAD(v->v[i].r->mapped));
        if (t == GVM_LOC_NONE) continue;
        out[m] = v->v[i].r;
        to[m++] = t;
    }
    return m;
}

static void swap_in(struct gvm_region *r, bool may_evict, struct gvm_region *const *used, int n)
{
    int device = GVM_LOAD(r->home);
    if (device < 0 || device >= gvm_topo.ndev) return;
    double t0 = ms_now();
    /* Pieces pooled at the device are taken first by the incoming region. */
    size_t need = GVM_LOAD(r->mapped), room = add_sat(gvm_policy_room(device), gvm_phys_pooled(device));
    struct gvm_victims v = {0};
    long first = pick_victims(r, need, room, may_evict, used, n, &v);
    if (first > 0 && deficit_in_swap(r, &v, (size_t)first, device)) first = 0;
    if (first < 0) {
        gvm_victims_free(&v);
        return;   /* nothing may leave: the kernel reads it where it is */
    }
    double t1 = ms_now();
    /* Each move waits for the devices (or, in a swap of lazy spills only,
     * for its regions' last uses: core/usemark.h) once it holds its
     * regions, never before: a wait begun before a victim is taken misses
     * a kernel that another thread queues on it meanwhile, and the unmap
     * kills that kernel (gpu-threads, spill, two H100s, 2026-11-27: an
     * illegal address). Once the first wait has drained the queues, the
     * later ones cost a synchronize of idle devices. */
    int gone = 0;
    for (long i = 0; i < first; i++) gone += evict(v.v[i].r, device, 0);
    double t2 = ms_now();
    size_t rest = v.n - (size_t)first;
    struct gvm_region *out[rest ? rest : 1];
    int to[rest ? rest : 1];
    int m = targets(&v, (size_t)first, device, out, to);
    CUresult rc;
    gone += gvm_relocate_swap(r, device, out, to, m, lazy_flag(), &rc);
    if (rc == CUDA_SUCCESS)
        gvm_debug("demand: brought %#lx (%zu bytes) back to device %d, %d region(s) out (%ld first); victims "
                  "%.2f, first out %.2f, swap %.2f ms",
                  (unsigned long)r->base, need, device, gone, first, t1 - t0, t2 - t1, ms_now() - t2);
    gvm_victims_free(&v);
}

/* Whether other data may leave so that spilled r comes in for a launch
 * (option swap_in). A kernel reading r where it lies goes at the speed
 * its access pattern gets across the link; a swap moves r in and as much
 * out, and remaps both. Over PCIe the swap wins: the read loop's GEMV
 * read host memory in place at 3.27x the link bound, swapped at 1.62x.
 * Over NVLink reading in place wins: 1.54x against 2.01x for the read
 * loop, 5.21x against 7.15x for the training step (bench/spill.py, two
 * H200s, 2026-11-24, 1.5x a 4 GiB limit). Peers joined by PCIe only are
 * treated as host memory is. */
static bool may_evict_for(const struct gvm_config *cfg, struct gvm_region *r)
{
    switch (cfg->swap_in) {
    case GVM_CFG_SWAP_IN_ALL: return true;
    case GVM_CFG_SWAP_IN_NONE: return false;
    default: return !gvm_topo_nvlinked(GVM_LOAD(r->home), gvm_region_location_now(r));
    }
}

void gvm_policy_before_launch(struct gvm_region *const *used, int n)
{
    const struct gvm_config *cfg = gvm_policy_cfg();
    if (!cfg || !cfg->spill.n || !cfg->promote) return;
    /* A launch being captured runs at replay: no swap now (it would wait). */
    if (gvm_capture_open(-1)) return;
    if (cfg->learn_loop) gvm_recur_launch(used, n);
    gvm_prefetch_wait(used, n);
    for (int i = 0; i < n; i++) {
        struct gvm_region *r = used[i];
        if (!GVM_LOAD(r->spilled_at) || GVM_LOAD(r->kind) == GVM_REGION_ALIAS) continue;
        swap_in(r, may_evict_for(cfg, r), used, n);
    }
}

/* ---- lazily spilled memory ------------------------------------------------ */

void gvm_policy_map_spilled(void)
{
    if (!__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED)) return;
    struct gvm_victims c = {0};
    gvm_victims_unmapped(&c);
    for (size_t i = 0; i < c.n; i++) gvm_relocate(c.v[i].r, GVM_LOC_HOST, GVM_RELOC_MAPPED);
    gvm_victims_free(&c);
}

struct gvm_region *gvm_policy_use_mapped(struct gvm_region *r, uint64_t *tick)
{
    /* Announced, r cannot change; not announced, it may be spilled again
     * before the next look: a few rounds, then the call goes ahead (and
     * meets the driver's answer for unmapped memory). */
    for (int tries = 0; tries < 4 && GVM_LOAD(r->shelf_spill); tries++) {
        gvm_use_end(r);
        gvm_relocate(r, GVM_LOC_HOST, GVM_RELOC_MAPPED);
        gvm_use_region_in(r, tick);
    }
    return r;
}
