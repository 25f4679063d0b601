#include "core/perthread.h"

#include <stdlib.h>

/* At thread exit. A thread that attaches again afterwards (a later
 * destructor calling the driver) sets the key again, and glibc runs this
 * again. */
static void release(void *arg)
{
    struct gvm_perthread *b = arg;
    *b->owner = NULL;
    __atomic_store_n(&b->idle, 1, __ATOMIC_RELEASE);
}

/* Each list makes its key on its first attach, under its lock. */
static void make_key(struct gvm_perthread_list *l)
{
    if (!l->have_key) l->have_key = pthread_key_create(&l->key, release) == 0;
}

struct gvm_perthread *gvm_perthread_attach(struct gvm_perthread_list *l, struct gvm_perthread **mine)
{
    struct gvm_perthread *b;
    pthread_mutex_lock(&l->lock);
    make_key(l);
    for (b = l->head; b && !__atomic_load_n(&b->idle, __ATOMIC_ACQUIRE); b = b->next) {
    }
    if (b) {
        __atomic_store_n(&b->idle, 0, __ATOMIC_RELAXED);
    } else if ((b = calloc(1, l->size))) {
        b->next = l->head;
        __atomic_store_n(&l->head, b, __ATOMIC_RELEASE);
    }
    bool keyed = l->have_key;
    pthread_mutex_unlock(&l->lock);
    if (!b) return NULL;
    b->owner = mine;
    /* Without the exit hook the block is never handed on; it still works. */
    if (keyed) pthread_setspecific(l->key, b);
    *mine = b;
    return b;
}

void gvm_perthread_after_fork(struct gvm_perthread_list *l, const struct gvm_perthread *mine)
{
    pthread_mutex_init(&l->lock, NULL);
    for (struct gvm_perthread *b = l->head; b; b = b->next)
        if (b != mine) __atomic_store_n(&b->idle, 1, __ATOMIC_RELAXED);
}
