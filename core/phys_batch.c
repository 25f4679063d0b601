/* Making several pieces at once (core/phys_batch.h): pooled ones first,
 * the rest created on threads, each usable as soon as it exists. */
#include "core/phys_batch.h"

#include "core/held.h"
#include "core/hostpin.h"
#include "core/location.h"
#include "core/phys.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* Threads creating pieces at once. The driver serializes cuMemCreate, so
 * more add little there; registered pages are zeroed by page faults,
 * which scale with cores, but registering takes a lock the faults wait
 * for: a first 8 GiB unmapped pause ran at 28.6-29.7 GB/s with 8
 * threads, 22.7-24.6 with 16 (registering 3 ms a 64 MiB piece against
 * 16-18; H100 host of 16 cores, 2026-11-27). */
#define CREATE_THREADS 8

/* Pieces being created on several threads at once (pinning host memory
 * is the slow part of a first move; the kernel faults pages in parallel),
 * each usable as soon as it is made (gvm_phys_batch_wait). */
struct gvm_phys_batch {
    int loc;
    bool staging, copy_only;
    int dev;                 /* copy_only: whose context registers host pages */
    const size_t *sizes;
    struct gvm_phys **out;
    int *todo;               /* indices of out still to create */
    int ntodo;
    int next;                /* shared cursor into todo */
    unsigned char *settled;  /* per index of out: made, or its creation failed */
    CUresult rc;             /* the first failure; written under lock */
    bool stop;               /* claim nothing more */
    bool refused;            /* the missing pieces would pass the cap: no thread started */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t t[CREATE_THREADS];
    int started;
};

/* A registered piece where only copies will reach it, else a created one
 * (also when registering fails: the driver or the kernel refused it). */
static CUresult create_once(struct gvm_phys_batch *b, int i)
{
    struct gvm_phys **out = &b->out[i];
    if (b->copy_only && b->loc == GVM_LOC_HOST && gvm_hostpin_usable() &&
        gvm_hostpin_create(b->sizes[i], b->dev, out) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    CUresult rc = gvm_phys_create(b->loc, b->sizes[i], out);
    if (rc == CUDA_SUCCESS && b->staging && (rc = gvm_phys_stage(*out)) != CUDA_SUCCESS) {
        gvm_phys_destroy(*out);
        *out = NULL;
    }
    return rc;
}

static CUresult create_one(struct gvm_phys_batch *b, int i)
{
    CUresult rc = create_once(b, i);
    /* Pooled pieces of other sizes were in the way: one more go. */
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_phys_trim(b->loc, SIZE_MAX)) rc = create_once(b, i);
    return rc;
}

static bool batch_going(struct gvm_phys_batch *b)
{
    return __atomic_load_n(&b->rc, __ATOMIC_RELAXED) == CUDA_SUCCESS && !__atomic_load_n(&b->stop, __ATOMIC_RELAXED);
}

static void *create_worker(void *arg)
{
    struct gvm_phys_batch *b = arg;
    for (;;) {
        int k = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);
        if (k >= b->ntodo || !batch_going(b)) break;
        int i = b->todo[k];
        CUresult rc = create_one(b, i);
        pthread_mutex_lock(&b->lock);
        if (rc != CUDA_SUCCESS && b->rc == CUDA_SUCCESS) __atomic_store_n(&b->rc, rc, __ATOMIC_RELAXED);
        b->settled[i] = 1;
        pthread_cond_broadcast(&b->cond);
        pthread_mutex_unlock(&b->lock);
    }
    return NULL;
}

/* Whether pieces of these sizes fit under loc's cap beside what is held:
 * creating them in parallel, one thread could create a small piece before
 * another's large one is refused, so a request that cannot fit is refused
 * before the driver is asked at all. */
static bool fits_cap(int loc, const size_t *sizes, const int *todo, int n)
{
    size_t need = 0, cap = gvm_held_cap(loc), held = gvm_held_bytes(loc);
    for (int k = 0; k < n; k++) need += sizes[todo[k]];
    return need <= cap && held <= cap - need;
}

/* A pooled piece of `size` at loc, staged when asked (one that cannot be
 * goes back), or NULL. */
static struct gvm_phys *pooled(int loc, size_t size, bool staging, bool copy_only)
{
    struct gvm_phys *p = gvm_phys_pool_take(loc, size, staging, copy_only);
    if (p && staging && !p->staging && gvm_phys_stage(p) != CUDA_SUCCESS) {
        gvm_phys_put(p);
        p = NULL;
    }
    return p;
}

static void batch_free(struct gvm_phys_batch *b)
{
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    free(b->todo);
    free(b->settled);
    free(b);
}

/* The pooled pieces into out, the others claimed on up to `threads` new
 * threads (none: the caller works them off itself). */
static CUresult batch_start(int loc, const size_t *sizes, int n, bool staging, bool copy_only, int dev,
                            struct gvm_phys **out, int threads, struct gvm_phys_batch **bp)
{
    struct gvm_phys_batch *b = calloc(1, sizeof *b);
    int *todo = calloc((size_t)n + 1, sizeof *todo);
    unsigned char *settled = calloc((size_t)n + 1, 1);
    if (!b || !todo || !settled) {
        free(b);
        free(todo);
        free(settled);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *b = (struct gvm_phys_batch){.loc = loc, .staging = staging, .copy_only = copy_only, .dev = dev, .sizes = sizes,
                                 .out = out, .todo = todo, .settled = settled};
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    for (int i = 0; i < n; i++) {
        if (!out[i]) out[i] = pooled(loc, sizes[i], staging, copy_only);
        if (out[i])
            b->settled[i] = 1;
        else
            b->todo[b->ntodo++] = i;
    }
    b->refused = b->ntodo && !fits_cap(loc, sizes, b->todo, b->ntodo);
    if (b->refused) b->rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (threads > b->ntodo) threads = b->ntodo;
    for (; !b->refused && b->started < threads && b->started < CREATE_THREADS; b->started++)
        if (pthread_create(&b->t[b->started], NULL, create_worker, b)) break;
    *bp = b;
    return CUDA_SUCCESS;
}

/* Page faults zero a registered piece's pages on the creating thread:
 * no more threads than CPUs. */
static int copy_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 || n > CREATE_THREADS ? CREATE_THREADS : (int)n;
}

CUresult gvm_phys_batch_start(int loc, const size_t *sizes, int n, bool copy_only, int dev, struct gvm_phys **out,
                              struct gvm_phys_batch **b)
{
    CUresult rc = batch_start(loc, sizes, n, true, copy_only, dev, out, copy_only ? copy_threads() : CREATE_THREADS, b);
    if (rc != CUDA_SUCCESS) return rc;
    if ((*b)->refused) {   /* by the cap: nothing started */
        batch_free(*b);
        *b = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* No thread would start: the caller's first wait creates them all. */
    if (!(*b)->started && (*b)->ntodo) (*b)->started = -1;
    return CUDA_SUCCESS;
}

CUresult gvm_phys_batch_wait(struct gvm_phys_batch *b, int k)
{
    if (b->started < 0) create_worker(b);   /* no thread of its own: all of it, now */
    pthread_mutex_lock(&b->lock);
    while (!b->settled[k] && b->rc == CUDA_SUCCESS) pthread_cond_wait(&b->cond, &b->lock);
    /* Woken by another piece's failure, piece k may still be in the
     * making: its slot is the worker's until it is settled. */
    CUresult rc = b->settled[k] && b->out[k] ? CUDA_SUCCESS : b->rc != CUDA_SUCCESS ? b->rc : CUDA_ERROR_UNKNOWN;
    pthread_mutex_unlock(&b->lock);
    return rc;
}

CUresult gvm_phys_batch_end(struct gvm_phys_batch *b, bool stop)
{
    if (stop) __atomic_store_n(&b->stop, true, __ATOMIC_RELAXED);
    for (int i = 0; i < b->started; i++) pthread_join(b->t[i], NULL);
    CUresult rc = b->rc;
    if (rc == CUDA_SUCCESS && !stop)
        for (int k = 0; k < b->ntodo; k++)
            if (!b->out[b->todo[k]]) rc = CUDA_ERROR_UNKNOWN;   /* never claimed: a wait was skipped */
    batch_free(b);
    return rc;
}

size_t gvm_phys_take_pooled(int loc, const size_t *sizes, int n, bool staging, struct gvm_phys **out)
{
    size_t missing = 0;
    for (int i = 0; i < n; i++) {
        if (!out[i]) out[i] = pooled(loc, sizes[i], staging, false);
        if (!out[i]) missing += sizes[i];
    }
    return missing;
}

CUresult gvm_phys_get_many(int loc, const size_t *sizes, int n, bool staging, struct gvm_phys **out)
{
    struct gvm_phys_batch *b = NULL;
    CUresult rc = batch_start(loc, sizes, n, staging, false, -1, out, CREATE_THREADS - 1, &b);
    if (rc == CUDA_SUCCESS && b->refused && gvm_phys_trim(loc, SIZE_MAX)) {
        /* Pooled pieces of other sizes were in the way of the cap: one more go. */
        batch_free(b);
        rc = batch_start(loc, sizes, n, staging, false, -1, out, CREATE_THREADS - 1, &b);
    }
    if (rc == CUDA_SUCCESS) {
        create_worker(b);   /* this thread works too */
        rc = gvm_phys_batch_end(b, false);
    }
    if (rc != CUDA_SUCCESS)
        for (int i = 0; i < n; i++) {
            gvm_phys_put(out[i]);
            out[i] = NULL;
        }
    return rc;
}
