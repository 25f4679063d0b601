/* Spilling: when an allocation would pass its device's limit (or the
 * device is out of memory), make room by moving the least recently used
 * allocations to the spill targets, in the order the user gave, or place
 * the new allocation there. Never fail while a target has room; fail as
 * natively (CUDA_ERROR_OUT_OF_MEMORY) when none has. */
#include "policy/spill.h"

#include "core/capture.h"
#include "core/log.h"
#include "core/move.h"
#include "core/topo.h"

#include <stdlib.h>

struct victim {
    struct gvm_region *r;
    uint64_t last_use;
};

struct collect {
    int device;
    struct victim *v;
    size_t n, cap;
};

static void collect_one(struct gvm_region *r, void *arg)
{
    struct collect *c = arg;
    /* Where its memory is gets checked under its lock, in evict(). */
    if (GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS) return;
    if (GVM_LOAD(r->flags) & (GVM_RF_PAUSED | GVM_RF_PINNED) || GVM_LOAD(r->home) != c->device) return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct victim *nv = realloc(c->v, cap * sizeof *nv);
        if (!nv) return;
        c->v = nv;
        c->cap = cap;
    }
    c->v[c->n++] = (struct victim){r, __atomic_load_n(&r->last_use, __ATOMIC_RELAXED)};
}

static int by_age(const void *a, const void *b)
{
    uint64_t x = ((const struct victim *)a)->last_use, y = ((const struct victim *)b)->last_use;
    return x < y ? -1 : x > y;
}

static size_t charge_of(size_t size)
{
    size_t g = gvm_topo.gran;
    return (size + g - 1) / g * g;
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

/* Moves one victim off device. True when it moved. */
static bool evict_q(struct gvm_region *r, int device, bool quiesced);

static bool evict(struct gvm_region *r, int device) { return evict_q(r, device, false); }

static bool evict_q(struct gvm_region *r, int device, bool quiesced)
{
    pthread_mutex_lock(&r->op);
    bool ok = false;
    if (gvm_region_live(r) && !(r->flags & (GVM_RF_PAUSED | GVM_RF_PINNED)) &&
        gvm_region_location(r) == device) {
        int to = pick_target(device, r->mapped);
        if (to != GVM_LOC_NONE) {
            gvm_move_enter(r);
            ok = (quiesced ? gvm_move_blocks_quiesced(r, to) : gvm_move_blocks(r, to)) == CUDA_SUCCESS;
            gvm_move_leave(r);
            if (ok) {
                GVM_STORE(r->spilled_at, gvm_clock_tick());
                gvm_stat_inc(spills);
                gvm_stat_add(spilled_bytes, r->mapped);
                gvm_debug("spill: moved %#lx (%zu bytes, last use %lu) from device %d to %d",
                          (unsigned long)r->base, r->mapped, (unsigned long)r->last_use, device, to);
            }
        }
    }
    pthread_mutex_unlock(&r->op);
    return ok;
}

static CUresult try_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    struct gvm_place pl = {.loc = device};
    if (!gvm_policy_fits(device, charge_of(size))) return CUDA_ERROR_OUT_OF_MEMORY;
    return gvm_heap_alloc(size, device, ctx, &pl, tag, out);
}

static CUresult evict_then_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    struct collect c = {.device = device};
    gvm_heap_for_each(collect_one, &c);
    if (c.n) qsort(c.v, c.n, sizeof *c.v, by_age);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i <= c.n; i++) {
        gvm_heap_trim(device);   /* what moved out went to the pool: free it */
        if ((rc = try_alloc(size, device, ctx, tag, out)) != CUDA_ERROR_OUT_OF_MEMORY) break;
        if (i == c.n) break;
        evict(c.v[i].r, device);
    }
    free(c.v);
    return rc;
}

static CUresult place_on_target(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out)
{
    int to = pick_target(device, charge_of(size));
    if (to == GVM_LOC_NONE) return CUDA_ERROR_OUT_OF_MEMORY;
    struct gvm_place pl = {.loc = to};
    CUresult rc = gvm_heap_alloc(size, device, ctx, &pl, tag, out);
    if (rc != CUDA_SUCCESS) return rc;
    struct gvm_ref ref;
    if (gvm_heap_find(*out, &ref)) {
        GVM_STORE(ref.region->home, device);  /* it belongs on device: promote it when room returns */
        GVM_STORE(ref.region->spilled_at, gvm_clock_tick());
    }
    gvm_stat_inc(spills);
    gvm_stat_add(spilled_bytes, charge_of(size));
    gvm_debug("spill: placed %zu bytes for device %d at %d", size, device, to);
    return CUDA_SUCCESS;
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

/* ---- demand promotion --------------------------------------------------- */

/* A kernel reading spilled memory in place goes at the speed its access
 * pattern gets across the link (a GEMM: 13 GB/s of 55, H100 PCIe 5): a
 * swap moves the same bytes at the link's speed. The swap may hold the
 * incoming region and the outgoing ones on the device at once, so the
 * device can pass its limit by one region for the duration. */

struct evict_job {
    struct victim *v;
    size_t n;
    int device;
};

static void *evict_worker(void *arg)
{
    struct evict_job *j = arg;
    for (size_t i = 0; i < j->n; i++) evict_q(j->v[i].r, j->device, true);
    gvm_phys_trim(j->device, SIZE_MAX);   /* what left went to the pool: free it */
    return NULL;
}

static bool in_list(struct gvm_region *r, struct gvm_region *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (list[i] == r) return true;
    return false;
}

/* Regions to send out so `need` bytes come in, never one the launch uses.
 * First those idle for longer than the incoming region was (its reuse
 * distance): truly cold, like blocks a framework's allocator keeps cached,
 * oldest first. Then the most recently used: a training loop sweeps its
 * weights in order, and under LRU every swap would evict exactly the
 * weight needed next (a cyclic sweep larger than the device misses on
 * every access), while the most recently used one is needed last. */
static size_t pick_victims(int device, size_t need, uint64_t since, struct gvm_region *const *used, int n,
                           struct victim **out)
{
    struct collect c = {.device = device};
    gvm_heap_for_each(collect_one, &c);
    if (c.n) qsort(c.v, c.n, sizeof *c.v, by_age);
    size_t cold = 0;
    while (cold < c.n && c.v[cold].last_use < since) cold++;
    /* The warm tail, most recent first. */
    for (size_t i = cold, j = c.n; i + 1 < j; i++, j--) {
        struct victim t = c.v[i];
        c.v[i] = c.v[j - 1];
        c.v[j - 1] = t;
    }
    size_t k = 0, got = 0;
    for (size_t i = 0; i < c.n && got < need; i++) {
        if (in_list(c.v[i].r, used, n)) continue;
        got += GVM_LOAD(c.v[i].r->mapped);
        c.v[k++] = c.v[i];
    }
    *out = c.v;
    return got >= need ? k : 0;
}

static bool promote_now(struct gvm_region *r, int device, bool quiesced)
{
    pthread_mutex_lock(&r->op);
    bool ok = false;
    if (gvm_region_live(r) && GVM_LOAD(r->spilled_at) && !(r->flags & GVM_RF_PAUSED) &&
        GVM_LOAD(r->home) == device) {
        gvm_move_enter(r);
        ok = (quiesced ? gvm_move_blocks_quiesced(r, device) : gvm_move_blocks(r, device)) == CUDA_SUCCESS;
        gvm_move_leave(r);
        if (ok) {
            GVM_STORE(r->spilled_at, 0);
            gvm_stat_inc(promotions);
            gvm_stat_add(promoted_bytes, r->mapped);
        }
    }
    pthread_mutex_unlock(&r->op);
    return ok;
}

static void swap_in(struct gvm_region *r, struct gvm_region *const *used, int n)
{
    int device = GVM_LOAD(r->home);
    if (device < 0 || device >= gvm_topo.ndev) return;
    size_t need = GVM_LOAD(r->mapped), lim = gvm_policy_limit(device), usage = gvm_policy_usage(device);
    size_t room = lim > usage ? lim - usage : 0;
    struct victim *v = NULL;
    size_t nv = 0;
    if (need > room && !(nv = pick_victims(device, need - room, GVM_LOAD(r->last_use), used, n, &v))) {
        free(v);
        return;   /* nothing may leave: the kernel reads it where it is */
    }
    /* One wait for the program's queued work serves both moves. */
    if (gvm_topo_quiesce() != CUDA_SUCCESS) {
        free(v);
        return;
    }
    struct evict_job job = {.v = v, .n = nv, .device = device};
    pthread_t t;
    bool threaded = nv && !pthread_create(&t, NULL, evict_worker, &job);
    if (nv && !threaded) evict_worker(&job);
    bool ok = promote_now(r, device, true);
    if (threaded) pthread_join(t, NULL);
    /* Out of physical memory before the victims were out: once more. */
    if (!ok && GVM_LOAD(r->spilled_at)) ok = promote_now(r, device, true);
    if (ok)
        gvm_debug("demand: brought %#lx (%zu bytes) back to device %d, %zu region(s) out", (unsigned long)r->base,
                  need, device, nv);
    free(v);
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
