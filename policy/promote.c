/* Promotion: a background thread brings spilled allocations that were used
 * since they left back to their device while it has room, hottest first,
 * at most promote_rate bytes per second. A move waits for the program's
 * announced calls and launches on the region (core/move.h) and for queued
 * work, so the program stalls only for as long as the copy takes. */
#include "policy/spill.h"

#include "core/capture.h"
#include "core/log.h"
#include "core/move.h"
#include "core/topo.h"

#include <stdlib.h>
#include <time.h>

struct cand {
    struct gvm_region *r;
    uint64_t last_use;
};

struct gather {
    int device;
    struct cand *c;
    size_t n, cap;
};

static void gather_one(struct gvm_region *r, void *arg)
{
    struct gather *g = arg;
    if (GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS) return;
    uint64_t spilled = GVM_LOAD(r->spilled_at);
    if (GVM_LOAD(r->home) != g->device || !spilled || (GVM_LOAD(r->flags) & GVM_RF_PAUSED)) return;
    uint64_t last = GVM_LOAD(r->last_use);
    if (last <= spilled) return;   /* not used since it left: leave it */
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 32;
        struct cand *nc = realloc(g->c, cap * sizeof *nc);
        if (!nc) return;
        g->c = nc;
        g->cap = cap;
    }
    g->c[g->n++] = (struct cand){r, last};
}

static int hottest_first(const void *a, const void *b)
{
    uint64_t x = ((const struct cand *)a)->last_use, y = ((const struct cand *)b)->last_use;
    return x > y ? -1 : x < y;
}

static bool promote(struct gvm_region *r, int device)
{
    pthread_mutex_lock(&r->op);
    bool ok = false;
    if (r->state == GVM_REGION_LIVE && r->spilled_at && !(r->flags & GVM_RF_PAUSED)) {
        gvm_move_enter(r);
        ok = gvm_move_blocks(r, device) == CUDA_SUCCESS;
        gvm_move_leave(r);
        if (ok) {
            GVM_STORE(r->spilled_at, 0);
            gvm_stat_inc(promotions);
            gvm_stat_add(promoted_bytes, r->mapped);
            gvm_debug("promote: moved %#lx (%zu bytes) back to device %d", (unsigned long)r->base,
                      r->mapped, device);
        }
    }
    pthread_mutex_unlock(&r->op);
    return ok;
}

/* Room is kept for a margin, so promotion does not push the device straight
 * back over its limit at the next allocation. */
static size_t margin(int device) { return gvm_policy.limit[device] / 16; }

static size_t promote_device(int device, size_t budget)
{
    struct gather g = {.device = device};
    gvm_heap_for_each(gather_one, &g);
    if (g.n) qsort(g.c, g.n, sizeof *g.c, hottest_first);
    size_t moved = 0;
    for (size_t i = 0; i < g.n; i++) {
        size_t bytes = GVM_LOAD(g.c[i].r->mapped);
        if (moved + bytes > budget) break;
        if (!gvm_policy_fits(device, bytes + margin(device))) break;
        if (promote(g.c[i].r, device)) moved += bytes;
    }
    free(g.c);
    return moved;
}

static void *promoter(void *arg)
{
    (void)arg;
    uint64_t ms = gvm_policy.cfg->promote_interval;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    for (;;) {
        nanosleep(&ts, NULL);
        /* A rate near SIZE_MAX times the interval is past what size_t holds
         * (and converting such a double is undefined): saturate. */
        double want = (double)gvm_policy.cfg->promote_rate * (double)ms / 1000.0;
        size_t budget = want < (double)SIZE_MAX ? (size_t)want : SIZE_MAX;
        if (budget < gvm_topo.gran) budget = gvm_topo.gran;
        if (gvm_capture_open(-1)) continue;   /* a move would wait for the devices */
        for (int d = 0; d < gvm_topo.ndev; d++)
            if (gvm_topo.dev[d].vmm) budget -= promote_device(d, budget);
    }
    return NULL;
}

CUresult gvm_promoter_start(void)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, promoter, NULL);
    pthread_attr_destroy(&attr);
    if (rc) {
        gvm_warn("cannot start the promoter thread; spilled allocations stay where they are");
        return CUDA_SUCCESS;
    }
    return CUDA_SUCCESS;
}
