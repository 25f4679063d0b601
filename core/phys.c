#include "core/phys.h"

#include "core/driver.h"
#include "core/held.h"
#include "core/hostpin.h"
#include "core/core_state.h"
#include "core/log.h"
#include "core/settings.h"
#include "core/topo.h"
#include "core/trace.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pool {
    struct gvm_phys *head;
    size_t bytes;
    size_t limit;
    size_t filling;          /* bytes a prefill is creating for it now */
    bool prefilled;          /* a prefill was started (once per process) */
    bool hinted;             /* a prefill was asked for before the core ran */
    bool fill_failed;        /* a prefill's creation failed: its other threads stop too */
    uint64_t used_ns;        /* CLOCK_MONOTONIC when a piece last came or went */
};

static struct pool pools[GVM_LOC_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void fill_prop(int loc, CUmemAllocationProp *p)
{
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (loc == GVM_LOC_HOST) {
        /* HOST handles refuse any export type; HOST_NUMA ones accept it but
         * nothing shares spilled memory, so ask for none. */
        p->location.type = gvm_topo.host_type;
        p->location.id = gvm_topo.host_numa_id;
        return;
    }
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = loc;
    if (gvm_topo.dev[loc].posix_fd) p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (gvm_topo.dev[loc].rdma) p->allocFlags.gpuDirectRDMACapable = 1;
}

CUresult gvm_phys_create_reserved(int loc, size_t size, struct gvm_phys **out)
{
    struct gvm_phys *p = calloc(1, sizeof *p);
    CUmemAllocationProp prop;
    fill_prop(loc, &prop);
    CUresult rc = p ? DRV(cuMemCreate, &p->handle, size, &prop, 0) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        free(p);
        return rc;
    }
    p->size = size;
    p->loc = loc;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult gvm_phys_create(int loc, size_t size, struct gvm_phys **out)
{
    /* Reserved before the driver is asked, so no thread can pass the cap. */
    if (!gvm_held_reserve(loc, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = gvm_phys_create_reserved(loc, size, out);
    if (rc != CUDA_SUCCESS) gvm_held_release(loc, size);
    return rc;
}

CUresult gvm_phys_stage(struct gvm_phys *p)
{
    if (p->staging) return CUDA_SUCCESS;   /* a registered piece's is its pointer */
    CUdeviceptr va = 0;
    CUresult rc = DRV(cuMemAddressReserve, &va, p->size, 0, 0, 0);
    if (rc != CUDA_SUCCESS) return rc;
    rc = DRV(cuMemMap, va, p->size, 0, p->handle, 0);
    if (rc != CUDA_SUCCESS) goto free_va;
    /* Host pieces serve every device's copies (each moves its own memory
     * to and from host); a device piece its own device's, and a peer's on
     * demand (gvm_phys_stage_for). */
    uint32_t devices = p->loc == GVM_LOC_HOST ? UINT32_MAX : 1u << p->loc;
    CUmemAccessDesc descs[GVM_MAX_DEVICES + 1];
    int n = gvm_topo_access_mask(p->loc, devices, false, descs);
    rc = DRV(cuMemSetAccess, va, p->size, descs, (size_t)n);
    if (rc != CUDA_SUCCESS) goto unmap;
    p->staging = va;
    p->staged_for = devices;
    return CUDA_SUCCESS;
unmap:
    if (gvm_phys_unmap(va, p->size) != CUDA_SUCCESS) {
        p->stuck = true;   /* its caller puts it back: leaked there */
        return rc;
    }
free_va:
    gvm_phys_free_range(va, p->size);
    return rc;
}

CUresult gvm_phys_stage_for(struct gvm_phys *p, int dev)
{
    CUresult rc = gvm_phys_stage(p);
    if (rc != CUDA_SUCCESS || dev < 0 || (p->staged_for >> dev & 1) || p->host) return rc;
    CUmemAccessDesc d[GVM_MAX_DEVICES + 1];
    int n = gvm_topo_access_mask(p->loc, 1u << dev, false, d);
    if (!n) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if ((rc = DRV(cuMemSetAccess, p->staging, p->size, d, (size_t)n)) == CUDA_SUCCESS) p->staged_for |= 1u << dev;
    return rc;
}

void gvm_phys_unstage(struct gvm_phys *p)
{
    /* An unmap that fails keeps the mapping recorded: destroy tries again. */
    if (!p->staging || p->host || gvm_phys_unmap(p->staging, p->size) != CUDA_SUCCESS) return;
    gvm_phys_free_range(p->staging, p->size);
    p->staging = 0;
    p->staged_for = 0;
}

/* Each release call is tried again once (a passing fault), and none is
 * made, nor its failure reported, once the driver has shut down
 * (core/driver.h). */
CUresult gvm_phys_unmap(CUdeviceptr va, size_t size)
{
    if (gvm_driver_gone(CUDA_SUCCESS)) return CUDA_ERROR_DEINITIALIZED;
    CUresult rc = DRV(cuMemUnmap, va, size);
    if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc)) rc = DRV(cuMemUnmap, va, size);
    if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc)) gvm_warn("cuMemUnmap failed (%d) at %#lx", rc, (unsigned long)va);
    return rc;
}

CUresult gvm_phys_free_range(CUdeviceptr va, size_t size)
{
    if (gvm_driver_gone(CUDA_SUCCESS)) return CUDA_ERROR_DEINITIALIZED;
    CUresult rc = DRV(cuMemAddressFree, va, size);
    if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc)) rc = DRV(cuMemAddressFree, va, size);
    if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc))
        gvm_warn("cuMemAddressFree failed (%d) at %#lx", rc, (unsigned long)va);
    return rc;
}

/* Memory that is still mapped somewhere stays allocated, its range
 * reserved: the only safe answer to an unmap that keeps failing. Once the
 * driver has shut down, the memory went with it: nothing leaks. */
static void leak(struct gvm_phys *p)
{
    if (!gvm_driver_gone(CUDA_SUCCESS)) gvm_warn("leaking %zu bytes that could not be unmapped", p->size);
    free(p);
}

void gvm_phys_destroy(struct gvm_phys *p)
{
    if (!p) return;
    if (gvm_driver_gone(CUDA_SUCCESS)) {   /* gone with the driver */
        free(p);
        return;
    }
    if (p->host) {
        gvm_hostpin_destroy(p);
        return;
    }
    if (p->staging && gvm_phys_unmap(p->staging, p->size) != CUDA_SUCCESS) p->stuck = true;
    if (p->stuck) {
        leak(p);
        return;
    }
    if (p->staging) gvm_phys_free_range(p->staging, p->size);
    CUresult rc = DRV(cuMemRelease, p->handle);
    if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc)) rc = DRV(cuMemRelease, p->handle);   /* a passing fault */
    if (rc == CUDA_SUCCESS)
        gvm_held_release(p->loc, p->size);
    else if (!gvm_driver_gone(rc))   /* still the process's memory: it stays counted */
        gvm_warn("cuMemRelease failed (%d): %zu bytes may leak", rc, p->size);
    free(p);
}

struct gvm_phys *gvm_phys_pool_take(int loc, size_t size, bool staging, bool copy_only)
{
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    struct gvm_phys **best = NULL;
    pthread_mutex_lock(&pool_lock);
    for (struct gvm_phys **pp = &pl->head; *pp; pp = &(*pp)->next) {
        if ((*pp)->size != size || ((*pp)->host && !copy_only)) continue;
        best = pp;
        if (!staging || (*pp)->staging) break;   /* prefer one already staged */
    }
    struct gvm_phys *p = NULL;
    if (best) {
        p = *best;
        *best = p->next;
        pl->bytes -= p->size;
        p->next = NULL;
        pl->used_ns = gvm_trace_now();
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

CUresult gvm_phys_get(int loc, size_t size, bool staging, struct gvm_phys **out)
{
    struct gvm_phys *p = gvm_phys_pool_take(loc, size, staging, false);
    CUresult rc = CUDA_SUCCESS;
    if (!p) {
        rc = gvm_phys_create(loc, size, &p);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_phys_trim(loc, SIZE_MAX))
            rc = gvm_phys_create(loc, size, &p);
        if (rc != CUDA_SUCCESS) return rc;
    }
    if (staging && !p->staging && (rc = gvm_phys_stage(p)) != CUDA_SUCCESS) {
        gvm_phys_put(p);
        return rc;
    }
    *out = p;
    return CUDA_SUCCESS;
}

/* Unlinks the piece pooled longest ago (the list's tail) and returns it;
 * pool_lock held, the pool not empty. */
static struct gvm_phys *pool_oldest(struct pool *pl)
{
    struct gvm_phys **pp = &pl->head;
    while ((*pp)->next) pp = &(*pp)->next;
    struct gvm_phys *p = *pp;
    *pp = NULL;
    pl->bytes -= p->size;
    return p;
}

/* A piece given back is the likeliest to be asked for again (the reverse
 * of the move that freed it), so a full pool makes room for it by
 * destroying the pieces pooled longest ago. Keeping the old ones instead
 * destroyed each 8 GiB peer move's sources and created them again on the
 * way back, every time, while the pool held pieces of the other sizes
 * that an earlier trip to host had cut (two H100s, 2026-11-26: 9-10 ms of
 * release and 6-7 ms of creation against 22 ms of copy). */
void gvm_phys_put(struct gvm_phys *p)
{
    if (!p) return;
    if (p->stuck) {
        leak(p);
        return;
    }
    struct pool *pl = &pools[gvm_loc_slot(p->loc)];
    struct gvm_phys *out = NULL;   /* what leaves the pool, chained */
    pthread_mutex_lock(&pool_lock);
    if (p->size <= pl->limit) {
        while (pl->bytes + p->size > pl->limit) {
            struct gvm_phys *o = pool_oldest(pl);
            o->next = out;
            out = o;
        }
        p->next = pl->head;
        pl->head = p;
        pl->bytes += p->size;
        pl->used_ns = gvm_trace_now();
    } else {
        out = p;
        p->next = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    while (out) {
        struct gvm_phys *o = out;
        out = o->next;
        gvm_phys_destroy(o);
    }
}

size_t gvm_phys_trim(int loc, size_t bytes)
{
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    size_t freed = 0;
    /* No more than the pool held when the trim began: a prefill beside it
     * puts a piece back each time one goes, and each release waits for the
     * creation under way (the driver holds itself for it), so a trim that
     * chased an empty pool traded created memory for released for seconds
     * (two H100s, 2026-11-27: 30 GB in 8.9 s at a cudaDeviceReset). */
    pthread_mutex_lock(&pool_lock);
    if (bytes > pl->bytes) bytes = pl->bytes;
    pthread_mutex_unlock(&pool_lock);
    while (freed < bytes) {
        pthread_mutex_lock(&pool_lock);
        struct gvm_phys *p = pl->head;
        if (p) {
            pl->head = p->next;
            pl->bytes -= p->size;
        }
        pthread_mutex_unlock(&pool_lock);
        if (!p) break;
        freed += p->size;
        gvm_phys_destroy(p);
    }
    return freed;
}

size_t gvm_phys_trim_registered(int dev)
{
    struct pool *pl = &pools[gvm_loc_slot(GVM_LOC_HOST)];
    struct gvm_phys *out = NULL, **link;
    pthread_mutex_lock(&pool_lock);
    for (link = &pl->head; *link;) {
        struct gvm_phys *p = *link;
        if (p->host && p->host_dev == dev) {
            *link = p->next;
            pl->bytes -= p->size;
            p->next = out;
            out = p;
        } else {
            link = &p->next;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    size_t freed = 0;
    while (out) {
        struct gvm_phys *p = out;
        out = p->next;
        freed += p->size;
        gvm_phys_destroy(p);
    }
    return freed;
}

size_t gvm_phys_trim_idle(int loc, uint64_t idle_ns)
{
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    pthread_mutex_lock(&pool_lock);
    bool idle = pl->bytes && !pl->filling && pl->used_ns + idle_ns <= gvm_trace_now();
    pthread_mutex_unlock(&pool_lock);
    return idle ? gvm_phys_trim(loc, SIZE_MAX) : 0;
}

size_t gvm_phys_pooled(int loc)
{
    pthread_mutex_lock(&pool_lock);
    size_t b = pools[gvm_loc_slot(loc)].bytes;
    pthread_mutex_unlock(&pool_lock);
    return b;
}

void gvm_phys_raise_limit(int loc, size_t bytes)
{
    pthread_mutex_lock(&pool_lock);
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    if (pl->limit < bytes) pl->limit = bytes;
    pthread_mutex_unlock(&pool_lock);
}

void gvm_phys_set_limit(int loc, size_t bytes)
{
    pthread_mutex_lock(&pool_lock);
    pools[gvm_loc_slot(loc)].limit = bytes;
    pthread_mutex_unlock(&pool_lock);
    if (gvm_phys_pooled(loc) > bytes) gvm_phys_trim(loc, gvm_phys_pooled(loc) - bytes);
}

/* ---- filling the pool ahead of need --------------------------------------- */

/* One background thread per location. Several create pinned host memory
 * little faster (H100, 2026-11-23: 4.75 GB/s on one thread, 4.21 on four),
 * and each creation holds the driver for its whole length (~14 ms per
 * 64 MiB piece): a move that starts meanwhile waits for every creation
 * under way (two H200s, 2026-11-23: warm 64 MiB moves back from host took
 * 13-14 ms with one fill thread, 40-80 ms with four, 1.2 ms without). */
#define FILL_THREADS 1

/* How long no move must have run before the fill creates a piece: moves
 * come in bursts, and one starting just after a piece began waits for it. */
#define FILL_QUIET_NS (100u * 1000 * 1000)

static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fill_done = PTHREAD_COND_INITIALIZER;
static int fill_running;
static bool fill_stop;

/* Claims the next piece to create for pl, under the pool lock, so that
 * the pool and what is being created never pass its limit together. */
static bool fill_claim(struct pool *pl, size_t piece)
{
    pthread_mutex_lock(&pool_lock);
    bool more = !__atomic_load_n(&fill_stop, __ATOMIC_RELAXED) && !pl->fill_failed &&
                pl->bytes + pl->filling + piece <= pl->limit;
    if (more) pl->filling += piece;
    pthread_mutex_unlock(&pool_lock);
    return more;
}

/* Puts a created piece into the pool (NULL: its creation failed) and
 * ends its claim, in one step. */
static void fill_deliver(struct pool *pl, struct gvm_phys *p, size_t piece)
{
    pthread_mutex_lock(&pool_lock);
    pl->filling -= piece;
    if (p) {
        p->next = pl->head;
        pl->head = p;
        pl->bytes += p->size;
    } else {
        pl->fill_failed = true;
    }
    pthread_mutex_unlock(&pool_lock);
}

/* Creating pinned host memory holds the driver for long stretches, and a
 * move under way waits on it: on two H200s a first 1 GiB move to host took
 * 1063 ms with the fill running beside it and 284 ms without, and warm
 * moves ran at 1 GB/s for as long as a 20 GiB fill lasted. So the fill
 * steps aside while moves run and for a quiet stretch after the last one
 * (between pieces: the piece under way is finished first). A program that
 * keeps moving (a spill loop) needs no fill: its swaps recycle the pool. */
static int moves_running;
static uint64_t last_move_end_ns;   /* CLOCK_MONOTONIC (gvm_trace_now) */

void gvm_phys_moves(int delta)
{
    if (delta < 0) __atomic_store_n(&last_move_end_ns, gvm_trace_now(), __ATOMIC_RELAXED);
    __atomic_fetch_add(&moves_running, delta, __ATOMIC_SEQ_CST);
}

/* Nanoseconds since the last move ended; 0 while one runs. */
static uint64_t moves_idle_ns(void)
{
    if (__atomic_load_n(&moves_running, __ATOMIC_SEQ_CST)) return 0;
    uint64_t end = __atomic_load_n(&last_move_end_ns, __ATOMIC_RELAXED), now = gvm_trace_now();
    return now > end ? now - end : 0;
}

static void fill_yield(void)
{
    struct timespec pause = {0, 1000000};
    while (moves_idle_ns() < FILL_QUIET_NS && !__atomic_load_n(&fill_stop, __ATOMIC_RELAXED))
        nanosleep(&pause, NULL);
}

static void *fill_worker(void *arg)
{
    int loc = (int)(intptr_t)arg;
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    size_t piece = gvm_settings.block_size;
    while ((fill_yield(), fill_claim(pl, piece))) {
        struct gvm_phys *p = NULL;
        CUresult rc = gvm_phys_create(loc, piece, &p);
        if (rc == CUDA_SUCCESS && (rc = gvm_phys_stage(p)) != CUDA_SUCCESS) {
            gvm_phys_destroy(p);   /* a stuck one is leaked there */
            p = NULL;
        }
        fill_deliver(pl, p, piece);
        if (rc != CUDA_SUCCESS) {
            gvm_debug("filling the pool at %d stopped (driver error %d)", loc, rc);
            break;
        }
    }
    pthread_mutex_lock(&fill_lock);
    if (--fill_running == 0) pthread_cond_broadcast(&fill_done);
    pthread_mutex_unlock(&fill_lock);
    return NULL;
}

static void fill_at_exit(void) { gvm_phys_prefill_wait(true); }

/* A forked child has none of the parent's threads, and must not wait at
 * its exit on a lock one of them held at the fork. */
static void fill_after_fork(void)
{
    pthread_mutex_init(&fill_lock, NULL);
    pthread_cond_init(&fill_done, NULL);
    fill_running = 0;
    __atomic_store_n(&fill_stop, true, __ATOMIC_RELAXED);
}

void gvm_phys_prefill(int loc)
{
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    if (__atomic_load_n(&pl->prefilled, __ATOMIC_RELAXED)) return;   /* tags push often */
    if (loc == GVM_LOC_HOST && !gvm_topo.host_vmm) return;
    pthread_mutex_lock(&pool_lock);
    size_t limit = pl->limit;
    bool first = !pl->prefilled && limit >= gvm_settings.block_size;
    if (first) __atomic_store_n(&pl->prefilled, true, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool_lock);
    if (!first) return;
    static bool registered;
    pthread_mutex_lock(&fill_lock);
    if (!registered) {
        /* Before the driver's own exit handlers, which run after it. */
        registered = !atexit(fill_at_exit) && !pthread_atfork(NULL, NULL, fill_after_fork);
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int started = 0;
    for (; started < FILL_THREADS && registered; started++) {
        pthread_t t;
        if (pthread_create(&t, &attr, fill_worker, (void *)(intptr_t)loc)) break;
        fill_running++;
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&fill_lock);
    gvm_debug("filling the pool at %d (%zu bytes) on %d threads", loc, limit, started);
}

void gvm_phys_prefill_hint(int loc)
{
    if (!gvm_core_active()) {
        pthread_mutex_lock(&pool_lock);
        pools[gvm_loc_slot(loc)].hinted = true;
        pthread_mutex_unlock(&pool_lock);
        /* The core may have started meanwhile, before it could see the
         * hint: then act on it here (the core reads it after going active). */
        if (!gvm_core_active()) return;
    }
    if (gvm_settings.host_prefill == GVM_HOST_PREFILL_AUTO) gvm_phys_prefill(loc);
}

bool gvm_phys_prefill_hinted(int loc)
{
    pthread_mutex_lock(&pool_lock);
    bool h = pools[gvm_loc_slot(loc)].hinted;
    pthread_mutex_unlock(&pool_lock);
    return h;
}

void gvm_phys_prefill_wait(bool stop)
{
    if (stop) __atomic_store_n(&fill_stop, true, __ATOMIC_RELAXED);
    pthread_mutex_lock(&fill_lock);
    while (fill_running) pthread_cond_wait(&fill_done, &fill_lock);
    pthread_mutex_unlock(&fill_lock);
}
