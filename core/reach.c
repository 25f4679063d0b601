#include "core/reach.h"

#include "core/core_state.h"
#include "core/heap.h"
#include "core/live.h"
#include "core/region.h"
#include "core/topo.h"

#include <pthread.h>
#include <stdlib.h>

/* One walk at a time: a second caller for the same pair returns only once
 * the first has granted everything. */
static pthread_mutex_t reach_lock = PTHREAD_MUTEX_INITIALIZER;

/* Region records are recycled, never freed: a record taken here stays
 * readable, and its generation tells whether it is still the same one. */
struct taken {
    struct gvm_region *r;
    unsigned gen;
};

struct owned {
    int owner;
    size_t n, cap;
    struct taken *t;
};

static void collect(struct gvm_region *r, void *arg)
{
    struct owned *o = arg;
    if (r->kind == GVM_REGION_ALIAS || r->device != o->owner) return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        struct taken *nt = realloc(o->t, cap * sizeof *nt);
        if (!nt) return;
        o->t = nt;
        o->cap = cap;
    }
    o->t[o->n++] = (struct taken){r, __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE)};
}

static CUresult grant_all(struct owned *o, int dev)
{
    CUresult first = CUDA_SUCCESS;
    for (size_t i = 0; i < o->n; i++) {
        struct gvm_region *r = o->t[i].r;
        /* r->op: a move maps memory under it, with the old grants if it
         * began before the new bit was set; it is finished here. */
        pthread_mutex_lock(&r->op);
        if (__atomic_load_n(&r->gen, __ATOMIC_ACQUIRE) == o->t[i].gen) {
            CUresult rc = gvm_region_grant(r, dev);
            if (rc != CUDA_SUCCESS && first == CUDA_SUCCESS) first = rc;
        }
        pthread_mutex_unlock(&r->op);
    }
    return first;
}

CUresult gvm_reach_enable(int owner, int dev)
{
    if (owner < 0 || owner >= GVM_MAX_DEVICES || dev < 0 || dev >= GVM_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    uint32_t bit = 1u << dev;
    if (!gvm_core_active()) {
        /* Nothing is mapped yet; the start keeps the bit (gvm_topo_init). */
        __atomic_fetch_or(&gvm_topo.reach[owner], bit, __ATOMIC_ACQ_REL);
        return CUDA_SUCCESS;
    }
    if (__atomic_load_n(&gvm_topo.reach[owner], __ATOMIC_ACQUIRE) & bit) return CUDA_SUCCESS;
    pthread_mutex_lock(&reach_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!(__atomic_fetch_or(&gvm_topo.reach[owner], bit, __ATOMIC_ACQ_REL) & bit)) {
        /* Before the walk: what is mapped after it reads the new bit.
         * Cached regions keep their mappings out of the live list: they
         * are given back instead of walked. */
        gvm_heap_trim(owner);
        struct owned o = {.owner = owner};
        gvm_live_for_each(collect, &o);
        rc = grant_all(&o, dev);
        free(o.t);
    }
    pthread_mutex_unlock(&reach_lock);
    return rc;
}
