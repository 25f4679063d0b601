/* The core against the simulated driver: allocation, lookup, the caches,
 * migration, aliases, resizing, and every failure path of each. */
#include "simcore.h"

#include "core/capture.h"
#include "core/held.h"
#include "core/hostaccess.h"
#include "core/move.h"
#include "core/phys.h"
#include "core/reach.h"
#include "core/slab.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

static void start2(void) { sim_start(2, 512 * MiB, NULL); }

static void large_alloc_lookup_free(void)
{
    start2();
    struct leaks base = leaks_now();
    size_t n = 10 * MiB + 123;
    uintptr_t p = sim_alloc(n);
    fill(p, n & ~(size_t)3, 7);
    struct gvm_ref ref;
    CHECK(gvm_heap_find(p + n - 1, &ref));
    CHECK_EQ(ref.base, p);
    CHECK_EQ(ref.size, n);
    CHECK(!gvm_heap_find(p + n, &ref));        /* past the end is not the allocation */
    CHECK_EQ(p % (2 * MiB), 0);
    CHECK_EQ(simcuda_location_of(p), 0);
    CHECK(simcuda_access_mask(p) & 1);
    CHECK(!(simcuda_access_mask(p) & 2));      /* as natively: the peer only once peer access is enabled */
    CHECK_EQ(gvm_heap_free(p + 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    CHECK(!gvm_heap_find(p, &ref));
    CHECK_EQ(gvm_heap_free(p), CUDA_ERROR_NOT_FOUND);
    CHECK_NO_LEAK(base);
}

static void small_allocations_share_a_chunk(void)
{
    start2();
    struct leaks base = leaks_now();
    uintptr_t p[100];
    for (int i = 0; i < 100; i++) {
        p[i] = sim_alloc(1000);
        CHECK_EQ(p[i] % 256, 0);
        memset((void *)p[i], i, 1000);
    }
    gvm_info a, b;
    CHECK_EQ(gvm_query((void *)p[0], &a), GVM_OK);
    CHECK_EQ(gvm_query((void *)(p[99] + 999), &b), GVM_OK);
    CHECK(a.packed && b.packed);
    CHECK(a.chunk_base == b.chunk_base);
    CHECK_EQ((uintptr_t)b.base, p[99]);
    CHECK_EQ(b.size, 1000);
    for (int i = 0; i < 100; i++) CHECK_EQ(((unsigned char *)p[i])[999], i);
    CHECK_EQ(gvm_heap_free(p[5] + 8), CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < 100; i++) CHECK_EQ(gvm_heap_free(p[i]), CUDA_SUCCESS);
    gvm_slab_flush(0);
    CHECK(gvm_heap_idle_bytes(0) >= 2 * MiB);  /* the empty chunk waits for reuse */
    CHECK_NO_LEAK(base);
}

static void freed_regions_are_reused_without_driver_calls(void)
{
    start2();
    uintptr_t p = sim_alloc(64 * MiB);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    CHECK(gvm_heap_idle_bytes(0) >= 64 * MiB);
    simcuda_reset_counts();
    uintptr_t q = sim_alloc(64 * MiB - 5);
    CHECK_EQ(q, p);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), 0);
    CHECK_EQ(simcuda_calls_of("cuMemMap"), 0);
    CHECK_EQ(gvm_heap_free(q), CUDA_SUCCESS);
}

/* Freed memory is not handed out again before work queued ahead of the free
 * is done: a freed slot waits for a device-wide sync begun after the free,
 * and frees themselves do not wait (one sync serves thousands of frees). */
static void freed_small_blocks_wait_for_the_device(void)
{
    start2();
    uintptr_t a = sim_alloc(256);
    simcuda_reset_counts();
    CHECK_EQ(gvm_heap_free(a), CUDA_SUCCESS);
    CHECK_EQ(simcuda_calls_of("cuCtxSynchronize"), 0);
    uintptr_t b = sim_alloc(256);
    CHECK(b != a);                        /* a is still pending */
    /* Fill the chunk: when no free slot is left the pending ones are
     * released after one sync rather than a new chunk made. */
    size_t slots = 2 * MiB / 256;
    uintptr_t *q = calloc(slots, sizeof *q);
    for (size_t i = 0; i < slots - 2; i++) q[i] = sim_alloc(256);
    simcuda_reset_counts();
    uintptr_t c = sim_alloc(256);
    CHECK_EQ(c, a);
    CHECK(simcuda_calls_of("cuCtxSynchronize") >= 1);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), 0);
    free(q);
}

static void freed_large_regions_wait_for_the_device(void)
{
    start2();
    uintptr_t p = sim_alloc(64 * MiB);
    simcuda_reset_counts();
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    CHECK_EQ(simcuda_calls_of("cuCtxSynchronize"), 0);
    uintptr_t q = sim_alloc(64 * MiB);
    CHECK_EQ(q, p);
    CHECK_EQ(simcuda_calls_of("cuCtxSynchronize"), 1);   /* settled before reuse */
    /* A sync that began after the free already counts: no second wait. */
    CHECK_EQ(gvm_heap_free(q), CUDA_SUCCESS);
    CHECK_EQ(gvm_topo_sync_device(0), CUDA_SUCCESS);
    simcuda_reset_counts();
    CHECK_EQ(sim_alloc(64 * MiB), p);
    CHECK_EQ(simcuda_calls_of("cuCtxSynchronize"), 0);
}

static void out_of_memory_is_the_native_error(void)
{
    start2();
    struct leaks base = leaks_now();
    struct gvm_place pl = {.loc = 0};
    uintptr_t p = 0;
    CHECK_EQ(gvm_heap_alloc(600 * MiB, 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(gvm_heap_alloc(0, 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_INVALID_VALUE);
    CHECK_NO_LEAK(base);
}

/* Every driver call an allocation makes fails once, in turn: the error is
 * the driver's, nothing leaks, and the next attempt works. */
static void alloc_failure_at_every_call(void)
{
    start2();
    size_t sizes[] = {3000, 100 * MiB};
    for (int s = 0; s < 2; s++) {
        for (unsigned long k = 1;; k += test_sweep_step()) {
            struct leaks base = leaks_now();
            struct gvm_place pl = {.loc = 0};
            uintptr_t p = 0;
            CUcontext ctx = current_ctx();
            simcuda_fail_nth(k, CUDA_ERROR_UNKNOWN);
            CUresult rc = gvm_heap_alloc(sizes[s], 0, ctx, &pl, 0, &p);
            simcuda_fail_nth(0, CUDA_SUCCESS);
            if (rc == CUDA_SUCCESS) {
                CHECK(k > 1);
                CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
                break;
            }
            CHECK_EQ(rc, CUDA_ERROR_UNKNOWN);
            CHECK_NO_LEAK(base);
        }
    }
}

static void migrate_round_trip_keeps_data(void)
{
    start2();
    size_t n = 200 * MiB + 4096;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 42);
    gvm_info info;
    int path[] = {1, GVM_HOST, 0, GVM_HOST, 1, 0};
    uint64_t id = 0;
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(gvm_migrate((void *)(p + 12345), path[i]), GVM_OK);
        CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
        CHECK_EQ(info.location, path[i]);
        CHECK_EQ(info.device, 0);               /* still "allocated on device 0" */
        CHECK(info.buffer_id != id);            /* registration caches must notice */
        id = info.buffer_id;
        CHECK_EQ(simcuda_location_of(p + n - 1), path[i]);
        CHECK(intact(p, n, 42));
    }
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);   /* already there: no-op */
    CHECK_EQ(gvm_migrate((void *)p, 7), GVM_ERR_INVALID);
    CHECK_EQ(gvm_migrate((void *)(p + 300 * MiB), 1), GVM_ERR_UNKNOWN_POINTER);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
}

/* A full pool makes room for the piece given back last, the likeliest to
 * be wanted again: a region moved back and forth between two devices,
 * after a trip to host left the first device's pool full of pieces cut
 * another way, creates and releases nothing once its pieces have been
 * made on both sides (before, each return created the pieces the last
 * departure had released). The data survives every trip. */
static void pool_tune(struct gvm_settings *s)
{
    s->pool_limit[0] = s->pool_limit[1] = 256 * MiB;
}

static void a_full_pool_keeps_what_was_given_back_last(void)
{
    sim_start(2, 1024 * MiB, pool_tune);
    size_t n = 256 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 17);
    int warm_up[] = {GVM_HOST, 0, 1, 0, 1};   /* host cuts block-size pieces */
    for (int i = 0; i < 5; i++) CHECK_EQ(gvm_migrate((void *)p, warm_up[i]), GVM_OK);
    unsigned long created = simcuda_calls_of("cuMemCreate"), released = simcuda_calls_of("cuMemRelease");
    for (int i = 0; i < test_scaled(6); i++) {
        int to = i % 2 ? 1 : 0;
        CHECK_EQ(gvm_migrate((void *)p, to), GVM_OK);
        CHECK_EQ(simcuda_location_of(p + n - 1), to);
        CHECK(intact(p, n, 17));
    }
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), created);
    CHECK_EQ(simcuda_calls_of("cuMemRelease"), released);
    CHECK(gvm_phys_pooled(0) <= 256 * MiB && gvm_phys_pooled(1) <= 256 * MiB);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
}

/* A move to a device creates the memory it cannot take from the pool a
 * group ahead of its copies (creating device memory costs about an eighth
 * of copying it from host), held under the device's cap from the start;
 * a creation that fails midway leaves the region where it was, data and
 * counts intact, nothing leaked. */
static void no_device_pool(struct gvm_settings *s) { s->pool_limit[0] = s->pool_limit[1] = 0; }

static void a_move_to_a_device_creates_its_memory_as_it_copies(void)
{
    sim_start(2, 1024 * MiB, no_device_pool);
    size_t n = 256 * MiB;   /* four groups of the block size from host */
    uintptr_t p = sim_alloc(n);
    fill(p, n, 23);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    size_t held = gvm_held_bytes(0);
    struct leaks base = leaks_now();
    unsigned long copies = simcuda_calls_of("cuMemcpyDtoDAsync_v2");
    simcuda_fail_calls("cuMemCreate", 3, 2, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_ERR_NO_MEMORY);
    simcuda_fail_call("cuMemCreate", 0, CUDA_SUCCESS);
    CHECK(simcuda_calls_of("cuMemcpyDtoDAsync_v2") > copies);   /* copies ran before the third creation */
    CHECK_EQ(simcuda_location_of(p), GVM_LOC_HOST);
    CHECK_EQ(simcuda_location_of(p + n - 1), GVM_LOC_HOST);
    CHECK(intact(p, n, 23));
    CHECK_EQ(gvm_held_bytes(0), held);
    CHECK_NO_LEAK(base);

    gvm_held_set_cap(0, held + n);   /* exactly room for it */
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);
    CHECK_EQ(simcuda_location_of(p + n - 1), 0);
    CHECK(intact(p, n, 23));
    CHECK(gvm_held_peak(0) <= held + n);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    gvm_held_set_cap(0, held + n - 2 * MiB);   /* no room: refused before anything moves */
    copies = simcuda_calls_of("cuMemcpyDtoDAsync_v2");
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_ERR_NO_MEMORY);
    CHECK_EQ(simcuda_calls_of("cuMemcpyDtoDAsync_v2"), copies);
    CHECK(intact(p, n, 23));
    gvm_held_set_cap(0, SIZE_MAX);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
}

/* Memory is granted to the devices that reach it natively: its own
 * device, and devices the program enabled peer access for. Each device
 * granted makes mapping memory cost about as much again. */
/* The devices granted at p (the CPU left out). */
static int devices_of(uintptr_t p) { return simcuda_access_mask(p) & ~(int)SIMCUDA_CPU_BIT; }

static void memory_is_granted_to_the_devices_that_reach_it(void)
{
    start2();
    uintptr_t p = sim_alloc(8 * MiB), q = sim_alloc(8 * MiB), small = sim_alloc(4096);
    fill(p, 8 * MiB, 31);
    CHECK_EQ(devices_of(p), 1);
    uintptr_t on_device = sim_alloc(8 * MiB);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_migrate((void *)small, GVM_HOST), GVM_OK);
    CHECK_EQ(devices_of(p), 1);
    CHECK_EQ(devices_of(p + 8 * MiB - 1), 1);
    CHECK_EQ(devices_of(small), 1);
    void *view = NULL;
    CHECK_EQ(gvm_alias((void *)p, &view), GVM_OK);
    CHECK_EQ(devices_of((uintptr_t)view), 1);
    /* Memory the program moved to device 1 stays reachable there. */
    uintptr_t m = sim_alloc(8 * MiB);
    CHECK_EQ(gvm_migrate((void *)m, 1), GVM_OK);
    CHECK_EQ(gvm_migrate((void *)m, GVM_HOST), GVM_OK);
    CHECK_EQ(devices_of(m), 3);
    /* Freed and cached with its host memory: given back, not kept unreachable. */
    CHECK_EQ(gvm_migrate((void *)q, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_heap_free(q), CUDA_SUCCESS);
    /* Device 1 enables peer access to device 0's memory. */
    CHECK_EQ(gvm_reach_enable(0, 1), CUDA_SUCCESS);
    CHECK_EQ(devices_of(p), 3);
    CHECK_EQ(devices_of(p + 8 * MiB - 1), 3);
    CHECK_EQ(devices_of((uintptr_t)view), 3);
    CHECK_EQ(devices_of(small), 3);
    CHECK_EQ(devices_of(on_device), 3);   /* device memory too */
    CHECK_EQ(simcuda_location_of(q), SIMCUDA_LOC_UNMAPPED);   /* the cached region is gone */
    uintptr_t r = sim_alloc(8 * MiB);   /* and memory that goes to host later */
    CHECK_EQ(gvm_migrate((void *)r, GVM_HOST), GVM_OK);
    CHECK_EQ(devices_of(r), 3);
    CHECK(intact(p, 8 * MiB, 31));
    /* Device 1's own memory on host stays its own. */
    uintptr_t d1 = sim_alloc_on(1, 8 * MiB);
    CHECK_EQ(gvm_migrate((void *)d1, GVM_HOST), GVM_OK);
    CHECK_EQ(devices_of(d1), 2);
}

/* Memory placed on host when it was allocated has no staging mapping, and
 * its mapping is granted to its own device only: a move to a peer, whose
 * copy engine reads it, must not rely on that mapping. */
static void host_memory_of_device_0_moves_to_device_1(void)
{
    start2();
    struct gvm_place on_host = {.loc = GVM_LOC_HOST};
    uintptr_t q = 0;
    CHECK_EQ(gvm_heap_alloc(8 * MiB, 0, current_ctx(), &on_host, 0, &q), CUDA_SUCCESS);
    fill(q, 8 * MiB, 41);
    CHECK_EQ(devices_of(q), 1);
    CHECK_EQ(gvm_migrate((void *)q, 1), GVM_OK);
    CHECK_EQ(simcuda_location_of(q), 1);
    CHECK_EQ(devices_of(q), 3);   /* device 1 holds it, device 0 owns it */
    CHECK(intact(q, 8 * MiB, 41));
    CHECK_EQ(gvm_migrate((void *)q, GVM_HOST), GVM_OK);
    CHECK_EQ(devices_of(q), 3);   /* moved to device 1 by the program: it keeps reaching it */
    CHECK(intact(q, 8 * MiB, 41));
}

/* A grant that fails is reported; the ones after it are still made. */
static void a_failed_peer_grant_is_reported(void)
{
    start2();
    uintptr_t p = sim_alloc(8 * MiB), q = sim_alloc(8 * MiB);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_migrate((void *)q, GVM_HOST), GVM_OK);
    simcuda_fail_call("cuMemSetAccess", 1, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(gvm_reach_enable(0, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(devices_of(p) | devices_of(q), 3);   /* one of them was granted */
    CHECK_EQ(gvm_reach_enable(0, 1), CUDA_SUCCESS);                    /* once per pair */
    CHECK_EQ(gvm_reach_enable(0, GVM_MAX_DEVICES), CUDA_ERROR_INVALID_DEVICE);
}

static void migrating_a_small_allocation_moves_its_chunk(void)
{
    start2();
    uintptr_t a = sim_alloc(4096), b = sim_alloc(4096);
    fill(a, 4096, 1);
    fill(b, 4096, 2);
    CHECK_EQ(gvm_migrate((void *)a, GVM_HOST), GVM_OK);
    gvm_info ib;
    CHECK_EQ(gvm_query((void *)b, &ib), GVM_OK);
    CHECK_EQ(ib.location, GVM_HOST);
    CHECK(ib.packed);
    CHECK(intact(a, 4096, 1) && intact(b, 4096, 2));
    /* New small allocations do not land in the chunk that left the device. */
    uintptr_t c = sim_alloc(4096);
    CHECK_EQ(simcuda_location_of(c), 0);
}

static void migrate_without_peer_access_is_refused(void)
{
    start2();
    simcuda_set_peer(0);
    gvm_topo_init();   /* read again, with the peers gone */
    uintptr_t p = sim_alloc(8 * MiB);
    CHECK_EQ(simcuda_access_mask(p), 1);
    CHECK_EQ(gvm_migrate((void *)p, 1), GVM_ERR_UNSUPPORTED);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
}

static void migrate_failure_at_every_call(void)
{
    start2();
    size_t n = 300 * MiB;   /* five pieces: the pipeline runs */
    uintptr_t p = sim_alloc(n);
    fill(p, n, 9);
    int targets[] = {1, GVM_HOST};
    for (int t = 0; t < 2; t++) {
        for (unsigned long k = 1;; k += test_sweep_step()) {
            struct leaks base = leaks_now();
            simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
            gvm_status st = gvm_migrate((void *)p, targets[t]);
            simcuda_fail_nth(0, CUDA_SUCCESS);
            gvm_info info;
            CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
            CHECK(intact(p, n, 9));
            if (st == GVM_OK) {
                CHECK_EQ(info.location, targets[t]);
                break;
            }
            CHECK_EQ(st, GVM_ERR_DRIVER);
            CHECK_EQ(info.location, 0);
            CHECK_EQ(info.last_driver_error, CUDA_ERROR_ILLEGAL_STATE);
            CHECK_EQ(simcuda_location_of(p), 0);
            CHECK_NO_LEAK(base);
        }
        CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);
    }
}

static void migrate_to_a_full_device_fails_cleanly(void)
{
    start2();
    simcuda_set_capacity(1, 64 * MiB);
    uintptr_t p = sim_alloc(100 * MiB);
    fill(p, 100 * MiB, 3);
    struct leaks base = leaks_now();
    CHECK_EQ(gvm_migrate((void *)p, 1), GVM_ERR_NO_MEMORY);
    CHECK(intact(p, 100 * MiB, 3));
    CHECK_NO_LEAK(base);
}

static void alias_shows_the_same_memory(void)
{
    start2();
    struct leaks base = leaks_now();
    size_t n = 70 * MiB;
    uintptr_t p = sim_alloc(n);
    void *al = NULL;
    CHECK_EQ(gvm_alias((void *)(p + 100), &al), GVM_OK);
    uintptr_t a = (uintptr_t)al - 100;
    CHECK(a != p);
    fill(p, n, 5);
    CHECK(intact(a, n, 5));
    fill(a, n, 6);
    CHECK(intact(p, n, 6));
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    CHECK_EQ(info.aliases, 1);
    /* A move remaps both addresses. */
    CHECK_EQ(gvm_migrate((void *)p, 1), GVM_OK);
    CHECK_EQ(simcuda_location_of(a), 1);
    CHECK(intact(a, n, 6));
    /* The memory lives on after the program frees the allocation. */
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    CHECK(intact(a, n, 6));
    CHECK_EQ(gvm_unalias((void *)(a + 5)), GVM_OK);
    CHECK_EQ(gvm_unalias((void *)a), GVM_ERR_UNKNOWN_POINTER);
    CHECK_NO_LEAK(base);
}

static void alias_of_a_small_allocation(void)
{
    start2();
    uintptr_t p = sim_alloc(512);
    void *al;
    CHECK_EQ(gvm_alias((void *)p, &al), GVM_OK);
    memset((void *)p, 0xab, 512);
    CHECK_EQ(((unsigned char *)al)[511], 0xab);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    /* The slot stays taken while the alias shows it. */
    uintptr_t q = sim_alloc(512);
    CHECK(q != p);
    CHECK_EQ(((unsigned char *)al)[0], 0xab);
    CHECK_EQ(gvm_unalias(al), GVM_OK);
}

/* An alias made before its allocation grew covers only the old length. A
 * move groups adjacent pieces; a group reaching past the alias's end must
 * still remap the alias's part, or the alias keeps showing the old memory
 * (stress test, 2026-11-23: a view read an earlier pattern after a move). */
static void alias_of_a_grown_allocation_follows_moves(void)
{
    start2();
    uintptr_t p = sim_alloc(4 * MiB);
    void *al;
    CHECK_EQ(gvm_alias((void *)p, &al), GVM_OK);
    CHECK_EQ(gvm_realloc((void *)p, 8 * MiB), GVM_OK);
    for (int round = 0; round < 3; round++) {
        int to = round == 1 ? 1 : GVM_HOST;
        CHECK_EQ(gvm_migrate((void *)p, to), GVM_OK);
        fill(p, 8 * MiB, 30 + (uint32_t)round);
        CHECK(intact((uintptr_t)al, 4 * MiB, 30 + (uint32_t)round));
    }
    CHECK_EQ(gvm_unalias(al), GVM_OK);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
}

static void alias_failure_at_every_call(void)
{
    start2();
    uintptr_t p = sim_alloc(130 * MiB);
    for (unsigned long k = 1;; k += test_sweep_step()) {
        struct leaks base = leaks_now();
        void *al = NULL;
        simcuda_fail_nth(k, CUDA_ERROR_UNKNOWN);
        gvm_status st = gvm_alias((void *)p, &al);
        simcuda_fail_nth(0, CUDA_SUCCESS);
        if (st == GVM_OK) {
            CHECK_EQ(gvm_unalias(al), GVM_OK);
            break;
        }
        CHECK_EQ(st, GVM_ERR_DRIVER);
        CHECK_NO_LEAK(base);
    }
}

static void realloc_grows_and_shrinks_in_place(void)
{
    start2();
    size_t n = 40 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 11);
    CHECK_EQ(gvm_realloc((void *)p, 80 * MiB), GVM_OK);
    CHECK(intact(p, n, 11));
    memset((void *)(p + 80 * MiB - 1), 1, 1);   /* the new tail is mapped */
    struct gvm_ref ref;
    CHECK(gvm_heap_find(p + 79 * MiB, &ref));
    CHECK_EQ(ref.size, 80 * MiB);
    CHECK_EQ(gvm_realloc((void *)p, 1000 * MiB), GVM_ERR_NO_HEADROOM);
    CHECK_EQ(gvm_realloc((void *)p, 3 * MiB), GVM_OK);
    CHECK(intact(p, 3 * MiB, 11));
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    CHECK(info.chunk_size < 80 * MiB);
    CHECK_EQ(info.size, 3 * MiB);
    CHECK_EQ(simcuda_location_of(p + 70 * MiB), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(gvm_realloc((void *)p, 0), GVM_ERR_INVALID);
    /* A small allocation may grow within its slot only. */
    uintptr_t s = sim_alloc(300);
    CHECK_EQ(gvm_realloc((void *)s, 500), GVM_OK);
    CHECK_EQ(gvm_realloc((void *)s, 5000), GVM_ERR_NO_HEADROOM);
}

static void realloc_grows_where_the_memory_lives(void)
{
    start2();
    uintptr_t p = sim_alloc(8 * MiB);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_realloc((void *)p, 12 * MiB), GVM_OK);
    CHECK_EQ(simcuda_location_of(p + 11 * MiB), SIMCUDA_LOC_HOST);
}

static void realloc_failure_at_every_call(void)
{
    start2();
    uintptr_t p = sim_alloc(8 * MiB);
    fill(p, 8 * MiB, 4);
    for (unsigned long k = 1;; k += test_sweep_step()) {
        struct leaks base = leaks_now();
        simcuda_fail_nth(k, CUDA_ERROR_UNKNOWN);
        gvm_status st = gvm_realloc((void *)p, 16 * MiB);
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(intact(p, 8 * MiB, 4));
        if (st == GVM_OK) break;
        CHECK_EQ(st, GVM_ERR_DRIVER);
        struct gvm_ref ref;
        CHECK(gvm_heap_find(p, &ref));
        CHECK_EQ(ref.size, 8 * MiB);
        CHECK_NO_LEAK(base);
    }
}

/* Copies announced on the region while other threads move it: none is
 * lost, every read sees the last write. */
struct worker {
    uintptr_t base;
    int id;
    int errors;
};

static void *copier(void *arg)
{
    struct worker *w = arg;
    uint32_t buf[1024];
    CUcontext ctx;
    gvm_topo_ctx(0, &ctx);
    gvm_drv.cuCtxSetCurrent(ctx);
    uintptr_t slice = w->base + (size_t)w->id * sizeof buf;
    for (uint32_t round = 0; round < test_scaled(300); round++) {
        for (int i = 0; i < 1024; i++) buf[i] = round * 7919u + (uint32_t)i + (uint32_t)w->id;
        struct gvm_region *r = gvm_use_begin(slice);
        CHECK(r != NULL);
        CHECK_EQ(gvm_drv.cuMemcpyHtoD_v2((CUdeviceptr)slice, buf, sizeof buf), CUDA_SUCCESS);
        gvm_use_end(r);
        memset(buf, 0, sizeof buf);
        r = gvm_use_begin(slice);
        CHECK_EQ(gvm_drv.cuMemcpyDtoH_v2(buf, (CUdeviceptr)slice, sizeof buf), CUDA_SUCCESS);
        gvm_use_end(r);
        for (int i = 0; i < 1024; i++)
            if (buf[i] != round * 7919u + (uint32_t)i + (uint32_t)w->id) w->errors++;
    }
    return NULL;
}

static void *mover(void *arg)
{
    uintptr_t p = *(uintptr_t *)arg;
    int where[] = {1, GVM_HOST, 0};
    CUcontext ctx;
    gvm_topo_ctx(0, &ctx);
    gvm_drv.cuCtxSetCurrent(ctx);
    for (int i = 0; i < test_scaled(30); i++) CHECK_EQ(gvm_migrate((void *)p, where[i % 3]), GVM_OK);
    return NULL;
}

static void concurrent_copies_and_moves(void)
{
    start2();
    uintptr_t p = sim_alloc(130 * MiB);
    pthread_t t[5];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.base = p, .id = i};
        pthread_create(&t[i], NULL, copier, &w[i]);
    }
    pthread_create(&t[4], NULL, mover, &p);
    for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) CHECK_EQ(w[i].errors, 0);
}

static void cache_respects_its_limit(void)
{
    sim_start(1, 512 * MiB, NULL);
    gvm_settings.cache_limit[0] = 40 * MiB;
    uintptr_t a = sim_alloc(32 * MiB), b = sim_alloc(16 * MiB);
    CHECK_EQ(gvm_heap_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_heap_free(b), CUDA_SUCCESS);   /* evicts a: 48M > 40M */
    uintptr_t c = sim_alloc(16 * MiB);
    CHECK_EQ(c, b);
    simcuda_reset_counts();
    uintptr_t d = sim_alloc(32 * MiB);   /* a was not kept: new mappings */
    CHECK(simcuda_calls_of("cuMemMap") > 0);
    gvm_heap_free(c);
    gvm_heap_free(d);
}

static void striped_allocation_spans_devices(void)
{
    start2();
    struct gvm_place pl = {.loc = 0, .interleave = 3};
    uintptr_t p = 0;
    CHECK_EQ(gvm_heap_alloc(16 * MiB, 0, current_ctx(), &pl, 0, &p), CUDA_SUCCESS);
    CHECK_EQ(simcuda_location_of(p), 0);
    CHECK_EQ(simcuda_location_of(p + 2 * MiB), 1);
    CHECK_EQ(simcuda_location_of(p + 4 * MiB), 0);
    /* Used from every device it spans: each stripe is granted to both. */
    CHECK_EQ(simcuda_access_mask(p) & 3, 3);
    CHECK_EQ(simcuda_access_mask(p + 2 * MiB) & 3, 3);
    fill(p, 16 * MiB, 8);
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    CHECK_EQ(info.location, GVM_MIXED);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK(intact(p, 16 * MiB, 8));
    CHECK_EQ(simcuda_access_mask(p + 2 * MiB) & 3, 3);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
}

static void lazy_host_access(void)
{
    sim_start(1, 512 * MiB, NULL);
    gvm_settings.host_access = GVM_HOST_ACCESS_LAZY;
    uintptr_t p = sim_alloc(4 * MiB);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK(!(simcuda_access_mask(p) & SIMCUDA_CPU_BIT));
    CHECK(gvm_hostaccess_grant(p + 10));
    CHECK(simcuda_access_mask(p) & SIMCUDA_CPU_BIT);
}

/* ---- lazy CPU access: the fault handler and the signals it does not own ---- */

static void lazy_small_blocks(struct gvm_settings *s)
{
    s->host_access = GVM_HOST_ACCESS_LAZY;
    s->block_size = 2 * MiB;
}

/* Host-resident memory the CPU may not touch yet, as on a GPU. */
static uintptr_t lazy_host_buffer(size_t n, uint32_t seed)
{
    simcuda_set_cpu_faults(1);
    sim_start(1, 512 * MiB, lazy_small_blocks);
    uintptr_t p = sim_alloc(n);
    fill(p, n, seed);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK(!(simcuda_access_mask(p) & SIMCUDA_CPU_BIT));
    return p;
}

static void cpu_touch_of_host_resident_memory_is_granted(void)
{
    uintptr_t p = lazy_host_buffer(8 * MiB, 21);
    errno = 4242;
    CHECK(intact(p, 8 * MiB, 21));              /* faults once per block */
    CHECK_EQ(errno, 4242);
    CHECK(simcuda_access_mask(p + 6 * MiB) & SIMCUDA_CPU_BIT);
    CHECK_EQ(gvm_stats.cpu_access_faults, 4);
}

static void failed_grant_in_the_handler_is_retried(void)
{
    uintptr_t p = lazy_host_buffer(4 * MiB, 22);
    simcuda_fail_call("cuMemSetAccess", 1, CUDA_ERROR_OUT_OF_MEMORY);
    errno = 77;
    CHECK(intact(p, 4 * MiB, 22));
    CHECK_EQ(errno, 77);
}

/* Runs fn in a child; returns its wait status. */
static int in_child(void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

static void set_action(int sig, void (*h)(int), void (*sa_fn)(int, siginfo_t *, void *), int flags);

static void touch_with_a_grant_that_keeps_failing(void)
{
    set_action(SIGSEGV, SIG_DFL, NULL, 0);   /* not a sanitizer's report */
    uintptr_t p = lazy_host_buffer(4 * MiB, 23);
    simcuda_fail_calls("cuMemSetAccess", 1, 1000, CUDA_ERROR_OUT_OF_MEMORY);
    _exit(intact(p, 4 * MiB, 23) ? 3 : 4);
}

static void grant_that_keeps_failing_faults(void)
{
    int status = in_child(touch_with_a_grant_that_keeps_failing);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGSEGV);
}

/* The touching thread captures in global mode: the grant must neither be
 * refused nor break the capture. */
static void touch_during_a_global_capture(void)
{
    uintptr_t p = lazy_host_buffer(4 * MiB, 25);
    CUstream s;
    CHECK_EQ(gvm_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_GLOBAL);   /* as the capture hook does */
    CHECK(intact(p, 4 * MiB, 25));
    CUgraph g = NULL;
    CHECK_EQ(gvm_drv.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    CHECK_EQ(gvm_capture_end(s), 0);
}

static volatile sig_atomic_t got_sig, got_code, got_pid, got_calls;

static void on_siginfo(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    got_sig = sig;
    got_code = si->si_code;
    got_pid = si->si_pid;
    got_calls++;
    errno = 999;   /* a handler that does not restore errno */
}

static void on_plain(int sig)
{
    got_sig = sig;
    got_calls++;
}

static void set_action(int sig, void (*h)(int), void (*sa_fn)(int, siginfo_t *, void *), int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (sa_fn) {
        sa.sa_sigaction = sa_fn;
        flags |= SA_SIGINFO;
    } else {
        sa.sa_handler = h;
    }
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(sig, &sa, NULL), 0);
}

static void start_lazy(void)
{
    sim_start(1, 512 * MiB, lazy_small_blocks);
}

static void sent_signals_reach_a_siginfo_handler(void)
{
    set_action(SIGSEGV, NULL, on_siginfo, 0);
    start_lazy();
    for (int i = 1; i <= 2; i++) {
        CHECK_EQ(raise(SIGSEGV), 0);
        CHECK_EQ(got_calls, i);
        CHECK_EQ(got_sig, SIGSEGV);
        CHECK_EQ(got_code, SI_TKILL);
    }
    /* From another process. */
    pid_t me = getpid(), pid = fork();
    if (pid == 0) {
        kill(me, SIGSEGV);
        _exit(0);
    }
    for (int ms = 0; got_calls < 3 && ms < 10000; ms++) usleep(1000);
    CHECK_EQ(got_calls, 3);
    CHECK_EQ(got_code, SI_USER);
    CHECK_EQ(got_pid, pid);
    waitpid(pid, NULL, 0);
}

static void plain_handler_with_resethand(void)
{
    set_action(SIGBUS, on_plain, NULL, SA_RESETHAND);
    start_lazy();
    raise(SIGBUS);
    CHECK_EQ(got_calls, 1);
    CHECK_EQ(got_sig, SIGBUS);
    raise(SIGBUS);   /* the disposition went back to the default: this ends the process */
    _exit(0);
}

static void sent_signals_reach_a_plain_handler_once_with_resethand(void)
{
    int status = in_child(plain_handler_with_resethand);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGBUS);
}

static void ignored_sigbus_stays_ignored(void)
{
    set_action(SIGBUS, SIG_IGN, NULL, 0);
    start_lazy();
    for (int i = 0; i < 3; i++) CHECK_EQ(raise(SIGBUS), 0);
    pid_t me = getpid(), pid = fork();
    if (pid == 0) {
        kill(me, SIGBUS);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    usleep(10000);
}

static void raise_segv_under_default(void)
{
    set_action(SIGSEGV, SIG_DFL, NULL, 0);
    start_lazy();
    raise(SIGSEGV);
    _exit(0);   /* swallowed */
}

static void kill_segv_under_default(void)
{
    set_action(SIGSEGV, SIG_DFL, NULL, 0);
    start_lazy();
    pid_t me = getpid(), pid = fork();
    if (pid == 0) {
        kill(me, SIGSEGV);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    for (int i = 0; i < 1000; i++) usleep(1000);
    _exit(0);   /* swallowed */
}

static void default_action_ends_the_process_with_the_signal(void)
{
    int status = in_child(raise_segv_under_default);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGSEGV);
    status = in_child(kill_segv_under_default);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGSEGV);
}

static void errno_survives_a_forwarded_signal(void)
{
    set_action(SIGSEGV, NULL, on_siginfo, 0);
    start_lazy();
    errno = 31337;
    raise(SIGSEGV);
    CHECK_EQ(got_calls, 1);
    CHECK_EQ(errno, 31337);
}

/* A real fault outside gvmshim's memory goes to the program's handler. */
static sigjmp_buf fault_jump;

static void on_fault_jump(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    got_sig = sig;
    got_code = si->si_code;
    got_calls++;
    siglongjmp(fault_jump, 1);
}

static void faults_not_ours_reach_the_program(void)
{
    set_action(SIGSEGV, NULL, on_fault_jump, SA_NODEFER);
    uintptr_t p = lazy_host_buffer(4 * MiB, 24);
    CHECK(intact(p, 4 * MiB, 24));
    CHECK_EQ(got_calls, 0);
    volatile char *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(bad != MAP_FAILED);
    if (!sigsetjmp(fault_jump, 1)) {
        (void)bad[0];
        CHECK(!"the fault was swallowed");
    }
    CHECK_EQ(got_calls, 1);
    CHECK_EQ(got_code, SEGV_ACCERR);
}

static void inactive_core_refuses_api(void)
{
    start2();
    uintptr_t p = sim_alloc(4096);
    gvm_core_set_active(false);
    CHECK_EQ(gvm_migrate((void *)p, 1), GVM_ERR_INACTIVE);
    CHECK(strlen(gvm_strerror(GVM_ERR_NO_HEADROOM)) > 0);
    CHECK(strcmp(gvm_strerror(-99), gvm_strerror(GVM_ERR_DRIVER)) != 0);
}

/* While a capture is open on a device no wait runs there: freed memory
 * is not reused before it settled, and settles once the capture ended. */
static void device_waits_refused_while_capturing(void)
{
    start2();
    CUstream s = (CUstream)(uintptr_t)0x1234;
    uintptr_t p = sim_alloc(8 * MiB);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    unsigned long syncs = simcuda_calls_of("cuCtxSynchronize");
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(gvm_capture_open(0) && gvm_capture_open(-1) && !gvm_capture_open(1));
    CHECK_EQ(gvm_topo_sync_device(0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_EQ(gvm_topo_quiesce(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    uintptr_t q = sim_alloc(8 * MiB);
    CHECK(q != p);   /* fresh memory, not the unsettled cached region */
    CHECK_EQ(simcuda_calls_of("cuCtxSynchronize"), syncs);
    CHECK_EQ(gvm_topo_sync_device(1), CUDA_SUCCESS);   /* another device waits */
    CHECK_EQ(gvm_capture_end(s), 0);
    CHECK_EQ(gvm_capture_end(s), -2);
    CHECK(!gvm_capture_open(-1));
    CHECK_EQ(gvm_heap_free(q), CUDA_SUCCESS);
    uintptr_t r = sim_alloc(8 * MiB);
    CHECK(r == p || r == q);   /* reused, settled by a wait now */
    CHECK(simcuda_calls_of("cuCtxSynchronize") > syncs);
}

/* More small frees during a capture than the pending list holds: none is
 * lost, all are reused once the capture ended (one chunk holds 8192). */
static void small_frees_past_the_pending_list_during_a_capture(void)
{
    start2();
    enum { N = 5000, SLOTS = 8192 };
    static uintptr_t p[N];
    CUstream s = (CUstream)(uintptr_t)0x1234;
    for (int i = 0; i < N; i++) p[i] = sim_alloc(256);
    long handles = simcuda_live_handles();
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    for (int i = 0; i < N; i++) CHECK_EQ(gvm_heap_free(p[i]), CUDA_SUCCESS);
    CHECK_EQ(gvm_capture_end(s), 0);
    for (int i = 0; i < SLOTS; i++) sim_alloc(256);
    CHECK_EQ(simcuda_live_handles(), handles);
}

static void *other_thread_modes(void *arg)
{
    (void)arg;
    /* Another thread's global capture forbids global mode only. */
    CHECK(gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(!gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    return NULL;
}

/* CUDA's rules for "potentially unsafe" calls, by the thread's mode; a
 * refused second begin on a capturing stream keeps the first. */
static void capture_modes_forbid_as_cuda_says(void)
{
    CUstream s = (CUstream)(uintptr_t)0x1234;
    CHECK(!gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_GLOBAL));
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    CHECK(gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK(!gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_RELAXED));
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    gvm_capture_abort(s);
    CHECK(gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK_EQ(gvm_capture_end(s), 0);
    gvm_capture_begin(1, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(!gvm_capture_forbids_unsafe(CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(gvm_capture_open(1) && !gvm_capture_open(0));
    CHECK_EQ(gvm_capture_end(s), 1);
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread_modes, NULL) == 0);
    pthread_join(t, NULL);
    CHECK_EQ(gvm_capture_end(s), 0);
}

/* What core counts as held is what the driver gave it, wherever it sits:
 * live, cached, in a chunk, pooled, on host. */
static int held_matches_the_driver(void)
{
    return gvm_held_bytes(0) == simcuda_phys_bytes(0) && gvm_held_bytes(1) == simcuda_phys_bytes(1) &&
           gvm_held_bytes(GVM_LOC_HOST) == simcuda_phys_bytes(SIMCUDA_LOC_HOST);
}

static void held_bytes_are_every_physical_byte(void)
{
    start2();
    CHECK(held_matches_the_driver());
    uintptr_t big = sim_alloc(20 * MiB), small = sim_alloc(3000), other = sim_alloc(8 * MiB);
    CHECK(held_matches_the_driver());
    CHECK_EQ(gvm_heap_free(other), CUDA_SUCCESS);          /* cached */
    CHECK_EQ(gvm_migrate((void *)big, GVM_HOST), GVM_OK);  /* device pieces pooled */
    CHECK_EQ(gvm_migrate((void *)small, 1), GVM_OK);
    CHECK(held_matches_the_driver());
    CHECK(gvm_held_bytes(0) >= 28 * MiB);
    size_t peak = gvm_held_peak(0);
    trim_all();
    CHECK(held_matches_the_driver());
    CHECK_EQ(gvm_held_peak(0), peak);
    /* A failed creation reserves nothing; a release that fails once is retried. */
    /* Every creation fails (a move retries once after trimming idle memory,
     * and creates pieces on several threads). */
    simcuda_fail_calls("cuMemCreate", 1, 1000, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(gvm_migrate((void *)big, 0), GVM_ERR_NO_MEMORY);
    simcuda_fail_calls("cuMemCreate", 0, 0, CUDA_SUCCESS);
    CHECK(held_matches_the_driver());
    CHECK_EQ(gvm_migrate((void *)big, 0), GVM_OK);
    simcuda_fail_call("cuMemRelease", 1, CUDA_ERROR_UNKNOWN);
    CHECK_EQ(gvm_heap_free(big), CUDA_SUCCESS);
    trim_all();
    CHECK(held_matches_the_driver());
}

/* A cap refuses memory before the driver is asked, for every user of
 * physical memory alike, and a cap of none is no cap. */
static void capped_tune(struct gvm_settings *s) { s->hold_limit[0] = 32 * MiB; }

static void the_cap_refuses_before_the_driver(void)
{
    sim_start(2, 512 * MiB, capped_tune);
    CHECK_EQ(gvm_held_cap(0), 32 * MiB);
    CHECK_EQ(gvm_held_cap(1), SIZE_MAX);
    uintptr_t a = sim_alloc(24 * MiB);
    unsigned long creates = simcuda_calls_of("cuMemCreate");
    struct gvm_place pl = {.loc = 0};
    uintptr_t p = 0;
    CHECK_EQ(gvm_heap_alloc(16 * MiB, 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), creates);
    CHECK(simcuda_phys_bytes(0) <= 32 * MiB);
    uintptr_t b = sim_alloc_on(1, 64 * MiB);
    CHECK_EQ(gvm_migrate((void *)b, 0), GVM_ERR_NO_MEMORY);
    CHECK_EQ(gvm_heap_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_heap_alloc(16 * MiB, 0, current_ctx(), &pl, 0, &p), CUDA_SUCCESS);
    CHECK(simcuda_phys_bytes(0) <= 32 * MiB);
}

static const struct test_case cases[] = {
    TEST_ENTRY(large_alloc_lookup_free)
    TEST_ENTRY(small_allocations_share_a_chunk)
    TEST_ENTRY(freed_regions_are_reused_without_driver_calls)
    TEST_ENTRY(freed_small_blocks_wait_for_the_device)
    TEST_ENTRY(freed_large_regions_wait_for_the_device)
    TEST_ENTRY(out_of_memory_is_the_native_error)
    TEST_ENTRY(alloc_failure_at_every_call)
    TEST_ENTRY(migrate_round_trip_keeps_data)
    TEST_ENTRY(a_full_pool_keeps_what_was_given_back_last)
    TEST_ENTRY(a_move_to_a_device_creates_its_memory_as_it_copies)
    TEST_ENTRY(memory_is_granted_to_the_devices_that_reach_it)
    TEST_ENTRY(host_memory_of_device_0_moves_to_device_1)
    TEST_ENTRY(a_failed_peer_grant_is_reported)
    TEST_ENTRY(migrating_a_small_allocation_moves_its_chunk)
    TEST_ENTRY(migrate_without_peer_access_is_refused)
    TEST_ENTRY(migrate_failure_at_every_call)
    TEST_ENTRY(migrate_to_a_full_device_fails_cleanly)
    TEST_ENTRY(alias_shows_the_same_memory)
    TEST_ENTRY(alias_of_a_small_allocation)
    TEST_ENTRY(alias_of_a_grown_allocation_follows_moves)
    TEST_ENTRY(alias_failure_at_every_call)
    TEST_ENTRY(realloc_grows_and_shrinks_in_place)
    TEST_ENTRY(realloc_grows_where_the_memory_lives)
    TEST_ENTRY(realloc_failure_at_every_call)
    TEST_ENTRY(concurrent_copies_and_moves)
    TEST_ENTRY(cache_respects_its_limit)
    TEST_ENTRY(striped_allocation_spans_devices)
    TEST_ENTRY(lazy_host_access)
    TEST_ENTRY(cpu_touch_of_host_resident_memory_is_granted)
    TEST_ENTRY(failed_grant_in_the_handler_is_retried)
    TEST_ENTRY(grant_that_keeps_failing_faults)
    TEST_ENTRY(touch_during_a_global_capture)
    TEST_ENTRY(sent_signals_reach_a_siginfo_handler)
    TEST_ENTRY(sent_signals_reach_a_plain_handler_once_with_resethand)
    TEST_ENTRY(ignored_sigbus_stays_ignored)
    TEST_ENTRY(default_action_ends_the_process_with_the_signal)
    TEST_ENTRY(errno_survives_a_forwarded_signal)
    TEST_ENTRY(faults_not_ours_reach_the_program)
    TEST_ENTRY(inactive_core_refuses_api)
    TEST_ENTRY(device_waits_refused_while_capturing)
    TEST_ENTRY(capture_modes_forbid_as_cuda_says)
    TEST_ENTRY(small_frees_past_the_pending_list_during_a_capture)
    TEST_ENTRY(held_bytes_are_every_physical_byte)
    TEST_ENTRY(the_cap_refuses_before_the_driver)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
