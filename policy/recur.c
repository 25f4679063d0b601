/* Recurrence: the period of the program's launch sequence, voted by the
 * launches that repeat, and each region's next use predicted from it. */
#include "policy/recur.h"

#include "core/log.h"
#include "core/stats.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

/* Launch signatures remembered by value (a hash table whose entries are
 * simply overwritten) and in order (a ring: a period is checked against
 * it, so it holds more than two of the longest period learned). A period
 * is adopted when the last CHECK launches repeat the CHECK before them at
 * that distance (all but SLACK of them), and dropped when fewer than
 * HOLD of the last WINDOW launches repeat the one a period before. */
#define SIGS 4096
#define RING (1u << 16)
#define CHECK 32
#define SLACK 4
#define WINDOW 64
#define HOLD 48

static bool learning;        /* since the first spill */
static uint32_t launch_no;   /* the latest launch's number */
static uint32_t period;
static uint64_t ring[RING];

/* Taken with trylock only: a launch another thread is voting beside
 * skips its vote (votes are many; launches must not queue here). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct sig {
    uint64_t sig;
    uint32_t at;
} sigs[SIGS];
static unsigned seen, held;   /* launches of the current window, and those that repeated */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

static uint64_t ring_at(uint32_t no) { return __atomic_load_n(&ring[no % RING], __ATOMIC_RELAXED); }

/* How many of the last `span` launches up to `now` differ from those
 * `gap` before them, counted up to `most` + 1 (more than the ring holds:
 * all). A signature recurring at a short distance (a loss, a scalar: a
 * chunk used by every other launch) does not make a period: the launches
 * between differ. */
static uint32_t misses(uint32_t now, uint32_t gap, uint32_t span, uint32_t most)
{
    if (!gap || span > RING / 2 || gap > RING / 2 - span || now <= gap + span) return UINT32_MAX;
    uint32_t n = 0;
    for (uint32_t j = 0; j < span && n <= most; j++) n += ring_at(now - j) != ring_at(now - j - gap);
    return n;
}

static uint32_t max3(uint32_t a, uint32_t b, uint32_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* A multiple of the period repeats wherever the period does, so it
 * replaces the period only where it is exact and the period is not (a
 * loop whose steps differ in turn: an allocator handing out two buffers
 * alternately), judged over two of its own lengths: twice fewer misses.
 * Judged as any other proposal, a multiple won on a tie or one miss
 * fewer: where its key's votes in between were skipped (a launch beside
 * another thread's vote skips its own; PyTorch launches the backward pass
 * from a thread of its own), and wherever a loop's order wobbles (two
 * launches trading places now and then). The default-Adam step's period
 * went 273, 546 ... 2457 launches, the fused-Adam step's 162, 324, 162,
 * 648, 486 ... (H100s, 2026-11-27), each change restarting the prefetch's
 * trial. */
static bool clearly_better_multiple(uint32_t now, uint32_t gap, uint32_t known)
{
    uint32_t span = CHECK > 2 * gap ? CHECK : 2 * gap, mine = misses(now, gap, span, SLACK);
    if (mine > SLACK) return false;
    return misses(now, known, span, 2 * mine) > 2 * mine;
}

/* Whether `gap`, which repeated at this launch, should replace the known
 * period: it must repeat over the last CHECK launches (all but SLACK),
 * and, with a period known, be a clearly better multiple (above) or
 * explain the launches of the longer of the two better, or as well and be
 * shorter. So a loop inside the step (a burst of one launch repeated: a
 * period of 1) does not replace the step's period, while a shorter loop
 * the program moved to does, though the old period, a multiple of it,
 * goes on matching. */
static bool better(uint32_t now, uint32_t gap, uint32_t known)
{
    if (!known) return misses(now, gap, CHECK, SLACK) <= SLACK;
    if (gap % known == 0) return clearly_better_multiple(now, gap, known);
    uint32_t span = max3(CHECK, gap, known), mine = misses(now, gap, span, SLACK);
    if (mine > SLACK) return false;
    uint32_t theirs = misses(now, known, span, mine);
    return mine < theirs || (mine == theirs && gap < known);
}

/* The key a launch is looked up by: its signature and the KEY_RUN - 1
 * before it. Kernels come in runs on the same allocations (the read
 * loop's GEMV is two launches on its weight, input and output, on an
 * H100): keyed by its own signature, the second of a run finds its twin
 * one launch back and the first finds the previous step's second, a
 * period less one back, and no launch ever votes for the period. */
#define KEY_RUN 4

static uint64_t key_at(uint32_t now)
{
    uint64_t k = 0;
    for (uint32_t j = 0; j < KEY_RUN && j < now; j++) k = mix(k, ring_at(now - j));
    return k | 1;
}

/* Called with lock held. */
static void vote(uint32_t now)
{
    uint32_t known = __atomic_load_n(&period, __ATOMIC_RELAXED);
    if (known) {
        held += ring_at(now) == ring_at(now - known);
        if (++seen == WINDOW) {
            if (held < HOLD) {   /* the loop changed */
                __atomic_store_n(&period, 0, __ATOMIC_RELAXED);
                gvm_debug("loop: the period of %u launches stopped repeating (%u of %d)", known, held, WINDOW);
            }
            seen = held = 0;
        }
    }
    uint64_t key = key_at(now);
    struct sig *s = &sigs[(key >> 32) % SIGS];
    if (s->sig == key) {
        uint32_t gap = now - s->at;
        if (gap != known && better(now, gap, known)) {
            __atomic_store_n(&period, gap, __ATOMIC_RELAXED);
            gvm_stat_inc(loops_learned);
            gvm_debug("loop: learned a period of %u launches (launch %u)", gap, now);
            seen = held = 0;
        }
    }
    *s = (struct sig){key, now};
}

/* Uses at most this many launches apart make one run (a region launched
 * on every few launches: a scalar, a small pool chunk, a weight its
 * kernels pass over twice); at most an eighth of the period, so that a
 * short loop keeps every use apart. A region remembers where its runs
 * started and ended: with each use remembered, sixteen uses of a small
 * chunk in one phase of a step hid the rest of the step, and the chunk
 * looked needed a period ahead while in use every few launches (a
 * prefetch sent such chunks out at every launch on an H100, 2026-11-26,
 * and the training step ran at three times its time). */
#define RUN_GAP 8

static uint32_t run_gap(void)
{
    uint32_t per = __atomic_load_n(&period, __ATOMIC_RELAXED) / 8;
    return per < RUN_GAP ? per : RUN_GAP;
}

/* Loads and stores, not read-modify-writes: two threads launching on one
 * region at once may record one use, which costs a prediction nothing
 * that matters, where a locked add would cost every launch. */
static void note_use(struct gvm_region *r, uint32_t now, uint32_t gap)
{
    uint32_t i = __atomic_load_n(&r->nlaunches, __ATOMIC_RELAXED);
    if (i) {
        uint32_t *end = &r->launch_ends[(i - 1) % GVM_REGION_LAUNCHES];
        if (now - __atomic_load_n(end, __ATOMIC_RELAXED) <= gap) {
            __atomic_store_n(end, now, __ATOMIC_RELAXED);   /* the run goes on */
            return;
        }
    }
    __atomic_store_n(&r->launches[i % GVM_REGION_LAUNCHES], now, __ATOMIC_RELAXED);
    __atomic_store_n(&r->launch_ends[i % GVM_REGION_LAUNCHES], now, __ATOMIC_RELAXED);
    __atomic_store_n(&r->nlaunches, i + 1, __ATOMIC_RELAXED);
}

void gvm_recur_start(void)
{
    if (!__atomic_load_n(&learning, __ATOMIC_RELAXED)) __atomic_store_n(&learning, true, __ATOMIC_RELAXED);
}

void gvm_recur_launch(struct gvm_region *const *used, int n)
{
    if (!__atomic_load_n(&learning, __ATOMIC_RELAXED)) return;
    uint32_t now = __atomic_add_fetch(&launch_no, 1, __ATOMIC_RELAXED);
    uint64_t sig = 1;
    uint32_t gap = run_gap();
    for (int i = 0; i < n; i++) {
        note_use(used[i], now, gap);
        sig = mix(sig, GVM_LOAD(used[i]->base));
    }
    sig |= 1;   /* never 0, an empty slot */
    __atomic_store_n(&ring[now % RING], sig, __ATOMIC_RELAXED);
    if (pthread_mutex_trylock(&lock) != 0) return;
    vote(now);
    pthread_mutex_unlock(&lock);
}

uint32_t gvm_recur_launches(void) { return __atomic_load_n(&launch_no, __ATOMIC_RELAXED); }

uint32_t gvm_recur_period(void) { return __atomic_load_n(&period, __ATOMIC_RELAXED); }

/* Each run of uses one period ago comes again: one that started less
 * than a period ago starts again a period after its start; one that
 * started before and ended less than a period ago is going on now (the
 * region is needed within the run gap). The soonest of these counts. With
 * more runs in a period than are remembered, the oldest are lost and the
 * estimate is later than the truth. A buffer not launched on yet counts
 * as used just now (a framework allocates what it is about to use):
 * needed a period ahead, after those not needed at all. */
uint32_t gvm_recur_next_use(const struct gvm_region *r, uint32_t per)
{
    uint32_t now = __atomic_load_n(&launch_no, __ATOMIC_RELAXED);
    uint32_t n = __atomic_load_n(&r->nlaunches, __ATOMIC_RELAXED);
    uint32_t k = n < GVM_REGION_LAUNCHES ? n : GVM_REGION_LAUNCHES, best = GVM_RECUR_NEVER;
    if (!k) return per;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t ago = now - __atomic_load_n(&r->launches[j], __ATOMIC_RELAXED);
        uint32_t ended = now - __atomic_load_n(&r->launch_ends[j], __ATOMIC_RELAXED);
        if (ago < per && per - ago < best) best = per - ago;
        else if (ago >= per && ended < per) return 1;
    }
    return best;
}

void gvm_recur_hold_votes(bool hold)
{
    if (hold)
        pthread_mutex_lock(&lock);
    else
        pthread_mutex_unlock(&lock);
}

void gvm_recur_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(sigs, 0, sizeof sigs);
    for (uint32_t i = 0; i < RING; i++) __atomic_store_n(&ring[i], 0, __ATOMIC_RELAXED);
    seen = held = 0;
    __atomic_store_n(&period, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&learning, false, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
}
