/* The stream-ordered pool's placement and reserve (core/poolarena.c)
 * against the driver's: a PyTorch cudaMallocAsync training run's every
 * allocation, free, synchronize and trim, logged natively on an H200
 * (driver 580.159) by scripts/probe/poolplace.c with the pool's reserve
 * after each (tests/cpu/data/pool-torch-h200.txt), replayed here: the
 * reserve must equal the driver's after every line. PyTorch sets the
 * pool's release threshold to the most it can hold, so its synchronizes
 * release nothing. Then CuPy's sequences, with the figures the driver gave
 * in gpu test gpu-cupy-pools. */
#include "core/poolarena.h"
#include "harness.h"

#include <inttypes.h>

#define MiB ((uint64_t)1 << 20)

static void the_driver_log_of_a_training_run(void)
{
    const char *path = getenv("GVM_TEST_POOL_LOG");
    CHECK(path != NULL);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    struct gvm_pool_arena a = GVM_POOL_ARENA_INIT;
    char op[16], ptr[32], stream[32];
    uint64_t size, reserved, used, live = 0;
    int lines = 0, grew = 0;
    while (fscanf(f, "%15s %31s %" SCNu64 " %31s %" SCNu64 " %" SCNu64, op, ptr, &size, stream, &reserved, &used) == 6) {
        uint64_t key = strtoull(ptr, NULL, 16), before = gvm_arena_reserved(&a);
        if (!strcmp(op, "alloc")) {
            gvm_arena_alloc(&a, key, size);
            live += size;
        } else if (!strcmp(op, "free")) {
            CHECK(gvm_arena_free(&a, key));
        } else if (!strcmp(op, "sync") || !strcmp(op, "ssync")) {
            gvm_arena_sync(&a, UINT64_MAX);
        } else if (!strcmp(op, "trim")) {
            gvm_arena_trim(&a, size);
        }
        lines++;
        grew += gvm_arena_reserved(&a) > before;
        if (gvm_arena_reserved(&a) != reserved)
            fprintf(stderr, "line %d (%s %s %" PRIu64 "): reserve %" PRIu64 ", the driver's %" PRIu64 "\n", lines, op,
                    ptr, size, gvm_arena_reserved(&a), reserved);
        CHECK_EQ(gvm_arena_reserved(&a), reserved);
    }
    fclose(f);
    printf("%d lines replayed, the reserve grew %d times\n", lines, grew);
    CHECK(lines > 700);
    CHECK(grew >= 3);
    CHECK(!a.lost);
    gvm_arena_clear(&a);
}

static void an_allocation_spans_chunks(void)
{
    struct gvm_pool_arena a = GVM_POOL_ARENA_INIT;
    gvm_arena_alloc(&a, 1, 512);
    gvm_arena_alloc(&a, 2, 100);
    CHECK_EQ(gvm_arena_reserved(&a), 32 * MiB);
    gvm_arena_alloc(&a, 3, 32 * MiB + 1);
    CHECK_EQ(gvm_arena_reserved(&a), 64 * MiB); /* not a 64 MiB chunk of its own */
    for (uint64_t k = 0; k < 64; k++) gvm_arena_alloc(&a, 100 + k, 4096 * (k + 1));
    CHECK_EQ(gvm_arena_reserved(&a), 64 * MiB);
    gvm_arena_clear(&a);
}

static void thresholds_and_trims(void)
{
    struct gvm_pool_arena a = GVM_POOL_ARENA_INIT;
    gvm_arena_alloc(&a, 1, 20 * MiB);
    CHECK(gvm_arena_free(&a, 1));
    CHECK_EQ(gvm_arena_reserved(&a), 32 * MiB);
    gvm_arena_sync(&a, 5 * MiB);
    CHECK_EQ(gvm_arena_reserved(&a), 0);
    gvm_arena_alloc(&a, 1, 72 * MiB);
    CHECK(gvm_arena_free(&a, 1));
    CHECK_EQ(gvm_arena_reserved(&a), 96 * MiB);
    gvm_arena_sync(&a, 40 * MiB);
    CHECK_EQ(gvm_arena_reserved(&a), 32 * MiB);
    gvm_arena_alloc(&a, 1, 48 * MiB);
    CHECK(gvm_arena_free(&a, 1));
    gvm_arena_sync(&a, UINT64_MAX);
    CHECK_EQ(gvm_arena_reserved(&a), 64 * MiB);
    gvm_arena_trim(&a, 40 * MiB); /* keeps at least 40 MiB: both chunks */
    CHECK_EQ(gvm_arena_reserved(&a), 64 * MiB);
    gvm_arena_trim(&a, 0);
    CHECK_EQ(gvm_arena_reserved(&a), 0);
    gvm_arena_clear(&a);
}

static void a_trim_keeps_unsettled_frees(void)
{
    struct gvm_pool_arena a = GVM_POOL_ARENA_INIT;
    gvm_arena_alloc(&a, 1, 3 * MiB);
    CHECK(gvm_arena_free(&a, 1));
    CHECK(gvm_arena_releasable(&a, 0));
    gvm_arena_trim(&a, 0);
    CHECK_EQ(gvm_arena_reserved(&a), 32 * MiB); /* queued work may still use it */
    gvm_arena_sync(&a, UINT64_MAX);
    gvm_arena_trim(&a, 0);
    CHECK_EQ(gvm_arena_reserved(&a), 0);
    CHECK(!gvm_arena_releasable(&a, 0));
    CHECK(!gvm_arena_free(&a, 1)); /* not live any more */
    gvm_arena_clear(&a);
}

static void freed_bytes_are_reused_and_an_address_again(void)
{
    struct gvm_pool_arena a = GVM_POOL_ARENA_INIT;
    gvm_arena_alloc(&a, 7, 16 * MiB);
    CHECK(gvm_arena_free(&a, 7));
    gvm_arena_alloc(&a, 7, 16 * MiB); /* the same address served again */
    gvm_arena_alloc(&a, 8, 16 * MiB);
    CHECK_EQ(gvm_arena_reserved(&a), 32 * MiB);
    CHECK(gvm_arena_free(&a, 7));
    CHECK(!gvm_arena_free(&a, 7));
    gvm_arena_sync(&a, 0);
    CHECK_EQ(gvm_arena_reserved(&a), 32 * MiB); /* key 8 still covers it */
    CHECK(gvm_arena_free(&a, 8));
    gvm_arena_sync(&a, 0);
    CHECK_EQ(gvm_arena_reserved(&a), 0);
    gvm_arena_clear(&a);
}

int main(int argc, char **argv)
{
    static const struct test_case cases[] = {
        TEST_ENTRY(the_driver_log_of_a_training_run)
        TEST_ENTRY(an_allocation_spans_chunks)
        TEST_ENTRY(thresholds_and_trims)
        TEST_ENTRY(a_trim_keeps_unsettled_frees)
        TEST_ENTRY(freed_bytes_are_reused_and_an_address_again)
    };
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
