#include "core/heap.h"

#include "core/capture.h"
#include "core/driver.h"
#include "core/log.h"
#include "core/move.h"
#include "core/settings.h"
#include "core/share.h"
#include "core/slab.h"
#include "core/topo.h"
#include "core/vamap.h"

#include <string.h>

#define CACHE_BUCKETS 64

struct cache {
    struct gvm_region *bucket[CACHE_BUCKETS];  /* by mapped size, via ->next */
    struct gvm_region fifo;                     /* oldest first, via lru links */
    size_t bytes;
};

static pthread_mutex_t heap_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct gvm_region live = {.lru_prev = &live, .lru_next = &live};
static struct cache caches[GVM_MAX_DEVICES];

void gvm_heap_lock(void) { pthread_mutex_lock(&heap_mutex); }
void gvm_heap_unlock(void) { pthread_mutex_unlock(&heap_mutex); }

static void ring_insert_tail(struct gvm_region *head, struct gvm_region *r)
{
    if (!head->lru_next) head->lru_next = head->lru_prev = head;
    r->lru_prev = head->lru_prev;
    r->lru_next = head;
    head->lru_prev->lru_next = r;
    head->lru_prev = r;
}

static void ring_remove(struct gvm_region *r)
{
    if (!r->lru_next) return;
    r->lru_prev->lru_next = r->lru_next;
    r->lru_next->lru_prev = r->lru_prev;
    r->lru_next = r->lru_prev = NULL;
}

void gvm_heap_track(struct gvm_region *r)
{
    gvm_heap_lock();
    ring_insert_tail(&live, r);
    gvm_heap_unlock();
}

void gvm_heap_untrack(struct gvm_region *r)
{
    gvm_heap_lock();
    ring_remove(r);
    gvm_heap_unlock();
}

void gvm_heap_for_each(void (*fn)(struct gvm_region *r, void *arg), void *arg)
{
    gvm_heap_lock();
    for (struct gvm_region *r = live.lru_next; r != &live;) {
        struct gvm_region *next = r->lru_next;
        fn(r, arg);
        r = next;
    }
    gvm_heap_unlock();
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t gvm_heap_headroom(size_t rounded)
{
    double extra = gvm_settings.headroom * (double)rounded;
    if (extra <= 0) return 0;
    if (extra > (double)((size_t)1 << 46)) extra = (double)((size_t)1 << 46);
    return align_up((size_t)extra, gvm_topo.gran);
}

/* ---- the cache of mapped regions ---------------------------------------- */

static unsigned bucket_of(size_t mapped) { return (unsigned)((mapped / gvm_topo.gran) % CACHE_BUCKETS); }

/* A cached region is reused only once the work queued before its free has
 * finished (topo.h); the wait, when one is needed, is one device sync. */
static void cache_return(int device, struct gvm_region *r);

/* While a capture is open on the device no wait may run: only a region
 * already settled can be reused, else the caller takes fresh memory. */
static bool reusable(int device, const struct gvm_region *r, bool capturing)
{
    return !capturing || gvm_topo_settled(device, r->freed_at);
}

static struct gvm_region *cache_take(int device, size_t mapped)
{
    struct cache *c = &caches[device];
    bool capturing = gvm_capture_open(device);
    gvm_heap_lock();
    struct gvm_region **pp = &c->bucket[bucket_of(mapped)];
    while (*pp && ((*pp)->mapped != mapped || !reusable(device, *pp, capturing))) pp = &(*pp)->next;
    struct gvm_region *r = *pp;
    if (r) {
        *pp = r->next;
        r->next = NULL;
        ring_remove(r);
        c->bytes -= r->mapped;
    }
    gvm_heap_unlock();
    if (r && gvm_topo_settle(device, r->freed_at) != CUDA_SUCCESS) {
        cache_return(device, r);
        return NULL;
    }
    return r;
}

static void cache_unlink(struct cache *c, struct gvm_region *r)
{
    struct gvm_region **pp = &c->bucket[bucket_of(r->mapped)];
    while (*pp != r) pp = &(*pp)->next;
    *pp = r->next;
    r->next = NULL;
    ring_remove(r);
    c->bytes -= r->mapped;
}

/* ---- frees deferred while a capture is open ------------------------------ */

/* Freed regions that must not be unmapped yet: a wait for their users was
 * refused because a stream capture is open. They stay mapped (still counted
 * resident) until the first chance with no capture open. */
static struct gvm_region *deferred;
static unsigned ndeferred;

static void defer(struct gvm_region *r)
{
    __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
    gvm_heap_lock();
    r->next = deferred;
    deferred = r;
    __atomic_fetch_add(&ndeferred, 1, __ATOMIC_RELAXED);
    gvm_heap_unlock();
    gvm_debug("free of %#lx deferred until the stream capture ends", (unsigned long)r->base);
}

static void region_dispose(struct gvm_region *r);

void gvm_heap_settle_deferred(void)
{
    if (!__atomic_load_n(&ndeferred, __ATOMIC_RELAXED) || gvm_capture_open(-1)) return;
    gvm_heap_lock();
    struct gvm_region *list = deferred;
    deferred = NULL;
    __atomic_store_n(&ndeferred, 0, __ATOMIC_RELAXED);
    gvm_heap_unlock();
    if (!list) return;
    /* One wait on every device: some of them were not on their own. */
    CUresult rc = gvm_topo_quiesce();
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        gvm_warn("waiting for the devices before unmapping freed memory failed (%d)", rc);
    while (list) {
        struct gvm_region *r = list;
        list = r->next;
        r->next = NULL;
        if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            defer(r);   /* a capture began meanwhile */
        else
            region_dispose(r);
    }
}

static void region_dispose(struct gvm_region *r)
{
    /* Unmapping memory a kernel still reads would kill the kernel. */
    if (r->state == GVM_REGION_CACHED &&
        gvm_topo_settle(r->device, r->freed_at) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
        defer(r);
        return;
    }
    gvm_region_unpublish(r);
    gvm_region_destroy(r);
    gvm_region_recycle(r);
}

/* Evicts the oldest cached regions of device until `need` more bytes fit
 * under `limit` (limit SIZE_MAX-safe). Returns the bytes released. */
static size_t cache_evict(int device, size_t need, size_t limit)
{
    struct cache *c = &caches[device];
    struct gvm_region *victims = NULL;
    size_t freed = 0;
    bool capturing = gvm_capture_open(device);
    gvm_heap_lock();
    if (!c->fifo.lru_next) c->fifo.lru_next = c->fifo.lru_prev = &c->fifo;
    for (struct gvm_region *r = c->fifo.lru_next; r != &c->fifo && (c->bytes + need > limit || need > limit);) {
        struct gvm_region *next = r->lru_next;
        if (reusable(device, r, capturing)) {
            cache_unlink(c, r);
            freed += r->mapped;
            r->next = victims;
            victims = r;
        }
        r = next;
    }
    gvm_heap_unlock();
    while (victims) {
        struct gvm_region *r = victims;
        victims = r->next;
        region_dispose(r);
    }
    return freed;
}

/* Called with the heap lock held. */
static void cache_insert(struct cache *c, struct gvm_region *r)
{
    unsigned b = bucket_of(r->mapped);
    r->next = c->bucket[b];
    c->bucket[b] = r;
    ring_insert_tail(&c->fifo, r);
    c->bytes += r->mapped;
}

static void cache_return(int device, struct gvm_region *r)
{
    gvm_heap_lock();
    cache_insert(&caches[device], r);
    gvm_heap_unlock();
}

static bool cache_put(struct gvm_region *r)
{
    size_t limit = gvm_settings.cache_limit[r->device];
    if (r->mapped > limit) return false;
    cache_evict(r->device, r->mapped, limit);
    struct cache *c = &caches[r->device];
    gvm_heap_lock();
    if (c->bytes + r->mapped > limit) {
        gvm_heap_unlock();
        return false;
    }
    __atomic_store_n(&r->state, GVM_REGION_CACHED, __ATOMIC_RELEASE);
    cache_insert(c, r);
    gvm_heap_unlock();
    return true;
}

/* ---- allocation ------------------------------------------------------- */

static CUresult new_region(size_t rounded, int device, CUcontext ctx, const struct gvm_place *pl,
                           struct gvm_region **out)
{
    struct gvm_region *r = gvm_region_new();
    if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = gvm_region_reserve(r, rounded + gvm_heap_headroom(rounded));
    if (rc != CUDA_SUCCESS) {
        gvm_region_recycle(r);
        return rc;
    }
    r->kind = GVM_REGION_LARGE;
    r->device = device;
    r->home = pl->loc;
    r->ctx = ctx;
    if (pl->interleave)
        rc = gvm_region_grow_striped(r, rounded, pl->interleave);
    else
        rc = gvm_region_grow(r, rounded, pl->loc);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && !pl->interleave && gvm_heap_trim(pl->loc))
        rc = gvm_region_grow(r, rounded, pl->loc);
    if (rc == CUDA_SUCCESS && gvm_region_publish(r)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        gvm_region_unpublish(r);
        gvm_region_destroy(r);
        gvm_region_recycle(r);
        return rc;
    }
    *out = r;
    return CUDA_SUCCESS;
}

static CUresult alloc_large(size_t size, int device, CUcontext ctx, const struct gvm_place *pl, int tag,
                            uintptr_t *out)
{
    size_t rounded = align_up(size, gvm_topo.gran);
    bool at_home = pl->loc == device && !pl->interleave;
    struct gvm_region *r = at_home ? cache_take(device, rounded) : NULL;
    if (r) {
        gvm_stat_inc(cache_hits);
        r->ctx = ctx;
    } else {
        gvm_stat_inc(cache_misses);
        CUresult rc = new_region(rounded, device, ctx, pl, &r);
        if (rc != CUDA_SUCCESS) return rc;
    }
    r->size = size;
    GVM_STORE(r->tag, tag);
    GVM_STORE(r->flags, 0u);
    r->buffer_id = gvm_next_buffer_id();
    r->last_use = gvm_clock_tick();   /* a new allocation is about to be used */
    GVM_STORE(r->spilled_at, 0);
    __atomic_store_n(&r->state, GVM_REGION_LIVE, __ATOMIC_RELEASE);
    gvm_heap_track(r);
    *out = r->base;
    return CUDA_SUCCESS;
}

CUresult gvm_heap_alloc(size_t size, int device, CUcontext ctx, const struct gvm_place *place, int tag,
                        uintptr_t *out)
{
    if (!size) return CUDA_ERROR_INVALID_VALUE;
    gvm_heap_settle_deferred();
    CUresult rc;
    if (size <= gvm_settings.small_max && place->loc == device && !place->interleave) {
        rc = gvm_slab_alloc(device, size, tag, ctx, out);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_heap_trim(device))
            rc = gvm_slab_alloc(device, size, tag, ctx, out);
        if (rc == CUDA_SUCCESS) gvm_stat_inc(small_allocations);
    } else {
        rc = alloc_large(size, device, ctx, place, tag, out);
    }
    if (rc != CUDA_SUCCESS) {
        gvm_stat_inc(alloc_failures);
        return rc;
    }
    gvm_stat_inc(allocations_total);
    gvm_stats_live(device, (int64_t)size);
    return CUDA_SUCCESS;
}

/* ---- lookup ----------------------------------------------------------- */

struct gvm_region *gvm_heap_region(uintptr_t p)
{
    struct gvm_region *r = gvm_vamap_get(p);
    if (r && __atomic_load_n(&r->kind, __ATOMIC_RELAXED) == GVM_REGION_ALIAS)
        r = __atomic_load_n(&r->target, __ATOMIC_ACQUIRE);
    return r;
}

bool gvm_heap_find(uintptr_t p, struct gvm_ref *ref)
{
    struct gvm_region *r = gvm_vamap_get(p);
    if (!r) return false;
    uintptr_t shift = 0;
    int only_slot = -1;
    if (__atomic_load_n(&r->kind, __ATOMIC_RELAXED) == GVM_REGION_ALIAS) {
        struct gvm_region *a = r;
        if (__atomic_load_n(&a->state, __ATOMIC_ACQUIRE) != GVM_REGION_LIVE || p >= a->base + a->mapped)
            return false;
        r = a->target;
        shift = a->base - r->base;
        p -= shift;
        only_slot = a->alias_slot;
    }
    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != GVM_REGION_LIVE) return false;
    ref->region = r;
    if (r->kind == GVM_REGION_CHUNK) {
        if (!gvm_slab_find(r, p, &ref->base, &ref->size, &ref->slot)) return false;
        /* An alias of a small allocation shows its whole chunk, but only
         * that allocation has a second address. */
        if (only_slot >= 0 && ref->slot != only_slot) return false;
    } else {
        if (p < r->base || p >= r->base + r->size) return false;
        ref->base = r->base;
        ref->size = r->size;
        ref->slot = -1;
    }
    ref->off = ref->base - r->base;
    ref->base += shift;
    return true;
}

uint64_t gvm_heap_buffer_id(const struct gvm_ref *ref)
{
    if (ref->slot >= 0) return ref->region->slab->ids[ref->slot];
    return ref->region->buffer_id;
}

/* ---- free ------------------------------------------------------------- */

/* Memory that is about to be unmapped at once: unmapping does not wait for
 * kernels (a kernel still reading unmapped memory dies), so wait for the
 * device that allocated it, or for every active one when the memory lives
 * elsewhere. */
static CUresult wait_for_users(struct gvm_region *r)
{
    if (gvm_region_location(r) != r->device) return gvm_topo_quiesce();
    return gvm_topo_sync_device(r->device);
}

static CUresult free_small(struct gvm_region *r, uintptr_t p)
{
    uintptr_t base;
    size_t size;
    int slot;
    if (!gvm_slab_find(r, p, &base, &size, &slot)) return CUDA_ERROR_NOT_FOUND;
    if (base != p) return CUDA_ERROR_INVALID_VALUE;
    /* No wait: the slot is not reused before the device settles (slab.c). */
    CUresult rc = gvm_slab_free(r, p);
    if (rc == CUDA_SUCCESS) gvm_stats_live(r->device, -(int64_t)size);
    return rc;
}

static CUresult free_large(struct gvm_region *r, uintptr_t p)
{
    if (p != r->base) return p < r->base + r->size ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_FOUND;
    bool cacheable = !r->aliases && r->home == r->device && !(r->flags & (GVM_RF_PAUSED | GVM_RF_SHARED)) &&
                     gvm_region_location(r) == r->device;
    if (cacheable) {
        /* Kept mapped and not reused before the device settles. */
        r->freed_at = gvm_topo_epoch(r->device);
        gvm_heap_untrack(r);
        gvm_stats_live(r->device, -(int64_t)r->size);
        if (cache_put(r)) return CUDA_SUCCESS;
        __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
        CUresult rc = gvm_topo_settle(r->device, r->freed_at);
        if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
            defer(r);
            return CUDA_SUCCESS;
        }
        if (rc != CUDA_SUCCESS) gvm_warn("waiting for the device before an unmap failed (%d)", rc);
        region_dispose(r);
        return CUDA_SUCCESS;
    }
    CUresult rc = wait_for_users(r);
    bool capturing = rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc != CUDA_SUCCESS && !capturing) return rc;
    gvm_heap_untrack(r);
    gvm_stats_live(r->device, -(int64_t)r->size);
    if (r->aliases) {
        /* Its memory lives on behind the aliases; the last unalias frees it. */
        __atomic_store_n(&r->state, GVM_REGION_CACHED, __ATOMIC_RELEASE);
        r->flags |= GVM_RF_ORPHAN;
        return CUDA_SUCCESS;
    }
    if (capturing) {
        defer(r);
        return CUDA_SUCCESS;
    }
    __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
    region_dispose(r);
    return CUDA_SUCCESS;
}

CUresult gvm_heap_free(uintptr_t p)
{
    gvm_heap_settle_deferred();
    struct gvm_region *r = gvm_vamap_get(p);
    if (!r || r->kind == GVM_REGION_ALIAS) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&r->op);
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == GVM_REGION_LIVE) {
        int slot;
        uint64_t id;
        bool shared = gvm_share_key(r, p, &slot, &id);   /* CUDA IPC: core/share.h */
        rc = r->kind == GVM_REGION_CHUNK ? free_small(r, p) : free_large(r, p);
        if (rc == CUDA_SUCCESS && shared) gvm_share_freed(r, slot, id);
    }
    pthread_mutex_unlock(&r->op);
    if (rc == CUDA_SUCCESS) gvm_stat_inc(frees_total);
    return rc;
}

/* ---- idle memory ------------------------------------------------------ */

size_t gvm_heap_idle_bytes(int device)
{
    gvm_heap_lock();
    size_t cached = caches[device].bytes;
    gvm_heap_unlock();
    return cached + gvm_slab_idle_bytes(device) + gvm_phys_pooled(device);
}

size_t gvm_heap_trim(int loc)
{
    size_t freed = 0;
    gvm_heap_settle_deferred();
    if (loc >= 0) {
        freed += cache_evict(loc, 0, 0);
        gvm_slab_flush(loc);
        freed += gvm_slab_trim(loc);
    }
    freed += gvm_phys_trim(loc, SIZE_MAX);
    if (freed) gvm_debug("released %zu idle bytes at location %d", freed, loc);
    return freed;
}
