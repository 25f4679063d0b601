/* What VMM calls cost the program: growth and first allocations in few
 * large pieces (grow_block), the host pool filled ahead of need on
 * background threads (host_prefill), and pauses that take ready host
 * memory. Counted with the simulated driver's calls; every new path is
 * failed at each driver call it makes: the allocation stays as it was, and
 * nothing leaks. */
#include "simcore.h"
#include "reach.h"

#include "core/heap.h"
#include "core/held.h"
#include "core/move.h"
#include "core/phys.h"
#include "core/phys_batch.h"
#include "core/settings.h"
#include "policy/config.h"
#include "policy/place.h"
#include "policy/policy.h"
#include "policy/tags.h"

#include <pthread.h>
#include <string.h>

/* Small pieces, so that a few MiB make many of them; idle memory given
 * back at once, so the driver's counters show what is live. */
static void small_blocks(struct gvm_settings *s)
{
    s->block_size = 2 * MiB;
    s->grow_block = 64 * MiB;
    s->headroom = 8.0;
    for (int d = 0; d < GVM_MAX_DEVICES; d++) s->cache_limit[d] = s->pool_limit[d] = 0;
    s->host_pool = 0;
}

static void start(void) { sim_start(2, 512 * MiB, small_blocks); }

static int pieces(uintptr_t p)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    return info.pieces;
}

static size_t size_of(uintptr_t p)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    return info.size;
}

/* ---- growth and first allocations --------------------------------------- */

static void a_first_allocation_is_few_pieces(void)
{
    start();
    simcuda_reset_counts();
    uintptr_t p = sim_alloc(96 * MiB);
    /* 64 + 32 MiB, where the block size alone would make 48 pieces. */
    CHECK_EQ(pieces(p), 2);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), 2);
    CHECK_EQ(simcuda_calls_of("cuMemMap"), 2);
    CHECK_EQ(simcuda_calls_of("cuMemSetAccess"), 1);
    fill(p, 96 * MiB, 3);
    CHECK(intact(p, 96 * MiB, 3));
}

static void growth_in_place_is_one_create_map_and_access(void)
{
    start();
    size_t n = 64 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 7);
    simcuda_reset_counts();
    CHECK_EQ(gvm_realloc((void *)p, 2 * n), GVM_OK);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), 1);
    CHECK_EQ(simcuda_calls_of("cuMemMap"), 1);
    CHECK_EQ(simcuda_calls_of("cuMemSetAccess"), 1);
    CHECK_EQ(simcuda_calls_of("cuMemAddressReserve"), 0);   /* in place */
    CHECK_EQ(pieces(p), 2);
    CHECK_EQ(size_of(p), 2 * n);
    CHECK(intact(p, n, 7));
    fill(p, 2 * n, 8);   /* the new half is mapped and writable */
    CHECK(intact(p, 2 * n, 8));
}

/* Memory that moves keeps the pieces moves pipeline: tagged memory (what
 * gvm_pause moves), and memory living off its device. */
static void memory_that_moves_keeps_the_block_size(void)
{
    start();
    struct gvm_place pl = {.loc = 0};
    uintptr_t t = 0;
    CHECK_EQ(gvm_heap_alloc(16 * MiB, 0, current_ctx(), &pl, 1, &t), CUDA_SUCCESS);
    CHECK_EQ(pieces(t), 8);
    CHECK_EQ(gvm_realloc((void *)t, 20 * MiB), GVM_OK);
    CHECK_EQ(pieces(t), 10);
    uintptr_t h = sim_alloc(8 * MiB);
    CHECK_EQ(pieces(h), 1);
    fill(h, 8 * MiB, 9);
    CHECK_EQ(gvm_migrate((void *)h, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_realloc((void *)h, 12 * MiB), GVM_OK);
    CHECK_EQ(pieces(h), 6);   /* the move cut it in block-size pieces, the growth too */
    CHECK_EQ(simcuda_location_of(h + 11 * MiB), SIMCUDA_LOC_HOST);
    CHECK(intact(h, 8 * MiB, 9));
}

/* Each driver call of a growth fails in turn: the allocation keeps its
 * size, its data and its memory; nothing the growth made is left. */
static void growth_failing_at_every_call_changes_nothing(uintptr_t p, size_t n, size_t to)
{
    for (unsigned long k = 1;; k += test_sweep_step()) {
        struct leaks base = leaks_now();
        simcuda_fail_nth(k, CUDA_ERROR_UNKNOWN);
        gvm_status st = gvm_realloc((void *)p, to);
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(intact(p, n, 12));
        if (st == GVM_OK) break;
        CHECK_EQ(st, GVM_ERR_DRIVER);
        CHECK_EQ(size_of(p), n);
        CHECK_NO_LEAK(base);
        CHECK(k < 1000);
    }
    CHECK_EQ(size_of(p), to);
}

static void large_piece_growth_failing_half_way(void)
{
    start();
    size_t n = 32 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 12);
    /* 32 -> 224 MiB: pieces of 64, 64, 64 MiB. */
    growth_failing_at_every_call_changes_nothing(p, n, 224 * MiB);
    CHECK_EQ(pieces(p), 4);
}

static void host_growth_on_threads_failing_half_way(void)
{
    start();
    size_t n = 8 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 12);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    /* 16 host pieces of 2 MiB, created on several threads. */
    growth_failing_at_every_call_changes_nothing(p, n, 40 * MiB);
    CHECK_EQ(simcuda_location_of(p + 39 * MiB), SIMCUDA_LOC_HOST);
}

static void growth_past_the_cap_is_refused_before_the_driver(void)
{
    start();
    gvm_held_set_cap(0, 100 * MiB);
    uintptr_t p = sim_alloc(32 * MiB);
    fill(p, 32 * MiB, 12);
    struct leaks base = leaks_now();
    CHECK_EQ(gvm_realloc((void *)p, 160 * MiB), GVM_ERR_NO_MEMORY);
    CHECK_NO_LEAK(base);
    CHECK(intact(p, 32 * MiB, 12));
    CHECK_EQ(size_of(p), 32 * MiB);
    CHECK(gvm_held_bytes(0) <= 100 * MiB);
}

/* The first move of a large piece: one source group, many destination
 * pieces; failed at every call, it puts the large piece back. */
static void first_move_of_a_large_piece_failing_at_every_call(void)
{
    start();
    size_t n = 48 * MiB;
    uintptr_t p = sim_alloc(n);
    CHECK_EQ(pieces(p), 2);   /* 32 + 16 MiB */
    fill(p, n, 71);
    for (unsigned long k = 1;; k += test_sweep_step()) {
        struct leaks base = leaks_now();
        simcuda_fail_nth(k, CUDA_ERROR_UNKNOWN);
        gvm_status st = gvm_migrate((void *)p, GVM_HOST);
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(intact(p, n, 71));
        if (st == GVM_OK) break;
        CHECK_EQ(st, GVM_ERR_DRIVER);
        CHECK_EQ(simcuda_location_of(p), 0);
        CHECK_EQ(simcuda_location_of(p + n - 1), 0);
        CHECK_EQ(pieces(p), 2);
        CHECK_NO_LEAK(base);
        CHECK(k < 2000);
    }
    CHECK_EQ(simcuda_location_of(p + n - 1), SIMCUDA_LOC_HOST);
    CHECK_EQ(pieces(p), 24);   /* cut in block-size pieces for the moves to come */
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);
    CHECK(intact(p, n, 71));
}

/* ---- remapping while the copy runs ---------------------------------------- */

/* Mapping host memory at a region costs about what copying it does, so a
 * move reads its sources through a second mapping and remaps the region
 * while the copy runs. Seen from the driver: when the move first waits for
 * its copy, the region's new pieces are already mapped. The wait fails
 * here, and the move must still come back whole. */
static void the_region_is_remapped_while_its_copy_runs(void)
{
    start();
    size_t n = 8 * MiB, pieces_to = n / (2 * MiB);   /* host pieces of the block size */
    uintptr_t p = sim_alloc(n);
    fill(p, n, 13);
    CHECK_EQ(pieces(p), 1);
    struct leaks base = leaks_now();
    simcuda_reset_counts();
    simcuda_fail_call("cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_ERR_DRIVER);
    /* Besides staging mappings (one range each: the source's and the new
     * pieces'), the host pieces were mapped at the region before the wait,
     * and the device piece came back with the rollback. */
    CHECK_EQ(simcuda_calls_of("cuMemAddressReserve"), 1 + pieces_to);
    CHECK_EQ(simcuda_calls_of("cuMemMap") - simcuda_calls_of("cuMemAddressReserve"), pieces_to + 1);
    CHECK_EQ(simcuda_location_of(p), 0);
    CHECK(intact(p, n, 13));
    CHECK_NO_LEAK(base);   /* the staging mapping went with the failed move */
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(simcuda_location_of(p + n - 1), SIMCUDA_LOC_HOST);
    CHECK(intact(p, n, 13));
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);
    CHECK(intact(p, n, 13));
}

/* A host source without a staging mapping (placed on host when it was
 * allocated) is copied from the region's addresses and remapped after the
 * copy: mapping it a second time would cost what the overlap saves. */
static void host_sources_without_staging_keep_the_old_order(void)
{
    start();
    size_t n = 8 * MiB;
    uintptr_t p = sim_alloc(n);
    fill(p, n, 14);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);   /* staged host sources: early */
    CHECK(intact(p, n, 14));
    struct gvm_place on_host = {.loc = GVM_LOC_HOST};
    uintptr_t q = 0;
    CHECK_EQ(gvm_heap_alloc(n, 0, current_ctx(), &on_host, 0, &q), CUDA_SUCCESS);
    fill(q, n, 15);
    simcuda_reset_counts();
    CHECK_EQ(gvm_migrate((void *)q, 0), GVM_OK);
    /* Staging ranges for the device pieces only, none for the source. */
    CHECK_EQ(simcuda_calls_of("cuMemAddressReserve"), pieces(q));
    CHECK(intact(q, n, 15));
    CHECK_EQ(simcuda_location_of(q), 0);
}

/* ---- the host pool filled ahead of need ------------------------------------ */

static void host_pool_of(struct gvm_settings *s, size_t pool)
{
    small_blocks(s);
    s->host_pool = pool;
}

static void pool_64m(struct gvm_settings *s) { host_pool_of(s, 64 * MiB); }

static void prefill_fills_the_pool_once_and_a_move_takes_it(void)
{
    sim_start(2, 512 * MiB, pool_64m);
    uintptr_t p = sim_alloc(32 * MiB);
    fill(p, 32 * MiB, 5);
    gvm_phys_prefill(GVM_LOC_HOST);
    gvm_phys_prefill_wait(false);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 64 * MiB);
    CHECK_EQ(simcuda_phys_bytes(GVM_LOC_HOST), 64 * MiB);
    simcuda_reset_counts();
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), 0);   /* ready memory, staged */
    /* One range only: the device source's staging mapping, read by the
     * copy while the region's own addresses are remapped. */
    CHECK_EQ(simcuda_calls_of("cuMemAddressReserve"), 1);
    CHECK(intact(p, 32 * MiB, 5));
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 32 * MiB);
    /* Once per process: the pool is not topped up behind the moves. */
    gvm_phys_prefill(GVM_LOC_HOST);
    gvm_phys_prefill_wait(false);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 32 * MiB);
    CHECK_EQ(gvm_migrate((void *)p, 0), GVM_OK);
    CHECK(intact(p, 32 * MiB, 5));
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 64 * MiB);   /* given back for the next move */
}

static void prefill_failing_ends_quietly_without_a_leak(void)
{
    const char *calls[] = {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"};
    for (size_t c = 0; c < sizeof calls / sizeof *calls; c++) {
        pid_t pid = fork();
        if (pid == 0) {
            sim_start(2, 512 * MiB, pool_64m);
            struct leaks base = leaks_now();
            simcuda_fail_call(calls[c], 5, CUDA_ERROR_OUT_OF_MEMORY);
            gvm_phys_prefill(GVM_LOC_HOST);
            gvm_phys_prefill_wait(false);
            /* Fewer pieces than asked, each whole and staged. */
            CHECK(gvm_phys_pooled(GVM_LOC_HOST) < 64 * MiB);
            CHECK_EQ(simcuda_phys_bytes(GVM_LOC_HOST), gvm_phys_pooled(GVM_LOC_HOST));
            CHECK_EQ(gvm_held_bytes(GVM_LOC_HOST), gvm_phys_pooled(GVM_LOC_HOST));
            /* A move still works, creating what the pool lacks. */
            uintptr_t p = sim_alloc(80 * MiB);
            fill(p, 80 * MiB, 6);
            CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
            CHECK(intact(p, 80 * MiB, 6));
            CHECK_EQ(gvm_heap_free(p), CUDA_SUCCESS);
            CHECK_NO_LEAK(base);
            CHECK_EQ(gvm_held_bytes(GVM_LOC_HOST), 0);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

static void pool_64m_capped(struct gvm_settings *s)
{
    pool_64m(s);
    s->hold_limit[gvm_loc_slot(GVM_LOC_HOST)] = 20 * MiB;
}

static void prefill_stays_under_the_host_cap(void)
{
    sim_start(2, 512 * MiB, pool_64m_capped);
    gvm_phys_prefill(GVM_LOC_HOST);
    gvm_phys_prefill_wait(false);
    CHECK(gvm_held_bytes(GVM_LOC_HOST) <= 20 * MiB);
    CHECK(gvm_held_peak(GVM_LOC_HOST) <= 20 * MiB);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), gvm_held_bytes(GVM_LOC_HOST));
    /* The pool gives way to a move that needs the room. */
    uintptr_t p = sim_alloc(16 * MiB);
    fill(p, 16 * MiB, 2);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    CHECK(intact(p, 16 * MiB, 2));
}

/* Pieces the cap refuses while the pool holds pieces of other sizes: the
 * pool gives them back and the pieces are made, under the cap. */
static void pooled_pieces_of_other_sizes_give_way_to_the_cap(void)
{
    sim_start(2, 512 * MiB, pool_64m_capped);
    struct gvm_phys *a = NULL, *b = NULL;
    CHECK_EQ(gvm_phys_get(GVM_LOC_HOST, 8 * MiB, true, &a), CUDA_SUCCESS);
    CHECK_EQ(gvm_phys_get(GVM_LOC_HOST, 8 * MiB, true, &b), CUDA_SUCCESS);
    gvm_phys_put(a);
    gvm_phys_put(b);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 16 * MiB);
    size_t sizes[2] = {6 * MiB, 6 * MiB};
    struct gvm_phys *out[2] = {NULL, NULL};
    CHECK_EQ(gvm_phys_get_many(GVM_LOC_HOST, sizes, 2, true, out), CUDA_SUCCESS);
    CHECK(out[0] && out[1] && out[0]->size == 6 * MiB && out[1]->size == 6 * MiB && out[0]->staging);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 0);
    CHECK_EQ(gvm_held_bytes(GVM_LOC_HOST), 12 * MiB);
    CHECK(gvm_held_peak(GVM_LOC_HOST) <= 20 * MiB);
    gvm_phys_put(out[0]);
    gvm_phys_put(out[1]);
}

/* Moves take from the pool while the fill adds to it (TSan). */
struct mover {
    uintptr_t p;
    int rounds;
};

static void *move_back_and_forth(void *arg)
{
    struct mover *m = arg;
    for (int i = 0; i < m->rounds; i++) {
        CHECK_EQ(gvm_migrate((void *)m->p, GVM_HOST), GVM_OK);
        CHECK_EQ(gvm_migrate((void *)m->p, 0), GVM_OK);
    }
    return NULL;
}

static void pool_256m(struct gvm_settings *s) { host_pool_of(s, 256 * MiB); }

static void moves_during_a_fill(void)
{
    sim_start(2, 512 * MiB, pool_256m);
    struct mover m[2] = {{sim_alloc(24 * MiB), 6}, {sim_alloc(10 * MiB), 6}};
    fill(m[0].p, 24 * MiB, 31);
    fill(m[1].p, 10 * MiB, 32);
    /* A first round trip cuts them in block-size pieces: the count to keep. */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(gvm_migrate((void *)m[i].p, GVM_HOST), GVM_OK);
        CHECK_EQ(gvm_migrate((void *)m[i].p, 0), GVM_OK);
    }
    struct leaks base = leaks_now();
    pthread_t t[2];
    gvm_phys_prefill(GVM_LOC_HOST);
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&t[i], NULL, move_back_and_forth, &m[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    gvm_phys_prefill_wait(false);
    CHECK(intact(m[0].p, 24 * MiB, 31) && intact(m[1].p, 10 * MiB, 32));
    CHECK(gvm_phys_pooled(GVM_LOC_HOST) <= 256 * MiB);
    CHECK_NO_LEAK(base);
}

/* Creating pinned memory holds the driver: while a move is under way the
 * fill creates nothing more (pieces already being created may still land),
 * and it finishes once the move is over. */
static void the_fill_steps_aside_while_a_move_runs(void)
{
    sim_start(2, 512 * MiB, pool_256m);
    uintptr_t p = sim_alloc(8 * MiB);
    struct gvm_region *r = gvm_heap_region(p);
    pthread_mutex_lock(&r->op);
    gvm_move_enter(r);
    gvm_phys_prefill(GVM_LOC_HOST);
    struct timespec settle = {0, 50 * 1000 * 1000};
    nanosleep(&settle, NULL);
    size_t during = gvm_phys_pooled(GVM_LOC_HOST);
    nanosleep(&settle, NULL);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), during);   /* nothing more while the move runs */
    CHECK(during <= 4 * MiB);                            /* at most the piece under way */
    gvm_move_leave(r);
    pthread_mutex_unlock(&r->op);
    /* Moves come in bursts: the fill waits for a quiet stretch (100 ms). */
    struct timespec moment = {0, 30 * 1000 * 1000};
    nanosleep(&moment, NULL);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), during);
    gvm_phys_prefill_wait(false);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 256 * MiB);
}

static void a_stopped_fill_creates_no_more(void)
{
    sim_start(2, 512 * MiB, pool_256m);
    gvm_phys_prefill(GVM_LOC_HOST);
    gvm_phys_prefill_wait(true);   /* as at exit */
    size_t held = gvm_held_bytes(GVM_LOC_HOST);
    CHECK(held <= 256 * MiB);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), held);
}

/* A trim while the fill runs (a cudaDeviceReset soon after start): each
 * release waits for the creation under way, as on a GPU, and the fill puts
 * a piece back for each that goes. The trim takes what was pooled when it
 * began and ends; the fill then completes the pool. On two H100s the trim
 * chased the fill for 8.9 s, 30 GB created and released. */
static void a_trim_beside_a_fill_takes_only_what_was_pooled(void)
{
    sim_start(2, 512 * MiB, pool_256m);
    /* 128 pieces of 2 MiB, 1 ms each; a release takes 3 ms, in which the
     * fill puts back more than it took. */
    simcuda_set_host_pin_us(1000, 3000);
    gvm_phys_prefill(GVM_LOC_HOST);
    struct timespec tick = {0, 1000 * 1000};
    while (gvm_phys_pooled(GVM_LOC_HOST) < 8 * MiB) nanosleep(&tick, NULL);
    simcuda_reset_counts();
    size_t freed = gvm_phys_trim(GVM_LOC_HOST, SIZE_MAX);
    unsigned long released = simcuda_calls_of("cuMemRelease");
    gvm_phys_prefill_wait(false);
    simcuda_set_host_pin_us(0, 0);
    CHECK(freed >= 8 * MiB && freed <= 256 * MiB);
    CHECK_EQ(released, freed / (2 * MiB));
    /* Created since the trim began: what it took back and what the pool
     * still lacked then, at most the pool's worth (one more: a creation
     * under way when the counts were reset). A trim that chased the fill
     * took more than the pool held, and the fill made it all again. */
    CHECK(simcuda_calls_of("cuMemCreate") <= 256 / 2 + 1);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 256 * MiB);
    CHECK_EQ(gvm_held_bytes(GVM_LOC_HOST), 256 * MiB);
}

/* ---- pause takes the prefilled memory -------------------------------------- */

static struct gvm_config cfg;

static void start_policy(void (*tune)(struct gvm_settings *))
{
    gvm_config_defaults(&cfg);
    sim_start(2, 512 * MiB, tune);
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

static void pool_64m_auto(struct gvm_settings *s)
{
    pool_64m(s);
    s->host_prefill = GVM_HOST_PREFILL_AUTO;
}

static void a_pushed_tag_readies_host_memory_for_the_pause(void)
{
    start_policy(pool_64m_auto);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 0);
    CHECK_EQ(gvm_tag_push("weights"), GVM_OK);
    uintptr_t w = palloc(48 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(w, 48 * MiB, 41);
    gvm_phys_prefill_wait(false);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 64 * MiB);
    simcuda_reset_counts();
    CHECK_EQ(gvm_pause("weights", GVM_PAUSE_KEEP), GVM_OK);
    CHECK_EQ(simcuda_calls_of("cuMemCreate"), 0);
    CHECK_EQ(where(w), GVM_HOST);
    CHECK(intact(reach(w), 48 * MiB, 41));
    CHECK_EQ(gvm_resume("weights"), GVM_OK);
    CHECK_EQ(where(w), 0);
    CHECK(intact(reach(w), 48 * MiB, 41));
}

static void pool_16m_auto(struct gvm_settings *s)
{
    pool_64m_auto(s);
    s->host_pool = 16 * MiB;
}

/* More than the pool: the rest is created at the pause. A failure at any
 * driver call of the pause leaves the data where it was, intact. */
static void a_pause_larger_than_the_pool_failing_at_every_call(void)
{
    start_policy(pool_16m_auto);
    CHECK_EQ(gvm_tag_push("kv"), GVM_OK);
    uintptr_t a = palloc(24 * MiB), b = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(a, 24 * MiB, 51);
    fill(b, 8 * MiB, 52);
    gvm_phys_prefill_wait(false);
    for (unsigned long k = 1;; k += test_sweep_step()) {
        size_t dev0 = simcuda_phys_bytes(0);
        simcuda_fail_nth(k, CUDA_ERROR_UNKNOWN);
        gvm_status st = gvm_pause("kv", GVM_PAUSE_KEEP);
        simcuda_fail_nth(0, CUDA_SUCCESS);
        CHECK(intact(reach(a), 24 * MiB, 51) && intact(reach(b), 8 * MiB, 52));
        if (st == GVM_OK) break;
        CHECK_EQ(st, GVM_ERR_DRIVER);
        /* What moved before the failure stays paused on host, the rest on
         * the device; resume brings back what moved. */
        CHECK(simcuda_phys_bytes(0) <= dev0);
        CHECK_EQ(gvm_resume("kv"), GVM_OK);
        CHECK_EQ(where(a), 0);
        CHECK_EQ(where(b), 0);
        CHECK(k < 2000);
    }
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(gvm_resume("kv"), GVM_OK);
    CHECK(intact(reach(a), 24 * MiB, 51) && intact(reach(b), 8 * MiB, 52));
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    trim_all();
    CHECK_EQ(simcuda_live_mappings(), 0);
    CHECK_EQ(simcuda_live_handles(), 0);
}

/* A tag pushed before the program's first CUDA call: the fill starts with
 * the core. */
static void a_hint_before_the_core_starts_is_kept(void)
{
    gvm_phys_prefill_hint(GVM_LOC_HOST);
    sim_start(2, 512 * MiB, pool_64m_auto);
    gvm_phys_prefill_wait(false);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 64 * MiB);
}

/* Off: no sign starts a fill. */
static void no_fill_when_off(void)
{
    sim_start(2, 512 * MiB, pool_64m);
    gvm_phys_prefill_hint(GVM_LOC_HOST);
    uintptr_t p = sim_alloc(8 * MiB);
    CHECK_EQ(gvm_migrate((void *)p, GVM_HOST), GVM_OK);
    gvm_phys_prefill_wait(false);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 0);
}

/* pause_pool: what a resume gives back stays ready for the next pause,
 * past host_pool; off, the pool keeps host_pool only. */
static void paused_memory_stays_ready_for_the_next_pause(bool keep)
{
    start_policy(pool_16m_auto);
    cfg.pause_pool = keep;
    CHECK_EQ(gvm_tag_push("kv"), GVM_OK);
    uintptr_t a = palloc(40 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(a, 40 * MiB, 61);
    gvm_phys_prefill_wait(false);
    for (int cycle = 0; cycle < 3; cycle++) {
        simcuda_reset_counts();
        CHECK_EQ(gvm_pause("kv", GVM_PAUSE_KEEP), GVM_OK);
        if (cycle > 0 && keep) CHECK_EQ(simcuda_calls_of("cuMemCreate"), 0);
        /* Host memory made again: created, or the process's own pages
         * registered (a pause maps its copy only once reached). */
        if (cycle > 0 && !keep)
            CHECK(simcuda_calls_of("cuMemCreate") + simcuda_calls_of("cuMemHostRegister_v2") > 0);
        CHECK_EQ(where(a), GVM_HOST);
        CHECK(intact(reach(a), 40 * MiB, 61));
        CHECK_EQ(gvm_resume("kv"), GVM_OK);
        CHECK_EQ(where(a), 0);
        CHECK(intact(reach(a), 40 * MiB, 61));
        CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), keep ? 40 * MiB : 16 * MiB);
    }
    CHECK_EQ(gvm_policy_free(a), CUDA_SUCCESS);
    trim_all();
    CHECK_EQ(simcuda_live_handles(), 0);
}

static void a_resume_keeps_host_memory_for_the_next_pause(void) { paused_memory_stays_ready_for_the_next_pause(true); }

static void without_pause_pool_the_pool_keeps_its_limit(void) { paused_memory_stays_ready_for_the_next_pause(false); }

static const struct test_case cases[] = {
    TEST_ENTRY(a_first_allocation_is_few_pieces)
    TEST_ENTRY(growth_in_place_is_one_create_map_and_access)
    TEST_ENTRY(memory_that_moves_keeps_the_block_size)
    TEST_ENTRY(large_piece_growth_failing_half_way)
    TEST_ENTRY(host_growth_on_threads_failing_half_way)
    TEST_ENTRY(growth_past_the_cap_is_refused_before_the_driver)
    TEST_ENTRY(first_move_of_a_large_piece_failing_at_every_call)
    TEST_ENTRY(the_region_is_remapped_while_its_copy_runs)
    TEST_ENTRY(host_sources_without_staging_keep_the_old_order)
    TEST_ENTRY(prefill_fills_the_pool_once_and_a_move_takes_it)
    TEST_ENTRY(prefill_failing_ends_quietly_without_a_leak)
    TEST_ENTRY(prefill_stays_under_the_host_cap)
    TEST_ENTRY(pooled_pieces_of_other_sizes_give_way_to_the_cap)
    TEST_ENTRY(moves_during_a_fill)
    TEST_ENTRY(the_fill_steps_aside_while_a_move_runs)
    TEST_ENTRY(a_stopped_fill_creates_no_more)
    TEST_ENTRY(a_trim_beside_a_fill_takes_only_what_was_pooled)
    TEST_ENTRY(a_pushed_tag_readies_host_memory_for_the_pause)
    TEST_ENTRY(a_pause_larger_than_the_pool_failing_at_every_call)
    TEST_ENTRY(a_hint_before_the_core_starts_is_kept)
    TEST_ENTRY(no_fill_when_off)
    TEST_ENTRY(a_resume_keeps_host_memory_for_the_next_pause)
    TEST_ENTRY(without_pause_pool_the_pool_keeps_its_limit)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
