/* Prefetch: a demand swap stalls the launch that needs a spilled region
 * for its copies (2.73 ms a 128 MiB region to host and back, on an H100),
 * while the kernels queued before it could have hidden them: measured with
 * swaps scheduled by hand (scripts/probe/overlap.py), issuing each swap as
 * soon as its victim's kernel was queued took the read loop at 1.25x the
 * limit from 1.47x to 1.36x the link bound. Here a launch hands the next
 * swap to one background thread, which takes the regions, waits for their
 * last uses queued so far (core/relocate.h, core/usemark.h: after taking
 * them, so a launch that reaches one either is covered by that wait or
 * waits for the swap), and swaps. Only lazy spills (spill_host_map=lazy): the region going out is
 * one no launch names now, and a kernel reaching it through a pointer that
 * is not an argument may then read it mid-copy, where a lazily spilled
 * region already faults for it. */
#include "policy/prefetch.h"

#include "core/capture.h"
#include "core/log.h"
#include "core/phys.h"
#include "core/relocate.h"
#include "core/shelf.h"
#include "core/stats.h"
#include "core/topo.h"
#include "core/trace.h"
#include "policy/policy.h"
#include "policy/recur.h"
#include "policy/trial.h"
#include "policy/victims.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define MAX_OUT 8

struct request {
    struct gvm_region *in, *out[MAX_OUT];
    int to[MAX_OUT], nout, device;
    uint32_t in_next, out_next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, idle = PTHREAD_COND_INITIALIZER;
static struct request req;
static bool started;
static bool posted;   /* a request posted or running; written under lock, read without it by launches */
/* Planning walks the live regions twice: after a launch that found no
 * swap worth making, the next few do not look again. */
#define REST 4
static unsigned rest;

/* The trial (policy/trial.h): its state changes at step ends, under
 * trial_lock; launches read `trying_on` only. */
static pthread_mutex_t trial_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gvm_trial trial;
static uint32_t trial_period, step_start;   /* the period timed, the launch that began the step */
static bool trying_on = true;

static bool enabled(const struct gvm_config *cfg)
{
    return cfg && cfg->prefetch && cfg->promote && cfg->spill_host_map == GVM_CFG_SPILL_HOST_MAP_LAZY &&
           gvm_topo.host_vmm && __atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED);
}

static bool listed(const struct gvm_region *r, struct gvm_region *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (list[i] == r) return true;
    return false;
}

/* The lazily spilled region of `device` the learned loop needs soonest
 * (none the launch reached: it brought them back or mapped them). */
static struct gvm_region *next_in(int device, uint32_t period, uint32_t *when)
{
    struct gvm_victims c = {0};
    gvm_victims_unmapped(&c);   /* oldest use first */
    struct gvm_region *best = NULL;
    uint32_t soonest = GVM_RECUR_NEVER;
    for (size_t i = 0; i < c.n; i++) {
        struct gvm_region *r = c.v[i].r;
        if (GVM_LOAD(r->home) != device || GVM_LOAD(r->kind) == GVM_REGION_ALIAS) continue;
        uint32_t t = gvm_recur_next_use(r, period);
        if (!best || t < soonest) {
            best = r;
            soonest = t;
        }
    }
    gvm_victims_free(&c);
    *when = soonest;
    return best;
}


/* Builds the swap for the launch's device into *q; false when there is none
 * worth making now. */
static bool plan(const struct gvm_config *cfg, int device, struct request *q)
{
    if (device < 0 || device >= gvm_topo.ndev) return false;
    /* Only with the loop learned: without it the most recently used
     * region is the guess for the one needed last, and the launch's own
     * small buffers (outputs, scalars, used by every launch) look as recent
     * as the weight it read: on an H100 the read loop ran at twice its
     * step time, sending them out after every launch. */
    uint32_t period = cfg->learn_loop ? gvm_recur_period() : 0, in_next = 0;
    if (!period) return false;
    struct gvm_region *in = next_in(device, period, &in_next);
    if (!in || in_next == GVM_RECUR_NEVER) return false;   /* nothing the loop needs soon */
    /* The regions leaving hand their memory to `in` as they go: room for
     * one unit is enough (core/shelf.h). */
    size_t need = GVM_LOAD(in->mapped), room = gvm_policy_room(device), margin = gvm_shelf_swap_room(need);
    if (room < margin && gvm_phys_pooled(device) < margin - room) return false;   /* no room kept for a swap */
    /* The launch's own regions may leave: it is queued, and the swap waits
     * for it; in a sweep the weight just read is the one needed last. */
    struct gvm_victims v = {0};
    bool ok = gvm_victims_for_swap(device, need, GVM_LOAD(in->last_use), &in, 1, &v) > 0 && v.n <= MAX_OUT;
    *q = (struct request){.in = in, .device = device, .in_next = in_next, .out_next = v.n ? v.v[0].next_use : 0};
    for (size_t i = 0; ok && i < v.n; i++) {
        size_t bytes = GVM_LOAD(v.v[i].r->mapped);
        /* Nothing leaves that the loop needs before `in`. */
        ok = v.v[i].next_use > in_next && gvm_policy_fits(GVM_LOC_HOST, bytes);
        q->out[q->nout] = v.v[i].r;
        q->to[q->nout++] = GVM_LOC_HOST;
    }
    gvm_victims_free(&v);
    return ok;
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!posted) pthread_cond_wait(&wake, &lock);
        struct request q = req;
        pthread_mutex_unlock(&lock);
        CUresult rc = CUDA_ERROR_NOT_PERMITTED;
        if (!gvm_capture_open(-1)) {
            int gone = gvm_relocate_swap(q.in, q.device, q.out, q.to, q.nout, GVM_RELOC_SHELVE, &rc);
            if (rc == CUDA_SUCCESS) gvm_stat_inc(prefetches);
            gvm_debug("prefetch: %#lx to device %d, %d region(s) out: %s (needed in %u launches, first out in %u)",
                      (unsigned long)q.in->base, q.device, gone, rc == CUDA_SUCCESS ? "done" : "not done",
                      q.in_next, q.out_next);
        }
        pthread_mutex_lock(&lock);
        __atomic_store_n(&posted, false, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&idle);
    }
    return NULL;
}

/* A forked child has no thread: it starts its own when it needs one. */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&idle, NULL);
    pthread_mutex_init(&trial_lock, NULL);
    posted = started = false;
    rest = 0;
}

/* Called with lock held. */
static bool start(void)
{
    static bool hooked;
    if (started) return true;
    if (!hooked && pthread_atfork(NULL, NULL, after_fork_child) == 0) hooked = true;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&t, &attr, worker, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!started) gvm_warn("cannot start the prefetch thread; spilled memory comes back when launches need it");
    return started;
}

/* Two periods of one loop: the learned period may move between the
 * loop's and a multiple of it (policy/recur.c), and the trial goes on
 * timing steps of the one it began with. */
static bool same_loop(uint32_t a, uint32_t b)
{
    if (a == b) return a;   /* every launch asks: no division then */
    return a && b && (a % b == 0 || b % a == 0);
}

/* Whether this step prefetches: at a step's end (a period of launches
 * after its start) the trial times it. A new loop starts a new trial. */
static bool trial_allows(void)
{
    uint32_t period = gvm_recur_period(), now = gvm_recur_launches();
    if (!period) return false;
    uint32_t timed = __atomic_load_n(&trial_period, __ATOMIC_RELAXED);
    if (same_loop(timed, period) && now - __atomic_load_n(&step_start, __ATOMIC_RELAXED) < timed)
        return __atomic_load_n(&trying_on, __ATOMIC_RELAXED);
    if (pthread_mutex_trylock(&trial_lock) != 0) return __atomic_load_n(&trying_on, __ATOMIC_RELAXED);
    bool on;
    if (!same_loop(trial_period, period)) {
        gvm_trial_reset(&trial);
        on = gvm_trial_step(&trial, gvm_trace_now());
        __atomic_store_n(&trial_period, period, __ATOMIC_RELAXED);
        __atomic_store_n(&step_start, now, __ATOMIC_RELAXED);
    } else if (now - step_start >= trial_period) {
        /* More than a step since the last look: the time is not one step's. */
        if (now - step_start >= 2 * trial_period) gvm_trial_lost(&trial);
        on = gvm_trial_step(&trial, gvm_trace_now());
        __atomic_store_n(&step_start, now, __ATOMIC_RELAXED);
    } else {
        on = trial.on;
    }
    __atomic_store_n(&trying_on, on, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&trial_lock);
    return on;
}

void gvm_prefetch_after(struct gvm_region *const *used, int n)
{
    const struct gvm_config *cfg = gvm_policy_cfg();
    if (!n || !enabled(cfg)) return;
    if (cfg->prefetch_trial && !trial_allows()) return;
    if (__atomic_load_n(&posted, __ATOMIC_ACQUIRE)) return;
    unsigned left = __atomic_load_n(&rest, __ATOMIC_RELAXED);
    if (left) {
        __atomic_store_n(&rest, left - 1, __ATOMIC_RELAXED);   /* racy by design: a count, not a lock */
        return;
    }
    struct request q;
    int device = GVM_LOAD(used[0]->home);
    if (!gvm_spill_list_has(&cfg->spill, GVM_SPILL_HOST) || gvm_capture_open(-1) || !plan(cfg, device, &q)) {
        __atomic_store_n(&rest, REST, __ATOMIC_RELAXED);
        return;
    }
    pthread_mutex_lock(&lock);
    if (!posted && start()) {
        req = q;
        __atomic_store_n(&posted, true, __ATOMIC_RELEASE);
        pthread_cond_signal(&wake);
    }
    pthread_mutex_unlock(&lock);
}

static bool moving_one_of(struct gvm_region *const *used, int n)
{
    if (!posted) return false;
    if (listed(req.in, used, n)) return true;
    for (int i = 0; i < req.nout; i++)
        if (listed(req.out[i], used, n)) return true;
    return false;
}

void gvm_prefetch_wait(struct gvm_region *const *used, int n)
{
    if (!__atomic_load_n(&posted, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&lock);
    while (moving_one_of(used, n)) pthread_cond_wait(&idle, &lock);
    pthread_mutex_unlock(&lock);
}

void gvm_prefetch_drain(void)
{
    pthread_mutex_lock(&lock);
    while (posted) pthread_cond_wait(&idle, &lock);
    pthread_mutex_unlock(&lock);
}
