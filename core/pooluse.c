#include "core/pooluse.h"

#include "core/log.h"
#include "core/poolarena.h"

#include <pthread.h>

struct pool_figures {
    uint64_t used, used_high, reserved_high;
    struct gvm_pool_arena arena; /* where the driver would have put them */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_figures pools[GVM_MAX_DEVICES];
static unsigned keeping; /* pools a synchronize could change; read without the lock */

static bool on_device(int dev) { return dev >= 0 && dev < GVM_MAX_DEVICES; }

static uint64_t reserved_of(const struct pool_figures *p) { return gvm_arena_reserved(&p->arena); }

static bool keeps_extra(const struct pool_figures *p) { return gvm_arena_releasable(&p->arena, p->used); }

/* Recounts the pools a synchronize would change, after a change to p; lock
 * held. */
static void note_change(struct pool_figures *p, bool was_keeping)
{
    bool now = keeps_extra(p);
    if (now != was_keeping) __atomic_store_n(&keeping, keeping + (now ? 1u : -1u), __ATOMIC_RELAXED);
    if (p->used > p->used_high) p->used_high = p->used;
    if (reserved_of(p) > p->reserved_high) p->reserved_high = reserved_of(p);
}

void gvm_pooluse_alloc(int dev, uintptr_t key, uint64_t counted)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    gvm_arena_alloc(&p->arena, key, counted);
    p->used += counted;
    gvm_debug("pool of device %d: %#lx, %lu bytes; reserves %lu", dev, (unsigned long)key, (unsigned long)counted,
              (unsigned long)reserved_of(p));
    note_change(p, was);
    pthread_mutex_unlock(&lock);
}

void gvm_pooluse_free(int dev, uintptr_t key, uint64_t counted)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    p->used -= counted < p->used ? counted : p->used;
    bool known = gvm_arena_free(&p->arena, key);
    gvm_debug("pool of device %d: %#lx freed%s", dev, (unsigned long)key, known ? "" : ", not placed");
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

/* A synchronize (down to threshold `to`) or a trim (keeping at least `to`). */
static void release(int dev, uint64_t to, bool trim)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    uint64_t before = reserved_of(p);
    if (trim)
        gvm_arena_trim(&p->arena, to);
    else
        gvm_arena_sync(&p->arena, to);
    gvm_debug("pool of device %d %s %lu: reserves %lu, was %lu", dev, trim ? "trimmed to" : "synchronized, threshold",
              (unsigned long)to, (unsigned long)reserved_of(p), (unsigned long)before);
    note_change(p, was);
    pthread_mutex_unlock(&lock);
}

void gvm_pooluse_sync(int dev, uint64_t threshold) { release(dev, threshold, false); }

void gvm_pooluse_trim(int dev, uint64_t keep) { release(dev, keep, true); }

uint64_t gvm_pooluse_read(int dev, enum gvm_pooluse_figure f)
{
    if (!on_device(dev)) return 0;
    pthread_mutex_lock(&lock);
    const struct pool_figures *p = &pools[dev];
    uint64_t v = f == GVM_POOLUSE_USED            ? p->used
                 : f == GVM_POOLUSE_USED_HIGH     ? p->used_high
                 : f == GVM_POOLUSE_RESERVED      ? reserved_of(p)
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
    if (high == GVM_POOLUSE_RESERVED_HIGH) p->reserved_high = reserved_of(p);
    pthread_mutex_unlock(&lock);
}

void gvm_pooluse_drop(int dev)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&lock);
    struct pool_figures *p = &pools[dev];
    bool was = keeps_extra(p);
    gvm_arena_clear(&p->arena);
    *p = (struct pool_figures){0};
    note_change(p, was);
    pthread_mutex_unlock(&lock);
}
