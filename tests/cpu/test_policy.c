/* The policy against the simulated driver: device limits, spill by
 * eviction or placement, promotion, pause/resume, placement rules, and
 * failures injected while spilling. */
#include "simcore.h"
#include "reach.h"

#include "core/hostpin.h"
#include "core/held.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/move.h"
#include "core/relocate.h"
#include "core/usemark.h"
#include "policy/recur.h"
#include "policy/config.h"
#include "policy/derive.h"
#include "policy/place.h"
#include "policy/policy.h"
#include "policy/prefetch.h"
#include "policy/set.h"
#include "policy/spill.h"
#include "policy/tags.h"
#include "policy/trial.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static struct gvm_config cfg;

static void no_idle_memory(struct gvm_settings *s)
{
    /* Keep accounting exact: freed memory goes straight back. */
    for (int d = 0; d < GVM_MAX_DEVICES; d++) s->cache_limit[d] = s->pool_limit[d] = 0;
    s->host_pool = 0;
}

static void set(const char *name, const char *value)
{
    char err[GVM_CFG_ERR_MAX];
    if (gvm_config_set(&cfg, name, value, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

/* The caps core enforces come from the policy's configuration. */
static void limits_from_cfg(struct gvm_settings *s)
{
    struct gvm_settings p;
    gvm_policy_settings(&cfg, &gvm_topo, &p);
    memcpy(s->hold_limit, p.hold_limit, sizeof s->hold_limit);
}

static void no_idle_memory_limited(struct gvm_settings *s)
{
    no_idle_memory(s);
    limits_from_cfg(s);
}

static void start_policy(const char *const *kv)
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    for (; kv && kv[0]; kv += 2) set(kv[0], kv[1]);
    sim_start(2, 512 * MiB, no_idle_memory_limited);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
}

static uintptr_t palloc(size_t n)
{
    uintptr_t p = 0;
    CHECK_EQ(gvm_policy_alloc(n, 0, current_ctx(), gvm_policy_current_tag(), &p), CUDA_SUCCESS);
    return p;
}

static int where(uintptr_t p)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    return info.location;
}

static void touch(uintptr_t p) { gvm_use_end(gvm_use_begin(p)); }

static void evicts_the_least_recently_used(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    touch(a);                                /* b is now the coldest */
    uintptr_t c = palloc(24 * MiB);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(where(c), 0);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2));
    CHECK(gvm_policy_usage(0) <= 64 * MiB);
    CHECK_EQ(gvm_stats.spills, 1);
    /* Freeing the spilled one works from where it lives. */
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
}

/* The use clock orders calls: the regions one call touches share a tick,
 * a call repeated on the regions used last writes neither the clock nor
 * them, a use of anything older ticks, and a use after a spill counts as
 * one since the spill. */
static void the_use_clock_orders_calls(void)
{
    const char *kv[] = {"device_limit", "0:80M", "spill", "host", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB), c = palloc(24 * MiB);
    struct gvm_region *ra = gvm_heap_region(a), *rb = gvm_heap_region(b), *rc = gvm_heap_region(c);
    for (int round = 0; round < 2; round++) {
        uint64_t before = GVM_LOAD(gvm_clock), tick = 0;
        gvm_use_region_in(ra, &tick);
        gvm_use_region_in(rb, &tick);
        gvm_use_end(ra);
        gvm_use_end(rb);
        CHECK(tick != 0);
        CHECK_EQ(GVM_LOAD(ra->last_use), tick);
        CHECK_EQ(GVM_LOAD(rb->last_use), tick);
        CHECK(GVM_LOAD(rc->last_use) < tick);
        /* The first round ticks once; the repeat finds both newest. */
        CHECK_EQ(GVM_LOAD(gvm_clock), round ? before : before + 1);
    }
    touch(c);
    touch(a);
    touch(a);
    CHECK(GVM_LOAD(ra->last_use) > GVM_LOAD(rc->last_use));
    CHECK(GVM_LOAD(rc->last_use) > GVM_LOAD(rb->last_use));
    CHECK_EQ(GVM_LOAD(ra->last_use), GVM_LOAD(gvm_clock));
    fill(b, 24 * MiB, 3);
    uintptr_t d = palloc(24 * MiB);          /* b is the coldest */
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(c), 0);
    touch(b);
    CHECK(GVM_LOAD(rb->last_use) > GVM_LOAD(rb->spilled_at));
    CHECK(intact(b, 24 * MiB, 3));
    uintptr_t all[] = {a, b, c, d};
    for (int i = 0; i < 4; i++) CHECK_EQ(gvm_policy_free(all[i]), CUDA_SUCCESS);
}

static void *touch_elsewhere(void *p)
{
    touch((uintptr_t)p);
    return NULL;
}

static CUcontext test_ctx;

/* The policy spills p, on a thread of its own (as the promoter would). */
static void *spill_elsewhere(void *p)
{
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(test_ctx), CUDA_SUCCESS);
    CHECK_EQ(gvm_relocate(gvm_heap_region((uintptr_t)p), GVM_LOC_HOST, GVM_RELOC_SPILL), CUDA_SUCCESS);
    return NULL;
}

/* On another thread: a use that thread makes. */
static void touch_on_a_thread(uintptr_t p)
{
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, touch_elsewhere, (void *)p), 0);
    pthread_join(t, NULL);
}

/* Threads working on regions of their own do not take turns writing the
 * clock: a region this thread stamped last keeps its stamp while other
 * threads take a few ticks, but not many, and not past a spill of it. */
static void the_use_clock_lets_threads_work_apart(void)
{
    const char *kv[] = {"device_limit", "0:80M", "spill", "host", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB), c = palloc(24 * MiB);
    struct gvm_region *ra = gvm_heap_region(a);
    touch(a);
    uint64_t stamp = GVM_LOAD(ra->last_use);
    touch_on_a_thread(b);
    touch_on_a_thread(c);
    touch(a);                                /* two ticks elsewhere: kept */
    CHECK_EQ(GVM_LOAD(ra->last_use), stamp);
    for (int i = 0; i < 100; i++) touch_on_a_thread(i % 2 ? b : c);
    touch(a);                                /* many: stamped anew */
    CHECK_EQ(GVM_LOAD(ra->last_use), GVM_LOAD(gvm_clock));
    /* Spilled by another thread since its stamp: the next use is seen as
     * one since the spill. */
    fill(a, 24 * MiB, 6);
    test_ctx = current_ctx();
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, spill_elsewhere, (void *)a), 0);
    pthread_join(t, NULL);
    CHECK_EQ(where(a), GVM_HOST);
    touch(a);
    CHECK(GVM_LOAD(ra->last_use) > GVM_LOAD(ra->spilled_at));
    CHECK(intact(a, 24 * MiB, 6));
    uintptr_t all[] = {a, b, c};
    for (int i = 0; i < 3; i++) CHECK_EQ(gvm_policy_free(all[i]), CUDA_SUCCESS);
}

static void a_job_that_fits_never_spills(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", NULL};
    start_policy(kv);
    for (int i = 0; i < 50; i++) {
        uintptr_t a = palloc(20 * MiB), b = palloc(30 * MiB);
        gvm_policy_free(a);
        gvm_policy_free(b);
    }
    CHECK_EQ(gvm_stats.spills, 0);
}

static void place_mode_puts_the_new_allocation_on_the_target(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "spill_mode", "place", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB), c = palloc(24 * MiB);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(b), 0);
    CHECK_EQ(where(c), GVM_HOST);
    fill(c, 24 * MiB, 3);
    CHECK(intact(c, 24 * MiB, 3));
}

static void peer_first_then_host(void)
{
    const char *kv[] = {"device_limit", "0:64M,1:40M", "spill", "peer,host", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(30 * MiB), b = palloc(30 * MiB);
    uintptr_t c = palloc(30 * MiB);          /* a goes to the peer */
    CHECK_EQ(where(a), 1);
    uintptr_t d = palloc(30 * MiB);          /* the peer is full: b goes to host */
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(where(c), 0);
    CHECK_EQ(where(d), 0);
}

static void spill_off_fails_as_natively(void)
{
    const char *kv[] = {"device_limit", "0:64M", NULL};
    start_policy(kv);
    uintptr_t a = palloc(40 * MiB);
    uintptr_t p = 0;
    CHECK_EQ(gvm_policy_alloc(40 * MiB, 0, current_ctx(), 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(where(a), 0);
    size_t f = 512 * MiB, t = 512 * MiB;
    gvm_policy_meminfo(0, &f, &t);
    CHECK_EQ(t, 64 * MiB);
    CHECK_EQ(f, 24 * MiB);
}

static void fails_only_when_no_target_has_room(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "host_limit", "50M", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(30 * MiB), b = palloc(30 * MiB);
    uintptr_t c = palloc(30 * MiB);          /* one of a, b to host (30M <= 50M) */
    CHECK(where(a) == GVM_HOST || where(b) == GVM_HOST);
    uintptr_t p = 0;
    CHECK_EQ(gvm_policy_alloc(30 * MiB, 0, current_ctx(), 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(intact(c, 0, 0));
}

static int wait_for(uintptr_t p, int loc)
{
    for (int i = 0; i < 400; i++) {
        if (where(p) == loc) return 1;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void used_spilled_data_is_promoted_when_room_returns(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "5ms", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 4);
    touch(b);
    uintptr_t c = palloc(24 * MiB);
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
    touch(a);
    CHECK(wait_for(a, 0));
    CHECK(intact(a, 24 * MiB, 4));
    CHECK_EQ(gvm_stats.promotions, 1);
}

/* A launch reaching spilled data brings it back first, sending out the
 * coldest allocation the launch does not use. */
static void launch_on_spilled_data_swaps_it_in(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    touch(b);
    uintptr_t c = palloc(24 * MiB);          /* a leaves */
    CHECK_EQ(where(a), GVM_HOST);
    touch(b);
    struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
    gvm_policy_before_launch(used, 2);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(b), GVM_HOST);            /* the most recent one the launch does not use */
    CHECK_EQ(where(c), 0);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2));
    CHECK_EQ(gvm_stats.promotions, 1);
    CHECK(gvm_policy_usage(0) <= 64 * MiB);
    /* Nothing may leave (all used): the kernel reads it where it is. */
    struct gvm_region *all[3] = {gvm_heap_region(a), gvm_heap_region(b), gvm_heap_region(c)};
    gvm_policy_before_launch(all, 3);
    CHECK_EQ(where(b), GVM_HOST);
}

/* a, b, then c at a 64 MiB limit: a (the least recently used) leaves. */
struct trio {
    uintptr_t a, b, c;
};

static struct trio spill_the_first(const char *const *kv, uint32_t seed)
{
    start_policy(kv);
    struct trio t = {.a = palloc(24 * MiB), .b = palloc(24 * MiB)};
    fill(t.a, 24 * MiB, seed);
    fill(t.b, 24 * MiB, seed + 1);
    touch(t.b);
    t.c = palloc(24 * MiB);
    return t;
}

static void policy_set(const char *kv)
{
    char *args[] = {(char *)kv};
    FILE *quiet = fopen("/dev/null", "w");
    CHECK_EQ(gvm_policy_set(args, 1, quiet), GVM_OK);
    fclose(quiet);
}

/* Data spilled to a peer GPU joined by NVLink is read in place by a
 * launch that reaches it (option swap_in=host, the default): nothing
 * leaves for it and nothing moves. swap_in=all swaps it in as host data
 * is; with room to spare it comes back in either mode. */
static void data_on_a_peer_is_read_in_place(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "peer", "promote_interval", "3600s", NULL};
    struct trio t = spill_the_first(kv, 11);
    uintptr_t a = t.a, b = t.b, c = t.c;
    CHECK(gvm_topo_nvlinked(0, 1));
    CHECK_EQ(where(a), 1);                   /* a left for the peer */
    uint64_t moved = gvm_stats.bytes_migrated;
    struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
    gvm_policy_before_launch(used, 2);
    CHECK_EQ(where(a), 1);
    CHECK_EQ(where(b), 0);
    CHECK_EQ(gvm_stats.bytes_migrated, moved);
    policy_set("swap_in=all");
    gvm_policy_before_launch(used, 2);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(b), 1);                   /* the one the launch does not use */
    CHECK(gvm_policy_usage(0) <= 64 * MiB);
    policy_set("swap_in=host");
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
    struct gvm_region *rb = gvm_heap_region(b);
    gvm_policy_before_launch(&rb, 1);        /* it fits: it comes in alone */
    CHECK_EQ(where(b), 0);
    CHECK_EQ(where(a), 0);
    CHECK(intact(a, 24 * MiB, 11) && intact(b, 24 * MiB, 12));
}

/* Peers joined by PCIe only (no native atomics between them): peer data
 * is swapped in as host data is, by default. */
static void data_on_a_pcie_peer_is_swapped_in(void)
{
    simcuda_set_peer_pcie(1);
    const char *kv[] = {"device_limit", "0:64M", "spill", "peer", "promote_interval", "3600s", NULL};
    struct trio t = spill_the_first(kv, 31);
    uintptr_t a = t.a, b = t.b, c = t.c;
    CHECK(!gvm_topo_nvlinked(0, 1) && gvm_topo_reaches(0, 1));
    CHECK_EQ(where(a), 1);
    struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
    gvm_policy_before_launch(used, 2);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(b), 1);
    CHECK(intact(a, 24 * MiB, 31) && intact(b, 24 * MiB, 32));
}

/* A failed link query leaves that pair counted as PCIe-joined (swaps, as
 * before the in-place reads), and the start goes on. */
static void a_failed_link_query_counts_as_pcie(void)
{
    simcuda_fail_call("cuDeviceGetP2PAttribute", 1, CUDA_ERROR_UNKNOWN);
    const char *kv[] = {"device_limit", "0:64M", "spill", "peer", NULL};
    start_policy(kv);
    CHECK(!gvm_topo_nvlinked(0, 1) && gvm_topo_reaches(0, 1));
    CHECK(gvm_topo_nvlinked(1, 0));
}

/* swap_in=none: every kernel reads spilled data where it lies, host
 * memory included, until room returns. */
static void swap_in_none_reads_host_data_in_place(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", "swap_in", "none",
                        NULL};
    struct trio t = spill_the_first(kv, 21);
    uintptr_t a = t.a, c = t.c;
    CHECK_EQ(where(a), GVM_HOST);
    uint64_t moved = gvm_stats.bytes_migrated;
    struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
    gvm_policy_before_launch(used, 2);
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(gvm_stats.bytes_migrated, moved);
    CHECK(intact(a, 24 * MiB, 21));
}

/* A loop sweeping its buffers in order, one more than the device holds:
 * each sweep must move about one buffer each way, not all of them. */
static void a_cyclic_sweep_does_not_thrash(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", NULL};
    start_policy(kv);
    uintptr_t w[5];
    for (int i = 0; i < 5; i++) {
        w[i] = palloc(16 * MiB);
        fill(w[i], 16 * MiB, 40 + i);
    }
    uint64_t before = 0;
    for (int sweep = 0; sweep < 4; sweep++) {
        if (sweep == 1) before = gvm_stats.bytes_migrated;
        for (int i = 0; i < 5; i++) {
            struct gvm_region *r = gvm_heap_region(w[i]);
            gvm_policy_before_launch(&r, 1);
            touch(w[i]);
            CHECK_EQ(where(w[i]), 0);
        }
    }
    uint64_t per_sweep = (gvm_stats.bytes_migrated - before) / 3;
    if (per_sweep > 2 * 2 * 16 * MiB) fprintf(stderr, "moved %lu MiB per sweep\n", (unsigned long)(per_sweep >> 20));
    CHECK(per_sweep <= 2 * 2 * 16 * MiB);
    for (int i = 0; i < 5; i++) CHECK(intact(w[i], 16 * MiB, 40 + i));
}

/* A sweep whose launches alternate with launches on one small buffer (a
 * loss, a scalar: recurring every other launch): the period learned is
 * the sweep's, and a sweep moves no more than the recency order does
 * (four buffers each way: beside the small one's chunk and the room kept
 * for the next swap, two fit). A period of a few launches would make every
 * buffer look unneeded and the victims the least recently used: a miss on
 * every access, five each way (seen on two H200s, 2026-11-24, when the
 * period was voted by distances: the spill step took 2.4 times as long). */
static void a_sweep_with_a_shared_scalar_learns_its_period(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", NULL};
    start_policy(kv);
    uintptr_t w[5], acc = palloc(4096);
    for (int i = 0; i < 5; i++) {
        w[i] = palloc(16 * MiB);
        fill(w[i], 16 * MiB, 50 + i);
    }
    uint64_t before = 0;
    for (int sweep = 0; sweep < 8; sweep++) {
        if (sweep == 5) before = gvm_stats.bytes_migrated;
        for (int i = 0; i < 5; i++) {
            struct gvm_region *r[2] = {gvm_heap_region(w[i]), gvm_heap_region(acc)};
            gvm_policy_before_launch(r, 2);
            CHECK_EQ(where(w[i]), 0);
            for (int k = 0; k < 2; k++) gvm_policy_before_launch(&r[1], 1);
        }
    }
    CHECK_EQ(gvm_recur_period(), 15u);
    uint64_t per_sweep = (gvm_stats.bytes_migrated - before) / 3;
    if (per_sweep > 2 * 4 * 16 * MiB) fprintf(stderr, "moved %lu MiB per sweep\n", (unsigned long)(per_sweep >> 20));
    CHECK(per_sweep <= 2 * 4 * 16 * MiB);
    for (int i = 0; i < 5; i++) CHECK(intact(w[i], 16 * MiB, 50 + i));
}

/* ---- the loop model (policy/recur.c) on its own -------------------------
 * Regions here are records the model reads (base, kind, launch history);
 * no memory behind them. */

static void recur_launch_each(struct gvm_region *const *seq, int n, int times)
{
    for (int t = 0; t < times; t++)
        for (int i = 0; i < n; i++) gvm_recur_launch(&seq[i], 1);
}

static struct gvm_region *fake_region(uintptr_t base)
{
    struct gvm_region *r = calloc(1, sizeof *r);
    CHECK(r != NULL);
    r->base = base;
    r->kind = GVM_REGION_LARGE;
    return r;
}

/* n regions 1 GiB apart from base, for the loop model alone. */
static void fake_regions(struct gvm_region **r, int n, uintptr_t base)
{
    for (int i = 0; i < n; i++) r[i] = fake_region(base + ((uintptr_t)i << 30));
}

static void free_regions(struct gvm_region **r, int n)
{
    for (int i = 0; i < n; i++) free(r[i]);
}

/* Nothing is learned before the first spill; then a loop's period is
 * adopted once it repeats, each region's next use is where it was used a
 * period ago, and a changed loop replaces the period. */
static void the_loop_model_learns_and_unlearns(void)
{
    gvm_recur_reset();
    struct gvm_region *r[6];
    fake_regions(r, 6, 0x100000000ul);
    recur_launch_each(r, 4, 40);
    CHECK_EQ(gvm_recur_period(), 0u);   /* no spill yet: not even recorded */
    CHECK_EQ(r[0]->nlaunches, 0u);
    gvm_recur_start();
    recur_launch_each(r, 4, 20);        /* r0 r1 r2 r3, again and again */
    CHECK_EQ(gvm_recur_period(), 4u);
    /* Just after r3: r0 is next, then r1, r2, r3. */
    for (int i = 0; i < 4; i++) CHECK_EQ(gvm_recur_next_use(r[i], 4), (uint32_t)i + 1);
    CHECK_EQ(gvm_recur_next_use(r[4], 4), 4u);   /* never launched on: a period ahead */
    /* A longer loop over six regions: the old period stops holding and the
     * new one is adopted. */
    recur_launch_each(r, 6, 30);
    CHECK_EQ(gvm_recur_period(), 6u);
    for (int i = 0; i < 6; i++) CHECK_EQ(gvm_recur_next_use(r[i], 6), (uint32_t)i + 1);
    /* A shorter loop replaces it (the old period, a multiple of the new
     * one, would go on matching). A region the loop left behind is not
     * expected. */
    struct gvm_region *only[2] = {r[0], r[1]};
    recur_launch_each(only, 2, 40);
    CHECK_EQ(gvm_recur_period(), 2u);
    CHECK_EQ(gvm_recur_next_use(r[5], 2), GVM_RECUR_NEVER);
    free_regions(r, 6);
}

/* A step that launches one kernel many times in a row (a side stream's
 * GEMMs, sixty a step on an H100) holds a loop of period 1 inside it:
 * the step's period stays learned through the burst, and each region's
 * next use is still where it was a step ago. Adopting the burst's period
 * made every step learn 1 and then its own period again, and the weights
 * predicted in between came and went (2026-11-27). */
static void a_burst_inside_a_step_keeps_the_steps_period(void)
{
    gvm_recur_reset();
    gvm_recur_start();
    struct gvm_region *r[9];
    fake_regions(r, 9, 0x200000000ul);
    uint64_t learned = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 4) learned = gvm_stats.loops_learned;
        recur_launch_each(&r[8], 1, 40);   /* the burst */
        recur_launch_each(r, 8, 1);
        CHECK(step < 3 || gvm_recur_period() == 48u);
    }
    CHECK_EQ(gvm_stats.loops_learned, learned);   /* nothing relearned once known */
    /* Just after the step's sweep: the burst is next, then r0..r7. */
    CHECK_EQ(gvm_recur_next_use(r[8], 48), 1u);
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_recur_next_use(r[i], 48), 41u + (uint32_t)i);
    free_regions(r, 9);
}

/* Launches whose votes are skipped (each launch beside another thread's
 * vote skips its own: PyTorch launches the backward pass from a thread of
 * its own) leave their keys' last sightings a few periods back: the gap
 * is a multiple of the period, and the loop is still the same one. */
static void skipped_votes_keep_the_period(void)
{
    gvm_recur_reset();
    gvm_recur_start();
    struct gvm_region *r[8];
    fake_regions(r, 8, 0x300000000ul);
    recur_launch_each(r, 8, 10);
    CHECK_EQ(gvm_recur_period(), 8u);
    uint64_t learned = gvm_stats.loops_learned;
    for (int round = 0; round < 4; round++) {
        gvm_recur_hold_votes(true);
        recur_launch_each(r, 8, 1 + round);   /* one to four steps unvoted */
        gvm_recur_hold_votes(false);
        recur_launch_each(r, 8, 6);
        CHECK_EQ(gvm_recur_period(), 8u);
    }
    CHECK_EQ(gvm_stats.loops_learned, learned);
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_recur_next_use(r[i], 8), (uint32_t)i + 1);
    free_regions(r, 8);
}

/* A loop whose order wobbles a little from step to step (two launches
 * trading places: threads launching side by side, an allocator handing
 * out a buffer in turn) repeats at a multiple of its period now and then
 * with fewer misses than at the period itself. The period learned stays
 * the loop's or a multiple of it, and changes seldom: compared as any
 * other proposal, multiples came and went 15 times in these 300 steps,
 * and the fused-Adam step's period went 162, 324, 162, 648, 486, 162 ...
 * launches on two H100s (2026-11-27), each change restarting the
 * prefetch's trial. */
static void a_wobbling_loop_keeps_its_period(void)
{
    gvm_recur_reset();
    gvm_recur_start();
    struct gvm_region *r[40], *step[40];
    fake_regions(r, 40, 0x400000000ul);
    uint32_t seed = 12345;
    uint64_t learned = 0;
    for (int s = 0; s < 300; s++) {
        memcpy(step, r, sizeof step);
        /* Every third step the same pair trades places (three steps are
         * then exact where one is not), and half the steps another pair
         * at random. */
        if (s % 3 == 0) step[10] = r[11], step[11] = r[10];
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) & 1) {
            int at = 20 + (int)((seed >> 17) % 18);
            struct gvm_region *t = step[at];
            step[at] = step[at + 1];
            step[at + 1] = t;
        }
        recur_launch_each(step, 40, 1);
        if (s == 5) learned = gvm_stats.loops_learned;
        CHECK(s < 5 || (gvm_recur_period() && gvm_recur_period() % 40 == 0));
    }
    CHECK(gvm_stats.loops_learned - learned <= 2);
    free_regions(r, 40);
}

/* A region used more than once a step is next needed at its earliest use
 * in the step, and one used more often than it remembers stays predicted
 * within the period. */
static void the_loop_model_predicts_regions_used_often(void)
{
    gvm_recur_reset();
    gvm_recur_start();
    struct gvm_region *r[3];
    fake_regions(r, 3, 0x200000000ul);
    /* r0 is used twice a step: the oldest use within the period counts. */
    struct gvm_region *step[4] = {r[0], r[1], r[0], r[2]};
    recur_launch_each(step, 4, 40);
    CHECK_EQ(gvm_recur_period(), 4u);
    CHECK_EQ(gvm_recur_next_use(r[0], 4), 1u);
    CHECK_EQ(gvm_recur_next_use(r[1], 4), 2u);
    CHECK_EQ(gvm_recur_next_use(r[2], 4), 4u);
    /* More uses than a region remembers: the prediction stays within the
     * period. */
    struct gvm_region *busy[GVM_REGION_LAUNCHES + 4];
    for (int i = 0; i < GVM_REGION_LAUNCHES + 4; i++) busy[i] = i % 2 ? r[1] : r[0];
    busy[GVM_REGION_LAUNCHES + 3] = r[2];
    recur_launch_each(busy, GVM_REGION_LAUNCHES + 4, 10);
    uint32_t per = gvm_recur_period();
    CHECK_EQ(per, (uint32_t)GVM_REGION_LAUNCHES + 4);
    uint32_t n0 = gvm_recur_next_use(r[0], per);
    CHECK(n0 >= 1 && n0 <= per);
    CHECK_EQ(gvm_recur_next_use(r[2], per), per);
    free_regions(r, 3);
}

/* Kernels in runs on the same allocations, as the read loop launches them
 * on an H100 (2026-11-26): each weight's GEMV is two launches on the
 * weight and a shared chunk, then two on the chunk alone. Keyed by one
 * launch, the second of a pair found its twin a launch back and the first
 * a period less one back: no period was ever learned. The chunk, in use
 * every other launch through the whole step, is needed next; a weight
 * just read is needed a period after its run started. */
static void the_loop_model_learns_runs_of_launches(void)
{
    gvm_recur_reset();
    gvm_recur_start();
    struct gvm_region *w[6], *chunk = fake_region(0x300000000ul);
    for (int i = 0; i < 6; i++) w[i] = fake_region(0x310000000ul + ((uintptr_t)i << 30));
    struct gvm_region *seq[24][2];
    int lens[24];
    for (int i = 0; i < 6; i++) {
        for (int k = 0; k < 2; k++) {
            seq[4 * i + k][0] = w[i];
            seq[4 * i + k][1] = chunk;
            lens[4 * i + k] = 2;
            seq[4 * i + 2 + k][0] = chunk;
            lens[4 * i + 2 + k] = 1;
        }
    }
    uint64_t learned = gvm_stats.loops_learned;
    for (int t = 0; t < 12; t++)
        for (int j = 0; j < 24; j++) gvm_recur_launch(seq[j], lens[j]);
    CHECK_EQ(gvm_recur_period(), 24u);
    CHECK_EQ(gvm_stats.loops_learned, learned + 1);   /* what GVM_STATS shows */
    CHECK_EQ(gvm_recur_next_use(chunk, 24), 1u);
    /* Just after the step: w0's run started 23 launches ago, w5's 3. */
    for (int i = 0; i < 6; i++) CHECK_EQ(gvm_recur_next_use(w[i], 24), (uint32_t)(4 * i + 1));
    for (int i = 0; i < 6; i++) free(w[i]);
    free(chunk);
}

/* A region used every few launches in one phase of the step only (the
 * forward pass's activations): in its phase it is needed next; after it,
 * a period after the phase began, however many uses the phase had. */
static void the_loop_model_sees_a_phase_of_dense_use(void)
{
    gvm_recur_reset();
    gvm_recur_start();
    struct gvm_region *act = fake_region(0x400000000ul), *other[80];
    for (int i = 0; i < 80; i++) other[i] = fake_region(0x410000000ul + ((uintptr_t)i << 28));
    /* 80 launches a step: 40 on act and others in turn, then 40 others. */
    struct gvm_region *seq[80][2];
    int lens[80];
    for (int j = 0; j < 80; j++) {
        seq[j][0] = other[j];
        seq[j][1] = act;
        lens[j] = j < 40 && j % 2 == 0 ? 2 : 1;
    }
    for (int t = 0; t < 10; t++)
        for (int j = 0; j < 80; j++) gvm_recur_launch(seq[j], lens[j]);
    CHECK_EQ(gvm_recur_period(), 80u);
    CHECK_EQ(gvm_recur_next_use(act, 80), 1u);   /* its phase starts at the next launch */
    for (int j = 0; j < 20; j++) gvm_recur_launch(seq[j], lens[j]);
    CHECK(gvm_recur_next_use(act, 80) <= 2u);    /* in its phase: twenty uses so far */
    for (int j = 20; j < 60; j++) gvm_recur_launch(seq[j], lens[j]);
    CHECK_EQ(gvm_recur_next_use(act, 80), 21u);  /* its phase began 59 launches ago */
    for (int i = 0; i < 80; i++) free(other[i]);
    free(act);
}

/* A region idle for longer than the incoming one's reuse distance (like a
 * block a framework keeps cached) goes before any warm one. */
static void cold_regions_leave_before_warm_ones(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", NULL};
    start_policy(kv);
    uintptr_t cold = palloc(16 * MiB), a = palloc(16 * MiB), b = palloc(16 * MiB), c = palloc(16 * MiB);
    touch(a);
    touch(b);
    CHECK_EQ(gvm_migrate((void *)a, GVM_HOST), GVM_OK);   /* a is out; make it spilled data */
    GVM_STORE(gvm_heap_region(a)->home, 0);
    GVM_STORE(gvm_heap_region(a)->spilled_at, gvm_clock_tick());
    uintptr_t d = palloc(16 * MiB);
    touch(b);
    touch(c);
    touch(d);
    struct gvm_region *r = gvm_heap_region(a);
    gvm_policy_before_launch(&r, 1);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(cold), GVM_HOST);
    CHECK(where(b) == 0 && where(c) == 0 && where(d) == 0);
}

static void unused_spilled_data_stays_out(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "5ms", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    touch(b);
    uintptr_t c = palloc(24 * MiB);
    CHECK_EQ(where(a), GVM_HOST);
    gvm_policy_free(c);
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(gvm_stats.promotions, 0);
}

static void pause_keep_and_resume(void)
{
    start_policy(NULL);
    CHECK_EQ(gvm_tag_push("weights"), GVM_OK);
    uintptr_t w = palloc(40 * MiB), s = palloc(3000);
    CHECK_EQ(gvm_tag_push(""), GVM_OK);   /* untagged inside the tagged block */
    uintptr_t other = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(w, 40 * MiB, 5);
    fill(s, 3000 & ~3u, 6);
    CHECK_EQ(gvm_pause("weights", GVM_PAUSE_KEEP), GVM_OK);
    CHECK_EQ(where(w), GVM_HOST);
    CHECK_EQ(where(s), GVM_HOST);
    CHECK_EQ(where(other), 0);
    CHECK_EQ(simcuda_phys_bytes(0), 8 * MiB);   /* only the untagged one stays */
    CHECK(intact(reach(w), 40 * MiB, 5));              /* readable while paused */
    CHECK_EQ(gvm_migrate((void *)w, 1), GVM_ERR_BUSY);
    CHECK_EQ(gvm_resume("weights"), GVM_OK);
    CHECK_EQ(where(w), 0);
    CHECK(intact(reach(w), 40 * MiB, 5) && intact(reach(s), 3000 & ~3u, 6));
    CHECK_EQ(gvm_pause("nosuchtag", 0), GVM_OK);
    CHECK_EQ(gvm_pause("weights", 7), GVM_ERR_INVALID);
    CHECK_EQ(gvm_tag_pop(), GVM_ERR_INVALID);
}

static void pause_discard_and_resume_zeroed(void)
{
    start_policy(NULL);
    gvm_tag_push("kv");
    uintptr_t k = palloc(20 * MiB);
    gvm_tag_pop();
    fill(k, 20 * MiB, 7);
    CHECK_EQ(gvm_pause("kv", GVM_PAUSE_DISCARD), GVM_OK);
    CHECK_EQ(where(k), GVM_NOWHERE);
    CHECK_EQ(simcuda_location_of(k), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_phys_bytes(0), 0);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK_EQ(where(k), 0);
    for (size_t i = 0; i < 20 * MiB; i += 4096) CHECK_EQ(((unsigned char *)k)[i], 0);
    CHECK_EQ(gvm_policy_free(k), CUDA_SUCCESS);
}

/* GVM_PAUSE_UNMAPPED: the copy waits in host memory mapped nowhere in the
 * program's range; what users check is that the device memory is gone,
 * the pointers fault rather than read stale data, and resume restores
 * every byte in place. */
static void pause_unmapped_keeps_the_contents_off_the_range(void)
{
    start_policy(NULL);
    CHECK_EQ(gvm_tag_push("weights"), GVM_OK);
    uintptr_t w = palloc(40 * MiB), s = palloc(3000);
    CHECK_EQ(gvm_tag_push(""), GVM_OK);   /* untagged inside the tagged block */
    uintptr_t other = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(w, 40 * MiB, 5);
    fill(s, 3000 & ~3u, 6);
    fill(other, 8 * MiB, 8);
    CHECK_EQ(gvm_pause("weights", GVM_PAUSE_DISCARD | GVM_PAUSE_UNMAPPED), GVM_ERR_INVALID);
    CHECK_EQ(where(w), 0);
    CHECK_EQ(gvm_pause("weights", GVM_PAUSE_UNMAPPED), GVM_OK);
    gvm_info info;
    CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
    CHECK(info.paused);
    CHECK_EQ(info.location, GVM_HOST);
    CHECK_EQ(info.bytes_on_device, 0);
    CHECK_EQ(info.bytes_on_host, 40 * MiB);
    CHECK_EQ(where(s), GVM_HOST);
    CHECK_EQ(simcuda_location_of(w), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_location_of(s), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_phys_bytes(0), 8 * MiB);   /* only the untagged one stays */
    CHECK(intact(other, 8 * MiB, 8));
    CHECK_EQ(gvm_migrate((void *)w, 1), GVM_ERR_BUSY);
    CHECK_EQ(gvm_pause("weights", GVM_PAUSE_UNMAPPED), GVM_OK);   /* already paused: nothing to do */
    CHECK_EQ(gvm_resume("weights"), GVM_OK);
    CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
    CHECK(!info.paused);
    CHECK_EQ(info.location, 0);
    CHECK_EQ(info.bytes_on_host, 0);
    CHECK_EQ(simcuda_location_of(w), 0);
    CHECK(intact(w, 40 * MiB, 5) && intact(s, 3000 & ~3u, 6));
    /* And again: the host pieces came back to the pool for the next pause. */
    CHECK_EQ(gvm_pause("weights", GVM_PAUSE_UNMAPPED), GVM_OK);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK(intact(w, 40 * MiB, 5) && intact(s, 3000 & ~3u, 6));
}

static void freeing_shelved_memory_releases_its_copy(void)
{
    start_policy(NULL);
    struct leaks base = leaks_now();
    int64_t host0 = gvm_stats.resident[GVM_MAX_DEVICES];
    CHECK_EQ(gvm_tag_push("kv"), GVM_OK);
    uintptr_t k = palloc(24 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(k, 24 * MiB, 3);
    CHECK_EQ(gvm_pause("kv", GVM_PAUSE_UNMAPPED), GVM_OK);
    CHECK_EQ(gvm_stats.resident[GVM_MAX_DEVICES], host0 + (int64_t)(24 * MiB));
    CHECK_EQ(gvm_policy_free(k), CUDA_SUCCESS);
    CHECK_EQ(gvm_stats.resident[GVM_MAX_DEVICES], host0);
    CHECK_NO_LEAK(base);
}

/* A first unmapped pause finds no pooled host memory: its pieces are the
 * process's pages registered beside the copies (core/hostpin.h), not
 * created pinned memory; they go back to the pool like created ones, and
 * the next pause takes them. With host_register=0 nothing is registered. */
/* 40 MiB tagged "w", filled from seed; the pools trimmed after, so its
 * first pause finds no host memory ready. */
static uintptr_t tagged_w(uint32_t seed)
{
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t w = palloc(40 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(w, 40 * MiB, seed);
    leaks_now();
    return w;
}

/* The end of a pause of tagged_w(seed) that registered nothing: its
 * 40 MiB in created host pieces (host0: the host's bytes before), every
 * byte back on resume, nothing leaked since base once freed. */
static void paused_in_created_pieces(uintptr_t w, uint32_t seed, size_t host0, struct leaks base)
{
    CHECK_EQ(simcuda_registered_bytes(), base.registered);
    CHECK_EQ(simcuda_phys_bytes(SIMCUDA_LOC_HOST) - host0, 40 * MiB);
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    CHECK(intact(w, 40 * MiB, seed));
    CHECK_EQ(gvm_policy_free(w), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

static void no_registering(struct gvm_settings *s)
{
    no_idle_memory_limited(s);
    s->host_register = 0;
}

static void first_unmapped_pause(bool registered)
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    sim_start(2, 512 * MiB, registered ? no_idle_memory_limited : no_registering);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
    struct leaks base = leaks_now();
    uintptr_t w = tagged_w(11);
    size_t host0 = simcuda_phys_bytes(SIMCUDA_LOC_HOST);
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    CHECK_EQ(simcuda_location_of(w), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_phys_bytes(0), 0);
    CHECK_EQ(simcuda_registered_bytes() - base.registered, registered ? 40 * MiB : 0);
    CHECK_EQ(simcuda_phys_bytes(SIMCUDA_LOC_HOST) - host0, registered ? 0 : 40 * MiB);
    gvm_info info;
    CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
    CHECK_EQ(info.bytes_on_host, 40 * MiB);
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    CHECK_EQ(simcuda_location_of(w), 0);
    CHECK(intact(w, 40 * MiB, 11));
    unsigned long regs = simcuda_calls_of("cuMemHostRegister_v2"), creates = simcuda_calls_of("cuMemCreate");
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    CHECK_EQ(simcuda_calls_of("cuMemHostRegister_v2"), regs);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), creates);   /* the pool's pieces again */
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    CHECK(intact(w, 40 * MiB, 11));
    CHECK_EQ(gvm_policy_free(w), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

static void a_first_unmapped_pause_registers_host_pages(void) { first_unmapped_pause(true); }
static void host_register_off_creates_host_pieces(void) { first_unmapped_pause(false); }

/* Pages the machine does not have would be touched into the OOM killer:
 * below MemAvailable's margin the pause creates its pieces (which fail
 * cleanly where memory is short), and keeps every byte. */
static void registering_stops_short_of_the_machines_memory(void)
{
    start_policy(NULL);
    struct leaks base = leaks_now();
    uintptr_t w = tagged_w(13);
    char path[] = "/tmp/gvm-meminfo-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char text[] = "MemTotal:        2097152 kB\nMemFree:          524288 kB\nMemAvailable:    1048576 kB\n";
    CHECK_EQ(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    gvm_hostpin_set_meminfo(path);   /* 1 GiB available: not 1 GiB beside 40 MiB */
    size_t host0 = simcuda_phys_bytes(SIMCUDA_LOC_HOST);
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    gvm_hostpin_set_meminfo(NULL);
    unlink(path);
    paused_in_created_pieces(w, 13, host0, base);
}

/* Registering refused (by the driver, or the kernel out of pages): the
 * pause creates its host pieces instead, and keeps every byte. */
static void a_refused_registration_falls_back_to_created_pieces(void)
{
    start_policy(NULL);
    struct leaks base = leaks_now();
    uintptr_t w = tagged_w(12);
    size_t host0 = simcuda_phys_bytes(SIMCUDA_LOC_HOST);
    simcuda_fail_calls("cuMemHostRegister_v2", 1, 1000, CUDA_ERROR_NOT_PERMITTED);
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    simcuda_fail_calls("cuMemHostRegister_v2", 0, 0, CUDA_SUCCESS);
    CHECK(simcuda_calls_of("cuMemHostRegister_v2") > 0);
    paused_in_created_pieces(w, 12, host0, base);
}

/* A driver call failing anywhere in the pause leaves the allocation
 * mapped where it was with its contents; anywhere in the resume leaves it
 * paused with its copy, which a later resume restores. Nothing leaks. */
static void small_blocks(struct gvm_settings *s)
{
    no_idle_memory_limited(s);
    s->block_size = 8 * MiB;
}

/* The pause of w (n bytes of seed 4) with its k-th registration refused:
 * that piece is created instead; with no host memory left for that either,
 * the pause fails as out of memory and leaves w as it was. */
static void pause_with_a_refused_registration(uintptr_t w, size_t n, unsigned long k)
{
    gvm_info info;
    simcuda_fail_call("cuMemHostRegister_v2", k, CUDA_ERROR_ILLEGAL_STATE);
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
    CHECK(info.paused);
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    CHECK(intact(w, n, 4));
    struct leaks base = leaks_now();
    simcuda_fail_call("cuMemHostRegister_v2", k, CUDA_ERROR_ILLEGAL_STATE);
    simcuda_fail_call("cuMemCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
    gvm_status st = gvm_pause("w", GVM_PAUSE_UNMAPPED);
    simcuda_fail_call("cuMemHostRegister_v2", 0, CUDA_SUCCESS);
    simcuda_fail_call("cuMemCreate", 0, CUDA_SUCCESS);
    CHECK_EQ(st, GVM_ERR_NO_MEMORY);
    CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
    CHECK(!info.paused);
    CHECK_EQ(simcuda_location_of(w), 0);
    CHECK(intact(w, n, 4));
    CHECK_NO_LEAK(base);
}

static void pause_unmapped_failure_at_every_call(void)
{
    /* Small blocks: every round copies the allocation several times, and
     * at 200 MiB in 64 MiB blocks the case alone took 149 s under TSan. */
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    sim_start(2, 512 * MiB, small_blocks);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    size_t n = 25 * MiB;   /* several blocks, several host pieces each */
    uintptr_t w = palloc(n);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(w, n, 4);
    /* How many driver calls each makes on this thread from the state every
     * round starts in (pools trimmed): each one of them fails once below.
     * The pause registers host pages on worker threads, whose calls would
     * shift a count over all threads from run to run (on a loaded machine
     * fewer rounds failed); their faults are swept after. */
    leaks_now();
    simcuda_reset_counts();
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    unsigned long npause = simcuda_call_count_here();
    unsigned long nreg = simcuda_calls_of("cuMemHostRegister_v2");
    leaks_now();
    simcuda_reset_counts();
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    unsigned long nresume = simcuda_call_count_here();
    CHECK(npause > 10 && nresume > 10);
    gvm_info info;
    int failed = 0;
    for (unsigned long k = 1; k <= npause; k++) {
        struct leaks base = leaks_now();
        simcuda_fail_nth_here(k, CUDA_ERROR_ILLEGAL_STATE);
        gvm_status st = gvm_pause("w", GVM_PAUSE_UNMAPPED);
        simcuda_fail_nth_here(0, CUDA_SUCCESS);
        CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
        if (st == GVM_OK) {   /* the failed call was one the pause may do without */
            CHECK(info.paused);
            CHECK_EQ(simcuda_location_of(w), SIMCUDA_LOC_UNMAPPED);
            CHECK_EQ(gvm_resume("w"), GVM_OK);
            CHECK(intact(w, n, 4));
            continue;
        }
        failed++;
        CHECK_EQ(st, GVM_ERR_DRIVER);
        CHECK(!info.paused);
        CHECK_EQ(info.location, 0);
        CHECK_EQ(simcuda_location_of(w), 0);
        CHECK(intact(w, n, 4));
        CHECK_NO_LEAK(base);
    }
    CHECK(failed > 10);
    CHECK(nreg > 2);
    for (unsigned long k = 1; k <= nreg; k++) pause_with_a_refused_registration(w, n, k);
    failed = 0;
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
    for (unsigned long k = 1; k <= nresume; k++) {
        struct leaks base = leaks_now();
        simcuda_fail_nth_here(k, CUDA_ERROR_ILLEGAL_STATE);
        gvm_status st = gvm_resume("w");
        simcuda_fail_nth_here(0, CUDA_SUCCESS);
        CHECK_EQ(gvm_query((void *)w, &info), GVM_OK);
        if (st == GVM_OK) {
            CHECK(!info.paused);
            CHECK(intact(w, n, 4));
            CHECK_EQ(gvm_pause("w", GVM_PAUSE_UNMAPPED), GVM_OK);
            continue;
        }
        failed++;
        CHECK_EQ(st, GVM_ERR_DRIVER);
        CHECK(info.paused);
        CHECK_EQ(info.location, GVM_HOST);
        CHECK_EQ(simcuda_location_of(w), SIMCUDA_LOC_UNMAPPED);
        CHECK_NO_LEAK(base);
    }
    CHECK(failed > 10);
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    CHECK_EQ(where(w), 0);
    CHECK(intact(w, n, 4));
}

/* A tag paused while the device runs other work, resumed at the limit with
 * spill on: the resume makes room as an allocation would (least recently
 * used leave), every byte comes back, and the device stays within its
 * limit. Memory spilled before the pause and resumed onto its device is
 * resident again, a victim like any other. */
static void resume_at_the_limit_spills_the_overflow(void)
{
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", NULL};
    const int kinds[] = {GVM_PAUSE_KEEP, GVM_PAUSE_UNMAPPED};
    start_policy(kv);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = palloc(24 * MiB);
        fill(w[i], 24 * MiB, 20 + (uint32_t)i);
    }
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    CHECK_EQ(where(w[0]), GVM_HOST);   /* spilled before any pause */
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(gvm_pause("w", kinds[k]), GVM_OK);
        CHECK_EQ(simcuda_phys_bytes(0), 0);
        CHECK_EQ(gvm_resume("w"), GVM_OK);
        int home = 0;
        for (int i = 0; i < 4; i++) {
            gvm_info info;
            CHECK_EQ(gvm_query((void *)w[i], &info), GVM_OK);
            CHECK(!info.paused);
            home += info.location == 0;
            CHECK(intact(w[i], 24 * MiB, 20 + (uint32_t)i));
        }
        CHECK_EQ(home, 2);
        CHECK(gvm_policy_usage(0) <= 64 * MiB);
        CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    }
    for (int i = 0; i < 4; i++)
        if (where(w[i]) == 0) CHECK_EQ(GVM_LOAD(gvm_heap_region(w[i])->spilled_at), 0u);
    /* A new allocation evicts one of the resumed ones rather than going to host. */
    uintptr_t x = palloc(24 * MiB);
    CHECK_EQ(where(x), 0);
    CHECK(gvm_policy_usage(0) <= 64 * MiB);
}

/* No limit, the GPU itself full (the simulated one has 512 MiB): with
 * spill on, the resume still makes room. */
static void resume_on_a_full_device_spills_the_overflow(void)
{
    const char *kv[] = {"spill", "host", "promote_interval", "3600s", NULL};
    start_policy(kv);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = palloc(120 * MiB);
        fill(w[i], 120 * MiB, 50 + (uint32_t)i);
    }
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_KEEP), GVM_OK);
    uintptr_t other = palloc(300 * MiB);
    fill(other, 300 * MiB, 59);
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    for (int i = 0; i < 3; i++) CHECK(intact(w[i], 120 * MiB, 50 + (uint32_t)i));
    CHECK(intact(other, 300 * MiB, 59));
    CHECK(gvm_stats.spills > 0);
    CHECK(simcuda_phys_bytes(0) <= 512 * MiB);
}

/* Without spill a resume that finds no room fails as an allocation would:
 * GVM_ERR_NO_MEMORY, what did not fit still paused with its contents, and
 * a retry once room returns brings it back. */
static void resume_without_room_keeps_the_rest_paused(void)
{
    const char *kv[] = {"device_limit", "0:64M", NULL};
    start_policy(kv);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(a, 24 * MiB, 30);
    fill(b, 24 * MiB, 31);
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_KEEP), GVM_OK);
    uintptr_t other = palloc(32 * MiB);
    CHECK_EQ(gvm_resume("w"), GVM_ERR_NO_MEMORY);
    gvm_info ia, ib;
    CHECK_EQ(gvm_query((void *)a, &ia), GVM_OK);
    CHECK_EQ(gvm_query((void *)b, &ib), GVM_OK);
    CHECK_EQ(!ia.paused + !ib.paused, 1);
    CHECK(intact(reach(a), 24 * MiB, 30) && intact(reach(b), 24 * MiB, 31));
    CHECK(gvm_policy_usage(0) <= 64 * MiB);
    CHECK_EQ(gvm_policy_free(other), CUDA_SUCCESS);
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    CHECK(where(a) == 0 && where(b) == 0);
    CHECK(intact(reach(a), 24 * MiB, 30) && intact(reach(b), 24 * MiB, 31));
}

/* Every driver call of a resume that must evict fails once in turn: the
 * resume reports it as a driver failure (or does without the call),
 * nothing is lost or leaked, and the next resume brings the rest back.
 * `reached`: the paused copies are mapped (pause_host_map=eager, and
 * reached: mapped in place, where lazy), else they come back from their
 * shelves (pause_host_map=lazy, not reached; host_register off, so that
 * every pause's host pieces are alike and the leak check exact). */
static void pause_w(const uintptr_t *w, bool reached)
{
    CHECK_EQ(gvm_pause("w", GVM_PAUSE_KEEP), GVM_OK);
    for (int i = 0; reached && i < 3; i++) reach(w[i]);
}

static void resume_at_the_limit_failing(bool reached)
{
    const char *mapped_kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s", NULL};
    const char *shelved_kv[] = {"device_limit", "0:64M", "spill", "host", "promote_interval", "3600s",
                                "host_register", "0", "pause_host_map", "lazy", NULL};
    start_policy(reached ? mapped_kv : shelved_kv);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = palloc(24 * MiB);
        fill(w[i], 24 * MiB, 40 + (uint32_t)i);
    }
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    pause_w(w, reached);
    simcuda_reset_counts();
    CHECK_EQ(gvm_resume("w"), GVM_OK);
    unsigned long calls = simcuda_call_count_here();
    CHECK(calls > 10);
    int failed = 0;
    pause_w(w, reached);
    unsigned long step = reached ? test_sweep_step() : test_repeat_sweep_step();
    for (unsigned long k = 1; k <= calls; k += step) {
        struct leaks base = leaks_now();
        simcuda_fail_nth_here(k, CUDA_ERROR_ILLEGAL_STATE);
        gvm_status st = gvm_resume("w");
        simcuda_fail_nth_here(0, CUDA_SUCCESS);
        if (reached)
            for (int i = 0; i < 3; i++) CHECK(intact(reach(w[i]), 24 * MiB, 40 + (uint32_t)i));
        CHECK(gvm_policy_usage(0) <= 64 * MiB);
        if (st != GVM_OK) {
            failed++;
            CHECK_EQ(st, GVM_ERR_DRIVER);   /* the failed call's, not "no memory" */
            CHECK_EQ(gvm_resume("w"), GVM_OK);
        }
        for (int i = 0; i < 3; i++) {
            gvm_info info;
            CHECK_EQ(gvm_query((void *)w[i], &info), GVM_OK);
            CHECK(!info.paused);
            CHECK(intact(reach(w[i]), 24 * MiB, 40 + (uint32_t)i));
        }
        pause_w(w, reached);
        CHECK_NO_LEAK(base);
    }
    CHECK(failed > 0);
}

static void resume_at_the_limit_failure_at_every_call(void) { resume_at_the_limit_failing(true); }

static void resume_from_shelves_at_the_limit_failure_at_every_call(void) { resume_at_the_limit_failing(false); }

static void threshold_rule_places_large_allocations_in_host_memory(void)
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    char err[GVM_CFG_ERR_MAX];
    CHECK_EQ(gvm_config_parse_text(&cfg,
                                   "[rule big-in-host]\nsize = 32M-\nplace = host\n"
                                   "[rule pinned-peer]\ntag = peerdata\nplace = device 1\n"
                                   "[rule striped]\nsize = 16M-17M\nplace = interleave\n",
                                   "test.conf", err, sizeof err),
             0);
    sim_start(2, 512 * MiB, no_idle_memory);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
    uintptr_t big = palloc(40 * MiB), small = palloc(8 * MiB);
    CHECK_EQ(where(big), GVM_HOST);
    CHECK_EQ(where(small), 0);
    gvm_tag_push("peerdata");
    uintptr_t pd = palloc(4096);
    gvm_tag_pop();
    CHECK_EQ(where(pd), 1);
    uintptr_t st = palloc(16 * MiB);
    CHECK_EQ(where(st), GVM_MIXED);
    gvm_info info;
    CHECK_EQ(gvm_query((void *)big, &info), GVM_OK);
    CHECK_EQ(info.device, 0);
    /* Placed by a rule is where it belongs: it is not a spill to undo. */
    CHECK_EQ(gvm_stats.spills, 0);
}

static void failure_while_spilling_keeps_data(void)
{
    gvm_log_set_level(GVM_LOG_ERROR);   /* every round logs its injected failure */
    const char *kv[] = {"device_limit", "0:64M", "spill", "host", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 8);
    fill(b, 24 * MiB, 9);
    CUcontext ctx = current_ctx();
    for (unsigned long k = 1;; k += test_sweep_step()) {
        struct leaks base = leaks_now();
        uintptr_t c = 0;
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
        CUresult rc = gvm_policy_alloc(24 * MiB, 0, ctx, 0, &c);
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(intact(a, 24 * MiB, 8) && intact(b, 24 * MiB, 9));
        if (rc == CUDA_SUCCESS && simcuda_call_count() && k > 200) break;
        if (rc == CUDA_SUCCESS) {
            CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
            /* Bring everything home again for the next round. */
            CHECK_EQ(gvm_migrate((void *)a, 0), GVM_OK);
            CHECK_EQ(gvm_migrate((void *)b, 0), GVM_OK);
            trim_all();
            if (k > 60) break;
            continue;
        }
        CHECK(rc == CUDA_ERROR_ILLEGAL_STATE || rc == CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_NO_LEAK(base);
    }
}

/* ---- the device limit holds what the device really gives ------------------ */

/* Caches and pools at their defaults: the limit must hold them too. */
static void idle_memory_default_limited(struct gvm_settings *s) { limits_from_cfg(s); }

static void start_limited_with(const char *const *kv, void (*tune)(struct gvm_settings *))
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    for (; kv && kv[0]; kv += 2) set(kv[0], kv[1]);
    sim_start(2, 512 * MiB, tune);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
}

static void start_limited(const char *const *kv) { start_limited_with(kv, idle_memory_default_limited); }

/* The limits and the piece sizes of cfg, as a run under the shim has them. */
static void blocks_limited(struct gvm_settings *s)
{
    struct gvm_settings p;
    gvm_policy_settings(&cfg, &gvm_topo, &p);
    memcpy(s->hold_limit, p.hold_limit, sizeof s->hold_limit);
    s->block_size = p.block_size;
    s->grow_block = p.grow_block;
}

/* Samples the simulated device's physical bytes while the test runs. */
struct sampler {
    int stop;
    size_t peak;
    pthread_t thread;
};

static void *sample(void *arg)
{
    struct sampler *s = arg;
    struct timespec pause = {0, 20000};
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        size_t b = simcuda_phys_bytes(0);
        if (b > s->peak) s->peak = b;
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static void sampler_start(struct sampler *s)
{
    *s = (struct sampler){0};
    CHECK_EQ(pthread_create(&s->thread, NULL, sample, s), 0);
}

static size_t sampler_stop(struct sampler *s)
{
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    pthread_join(s->thread, NULL);
    return s->peak;
}

/* Writes through an announced use, as a copy hook would: no move runs
 * under it. */
static void write_seed(uintptr_t p, size_t n, uint32_t seed)
{
    struct gvm_region *r = gvm_use_begin(p);
    fill(p, n, seed);
    gvm_use_end(r);
}

static int check_seed(uintptr_t p, size_t n, uint32_t seed)
{
    struct gvm_region *r = gvm_use_begin(p);
    int ok = intact(p, n, seed);
    gvm_use_end(r);
    return ok;
}

#define MAXBUF 16
#define LIMIT (32 * MiB)

/* Allocations, frees, touches, launch-style swap-ins and the promoter, on
 * a working set of `ratio` times the limit: the simulated device never
 * holds more than the limit, sampled all along, and no byte is lost. */
static void churn_at(double ratio, void (*tune)(struct gvm_settings *))
{
    const char *kv[] = {"device_limit", "0:32M", "spill", "host", "promote_interval", "1ms", NULL};
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    for (const char *const *p = kv; p[0]; p += 2) set(p[0], p[1]);
    sim_start(2, 512 * MiB, tune);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
    const size_t each = 4 * MiB;
    const int nbuf = (int)((double)LIMIT * ratio / (double)each);
    uintptr_t buf[MAXBUF], small[4] = {0};
    uint32_t seed[MAXBUF];
    CHECK(nbuf <= MAXBUF);
    struct sampler smp;
    sampler_start(&smp);
    for (int i = 0; i < nbuf; i++) {
        buf[i] = palloc(each);
        write_seed(buf[i], each, seed[i] = 100 + (uint32_t)i);
    }
    unsigned rnd = 12345;
    for (int step = 0; step < test_scaled(200); step++) {
        rnd = rnd * 1103515245u + 12345u;
        int i = (int)((rnd >> 8) % (unsigned)nbuf), j = (int)((rnd >> 16) % (unsigned)nbuf);
        switch ((rnd >> 24) % 4) {
        case 0:   /* free and allocate again */
            CHECK_EQ(gvm_policy_free(buf[i]), CUDA_SUCCESS);
            buf[i] = palloc(each);
            write_seed(buf[i], each, seed[i] = (uint32_t)step * 7919u);
            break;
        case 1:   /* a copy touching it */
            touch(buf[i]);
            break;
        case 2: { /* a launch reading two buffers */
            struct gvm_region *used[2] = {gvm_heap_region(buf[i]), gvm_heap_region(buf[j])};
            gvm_policy_before_launch(used, i == j ? 1 : 2);
            touch(buf[i]);
            touch(buf[j]);
            break;
        }
        default:  /* small allocations come and go */
            if (small[i % 4]) CHECK_EQ(gvm_policy_free(small[i % 4]), CUDA_SUCCESS);
            small[i % 4] = palloc(4096 << (i % 4));
            break;
        }
        CHECK(simcuda_phys_bytes(0) <= LIMIT);
    }
    size_t peak = sampler_stop(&smp);
    if (peak > LIMIT) fprintf(stderr, "sampled %zu bytes on the device, limit %zu\n", peak, LIMIT);
    CHECK(peak <= LIMIT);
    CHECK(gvm_held_peak(0) <= LIMIT);
    CHECK(gvm_stats.spills > 0);
    for (int i = 0; i < nbuf; i++) CHECK(check_seed(buf[i], each, seed[i]));
}

static void the_limit_holds_at_1_25x(void) { churn_at(1.25, idle_memory_default_limited); }
static void the_limit_holds_at_1_5x(void) { churn_at(1.5, idle_memory_default_limited); }
static void the_limit_holds_at_2x(void) { churn_at(2.0, idle_memory_default_limited); }
static void the_limit_holds_without_idle_memory(void) { churn_at(1.5, no_idle_memory_limited); }

/* Without spill, idle memory (the cache of freed regions, pooled pieces)
 * is given back first; only then does an allocation fail, as natively. */
static void spill_off_gives_idle_memory_back_then_fails(void)
{
    const char *kv[] = {"device_limit", "0:64M", NULL};
    start_limited(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 11);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);          /* kept in the cache */
    CHECK_EQ(simcuda_phys_bytes(0), 48 * MiB);
    CHECK_EQ(gvm_migrate((void *)a, GVM_HOST), GVM_OK);   /* its pieces stay pooled */
    CHECK_EQ(gvm_migrate((void *)a, 0), GVM_OK);
    uintptr_t c = palloc(36 * MiB);                        /* fits once the cache is given back */
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    uintptr_t p = 0;
    CHECK_EQ(gvm_policy_alloc(8 * MiB, 0, current_ctx(), 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(simcuda_phys_bytes(0), 60 * MiB);             /* nothing idle is left */
    CHECK(intact(a, 24 * MiB, 11));
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_alloc(8 * MiB, 0, current_ctx(), 0, &p), CUDA_SUCCESS);
}

/* Core refuses, without asking the driver, memory past the cap, whatever
 * asks for it (here the program's own gvm_migrate). */
static void the_cap_is_enforced_below_the_policy(void)
{
    const char *kv[] = {"device_limit", "0:64M", NULL};
    start_limited(kv);
    uintptr_t a = palloc(48 * MiB);
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    a = palloc(40 * MiB);
    CHECK_EQ(gvm_migrate((void *)a, GVM_HOST), GVM_OK);
    uintptr_t b = palloc(40 * MiB);
    fill(a, 40 * MiB, 12);
    unsigned long creates = simcuda_calls_of("cuMemCreate");
    CHECK_EQ(gvm_migrate((void *)a, 0), GVM_ERR_NO_MEMORY);
    CHECK(simcuda_calls_of("cuMemCreate") == creates);   /* refused before the driver */
    CHECK_EQ(where(a), GVM_HOST);
    CHECK(intact(a, 40 * MiB, 12));
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    CHECK_EQ(gvm_held_bytes(0), simcuda_phys_bytes(0));
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK_EQ(gvm_migrate((void *)a, 0), GVM_OK);
}

/* A failure anywhere in a swap-in (evictions, then the promotion) loses
 * no data, leaks nothing, and never passes the limit. */
static void failure_during_a_swap_keeps_data(void)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    const char *kv[] = {"device_limit", "0:16M", "spill", "host", "promote_interval", "3600s", NULL};
    start_limited(kv);
    struct leaks base = leaks_now();
    for (unsigned long k = 1; k < 400; k += test_sweep_step()) {
        uintptr_t a = palloc(6 * MiB), b = palloc(6 * MiB);
        fill(a, 6 * MiB, 13);
        fill(b, 6 * MiB, 14);
        touch(b);
        uintptr_t c = palloc(6 * MiB);                     /* a leaves */
        fill(c, 6 * MiB, 15);
        CHECK_EQ(where(a), GVM_HOST);
        touch(b);
        struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
        unsigned long calls = simcuda_call_count();
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
        gvm_policy_before_launch(used, 2);
        bool fired = simcuda_call_count() - calls >= k;
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        CHECK(intact(a, 6 * MiB, 13) && intact(b, 6 * MiB, 14) && intact(c, 6 * MiB, 15));
        if (!fired) CHECK(where(a) == 0 && where(b) == GVM_HOST);   /* the whole swap ran */
        CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
        CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
        CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
        CHECK_NO_LEAK(base);
        if (!fired) return;
    }
    CHECK(0);
}

/* A sweep over twice what the device holds: every swap after the first
 * brings one buffer in while another leaves at once (a margin of one
 * buffer is kept while others wait outside). Data intact, the limit held
 * at every launch, and per sweep no more moved each way than what does not
 * fit plus two buffers: the margin, and the drift of most-recently-used
 * victims (3 stay, 6 of 8 come in per sweep: measured). */
static void a_wide_sweep_swaps_both_ways_at_once(void)
{
    const char *kv[] = {"device_limit", "0:16M", "spill", "host", "promote_interval", "3600s", NULL};
    start_limited(kv);
    uintptr_t w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, 60 + i);
    }
    uint64_t before = 0;
    for (int sweep = 0; sweep < 4; sweep++) {
        if (sweep == 1) before = gvm_stats.bytes_migrated;
        for (int i = 0; i < 8; i++) {
            struct gvm_region *r = gvm_heap_region(w[i]);
            gvm_policy_before_launch(&r, 1);
            touch(w[i]);
            CHECK_EQ(where(w[i]), 0);
            CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        }
    }
    uint64_t per_sweep = (gvm_stats.bytes_migrated - before) / 3;
    if (per_sweep > 2 * (16 + 8) * MiB) fprintf(stderr, "moved %lu MiB per sweep\n", (unsigned long)(per_sweep >> 20));
    CHECK(per_sweep <= 2 * (16 + 8) * MiB);
    for (int i = 0; i < 8; i++) CHECK(intact(w[i], 4 * MiB, 60 + i));
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
}

/* One step of a training loop over n parameters, in the order PyTorch's
 * Adam (foreach) reaches them: zero the gradients, forward through the
 * weights, backward into the gradients, then the optimizer's passes over
 * moments, gradients, a temporary and the weights, each over all n. The
 * working set (5n buffers) is twice the device: each step must bring
 * buffers in, and which ones leave decides how many. */
enum { TRAIN_N = 4, TRAIN_LISTS = 5 };

/* A launch on buffer i of each list in bufs; `home`: its buffers must be
 * on the device when it runs (else a failed swap lets it read in place). */
static void train_launch(uintptr_t *const *bufs, int nb, int i, bool home)
{
    struct gvm_region *r[3] = {NULL, NULL, NULL};
    for (int k = 0; k < nb; k++) r[k] = gvm_heap_region(bufs[k][i]);
    gvm_policy_before_launch(r, nb);
    for (int k = 0; k < nb; k++) {
        touch(bufs[k][i]);
        if (home) CHECK_EQ(where(bufs[k][i]), 0);
    }
}

static void train_step_checked(uintptr_t w[][TRAIN_N], bool home)
{
    uintptr_t *W = w[0], *G = w[1], *M = w[2], *V = w[3], *D = w[4];
    uintptr_t *zero[] = {G}, *fwd[] = {W}, *lerp[] = {M, G}, *mul[] = {V}, *addcmul[] = {V, G}, *sqrt_[] = {V, D},
              *div[] = {D}, *addcdiv[] = {W, M, D};
    struct pass {
        uintptr_t *const *b;
        int nb;
    } passes[] = {{zero, 1}, {fwd, 1}, {lerp, 2}, {mul, 1}, {addcmul, 2}, {sqrt_, 2}, {div, 1}, {div, 1}, {addcdiv, 3}};
    for (size_t p = 0; p < sizeof passes / sizeof *passes; p++)
        for (int i = 0; i < TRAIN_N; i++) train_launch(passes[p].b, passes[p].nb, i, home);
    for (int i = TRAIN_N - 1; i >= 0; i--) {   /* backward, last layer first */
        uintptr_t *bwd[] = {G};
        train_launch(bwd, 1, i, home);
    }
}

static void train_step(uintptr_t w[][TRAIN_N]) { train_step_checked(w, true); }

enum train_learning { LEARN, LEARN_OFF, LEARN_OFF_LIVE };

/* Moved bytes per step of that loop, after two steps to learn it; with
 * learn_loop off from the start, or turned off (gvmctl set) after those
 * two steps. */
static uint64_t train_moved_per_step(enum train_learning how)
{
    const char *kv[] = {"device_limit", "0:20M", "spill", "host", "promote_interval", "3600s",
                        "learn_loop", how == LEARN_OFF ? "0" : "1", NULL};
    start_limited(kv);
    uintptr_t w[TRAIN_LISTS][TRAIN_N];
    for (int l = 0; l < TRAIN_LISTS; l++)
        for (int i = 0; i < TRAIN_N; i++) {
            w[l][i] = palloc(2 * MiB);
            fill(w[l][i], 2 * MiB, (uint8_t)(80 + l * TRAIN_N + i));
        }
    uint64_t before = 0;
    for (int step = 0; step < 5; step++) {
        if (step == 2 && how == LEARN_OFF_LIVE) {
            CHECK(gvm_recur_period() != 0);
            char *off[] = {"learn_loop=0"};
            FILE *quiet = fopen("/dev/null", "w");
            CHECK_EQ(gvm_policy_set(off, 1, quiet), GVM_OK);
            fclose(quiet);
        }
        if (step == 2) before = gvm_stats.bytes_migrated;
        train_step(w);
        CHECK(simcuda_phys_bytes(0) <= 20 * MiB);
    }
    if (how == LEARN_OFF) CHECK_EQ(gvm_recur_period(), 0u);
    if (how == LEARN) CHECK(gvm_recur_period() != 0);
    for (int l = 0; l < TRAIN_LISTS; l++)
        for (int i = 0; i < TRAIN_N; i++) {
            CHECK(intact(w[l][i], 2 * MiB, (uint8_t)(80 + l * TRAIN_N + i)));
            CHECK_EQ(gvm_policy_free(w[l][i]), CUDA_SUCCESS);
        }
    return (gvm_stats.bytes_migrated - before) / 3;
}

/* Learned, the loop's victims are those needed furthest ahead: it moves
 * far less than the recency order does (which evicts, in the optimizer's
 * passes, what the next pass needs first), and no more than the best
 * possible choice: an offline replay of this step (Belady, with one
 * buffer's room kept for the next swap, as the swap keeps it) moves 38
 * buffers of 2 MiB a step. */
static uint64_t train_moved_in_a_child(enum train_learning how)
{
    /* Each measurement starts its own policy (and promoter thread): in a
     * process of its own, as every case does. */
    int fd[2];
    CHECK_EQ(pipe(fd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t moved = train_moved_per_step(how);
        _exit(write(fd[1], &moved, sizeof moved) == sizeof moved ? 0 : 1);
    }
    uint64_t moved = UINT64_MAX;
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(read(fd[0], &moved, sizeof moved), (ssize_t)sizeof moved);
    close(fd[0]);
    close(fd[1]);
    return moved;
}

static void a_training_loop_is_learned(void)
{
    uint64_t recency = train_moved_in_a_child(LEARN_OFF), learned = train_moved_in_a_child(LEARN);
    fprintf(stderr, "moved per step: %lu MiB by recency, %lu MiB learned\n", (unsigned long)(recency >> 20),
            (unsigned long)(learned >> 20));
    CHECK(learned * 4 <= recency * 3);
    CHECK(learned <= 38 * 2 * MiB);
}

/* gvmctl set learn_loop=0 in a running process: from then on, the
 * recency order (the loop stays as it was; what leaves changes). */
static void learning_turned_off_live_keeps_the_recency_order(void)
{
    uint64_t learned = train_moved_in_a_child(LEARN), off = train_moved_in_a_child(LEARN_OFF_LIVE);
    fprintf(stderr, "moved per step: %lu MiB learned, %lu MiB after learn_loop=0\n", (unsigned long)(learned >> 20),
            (unsigned long)(off >> 20));
    CHECK(off * 3 >= learned * 4);
}

/* A driver call failing anywhere in a step of a learned loop (in the
 * swaps that bring buffers in and send the furthest-needed out): every
 * buffer keeps its data, the device never holds more than its limit, the
 * loop stays learned, and once freed nothing leaks. Every 7th call of a
 * step is failed in turn (a step makes a few hundred). */
static void failure_during_a_learned_step_keeps_data(void)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    const char *kv[] = {"device_limit", "0:20M", "spill", "host", "promote_interval", "3600s", NULL};
    start_limited(kv);
    struct leaks base = leaks_now();
    uintptr_t w[TRAIN_LISTS][TRAIN_N];
    for (int l = 0; l < TRAIN_LISTS; l++)
        for (int i = 0; i < TRAIN_N; i++) {
            w[l][i] = palloc(2 * MiB);
            fill(w[l][i], 2 * MiB, (uint8_t)(100 + l * TRAIN_N + i));
        }
    for (int step = 0; step < 3; step++) train_step(w);
    CHECK(gvm_recur_period() != 0);
    bool fired = true;
    unsigned long k = 1;
    for (; fired; k += 7) {
        unsigned long calls = simcuda_call_count();
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
        train_step_checked(w, false);
        fired = simcuda_call_count() - calls >= k;
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(simcuda_phys_bytes(0) <= 20 * MiB);
        CHECK(gvm_recur_period() != 0);
        for (int l = 0; l < TRAIN_LISTS; l++)
            for (int i = 0; i < TRAIN_N; i++) CHECK(intact(w[l][i], 2 * MiB, (uint8_t)(100 + l * TRAIN_N + i)));
    }
    CHECK(k > 100);   /* the failures reached deep into the step, not just its start */
    for (int l = 0; l < TRAIN_LISTS; l++)
        for (int i = 0; i < TRAIN_N; i++) CHECK_EQ(gvm_policy_free(w[l][i]), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

/* Once the limit is raised (gvmctl set), launches that reach spilled data
 * bring it back without sending other data out: the device fills up to
 * what the job uses, not to the old limit. */
static void a_raised_limit_lets_spilled_data_back(void)
{
    const char *kv[] = {"device_limit", "0:16M", "spill", "host", "promote_interval", "3600s", NULL};
    start_limited(kv);
    uintptr_t w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, 90 + i);
    }
    for (int i = 0; i < 8; i++) {
        struct gvm_region *r = gvm_heap_region(w[i]);
        gvm_policy_before_launch(&r, 1);
        touch(w[i]);
    }
    char *raise[] = {"device_limit=0:64M"};
    FILE *quiet = fopen("/dev/null", "w");
    CHECK_EQ(gvm_policy_set(raise, 1, quiet), GVM_OK);
    fclose(quiet);
    uint64_t spills = gvm_stats.spills;
    for (int i = 0; i < 8; i++) {
        struct gvm_region *r = gvm_heap_region(w[i]);
        gvm_policy_before_launch(&r, 1);
        touch(w[i]);
    }
    CHECK_EQ(gvm_stats.spills, spills);
    for (int i = 0; i < 8; i++) CHECK_EQ(where(w[i]), 0);
    for (int i = 0; i < 8; i++) CHECK(intact(w[i], 4 * MiB, 90 + i));
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
}

/* A swap never waits for a victim that a call in flight has announced:
 * that call may be waiting for the incoming region, which the swap holds
 * (the stress test hung so: a copy from a victim into the incoming
 * region). The victim is left where it is; the incoming region comes in. */
static void a_swap_skips_a_victim_in_use(void)
{
    const char *kv[] = {"device_limit", "0:16M", "spill", "host", "promote_interval", "3600s", NULL};
    start_limited(kv);
    uintptr_t w[6];
    for (int i = 0; i < 6; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, 100 + i);
        touch(w[i]);
    }
    CHECK_EQ(where(w[0]), GVM_HOST);
    CHECK_EQ(where(w[1]), GVM_HOST);
    CHECK_EQ(gvm_policy_free(w[2]), CUDA_SUCCESS);   /* room for one */
    gvm_heap_trim(0);
    struct gvm_region *busy = gvm_use_begin(w[5]);    /* the most recent: the victim */
    struct gvm_region *r = gvm_heap_region(w[0]);
    gvm_policy_before_launch(&r, 1);
    gvm_use_end(busy);
    CHECK_EQ(where(w[0]), 0);
    CHECK_EQ(where(w[5]), 0);
    CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
    for (int i = 0; i < 6; i++)
        if (i != 2) CHECK(intact(w[i], 4 * MiB, 100 + (uint32_t)i));
}


/* ---- spill_host_map=lazy ---------------------------------------------- */

/* What a copy hook does with the memory it reaches (preload/shim.h): lazily
 * spilled memory is mapped first. */
static void use_mapped(uintptr_t p)
{
    uint64_t tick = 0;
    struct gvm_region *r = gvm_use_begin(p);
    if (r && gvm_policy_unmapped(r)) r = gvm_policy_use_mapped(r, &tick);
    gvm_use_end(r);
}

/* Checks p's contents the way a program can: through a call that reaches
 * it (lazily spilled memory is mapped for it). */
static int intact_used(uintptr_t p, size_t n, uint32_t seed)
{
    use_mapped(p);
    return simcuda_location_of(p) != SIMCUDA_LOC_UNMAPPED && intact(p, n, seed);
}

static const char *const lazy_kv[] = {"device_limit", "0:64M", "spill", "host", "spill_host_map", "lazy",
                                      "promote_interval", "3600s", NULL};

/* A lazily spilled region whose copy is in registered pages, which have
 * no handle to map: a call reaching it maps created pages holding the
 * same bytes in place, and the registered ones go back to the pool; while
 * that copy fails, the region stays spilled, intact, and the next call
 * maps it. */
static void registered_pages_of_a_lazy_spill_map_in_place(void)
{
    start_policy(lazy_kv);
    struct leaks base = leaks_now();
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 21);
    fill(b, 24 * MiB, 22);
    touch(b);
    uintptr_t c = palloc(24 * MiB);          /* a leaves, into registered pages */
    fill(c, 24 * MiB, 23);
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_registered_bytes() - base.registered, 24 * MiB);
    size_t host0 = simcuda_phys_bytes(SIMCUDA_LOC_HOST);
    simcuda_fail_calls("cuStreamSynchronize", 1, 1000, CUDA_ERROR_LAUNCH_FAILED);
    use_mapped(a);
    simcuda_fail_calls("cuStreamSynchronize", 0, 0, CUDA_SUCCESS);
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(where(a), GVM_HOST);
    use_mapped(a);
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_HOST);
    CHECK_EQ(simcuda_phys_bytes(SIMCUDA_LOC_HOST) - host0, 24 * MiB);
    CHECK(intact(a, 24 * MiB, 21) && intact(b, 24 * MiB, 22) && intact(c, 24 * MiB, 23));
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

/* A lazy spill gives the device memory back and leaves the range unmapped;
 * a launch brings the data back, a copy maps it where it is. */
static void a_lazy_spill_leaves_the_range_unmapped(void)
{
    start_policy(lazy_kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    touch(b);
    uintptr_t c = palloc(24 * MiB);          /* a leaves */
    fill(c, 24 * MiB, 3);
    gvm_info info;
    CHECK_EQ(gvm_query((void *)a, &info), GVM_OK);
    CHECK_EQ(info.location, GVM_HOST);
    CHECK_EQ(info.bytes_on_host, 24 * MiB);
    CHECK_EQ(info.bytes_on_device, 0);
    CHECK(!info.paused);
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_UNMAPPED);
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    CHECK_EQ(gvm_stats.spills, 1);
    CHECK_EQ(gvm_stats.migrations_d2h, 1);   /* a move like any other, in the counters */
    CHECK_EQ(gvm_stats.bytes_migrated, 24 * MiB);
    touch(b);
    struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
    gvm_policy_before_launch(used, 2);       /* a comes in, b leaves (lazily too) */
    CHECK_EQ(simcuda_location_of(a), 0);
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(simcuda_location_of(b), SIMCUDA_LOC_UNMAPPED);
    CHECK(intact(a, 24 * MiB, 1) && intact(c, 24 * MiB, 3));
    CHECK_EQ(gvm_stats.promotions, 1);
    CHECK_EQ(gvm_stats.migrations_h2d, 1);
    CHECK_EQ(gvm_stats.bytes_migrated, 72 * MiB);
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    /* A copy reaching b: mapped in place, on host, the device untouched. */
    use_mapped(b);
    CHECK_EQ(simcuda_location_of(b), SIMCUDA_LOC_HOST);
    CHECK_EQ(where(b), GVM_HOST);
    CHECK(intact(b, 24 * MiB, 2));
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    /* Spilled and mapped, it still comes back like any spilled data. */
    struct gvm_region *rb = gvm_heap_region(b);
    gvm_policy_before_launch(&rb, 1);
    CHECK_EQ(where(b), 0);
    CHECK(intact(b, 24 * MiB, 2));
}

/* A launch whose reach is not known (a graph, arguments not all scanned)
 * finds every lazily spilled region mapped; paused memory stays off. */
static void unknown_reach_maps_every_lazy_spill(void)
{
    start_policy(lazy_kv);
    CHECK_EQ(gvm_tag_push("kv"), GVM_OK);
    uintptr_t k = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(k, 8 * MiB, 9);
    CHECK_EQ(gvm_pause("kv", GVM_PAUSE_UNMAPPED), GVM_OK);
    uintptr_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = palloc(24 * MiB);
        fill(w[i], 24 * MiB, 20 + (uint32_t)i);
        touch(w[i]);
    }
    CHECK_EQ(simcuda_location_of(w[0]), SIMCUDA_LOC_UNMAPPED);
    gvm_policy_map_spilled();
    for (int i = 0; i < 4; i++) CHECK(simcuda_location_of(w[i]) != SIMCUDA_LOC_UNMAPPED);
    for (int i = 0; i < 4; i++) CHECK(intact(w[i], 24 * MiB, 20 + (uint32_t)i));
    CHECK_EQ(simcuda_location_of(k), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);   /* the paused one is none */
    CHECK_EQ(gvm_resume("kv"), GVM_OK);
    CHECK(intact(k, 8 * MiB, 9));
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
}

/* While a call of unknown reach is being issued (the hold), spills leave
 * nothing unmapped: a swap-in's victim goes to host mapped, the incoming
 * region comes from its shelf all the same; the data and the limit hold.
 * Released, spills are lazy again. */
static void held_spills_leave_nothing_unmapped(void)
{
    start_policy(lazy_kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 31);
    fill(b, 24 * MiB, 32);
    touch(b);
    uintptr_t c = palloc(24 * MiB);          /* a leaves, lazily */
    fill(c, 24 * MiB, 33);
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_UNMAPPED);
    touch(b);
    gvm_relocate_hold_unmapped(true);
    struct gvm_region *used[2] = {gvm_heap_region(a), gvm_heap_region(c)};
    gvm_policy_before_launch(used, 2);       /* a comes in, b leaves, mapped */
    CHECK_EQ(where(a), 0);
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(simcuda_location_of(b), SIMCUDA_LOC_HOST);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    gvm_relocate_hold_unmapped(false);
    struct gvm_region *rb = gvm_heap_region(b);
    gvm_policy_before_launch(&rb, 1);        /* b comes in, another leaves lazily */
    CHECK_EQ(where(b), 0);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 1u);
    CHECK(intact_used(a, 24 * MiB, 31) && intact_used(b, 24 * MiB, 32) && intact_used(c, 24 * MiB, 33));
    CHECK(simcuda_phys_bytes(0) <= 64 * MiB);
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
}

/* Operations on a lazily spilled allocation: an alias shows its data (it
 * is mapped first), a pause keeps or discards it, a free releases it. */
static void operations_on_lazily_spilled_memory(void)
{
    start_policy(lazy_kv);
    struct leaks base = leaks_now();
    int64_t host0 = gvm_stats.resident[GVM_MAX_DEVICES];
    uintptr_t x = palloc(24 * MiB);
    CHECK_EQ(gvm_tag_push("t"), GVM_OK);
    uintptr_t a = palloc(24 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(x, 24 * MiB, 30);
    fill(a, 24 * MiB, 31);
    touch(a);
    uintptr_t b = palloc(24 * MiB);          /* x leaves */
    touch(b);
    uintptr_t c = palloc(24 * MiB);          /* a leaves */
    CHECK_EQ(simcuda_location_of(x), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(gvm_stats.resident[GVM_MAX_DEVICES], host0 + (int64_t)(48 * MiB));
    void *alias = NULL;
    CHECK_EQ(gvm_alias((void *)x, &alias), GVM_OK);
    CHECK(intact((uintptr_t)alias, 24 * MiB, 30) && intact(x, 24 * MiB, 30));
    CHECK_EQ(gvm_unalias(alias), GVM_OK);
    CHECK_EQ(gvm_pause("t", 0), GVM_OK);    /* keeps its copy readable: mapped */
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_HOST);
    CHECK(intact(a, 24 * MiB, 31));
    CHECK_EQ(gvm_stats.resident[GVM_MAX_DEVICES], host0 + (int64_t)(48 * MiB));
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
    CHECK_EQ(gvm_resume("t"), GVM_OK);
    CHECK_EQ(where(a), 0);
    CHECK(intact(a, 24 * MiB, 31));
    CHECK_EQ(gvm_policy_free(x), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK_EQ(gvm_stats.resident[GVM_MAX_DEVICES], host0);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);
    CHECK_NO_LEAK(base);
}

/* A lazily spilled allocation freed: its host memory goes, nothing leaks. */
static void freeing_lazily_spilled_memory_releases_it(void)
{
    start_policy(lazy_kv);
    struct leaks base = leaks_now();
    int64_t host0 = gvm_stats.resident[GVM_MAX_DEVICES];
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    touch(b);
    uintptr_t c = palloc(24 * MiB);          /* a leaves */
    CHECK_EQ(simcuda_location_of(a), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_stats.resident[GVM_MAX_DEVICES], host0);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(c), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

/* A driver call failing anywhere in a two-way swap, and (lazy) in mapping a
 * lazily spilled region in place: every buffer keeps its data, the device
 * never holds more than its limit, nothing leaks. `hand_off`: buffers of
 * two 2 MiB blocks under an 8 MiB limit, one of which fits beside a
 * one-block margin, so the region leaving hands a block to the one coming
 * in mid-swap (and a failure after that puts handed blocks back from
 * host). */
static void two_way_swap_failures(bool lazy, bool hand_off)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    const char *kv[] = {"device_limit", hand_off ? "0:8M" : "0:16M", "spill", "host", "promote_interval", "3600s",
                        "block_size", hand_off ? "2M" : "64M", "spill_host_map", lazy ? "lazy" : "eager", NULL};
    const size_t limit = hand_off ? 8 * MiB : 16 * MiB, size = 4 * MiB;
    const int n = hand_off ? 4 : 6;
    start_limited_with(kv, hand_off ? blocks_limited : idle_memory_default_limited);
    struct leaks base = leaks_now();
    for (unsigned long k = 1; k < 600; k += test_sweep_step()) {
        uintptr_t w[6];
        for (int i = 0; i < n; i++) {
            w[i] = palloc(size);
            fill(w[i], size, 70 + i);
            touch(w[i]);
        }
        CHECK_EQ(where(w[0]), GVM_HOST);
        CHECK_EQ(where(w[1]), GVM_HOST);
        if (lazy) CHECK_EQ(simcuda_location_of(w[0]), SIMCUDA_LOC_UNMAPPED);
        struct gvm_region *r = gvm_heap_region(w[0]);
        unsigned long calls = simcuda_call_count();
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
        gvm_policy_before_launch(&r, 1);
        bool fired = simcuda_call_count() - calls >= k;
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(simcuda_phys_bytes(0) <= limit);
        if (!fired) CHECK(where(w[0]) == 0);   /* the whole swap ran */
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
        use_mapped(w[1]);   /* lazy: mapping it in place fails at call k, then succeeds */
        simcuda_fail_nth(0, CUDA_SUCCESS);
        for (int i = 0; i < n; i++) CHECK(intact_used(w[i], size, 70 + (uint32_t)i));
        CHECK(simcuda_phys_bytes(0) <= limit);
        for (int i = 0; i < n; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
        CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);
        CHECK_NO_LEAK(base);
        if (!fired) return;
    }
    CHECK(0);
}

static void failure_during_a_two_way_swap_keeps_data(void) { two_way_swap_failures(false, false); }
static void failure_during_a_lazy_swap_keeps_data(void) { two_way_swap_failures(true, false); }
static void failure_during_a_hand_off_keeps_data(void) { two_way_swap_failures(true, true); }

/* Five buffers of three 2 MiB blocks under a 16 MiB limit with lazy
 * spills: two fit beside a one-block margin, so each swap hands blocks
 * over. Filled from seed; `touch`ed in order when asked. *base: the
 * driver's objects before them. */
static void start_hand_off(uintptr_t *w, uint32_t seed, bool touched, struct leaks *base)
{
    const char *kv[] = {"device_limit", "0:16M", "spill", "host", "spill_host_map", "lazy", "block_size", "2M",
                        "promote_interval", "3600s", NULL};
    start_limited_with(kv, blocks_limited);
    *base = leaks_now();
    for (int i = 0; i < 5; i++) {
        w[i] = palloc(6 * MiB);
        fill(w[i], 6 * MiB, seed + (uint32_t)i);
        if (touched) touch(w[i]);
    }
}

/* The end of every case begun with start_hand_off: each buffer keeps its
 * data (seed + i), the limit held, no lazy spill left once they are
 * freed, nothing leaked. */
static void end_hand_off(const uintptr_t *w, uint32_t seed, struct leaks base)
{
    for (int i = 0; i < 5; i++) CHECK(intact_used(w[i], 6 * MiB, seed + (uint32_t)i));
    CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
    for (int i = 0; i < 5; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);
    CHECK_NO_LEAK(base);
}

/* A swap whose put fails after handing blocks off: the first handed block
 * cannot get its copy back into device memory either (its copy fails too),
 * so its host piece is mapped in place; the other gets fresh device memory.
 * Every buffer keeps its data at its addresses, the limit holds, nothing
 * leaks. */
static void a_failed_hand_off_puts_blocks_back(void)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 170, true, &base);
    CHECK_EQ(simcuda_location_of(w[0]), SIMCUDA_LOC_UNMAPPED);
    struct gvm_region *r = gvm_heap_region(w[0]);
    /* The put's wait, then the first restore's copy. */
    simcuda_fail_calls("cuStreamSynchronize", 1, 2, CUDA_ERROR_LAUNCH_FAILED);
    gvm_policy_before_launch(&r, 1);
    simcuda_fail_calls("cuStreamSynchronize", 0, 0, CUDA_SUCCESS);
    CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
    int mixed = 0;
    for (int i = 0; i < 5; i++) mixed += where(w[i]) == GVM_MIXED;
    CHECK_EQ(mixed, 1);
    end_hand_off(w, 170, base);
}

/* A lazy swap whose victims are all in use (announced by calls still
 * running) cannot take their memory: the incoming buffer stays on host,
 * where the call reaching it maps it; the busy ones stay put, the limit
 * holds, every buffer keeps its data, nothing leaks. */
static void a_lazy_swap_with_busy_victims_leaves_the_data_on_host(void)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 190, true, &base);
    CHECK_EQ(simcuda_location_of(w[0]), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(simcuda_location_of(w[3]), 0);
    CHECK_EQ(simcuda_location_of(w[4]), 0);
    struct gvm_region *busy3 = gvm_use_begin(w[3]), *busy4 = gvm_use_begin(w[4]);
    struct gvm_region *r = gvm_heap_region(w[0]);
    gvm_policy_before_launch(&r, 1);
    CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
    CHECK_EQ(simcuda_location_of(w[3]), 0);
    CHECK_EQ(simcuda_location_of(w[4]), 0);
    CHECK(intact_used(w[0], 6 * MiB, 190));   /* on host, mapped for the call */
    gvm_use_end(busy3);
    gvm_use_end(busy4);
    end_hand_off(w, 190, base);
}

/* A lazy sweep keeps a margin of one block, not of one buffer: the buffers
 * leaving hand their blocks to the one coming in as their copies finish.
 * Buffers of three 2 MiB blocks under a 16M limit: two stay on the device
 * beside the 2 MiB margin at every launch (with a whole buffer's margin
 * one would), the limit holds, the data survives, nothing leaks. */
static void a_lazy_swap_needs_room_for_one_block(void)
{
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 150, false, &base);
    uint64_t handed = gvm_stats.swap_handoffs;
    for (int sweep = 0; sweep < 4; sweep++) {
        for (int i = 0; i < 5; i++) {
            struct gvm_region *r = gvm_heap_region(w[i]);
            gvm_policy_before_launch(&r, 1);
            touch(w[i]);
            CHECK_EQ(simcuda_location_of(w[i]), 0);
            CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
            int resident = 0;
            for (int j = 0; j < 5; j++) resident += simcuda_location_of(w[j]) == 0;
            if (sweep > 0) CHECK_EQ(resident, 2);
        }
    }
    CHECK(gvm_stats.swap_handoffs > handed);   /* what GVM_STATS shows */
    end_hand_off(w, 150, base);
}

/* ---- per-region completion (core/usemark.h) -------------------------------- */

/* A launch on w[i] as the hook makes it, its use recorded after it on the
 * legacy stream. */
static int recorded_launch(const uintptr_t *w, int i)
{
    struct gvm_region *r = gvm_heap_region(w[i]);
    gvm_policy_before_launch(&r, 1);
    gvm_use_regions(&r, 1);
    uint64_t tick = 0;
    if (GVM_LOAD(r->shelf_spill)) r = gvm_policy_use_mapped(r, &tick);   /* not brought in: read where it is */
    touch(w[i]);
    int at = simcuda_location_of(w[i]);
    CHECK(at != SIMCUDA_LOC_UNMAPPED);
    if (gvm_usemark_on()) gvm_usemark_launch(&r, 1, NULL, false);
    gvm_use_end(r);
    return at;
}

/* Returns how many launches found their buffer on the device. */
static int recorded_sweeps(const uintptr_t *w, int sweeps)
{
    int found = 0;
    for (int sweep = 0; sweep < sweeps; sweep++)
        for (int i = 0; i < 5; i++) {
            found += recorded_launch(w, i) == 0;
            CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        }
    return found;
}

static unsigned long device_waits(void) { return simcuda_calls_of("cuCtxSynchronize"); }

/* Once the first lazy swap has waited for the device (and started the
 * recording), a sweep whose launches all recorded their uses swaps at
 * every launch without one device-wide wait: each swap waits for the
 * events of the regions it moves. */
static void lazy_swaps_wait_for_the_last_uses_of_their_regions(void)
{
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 180, false, &base);
    recorded_sweeps(w, 1);
    CHECK(gvm_usemark_on());
    uint64_t waits = gvm_stats.use_waits, spills = gvm_stats.spills;
    unsigned long whole = device_waits(), events = simcuda_calls_of("cuEventSynchronize");
    CHECK_EQ(recorded_sweeps(w, 3), 15);
    CHECK(gvm_stats.spills >= spills + 9);       /* three swaps a sweep at least */
    CHECK(gvm_stats.use_waits >= waits + 9);     /* what GVM_STATS shows */
    CHECK_EQ(device_waits(), whole);
    CHECK(simcuda_calls_of("cuEventSynchronize") > events);
    end_hand_off(w, 180, base);
}

/* A use with no event (a copy, a captured launch) makes the next swap of
 * that region wait for the devices, and so does work that may reach any
 * region (a graph, a launch not scanned whole); once a whole wait has
 * covered them, swaps wait for events again. */
static void a_use_without_an_event_makes_the_swap_wait_for_the_devices(void)
{
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 190, false, &base);
    recorded_sweeps(w, 2);
    for (int round = 0; round < 2; round++) {
        if (round == 0)
            for (int i = 0; i < 5; i++) gvm_usemark_unknown(gvm_heap_region(w[i]));
        else
            gvm_usemark_untracked("a test");
        unsigned long whole = device_waits();
        recorded_launch(w, 0);
        recorded_launch(w, 1);
        CHECK(device_waits() > whole);
        whole = device_waits();
        recorded_sweeps(w, 1);
        CHECK_EQ(device_waits(), whole);
    }
    end_hand_off(w, 190, base);
}

/* Each region used on three streams: with the earlier streams' work done,
 * the third takes a slot whose event has completed and swaps still wait
 * for events; with that work still queued (cuEventQuery: not ready), the
 * use cannot be recorded and the next swap waits for the devices. */
static void a_third_stream_busy_makes_the_swap_wait_for_the_devices(void)
{
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 230, false, &base);
    recorded_sweeps(w, 2);   /* each region's first slot: the legacy stream */
    CUstream s[4];
    for (int k = 0; k < 4; k++) CHECK_EQ(cuStreamCreate(&s[k], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int busy = 0; busy < 2; busy++) {
        if (busy) simcuda_fail_calls("cuEventQuery", 1, 1000, CUDA_ERROR_NOT_READY);
        for (int i = 0; i < 5; i++) {
            struct gvm_region *r = gvm_heap_region(w[i]);
            for (int k = 0; k < 2; k++) gvm_usemark_launch(&r, 1, s[2 * busy + k], false);   /* streams new to it */
        }
        simcuda_fail_calls("cuEventQuery", 0, 0, CUDA_SUCCESS);
        unsigned long whole = device_waits();
        recorded_sweeps(w, 1);
        if (busy)
            CHECK(device_waits() > whole);
        else
            CHECK_EQ(device_waits(), whole);
    }
    for (int k = 0; k < 4; k++) CHECK_EQ(cuStreamDestroy_v2(s[k]), CUDA_SUCCESS);
    end_hand_off(w, 230, base);
}

static void *launch_on_own_stream(void *r)
{
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(test_ctx), CUDA_SUCCESS);
    struct gvm_region *rr = r;
    gvm_usemark_launch(&rr, 1, NULL, true);   /* cuLaunchKernel_ptsz on the default stream */
    return NULL;
}

/* The per-thread default stream is one handle for as many streams as
 * threads: launches of two threads on it are two streams, and a region
 * whose slots are all busy with other streams cannot record a third. */
static void per_thread_streams_of_two_threads_are_two_streams(void)
{
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, 240, false, &base);
    recorded_sweeps(w, 1);   /* the first slot: the legacy stream */
    test_ctx = current_ctx();
    struct gvm_region *r = gvm_heap_region(w[0]);
    simcuda_fail_calls("cuEventQuery", 1, 1000, CUDA_ERROR_NOT_READY);   /* every stream's work still queued */
    for (int t = 0; t < 2; t++) {
        pthread_t th;
        CHECK_EQ(pthread_create(&th, NULL, launch_on_own_stream, r), 0);
        pthread_join(th, NULL);
        CHECK_EQ(GVM_LOAD(r->usemark.unknown) != 0, t == 1);   /* the second thread's stream finds no slot */
    }
    simcuda_fail_calls("cuEventQuery", 0, 0, CUDA_SUCCESS);
    end_hand_off(w, 240, base);
}

/* An event call failing for two sweeps: a use whose event cannot be made
 * or recorded, or an event wait that fails, ends in a wait for the
 * devices; the data, the limit and the driver's objects are as without
 * the failure. */
static void an_event_call_fails(const char *call, uint32_t seed)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    uintptr_t w[5];
    struct leaks base;
    start_hand_off(w, seed, false, &base);
    if (strcmp(call, "cuEventCreate")) recorded_sweeps(w, 1);   /* events made: the next calls record or wait */
    simcuda_fail_calls(call, 1, 1000, CUDA_ERROR_LAUNCH_FAILED);
    unsigned long whole = device_waits();
    recorded_sweeps(w, 2);
    simcuda_fail_calls(call, 0, 0, CUDA_SUCCESS);
    CHECK(device_waits() > whole);
    end_hand_off(w, seed, base);
}

static void a_failed_event_create_falls_back_to_a_device_wait(void) { an_event_call_fails("cuEventCreate", 200); }
static void a_failed_event_record_falls_back_to_a_device_wait(void) { an_event_call_fails("cuEventRecord", 210); }
static void a_failed_event_wait_falls_back_to_a_device_wait(void) { an_event_call_fails("cuEventSynchronize", 220); }

/* ---- prefetch ------------------------------------------------------------- */

static const char *const prefetch_kv[] = {"device_limit", "0:16M", "spill", "host", "spill_host_map", "lazy",
                                          "prefetch", "1", "prefetch_trial", "0",
                                          "promote_interval", "3600s", NULL};

/* One launch on w[i] as the launch hook makes it: the policy first, then
 * the region announced (where it is then is where the kernel reads it:
 * returned), then the policy after the launch; the prefetch thread's swap
 * is let finish, so what it did is seen before the next launch (a program
 * does not wait). */
static int sweep_launch(const uintptr_t *w, int i)
{
    struct gvm_region *r = gvm_heap_region(w[i]);
    gvm_policy_before_launch(&r, 1);
    touch(w[i]);
    int at = simcuda_location_of(w[i]);
    gvm_prefetch_after(&r, 1);
    gvm_prefetch_drain();
    return at;
}

/* A sweep over twice what fits: once the loop is learned, after each
 * launch the thread swaps in the buffer the sweep needs next, so every
 * launch finds its buffer on the device; the data survives and the device
 * never holds more than its limit. */
static void prefetch_swaps_in_what_the_sweep_needs_next(void)
{
    start_limited(prefetch_kv);
    struct leaks base = leaks_now();
    uintptr_t w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, 90 + (uint32_t)i);
    }
    int found = 0, launches = 0;
    uint64_t before = 0;
    for (int sweep = 0; sweep < 10; sweep++) {   /* the loop is learned in the 6th */
        if (sweep == 6) before = gvm_stats.bytes_migrated;
        for (int i = 0; i < 8; i++) {
            if (sweep >= 6) {
                found += simcuda_location_of(w[i]) == 0;
                launches++;
            }
            CHECK_EQ(sweep_launch(w, i), 0);
            CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        }
    }
    CHECK(gvm_stats.prefetches > 0);
    CHECK_EQ(found, launches);   /* once learned, every launch finds its buffer on the device */
    /* The price of looking ahead on a device this full: each launch swaps
     * (8 a sweep, where swapping on demand needs 6 and Belady 5.8), since
     * what leaves early is the weight just read, not the one Belady sends
     * out when the next is needed. */
    uint64_t per_sweep = (gvm_stats.bytes_migrated - before) / 4;
    CHECK(per_sweep <= 2 * 8 * 4 * MiB);
    for (int i = 0; i < 8; i++) CHECK(intact_used(w[i], 4 * MiB, 90 + (uint32_t)i));
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

/* Launches on regions at a..a+n as the hook makes them (see sweep_launch). */
static void launch_on(const uintptr_t *a, int n)
{
    struct gvm_region *r[4];
    for (int i = 0; i < n; i++) r[i] = gvm_heap_region(a[i]);
    gvm_policy_before_launch(r, n);
    for (int i = 0; i < n; i++) touch(a[i]);
    gvm_prefetch_after(r, n);
    gvm_prefetch_drain();
}

/* The read loop as PyTorch launches it: per weight, two kernels on the
 * weight and a shared output chunk, two on the chunk alone. The thread
 * brings the weights in ahead and never sends the chunk out (in use every
 * other launch: on an H100, before runs of uses were told apart, a
 * prefetch sent such chunks out after each launch and they came straight
 * back, 2026-11-26); the data survives and the limit holds. */
static void prefetch_keeps_what_every_launch_shares(void)
{
    start_limited(prefetch_kv);
    struct leaks base = leaks_now();
    uintptr_t w[8], chunk = palloc(2 * MiB);
    fill(chunk, 2 * MiB, 7);
    for (int i = 0; i < 8; i++) {
        w[i] = palloc(3 * MiB);
        fill(w[i], 3 * MiB, 110 + (uint32_t)i);
    }
    int found = 0, launches = 0;
    uint64_t prefetched = 0;
    for (int sweep = 0; sweep < 12; sweep++) {
        if (sweep == 8) prefetched = gvm_stats.prefetches;
        for (int i = 0; i < 8; i++) {
            uintptr_t both[2] = {w[i], chunk};
            if (sweep >= 8) {
                found += simcuda_location_of(w[i]) == 0;
                launches++;
                CHECK_EQ(simcuda_location_of(chunk), 0);
            }
            for (int k = 0; k < 2; k++) launch_on(both, 2);
            for (int k = 0; k < 2; k++) launch_on(&chunk, 1);
            CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        }
    }
    CHECK_EQ(gvm_recur_period(), 32u);
    CHECK(gvm_stats.prefetches > prefetched);
    CHECK_EQ(found, launches);
    CHECK(intact_used(chunk, 2 * MiB, 7));
    for (int i = 0; i < 8; i++) CHECK(intact_used(w[i], 3 * MiB, 110 + (uint32_t)i));
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(chunk), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

/* The thread is not used when spilled memory stays mapped (the default
 * spill_host_map), nor with prefetch off; turned on live (gvmctl set), it
 * starts at the next launch. Eight sweeps each: the loop is learned. */
static void prefetch_needs_lazy_spills(void)
{
    const char *kv[] = {"device_limit", "0:16M", "spill", "host", "prefetch", "1", "prefetch_trial", "0",
                        "promote_interval", "3600s", NULL};
    start_limited(kv);
    uintptr_t w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, 130 + (uint32_t)i);
    }
    for (int sweep = 0; sweep < 8; sweep++)
        for (int i = 0; i < 8; i++) CHECK_EQ(sweep_launch(w, i), 0);
    CHECK(gvm_recur_period() > 0);
    CHECK(gvm_stats.spills > 0);
    CHECK_EQ(gvm_stats.prefetches, 0);
    policy_set("prefetch=0");
    policy_set("spill_host_map=lazy");
    for (int sweep = 0; sweep < 8; sweep++)
        for (int i = 0; i < 8; i++) CHECK_EQ(sweep_launch(w, i), 0);
    CHECK(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED) > 0);
    CHECK_EQ(gvm_stats.prefetches, 0);
    policy_set("prefetch=1");
    for (int sweep = 0; sweep < 2; sweep++)
        for (int i = 0; i < 8; i++) CHECK_EQ(sweep_launch(w, i), 0);
    CHECK(gvm_stats.prefetches > 0);
    for (int i = 0; i < 8; i++) CHECK(intact_used(w[i], 4 * MiB, 130 + (uint32_t)i));
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
}

/* A program's steps as the trial times them, on a clock of its own:
 * each step takes `with` ns while the prefetch runs and `without` while it
 * does not, the spike_at-th step with it ten times more (an outlier: a
 * collection). Returns how many of the steps prefetched. */
struct trial_run {
    struct gvm_trial t;
    uint64_t clock;
    bool on;
};

static void trial_begin(struct trial_run *x)
{
    gvm_trial_reset(&x->t);
    x->clock += 1000;
    x->on = gvm_trial_step(&x->t, x->clock);   /* the trial starts at a step's end */
}

static int trial_steps(struct trial_run *x, int steps, uint64_t with, uint64_t without, int spike_at)
{
    int prefetched = 0;
    for (int s = 0; s < steps; s++) {
        prefetched += x->on;
        x->clock += x->on ? with : without;
        if (x->on && prefetched == spike_at) x->clock += 10 * with;
        x->on = gvm_trial_step(&x->t, x->clock);
    }
    return prefetched;
}

/* The trial runs six steps with the prefetch (the first, after the
 * switch, untimed), six without, and keeps the faster median for 100
 * steps, then tries again; one slow step does not decide it, a tie turns
 * it off, and steps that went by untimed do not count as one. */
static void the_prefetch_trial_keeps_the_faster_side(void)
{
    const uint64_t ms = 1000000;
    struct trial_run x = {0};
    trial_begin(&x);
    CHECK_EQ(trial_steps(&x, 12, 9 * ms, 10 * ms, 0), 6);
    CHECK(x.on);   /* faster with it: kept */
    CHECK_EQ(trial_steps(&x, GVM_TRIAL_HOLD, 9 * ms, 10 * ms, 0), GVM_TRIAL_HOLD);
    trial_begin(&x);
    CHECK_EQ(trial_steps(&x, 12, 11 * ms, 10 * ms, 0), 6);
    CHECK(!x.on);   /* slower with it: dropped */
    CHECK_EQ(trial_steps(&x, GVM_TRIAL_HOLD - 1, 11 * ms, 10 * ms, 0), 0);
    CHECK(!x.on);
    CHECK_EQ(trial_steps(&x, 1, 11 * ms, 10 * ms, 0), 0);
    CHECK(x.on);    /* the hold is over: tried again */
    trial_begin(&x);
    CHECK_EQ(trial_steps(&x, 12, 9 * ms, 10 * ms, 3), 6);
    CHECK(x.on);    /* one step of eleven times its time: the median holds */
    trial_begin(&x);
    CHECK_EQ(trial_steps(&x, 12, 10 * ms, 10 * ms, 0), 6);
    CHECK(!x.on);   /* a tie: off */
    /* After a stretch that went by untimed, the next end only starts the
     * clock again, and the step after it is timed. */
    trial_begin(&x);
    CHECK_EQ(trial_steps(&x, 1, ms, ms, 0), 1);   /* the settling step */
    gvm_trial_lost(&x.t);
    x.clock += 5000 * ms;
    CHECK(gvm_trial_step(&x.t, x.clock));
    CHECK_EQ(trial_steps(&x, 5, 2 * ms, ms, 0), 5);
    CHECK(!x.on);
    for (int s = 0; s < GVM_TRIAL_STEPS; s++) CHECK_EQ(x.t.with[s], 2 * ms);
}

static const char *const trial_kv[] = {"device_limit", "0:16M", "spill", "host", "spill_host_map", "lazy",
                                       "prefetch", "1", "promote_interval", "3600s", NULL};

/* Sweeps over nine 4 MiB buffers (from sweep `wobble_from` on, if not
 * negative, every other sweep launches the 5th before the 4th), the
 * device never over its limit: the longest run of sweeps without a
 * prefetch after the first that had one, -1 if none had one. */
static int longest_sweeps_without_prefetch(const uintptr_t *w, int sweeps, int wobble_from)
{
    int idle_run = 0, longest = 0;
    bool began = false;
    for (int sweep = 0; sweep < sweeps; sweep++) {
        uint64_t before = gvm_stats.prefetches;
        bool turn = wobble_from >= 0 && sweep >= wobble_from && sweep % 2;
        for (int k = 0; k < 9; k++) {
            CHECK_EQ(sweep_launch(w, turn && (k == 3 || k == 4) ? 7 - k : k), 0);
            CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        }
        bool prefetched = gvm_stats.prefetches > before;
        began |= prefetched;
        idle_run = began && !prefetched ? idle_run + 1 : 0;
        if (idle_run > longest) longest = idle_run;
    }
    return began ? longest : -1;
}

/* Runs a trial test on nine filled buffers, then checks their data, frees
 * them and finds nothing leaked. */
static void with_trial_buffers(uint32_t seed, void (*body)(const uintptr_t *w))
{
    start_limited(trial_kv);
    struct leaks base = leaks_now();
    uintptr_t w[9];
    for (int i = 0; i < 9; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, seed + (uint32_t)i);
    }
    body(w);
    for (int i = 0; i < 9; i++) CHECK(intact_used(w[i], 4 * MiB, seed + (uint32_t)i));
    for (int i = 0; i < 9; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
    CHECK_NO_LEAK(base);
}

static void steps_without_come(const uintptr_t *w)
{
    /* Six steps without: five whole sweeps at least. */
    CHECK(longest_sweeps_without_prefetch(w, 30, -1) >= GVM_TRIAL_STEPS);
}

/* With prefetch_trial on (the default), a learned sweep runs some steps
 * without the thread: its steps without make no prefetch, whatever the
 * verdict after them; every buffer keeps its data, the limit holds, and
 * nothing leaks. */
static void the_prefetch_trial_runs_steps_without_it(void) { with_trial_buffers(150, steps_without_come); }

static void steps_without_come_through_a_multiple(const uintptr_t *w)
{
    CHECK(longest_sweeps_without_prefetch(w, 22, 6) >= GVM_TRIAL_STEPS);
    CHECK_EQ(gvm_recur_period(), 18u);   /* the multiple was learned */
}

/* The learned period moving to a multiple of itself (from the 7th sweep
 * on, every other sweep swaps two launches: two sweeps are exact where one
 * is not) is the same loop: the trial goes on timing the steps it began
 * with, and its steps without the thread come on schedule. Restarted at
 * each such move, the trial kept the thread on through the moves of a
 * wobbling loop's period (fused Adam on two H100s, 2026-11-27). */
static void the_prefetch_trial_outlives_a_multiple_of_its_period(void)
{
    with_trial_buffers(170, steps_without_come_through_a_multiple);
}

/* A driver call failing anywhere in the thread's swap: every buffer keeps
 * its data, the device never holds more than its limit, the sweep goes on,
 * and nothing leaks. */
static void failure_during_a_prefetch_keeps_data(void)
{
    gvm_log_set_level(GVM_LOG_ERROR);
    start_limited(prefetch_kv);
    struct leaks base = leaks_now();
    uintptr_t w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = palloc(4 * MiB);
        fill(w[i], 4 * MiB, 110 + (uint32_t)i);
    }
    for (int sweep = 0; sweep < 6; sweep++)   /* the loop is learned */
        for (int i = 0; i < 8; i++) sweep_launch(w, i);
    bool fired = true;
    unsigned long k = 1;
    for (; fired && k < 600; k += test_sweep_step()) {
        uint64_t done = gvm_stats.prefetches;
        unsigned long calls = simcuda_call_count();
        struct gvm_region *r = gvm_heap_region(w[0]);
        gvm_policy_before_launch(&r, 1);
        touch(w[0]);
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);   /* call k from here on: the thread's */
        gvm_prefetch_after(&r, 1);
        gvm_prefetch_drain();
        fired = simcuda_call_count() - calls >= k;
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
        if (!fired) CHECK(gvm_stats.prefetches > done);   /* past its last call: the swap ran whole */
        for (int i = 1; i < 8; i++) CHECK_EQ(sweep_launch(w, i), 0);
        CHECK(simcuda_phys_bytes(0) <= 16 * MiB);
    }
    CHECK(!fired);
    CHECK(k > 10);   /* the thread's swap made calls that failed */
    for (int i = 0; i < 8; i++) CHECK(intact_used(w[i], 4 * MiB, 110 + (uint32_t)i));
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(w[i]), CUDA_SUCCESS);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED), 0u);
    CHECK_NO_LEAK(base);
}

static const struct test_case cases[] = {
    TEST_ENTRY(evicts_the_least_recently_used)
    TEST_ENTRY(the_use_clock_orders_calls)
    TEST_ENTRY(the_use_clock_lets_threads_work_apart)
    TEST_ENTRY(a_job_that_fits_never_spills)
    TEST_ENTRY(place_mode_puts_the_new_allocation_on_the_target)
    TEST_ENTRY(peer_first_then_host)
    TEST_ENTRY(spill_off_fails_as_natively)
    TEST_ENTRY(fails_only_when_no_target_has_room)
    TEST_ENTRY(used_spilled_data_is_promoted_when_room_returns)
    TEST_ENTRY(launch_on_spilled_data_swaps_it_in)
    TEST_ENTRY(data_on_a_peer_is_read_in_place)
    TEST_ENTRY(data_on_a_pcie_peer_is_swapped_in)
    TEST_ENTRY(a_failed_link_query_counts_as_pcie)
    TEST_ENTRY(swap_in_none_reads_host_data_in_place)
    TEST_ENTRY(a_cyclic_sweep_does_not_thrash)
    TEST_ENTRY(a_sweep_with_a_shared_scalar_learns_its_period)
    TEST_ENTRY(the_loop_model_learns_and_unlearns)
    TEST_ENTRY(a_burst_inside_a_step_keeps_the_steps_period)
    TEST_ENTRY(skipped_votes_keep_the_period)
    TEST_ENTRY(a_wobbling_loop_keeps_its_period)
    TEST_ENTRY(the_loop_model_predicts_regions_used_often)
    TEST_ENTRY(the_loop_model_learns_runs_of_launches)
    TEST_ENTRY(the_loop_model_sees_a_phase_of_dense_use)
    TEST_ENTRY(cold_regions_leave_before_warm_ones)
    TEST_ENTRY(unused_spilled_data_stays_out)
    TEST_ENTRY(pause_keep_and_resume)
    TEST_ENTRY(pause_discard_and_resume_zeroed)
    TEST_ENTRY(pause_unmapped_keeps_the_contents_off_the_range)
    TEST_ENTRY(freeing_shelved_memory_releases_its_copy)
    TEST_ENTRY(a_first_unmapped_pause_registers_host_pages)
    TEST_ENTRY(host_register_off_creates_host_pieces)
    TEST_ENTRY(a_refused_registration_falls_back_to_created_pieces)
    TEST_ENTRY(registering_stops_short_of_the_machines_memory)
    TEST_ENTRY(pause_unmapped_failure_at_every_call)
    TEST_ENTRY(resume_at_the_limit_spills_the_overflow)
    TEST_ENTRY(resume_without_room_keeps_the_rest_paused)
    TEST_ENTRY(resume_on_a_full_device_spills_the_overflow)
    TEST_ENTRY(resume_at_the_limit_failure_at_every_call)
    TEST_ENTRY(resume_from_shelves_at_the_limit_failure_at_every_call)
    TEST_ENTRY(threshold_rule_places_large_allocations_in_host_memory)
    TEST_ENTRY(failure_while_spilling_keeps_data)
    TEST_ENTRY(the_limit_holds_at_1_25x)
    TEST_ENTRY(the_limit_holds_at_1_5x)
    TEST_ENTRY(the_limit_holds_at_2x)
    TEST_ENTRY(the_limit_holds_without_idle_memory)
    TEST_ENTRY(spill_off_gives_idle_memory_back_then_fails)
    TEST_ENTRY(the_cap_is_enforced_below_the_policy)
    TEST_ENTRY(failure_during_a_swap_keeps_data)
    TEST_ENTRY(a_wide_sweep_swaps_both_ways_at_once)
    TEST_ENTRY(a_training_loop_is_learned)
    TEST_ENTRY(learning_turned_off_live_keeps_the_recency_order)
    TEST_ENTRY(failure_during_a_learned_step_keeps_data)
    TEST_ENTRY(failure_during_a_two_way_swap_keeps_data)
    TEST_ENTRY(a_raised_limit_lets_spilled_data_back)
    TEST_ENTRY(a_swap_skips_a_victim_in_use)
    TEST_ENTRY(a_lazy_spill_leaves_the_range_unmapped)
    TEST_ENTRY(registered_pages_of_a_lazy_spill_map_in_place)
    TEST_ENTRY(unknown_reach_maps_every_lazy_spill)
    TEST_ENTRY(held_spills_leave_nothing_unmapped)
    TEST_ENTRY(operations_on_lazily_spilled_memory)
    TEST_ENTRY(freeing_lazily_spilled_memory_releases_it)
    TEST_ENTRY(failure_during_a_lazy_swap_keeps_data)
    TEST_ENTRY(failure_during_a_hand_off_keeps_data)
    TEST_ENTRY(a_lazy_swap_needs_room_for_one_block)
    TEST_ENTRY(a_failed_hand_off_puts_blocks_back)
    TEST_ENTRY(a_lazy_swap_with_busy_victims_leaves_the_data_on_host)
    TEST_ENTRY(lazy_swaps_wait_for_the_last_uses_of_their_regions)
    TEST_ENTRY(a_use_without_an_event_makes_the_swap_wait_for_the_devices)
    TEST_ENTRY(a_third_stream_busy_makes_the_swap_wait_for_the_devices)
    TEST_ENTRY(per_thread_streams_of_two_threads_are_two_streams)
    TEST_ENTRY(a_failed_event_create_falls_back_to_a_device_wait)
    TEST_ENTRY(a_failed_event_record_falls_back_to_a_device_wait)
    TEST_ENTRY(a_failed_event_wait_falls_back_to_a_device_wait)
    TEST_ENTRY(prefetch_swaps_in_what_the_sweep_needs_next)
    TEST_ENTRY(prefetch_keeps_what_every_launch_shares)
    TEST_ENTRY(prefetch_needs_lazy_spills)
    TEST_ENTRY(failure_during_a_prefetch_keeps_data)
    TEST_ENTRY(the_prefetch_trial_keeps_the_faster_side)
    TEST_ENTRY(the_prefetch_trial_runs_steps_without_it)
    TEST_ENTRY(the_prefetch_trial_outlives_a_multiple_of_its_period)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
