#include "core/live.h"

#include "core/ring.h"

#include <pthread.h>

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gvm_region live = {.lru_prev = &live, .lru_next = &live};

void gvm_live_add(struct gvm_region *r)
{
    pthread_mutex_lock(&live_lock);
    gvm_ring_insert_tail(&live, r);
    pthread_mutex_unlock(&live_lock);
}

void gvm_live_remove(struct gvm_region *r)
{
    pthread_mutex_lock(&live_lock);
    gvm_ring_remove(r);
    pthread_mutex_unlock(&live_lock);
}

void gvm_live_for_each(void (*fn)(struct gvm_region *r, void *arg), void *arg)
{
    pthread_mutex_lock(&live_lock);
    for (struct gvm_region *r = live.lru_next; r != &live;) {
        struct gvm_region *next = r->lru_next;
        fn(r, arg);
        r = next;
    }
    pthread_mutex_unlock(&live_lock);
}
