#include "core/pooluse.h"

#include <pthread.h>

struct pool_figures {
    uint64_t used, reserved, used_high, reserved_high;
    uint64_t unsettled; /* freed bytes no synchronize has settled yet */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_figures pools[GVM_MAX_DEVICES];
static unsigned keeping; /* pools above their floor; read without the lock */

static bool on_device(int dev) { return dev >= 0 && dev < GVM_MAX_DEVICES; }

static uint64_t round_up(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }

/* What live allocations hold at least: their bytes in whole chunks. */
static uint64_t floor_of(const struct pool_figures *p) { return round_up(p->used, GVM_POOLUSE_GRANULE); }

/* Whether a synchronize would change p: it keeps more than its floor, or
 * frees to settle. */
static bool keeps_extra(const struct pool_figures *p) { return p->reserved > floor_of(p) || p->unsettled; }

/* Recounts the pools a synchronize would change, after a change to p; lock
 * held. */
static void note_change(struct pool_figures *p, bool was_keeping)
{
    bool now = keeps_extra(p);
    if (now != was_keeping) __atomic_store_n(&keeping, keeping + (now ? 1u : -1u), __ATOMIC_RELAXED);
    if (p->used > p->used_high) p->used_high = p->used;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
}

void gvm_pooluse_alloc(int dev, uint64_t counted)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    /* The pool's free bytes hold it, or it maps a new chunk of its own. */
    if (p->reserved - p->used < counted) p->reserved += round_up(counted, GVM_POOLUSE_GRANULE);
    p->used += counted;
    if (p->unsettled > p->reserved - p->used) p->unsettled = p->reserved - p->used;
    note_change(p, was);
    pthread_mutex_unlock(&lock);
}

void gvm_pooluse_free(int dev, uint64_t counted)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    p->used -= counted < p->used ? counted : p->used;
    p->unsettled += counted;
    if (p->unsettled > p->reserved - p->used) p->unsettled = p->reserved - p->used;
    note_change(p, was);
    pthread_mutex_unlock(&lock);
}

bool gvm_pooluse_releasable(void) { return __atomic_load_n(&keeping, __ATOMIC_RELAXED) != 0; }

bool gvm_pooluse_keeps_extra(int dev)
{
    if (!on_device(dev)) return false;
    pthread_mutex_lock(&lock);
    bool extra = keeps_extra(&pools[dev]);
    pthread_mutex_unlock(&lock);
    return extra;
}

/* Lowers p's reserve to target, never below floor; lock held. */
static void release_to(struct pool_figures *p, uint64_t target, uint64_t floor)
{
    bool was = keeps_extra(p);
    if (target < floor) target = floor;
    if (target < p->reserved) p->reserved = target;
    note_change(p, was);
}

void gvm_pooluse_sync(int dev, uint64_t threshold)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    p->unsettled = 0;
    note_change(p, was);
    /* The pool releases whole chunks until it holds no more than the
     * threshold, as a trim to it would (a 32 MiB chunk kept above a
     * smaller threshold would defeat it). */
    if (p->reserved > threshold) release_to(p, threshold / GVM_POOLUSE_GRANULE * GVM_POOLUSE_GRANULE, floor_of(p));
    pthread_mutex_unlock(&lock);
}

void gvm_pooluse_trim(int dev, uint64_t keep)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    /* Freed bytes no synchronize settled may still be in use by queued
     * work: the driver cannot release them yet. */
    uint64_t floor = round_up(p->used + p->unsettled, GVM_POOLUSE_GRANULE);
    if (p->reserved > keep) release_to(p, keep / GVM_POOLUSE_GRANULE * GVM_POOLUSE_GRANULE, floor);
    pthread_mutex_unlock(&lock);
}

uint64_t gvm_pooluse_read(int dev, enum gvm_pooluse_figure f)
{
    if (!on_device(dev)) return 0;
    pthread_mutex_lock(&lock);
    const struct pool_figures *p = &pools[dev];
    uint64_t v = f == GVM_POOLUSE_USED            ? p->used
                 : f == GVM_POOLUSE_USED_HIGH     ? p->used_high
                 : f == GVM_POOLUSE_RESERVED      ? p->reserved
                                                  : p->reserved_high;
    pthread_mutex_unlock(&lock);
    return v;
}

void gvm_pooluse_reset_high(int dev, enum gvm_pooluse_figure high)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    if (high == GVM_POOLUSE_USED_HIGH) p->used_high = p->used;
    if (high == GVM_POOLUSE_RESERVED_HIGH) p->reserved_high = p->reserved;
    pthread_mutex_unlock(&lock);
}

void gvm_pooluse_drop(int dev)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    *p = (struct pool_figures){0};
    note_change(p, was);
    pthread_mutex_unlock(&lock);
}
