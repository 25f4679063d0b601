/* The core against the simulated driver when the program's numbers or the
 * driver misbehave: sizes whose rounding would wrap, unmaps that keep
 * failing during teardown, an access grant refused during an allocation. */
#include "simcore.h"

#include "core/phys.h"

#include <string.h>

/* Freed allocations are unmapped at once (no cache), and their pieces go
 * to the pools: a piece that is still mapped must never get there. */
static void no_cache(struct gvm_settings *s)
{
    for (int d = 0; d < GVM_MAX_DEVICES; d++) {
        s->cache_limit[d] = 0;
        s->pool_limit[d] = 256 * MiB;
    }
}

static void start(void) { sim_start(2, 512 * MiB, no_cache); }

/* ---- sizes near SIZE_MAX ------------------------------------------------ */

static void realloc_near_size_max_keeps_the_allocation(void)
{
    start();
    size_t n = 8 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 21);
    struct leaks base = leaks_now();
    size_t huge[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 2 * MiB + 2, SIZE_MAX / 2 + 1, (size_t)1 << 62};
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        CHECK_EQ(gvm_realloc((void *)p, huge[i]), GVM_ERR_NO_HEADROOM);
        gvm_info info;
        CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
        CHECK_EQ(info.size, n);
        CHECK(intact(p, n, 21));
        CHECK_EQ(simcuda_location_of(p + n - 1), 0);
    }
    CHECK_NO_LEAK(base);
    /* A small allocation's slot bound is checked before its size is stored. */
    uintptr_t s = sim_alloc(300);
    CHECK_EQ(gvm_realloc((void *)s, SIZE_MAX), GVM_ERR_NO_HEADROOM);
    CHECK_EQ(gvm_realloc((void *)s, (size_t)1 << 32), GVM_ERR_NO_HEADROOM);
    struct gvm_ref ref;
    CHECK(gvm_heap_find(s, &ref));
    CHECK_EQ(ref.size, 300);
}

static void alloc_near_size_max_is_out_of_memory(void)
{
    start();
    struct leaks base = leaks_now();
    struct gvm_place pl = {.loc = 0};
    size_t huge[] = {SIZE_MAX, SIZE_MAX - 2 * MiB + 1, SIZE_MAX / 2, (size_t)1 << 48};
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        uintptr_t p = 0;
        CHECK_EQ(gvm_heap_alloc(huge[i], 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_EQ(p, 0);
    }
    CHECK_NO_LEAK(base);
}

/* ---- unmaps that fail during teardown ----------------------------------- */

/* An unmap that fails once is retried: nothing leaks. */
static void a_passing_unmap_failure_is_retried(void)
{
    start();
    struct leaks base = leaks_now();
    uintptr_t p = sim_alloc(4 * MiB);
    simcuda_fail_call("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    CHECK_EQ(simcuda_orphan_mappings(), 0);
    CHECK_NO_LEAK(base);
}

/* After the first allocation's piece could not be unmapped, a new one of
 * the same size must get other memory: writing it leaves the old bytes. */
static void check_not_reused(uintptr_t old, size_t n, uint32_t seed)
{
    CHECK_EQ(simcuda_orphan_mappings(), 0);
    CHECK(simcuda_location_of(old) != SIMCUDA_LOC_UNMAPPED);   /* left mapped, deliberately */
    CHECK(intact(old, n, seed));
    uintptr_t q = sim_alloc(n);
    CHECK(q != old);
    fill(q, n, seed + 1);
    CHECK(intact(old, n, seed));
    CHECK_EQ(gvm_heap_free(q), CUDA_SUCCESS);
    trim_all();
    CHECK_EQ(simcuda_orphan_mappings(), 0);
    CHECK(intact(old, n, seed));
}

static void free_with_a_stuck_unmap_leaks_but_frees_nothing_mapped(void)
{
    start();
    size_t n = 4 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 31);
    long resv = simcuda_live_reservations();
    simcuda_fail_calls("cuMemUnmap", 1, 2, CUDA_ERROR_UNKNOWN);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    CHECK_EQ(simcuda_live_reservations(), resv);   /* the range stays reserved */
    check_not_reused(p, n, 31);
}

static void unalias_with_a_stuck_unmap_leaks_but_frees_nothing_mapped(void)
{
    start();
    size_t n = 4 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 41);
    void *al = NULL;
    CHECK_EQ(gvm_alias((void *)p, &al), GVM_OK);
    simcuda_fail_calls("cuMemUnmap", 1, 2, CUDA_ERROR_UNKNOWN);
    CHECK_EQ(gvm_unalias(al), GVM_OK);
    CHECK_EQ(simcuda_orphan_mappings(), 0);
    CHECK(intact((uintptr_t)al, n, 41));
    /* The memory still shows through the stuck alias: freeing the
     * allocation must not pool it for the next one. */
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    check_not_reused((uintptr_t)al, n, 41);
}

/* Pieces that served a migration keep a staging mapping in the pool;
 * destroying one whose staging unmap keeps failing must not free that
 * range under it. */
static void pool_trim_with_a_stuck_staging_unmap_frees_nothing_mapped(void)
{
    start();
    size_t n = 8 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 51);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);    /* the host pieces go to the pool, staged */
    CHECK(gvm_phys_pooled(GVM_LOC_HOST) > 0);
    simcuda_fail_calls("cuMemUnmap", 1, 2, CUDA_ERROR_UNKNOWN);
    gvm_heap_trim(GVM_LOC_HOST);
    CHECK_EQ(simcuda_orphan_mappings(), 0);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 0);
    CHECK(intact(p, n, 51));
}

/* A shrink whose unmap keeps failing: the piece is leaked, never pooled
 * for another allocation while the old range still maps it. */
static void shrink_with_a_stuck_unmap_does_not_pool_the_piece(void)
{
    start();
    uintptr_t p = sim_alloc(4 * MiB);
    CHECK_EQ(gvm_realloc((void *)p, 8 * MiB), GVM_OK);   /* a second 4 MiB piece */
    fill(p, 8 * MiB, 61);
    simcuda_fail_calls("cuMemUnmap", 1, 2, CUDA_ERROR_UNKNOWN);
    CHECK_EQ(gvm_realloc((void *)p, 4 * MiB), GVM_OK);
    CHECK_EQ(simcuda_orphan_mappings(), 0);
    CHECK(intact(p, 8 * MiB, 61));
    uintptr_t q = sim_alloc(4 * MiB);
    fill(q, 4 * MiB, 62);
    CHECK(intact(p, 8 * MiB, 61));
    CHECK_EQ(gvm_heap_free(q), CUDA_SUCCESS);
    CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
    trim_all();
    CHECK_EQ(simcuda_orphan_mappings(), 0);
}

/* ---- errors a native cuMemAlloc would give ------------------------------ */

/* gvmshim's own calls fail with errors that describe its calls (an access
 * grant refused: invalid value); the program asked for a valid allocation
 * and gets what the native call gives when memory cannot be had. */
static void driver_errors_become_native_alloc_errors(void)
{
    start();
    struct gvm_place pl = {.loc = 0};
    const char *calls[] = {"cuMemSetAccess", "cuMemMap", "cuMemCreate", "cuMemAddressReserve"};
    size_t sizes[] = {3000, 40 * MiB};
    for (int c = 0; c < 4; c++)
        for (int s = 0; s < 2; s++) {
            struct leaks base = leaks_now();
            uintptr_t p = 0;
            simcuda_fail_call(calls[c], 1, CUDA_ERROR_INVALID_VALUE);
            CHECK_EQ(gvm_heap_alloc(sizes[s], 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
            simcuda_fail_call(calls[c], 1, CUDA_ERROR_INVALID_DEVICE);
            CHECK_EQ(gvm_heap_alloc(sizes[s], 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
            simcuda_fail_call(calls[c], 0, CUDA_SUCCESS);
            CHECK_NO_LEAK(base);
        }
    /* Errors the native call gives too pass unchanged. */
    CUresult native[] = {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
                         CUDA_ERROR_NOT_PERMITTED, CUDA_ERROR_ILLEGAL_ADDRESS};
    for (size_t i = 0; i < sizeof native / sizeof *native; i++) {
        uintptr_t p = 0;
        simcuda_fail_call("cuMemSetAccess", 1, native[i]);
        CHECK_EQ(gvm_heap_alloc(40 * MiB, 0, current_ctx(), &pl, 0, &p), native[i]);
    }
    uintptr_t p = 0;
    CHECK_EQ(gvm_heap_alloc(0, 0, current_ctx(), &pl, 0, &p), CUDA_ERROR_INVALID_VALUE);
}

static const struct test_case cases[] = {
    TEST_ENTRY(realloc_near_size_max_keeps_the_allocation)
    TEST_ENTRY(alloc_near_size_max_is_out_of_memory)
    TEST_ENTRY(a_passing_unmap_failure_is_retried)
    TEST_ENTRY(free_with_a_stuck_unmap_leaks_but_frees_nothing_mapped)
    TEST_ENTRY(unalias_with_a_stuck_unmap_leaks_but_frees_nothing_mapped)
    TEST_ENTRY(pool_trim_with_a_stuck_staging_unmap_frees_nothing_mapped)
    TEST_ENTRY(shrink_with_a_stuck_unmap_does_not_pool_the_piece)
    TEST_ENTRY(driver_errors_become_native_alloc_errors)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
