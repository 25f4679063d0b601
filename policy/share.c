/* Sharing a device's memory between processes (policy/share.h).
 *
 * Every participant runs a round every ROUND_MS on a thread of its own: it
 * publishes what it holds and whether it used its memory lately, sets its
 * own cap to what the budget leaves after the others, and answers the
 * others' requests for room by spilling its own least recently used
 * memory when the rule below makes it a giver. Nothing waits on another
 * process: a request is a number in the requester's slot, an answer is
 * memory released (seen as a smaller `held`), and a process that dies or
 * hangs stops answering without blocking anyone (its slot is reaped once
 * it is gone; a hung one keeps counting as holding what it holds).
 *
 * Who gives, for a request that the budget lacks `deficit` bytes for:
 * idle processes first (no use of their memory for IDLE_MS), lowest
 * weight first, each down to its share_min; then busy ones, down to their
 * weighted fair share of the budget among the busy, never one that grew
 * within RESIDENCE_MS (so two busy jobs converge to their fair shares
 * instead of taking memory back and forth). Every process computes the
 * same order from the same table, and gives only its own part. */
#define _GNU_SOURCE
#include "policy/share.h"

#include "core/held.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/topo.h"
#include "policy/policy.h"
#include "policy/share_table.h"
#include "policy/spill.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROUND_MS 20
#define IDLE_MS 1000
#define RESIDENCE_MS 1000
#define HUNG_MS 2000
#define PULL_MS 200          /* a busy process with memory off the device asks at most this often */
#define MARGIN ((size_t)512 << 20)   /* room for a new context, and what moves meanwhile */
#define MS 1000000ull

struct dev_share {
    bool on;
    struct gvm_share_file f;
    uint64_t seen_seq[GVM_SHARE_SLOTS];   /* the request of each slot already answered */
    int seen_pid[GVM_SHARE_SLOTS];
    uint64_t last_clock;
    uint64_t last_pull_ns;
    size_t outside;                       /* device memory in use outside the participants */
    int rounds;
};

static struct dev_share sh[GVM_MAX_DEVICES];
static bool started;
/* A round's state (dev_share's own fields) is the round's: one round at a
 * time, and the tables stay mapped while one runs (the exit handler takes
 * the lock before it unmaps them). */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool gvm_share_active(int d)
{
    return d >= 0 && d < GVM_MAX_DEVICES && __atomic_load_n(&sh[d].on, __ATOMIC_ACQUIRE);
}

/* ---- the numbers ---------------------------------------------------------- */

/* An explicit share_budget is what the participants hold through gvmshim
 * together: their contexts, and every other process's memory, come on top
 * (as a device limit leaves the context out). Without one, the budget is
 * whatever the device has beside the memory nobody here holds through
 * gvmshim (contexts, processes without the shim, libraries' own), less a
 * margin. */
static size_t budget_of(const struct gvm_config *cfg, int d)
{
    size_t total = gvm_topo.dev[d].total;
    size_t b = gvm_cfg_device_value(&cfg->share_budget, d, total);
    if (b != SIZE_MAX) return b;
    size_t outside = __atomic_load_n(&sh[d].outside, __ATOMIC_RELAXED);
    return total > outside + MARGIN ? total - outside - MARGIN : 0;
}

static size_t configured_limit(const struct gvm_config *cfg, int d)
{
    return gvm_cfg_device_value(&cfg->device_limit, d, gvm_topo.dev[d].total);
}

static uint64_t weight_of(const struct gvm_config *cfg) { return (uint64_t)(cfg->share_weight * 1000.0 + 0.5); }

static size_t others_held(const struct gvm_share_peer *p, int n)
{
    size_t s = 0;
    for (int i = 0; i < n; i++) s += p[i].held;
    return s;
}

/* This process's cap: what the budget leaves after the others, at least
 * its minimum, at most its own device_limit. Lowering it evicts nothing:
 * memory leaves only when another process asks (answer()) or when this
 * one allocates past it. */
static void set_cap(const struct gvm_config *cfg, int d, size_t others)
{
    size_t budget = budget_of(cfg, d);
    size_t cap = budget > others ? budget - others : 0;
    if (cap < cfg->share_min) cap = cfg->share_min;
    size_t own = configured_limit(cfg, d);
    if (cap > own) cap = own;
    if (cap != gvm_policy_limit(d)) gvm_policy_set_limit(d, cap);
}

/* ---- who gives ------------------------------------------------------------- */

struct giver {
    int pid;          /* 0: this process */
    size_t can;       /* bytes it may give */
    bool idle;
    uint64_t weight;
};

static int giver_order(const void *a, const void *b)
{
    const struct giver *x = a, *y = b;
    if (x->idle != y->idle) return x->idle ? -1 : 1;
    if (x->weight != y->weight) return x->weight < y->weight ? -1 : 1;
    if (x->can != y->can) return x->can > y->can ? -1 : 1;
    return x->pid - y->pid;
}

struct me {
    size_t held, min;
    uint64_t weight, active_ns, grew_ns;
};

/* What a participant may give: idle, all above its minimum; busy, what it
 * holds above its fair share (and nothing while it is settling in). */
static size_t can_give(size_t held, size_t min, bool idle, bool settling, uint64_t weight, uint64_t busy_weights,
                       size_t budget)
{
    size_t keep = min;
    if (!idle) {
        if (settling) return 0;
        size_t fair = busy_weights ? (size_t)((double)budget * (double)weight / (double)busy_weights) : budget;
        if (fair > keep) keep = fair;
    }
    return held > keep ? held - keep : 0;
}

/* The givers for a request of `asker` (-1: this process), in the order
 * they give; returns how many. */
static int givers(const struct gvm_share_peer *p, int n, int asker, const struct me *me, size_t budget, uint64_t now,
                  struct giver *g)
{
    int k = 0;
    uint64_t busy_weights = asker >= 0 ? p[asker].weight : me->weight;   /* the asker is busy */
    bool me_idle = now - me->active_ns > IDLE_MS * MS;
    if (asker >= 0 && !me_idle) busy_weights += me->weight;
    for (int i = 0; i < n; i++)
        if (i != asker && now - p[i].beat_ns <= HUNG_MS * MS && now - p[i].active_ns <= IDLE_MS * MS)
            busy_weights += p[i].weight;
    for (int i = 0; i < n; i++) {
        if (i == asker || now - p[i].beat_ns > HUNG_MS * MS) continue;   /* hung: counts as it holds */
        bool idle = now - p[i].active_ns > IDLE_MS * MS;
        bool settling = now - p[i].grew_ns < RESIDENCE_MS * MS;
        g[k++] = (struct giver){p[i].pid, can_give(p[i].held, p[i].min, idle, settling, p[i].weight, busy_weights,
                                                   budget), idle, p[i].weight};
    }
    if (asker >= 0) {
        bool settling = now - me->grew_ns < RESIDENCE_MS * MS;
        g[k++] = (struct giver){0, can_give(me->held, me->min, me_idle, settling, me->weight, busy_weights, budget),
                                me_idle, me->weight};
    }
    qsort(g, (size_t)k, sizeof *g, giver_order);
    return k;
}

/* This process's part of `deficit`, for the request of peer `asker`. */
static size_t my_part(const struct gvm_share_peer *p, int n, int asker, const struct me *me, size_t deficit,
                      size_t budget, uint64_t now)
{
    struct giver g[GVM_SHARE_SLOTS + 1];
    int k = givers(p, n, asker, me, budget, now, g);
    for (int i = 0; i < k && deficit; i++) {
        size_t take = g[i].can < deficit ? g[i].can : deficit;
        if (g[i].pid == 0) return take;
        deficit -= take;
    }
    return 0;
}

/* What the others would give this process now: asking when nobody can
 * would only make the allocation wait out share_wait. */
static size_t others_can_give(const struct gvm_config *cfg, int d, const struct gvm_share_peer *p, int n,
                              uint64_t now)
{
    struct me me = {gvm_policy_usage(d), cfg->share_min, weight_of(cfg), now, now};
    struct giver g[GVM_SHARE_SLOTS + 1];
    int k = givers(p, n, -1, &me, budget_of(cfg, d), now, g);
    size_t sum = 0;
    for (int i = 0; i < k; i++) sum += g[i].can;
    return sum;
}

/* ---- the round --------------------------------------------------------------- */

static void give(const struct gvm_config *cfg, int d, size_t bytes, int to)
{
    size_t held = gvm_policy_usage(d), moved = 0;
    size_t target = held > bytes ? held - bytes : 0;
    gvm_policy_set_limit(d, target < configured_limit(cfg, d) ? target : configured_limit(cfg, d));
    struct dev_share *s = &sh[d];
    CUresult rc = gvm_spill_release(d, target, &moved);
    GVM_SHARE_SET(&s->f, gave, GVM_SHARE_GET(&s->f, gave) + moved);
    GVM_SHARE_SET(&s->f, gave_to, (uint64_t)to);
    gvm_debug("share: gave %zu of %zu bytes on device %d to process %d (%d)", moved, bytes, d, to, (int)rc);
}

static void answer(const struct gvm_config *cfg, int d, const struct gvm_share_peer *p, int n, uint64_t now)
{
    struct dev_share *s = &sh[d];
    struct me me = {gvm_policy_usage(d), cfg->share_min, weight_of(cfg), GVM_SHARE_GET(&s->f, active_ns),
                    GVM_SHARE_GET(&s->f, grew_ns)};
    size_t budget = budget_of(cfg, d), all = me.held + others_held(p, n);
    for (int i = 0; i < n; i++) {
        int slot = p[i].slot;
        if (!p[i].want || (s->seen_pid[slot] == p[i].pid && s->seen_seq[slot] == p[i].want_seq)) continue;
        s->seen_pid[slot] = p[i].pid;
        s->seen_seq[slot] = p[i].want_seq;
        if (all + p[i].want <= budget) continue;
        size_t part = my_part(p, n, i, &me, all + p[i].want - budget, budget, now);
        if (!part) continue;
        give(cfg, d, part, p[i].pid);
        /* Moving memory out is no use of it: the next round must not count
         * this process busy for having given. */
        s->last_clock = __atomic_load_n(&gvm_clock, __ATOMIC_RELAXED);
    }
}

static void measure_outside(int d, const struct gvm_share_peer *p, int n)
{
    size_t used = gvm_topo_used(d);
    if (used == SIZE_MAX) return;
    size_t ours = gvm_policy_usage(d) + others_held(p, n);
    __atomic_store_n(&sh[d].outside, used > ours ? used - ours : 0, __ATOMIC_RELAXED);
}

/* A busy process whose memory was spilled asks for room to bring it back:
 * allocations alone would not (a training loop allocates nothing once it
 * runs), and the promoter brings memory in only under the cap. */
static void pull(const struct gvm_config *cfg, int d, uint64_t now, bool busy)
{
    struct dev_share *s = &sh[d];
    size_t off = gvm_held_bytes(GVM_LOC_HOST);
    if (!busy || !off || GVM_SHARE_GET(&s->f, want) || now - s->last_pull_ns < PULL_MS * MS) return;
    s->last_pull_ns = now;
    size_t own = configured_limit(cfg, d), held = gvm_policy_usage(d);
    size_t room = own > held ? own - held : 0;
    size_t want = off < room ? off : room;
    if (!want) return;
    GVM_SHARE_SET(&s->f, want, want);
    GVM_SHARE_SET(&s->f, want_seq, GVM_SHARE_GET(&s->f, want_seq) + 1);
}

static void round_device(const struct gvm_config *cfg, int d)
{
    struct dev_share *s = &sh[d];
    struct gvm_share_peer p[GVM_SHARE_SLOTS];
    uint64_t now = now_ns();
    uint64_t clock = __atomic_load_n(&gvm_clock, __ATOMIC_RELAXED);
    bool busy = clock != s->last_clock;
    s->last_clock = clock;
    GVM_SHARE_SET(&s->f, held, gvm_policy_usage(d));
    GVM_SHARE_SET(&s->f, min, cfg->share_min);
    GVM_SHARE_SET(&s->f, weight, weight_of(cfg));
    GVM_SHARE_SET(&s->f, budget, budget_of(cfg, d));
    if (busy) GVM_SHARE_SET(&s->f, active_ns, now);
    GVM_SHARE_SET(&s->f, beat_ns, now);
    int n = gvm_share_peers(&s->f, p);
    if (s->rounds++ % 5 == 0) measure_outside(d, p, n);
    /* A request of ours that the others answered (or that a pull made and
     * nobody could serve) ends after a round: the next pull asks again. */
    if (!GVM_SHARE_GET(&s->f, want)) pull(cfg, d, now, busy);
    else if (now - s->last_pull_ns >= PULL_MS * MS) GVM_SHARE_SET(&s->f, want, 0);
    answer(cfg, d, p, n, now);
    set_cap(cfg, d, others_held(p, n));
}

static void *rounds(void *arg)
{
    (void)arg;
    struct timespec nap = {0, ROUND_MS * 1000000L};
    for (;;) {
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&round_lock);
        if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&round_lock);
            return NULL;
        }
        const struct gvm_config *cfg = gvm_policy_cfg();
        for (int d = 0; d < gvm_topo.ndev; d++)
            if (gvm_share_active(d)) round_device(cfg, d);
        pthread_mutex_unlock(&round_lock);
    }
}

/* ---- requests from this process's allocations --------------------------------- */

void gvm_share_make_room(int d, size_t need)
{
    if (!gvm_share_active(d)) return;
    const struct gvm_config *cfg = gvm_policy_cfg();
    struct dev_share *s = &sh[d];
    struct gvm_share_peer p[GVM_SHARE_SLOTS];
    int n = gvm_share_peers(&s->f, p);
    size_t held = gvm_policy_usage(d), budget = budget_of(cfg, d);
    if (held + others_held(p, n) + need > budget && held + need <= configured_limit(cfg, d) &&
        others_can_give(cfg, d, p, n, now_ns())) {
        uint64_t start = now_ns(), wait = cfg->share_wait * MS;
        GVM_SHARE_SET(&s->f, active_ns, start);
        /* What this process holds now, not at its last round: the others
         * judge the request once, by the table (answer()), and one that
         * read a stale, smaller figure would find room enough and never
         * give (cpu test `share`, idle_process_gives_way). */
        GVM_SHARE_SET(&s->f, held, held);
        GVM_SHARE_SET(&s->f, want, need);
        GVM_SHARE_SET(&s->f, want_seq, GVM_SHARE_GET(&s->f, want_seq) + 1);
        struct timespec nap = {0, 2 * 1000000L};
        while (now_ns() - start < wait) {
            nanosleep(&nap, NULL);
            n = gvm_share_peers(&s->f, p);
            if (gvm_policy_usage(d) + others_held(p, n) + need <= budget_of(cfg, d)) break;
        }
        GVM_SHARE_SET(&s->f, want, 0);
        GVM_SHARE_SET(&s->f, grew_ns, now_ns());
    }
    set_cap(cfg, d, others_held(p, n));
}

/* ---- start, exit, fork ------------------------------------------------------------ */

static void runtime_dir(const struct gvm_config *cfg, char *out, size_t n)
{
    if (cfg->share_dir[0]) {
        snprintf(out, n, "%s", cfg->share_dir);
        return;
    }
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (x && x[0] == '/') snprintf(out, n, "%s/gvmshim", x);
    else snprintf(out, n, "/tmp/gvmshim-%u", (unsigned)geteuid());
    if (mkdir(out, 0700) != 0 && errno != EEXIST) gvm_debug("share: mkdir %s: %s", out, strerror(errno));
}

/* The device's name in every process, whatever CUDA_VISIBLE_DEVICES says. */
static void device_name(int d, char *out, size_t n)
{
    const int *pci = gvm_topo.dev[d].pci;
    if (pci[0] || pci[1] || pci[2]) snprintf(out, n, "share-%04x-%02x-%02x", pci[0], pci[1], pci[2]);
    else snprintf(out, n, "share-dev%d", d);
}

static void leave_at_exit(void)
{
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) return;   /* a forked child: nothing of its own */
    pthread_mutex_lock(&round_lock);
    __atomic_store_n(&started, false, __ATOMIC_RELEASE);
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (!gvm_share_active(d)) continue;
        __atomic_store_n(&sh[d].on, false, __ATOMIC_RELEASE);
        gvm_share_close(&sh[d].f);
    }
    pthread_mutex_unlock(&round_lock);
}

/* A forked child is another process: it holds no slot (the parent's
 * stays the parent's) and starts no round. */
static void after_fork_child(void)
{
    pthread_mutex_init(&round_lock, NULL);
    __atomic_store_n(&started, false, __ATOMIC_RELEASE);
    for (int d = 0; d < GVM_MAX_DEVICES; d++) __atomic_store_n(&sh[d].on, false, __ATOMIC_RELEASE);
}

void gvm_share_start(const struct gvm_config *cfg)
{
    if (!cfg->share || __atomic_exchange_n(&started, true, __ATOMIC_ACQ_REL)) return;
    char dir[GVM_CFG_PATH_MAX + 32], name[64], why[512];
    runtime_dir(cfg, dir, sizeof dir);
    int joined = 0;
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (!gvm_topo.dev[d].vmm) continue;
        struct dev_share *s = &sh[d];
        device_name(d, name, sizeof name);
        if (gvm_share_open(&s->f, dir, name, why, sizeof why)) {
            gvm_warn("share: %s: device %d keeps to this process's own limit", why, d);
            continue;
        }
        if (gvm_share_claim(&s->f, cfg->share_min, weight_of(cfg)) < 0) {
            gvm_warn("share: %s/%s has no free slot (%d processes): device %d keeps to this process's own limit",
                     dir, name, GVM_SHARE_SLOTS, d);
            gvm_share_close(&s->f);
            continue;
        }
        GVM_SHARE_SET(&s->f, beat_ns, now_ns());
        GVM_SHARE_SET(&s->f, active_ns, now_ns());
        __atomic_store_n(&s->on, true, __ATOMIC_RELEASE);
        joined++;
    }
    if (!joined) {
        __atomic_store_n(&started, false, __ATOMIC_RELEASE);
        return;
    }
    atexit(leave_at_exit);
    pthread_atfork(NULL, NULL, after_fork_child);
    /* The first round before the thread's: this allocation already sees
     * the others. */
    for (int d = 0; d < gvm_topo.ndev; d++)
        if (gvm_share_active(d)) round_device(cfg, d);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, rounds, NULL) != 0) gvm_warn("share: no round thread: memory is not shared");
    pthread_attr_destroy(&a);
}
