#include "core/heap.h"

#include "core/capture.h"
#include "core/ids.h"
#include "core/live.h"
#include "core/log.h"
#include "core/ring.h"
#include "core/settings.h"
#include "core/share_hold.h"
#include "core/slab.h"
#include "core/topo.h"
#include "core/trace.h"
#include "core/vamap.h"

#include <string.h>

#define CACHE_BUCKETS 64

struct cache {
    struct gvm_region *bucket[CACHE_BUCKETS];  /* by mapped size, via ->next */
    struct gvm_region fifo;                     /* oldest first, via lru links */
    size_t bytes;
};

/* Guards the caches. */
static pthread_mutex_t heap_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct cache caches[GVM_MAX_DEVICES];

static void gvm_heap_lock(void) { pthread_mutex_lock(&heap_mutex); }
static void gvm_heap_unlock(void) { pthread_mutex_unlock(&heap_mutex); }

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* cache_idle in ns (0: off), set by the policy (gvm_heap_set_cache_idle). */
static uint64_t cache_idle_ns;

void gvm_heap_set_cache_idle(uint64_t ns) { __atomic_store_n(&cache_idle_ns, ns, __ATOMIC_RELAXED); }

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

/* Freed in order on the stream this thread now serves (topo.h). */
static bool same_stream(const struct gvm_region *r)
{
    uint64_t s = gvm_topo_ordered_stream();
    return s && r->freed_on == s;
}

/* While no wait may run (a capture is open on the device, or a
 * stream-ordered allocation is served: topo.h), only a region already
 * settled may be unmapped; unmapping is not stream-ordered. */
static bool releasable(int device, const struct gvm_region *r, bool no_wait)
{
    return !no_wait || gvm_topo_settled(device, r->freed_at);
}

/* Reuse may also take, at once, a region freed in order on the same
 * stream; otherwise the caller takes fresh memory. */
static bool reusable(int device, const struct gvm_region *r, bool no_wait)
{
    return releasable(device, r, no_wait) || same_stream(r);
}

static struct gvm_region *cache_take(int device, size_t mapped)
{
    struct cache *c = &caches[device];
    bool no_wait = gvm_capture_open(device) || !gvm_topo_reuse_waits();
    gvm_heap_lock();
    struct gvm_region **pp = &c->bucket[bucket_of(mapped)];
    while (*pp && ((*pp)->mapped != mapped || !reusable(device, *pp, no_wait))) pp = &(*pp)->next;
    struct gvm_region *r = *pp;
    if (r) {
        *pp = r->next;
        r->next = NULL;
        gvm_ring_remove(r);
        c->bytes -= r->mapped;
    }
    gvm_heap_unlock();
    if (r && !same_stream(r) && gvm_topo_settle(device, r->freed_at) != CUDA_SUCCESS) {
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
    gvm_ring_remove(r);
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
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && !gvm_driver_gone(rc))
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

/* Unmaps and releases r, unless the wait for its users is refused by an
 * open capture (then it is deferred; false). The caller recycles a
 * released record once it no longer holds r->op. */
static bool region_release(struct gvm_region *r)
{
    /* Unmapping memory a kernel still reads would kill the kernel. */
    if (r->state == GVM_REGION_CACHED &&
        gvm_topo_settle(r->device, r->freed_at) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
        defer(r);
        return false;
    }
    gvm_region_unpublish(r);
    gvm_region_destroy(r);
    return true;
}

static void region_dispose(struct gvm_region *r)
{
    if (region_release(r)) gvm_region_recycle(r);
}

/* What ends an eviction walk: room for `need` under `limit`, or (with
 * `cached_before` nonzero) a region cached at or after it. */
struct evict_until {
    size_t need, limit;
    uint64_t cached_before;
};

static bool evict_more(const struct cache *c, const struct gvm_region *r, const struct evict_until *u)
{
    if (u->cached_before) return r->cached_at < u->cached_before;
    return c->bytes + u->need > u->limit || u->need > u->limit;
}

/* Releases cached regions of device, oldest first, until u says stop
 * (those whose users may still run while no wait is allowed are skipped).
 * Returns the bytes released. */
static size_t cache_evict_until(int device, const struct evict_until *u)
{
    struct cache *c = &caches[device];
    struct gvm_region *victims = NULL;
    size_t freed = 0;
    bool capturing = gvm_capture_open(device);
    gvm_heap_lock();
    if (!c->fifo.lru_next) c->fifo.lru_next = c->fifo.lru_prev = &c->fifo;
    for (struct gvm_region *r = c->fifo.lru_next; r != &c->fifo && evict_more(c, r, u);) {
        struct gvm_region *next = r->lru_next;
        if (releasable(device, r, capturing)) {
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

/* Evicts the oldest cached regions of device until `need` more bytes fit
 * under `limit` (limit SIZE_MAX-safe). Returns the bytes released. */
static size_t cache_evict(int device, size_t need, size_t limit)
{
    struct evict_until u = {.need = need, .limit = limit};
    return cache_evict_until(device, &u);
}

/* Called with the heap lock held; now: gvm_trace_now() of the caller. */
static void cache_insert(struct cache *c, struct gvm_region *r, uint64_t now)
{
    r->cached_at = now;
    unsigned b = bucket_of(r->mapped);
    r->next = c->bucket[b];
    c->bucket[b] = r;
    gvm_ring_insert_tail(&c->fifo, r);
    c->bytes += r->mapped;
}

static void cache_return(int device, struct gvm_region *r)
{
    uint64_t now = gvm_trace_now();
    gvm_heap_lock();
    cache_insert(&caches[device], r, now);
    gvm_heap_unlock();
}

static bool cache_put(struct gvm_region *r, uint64_t now)
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
    cache_insert(c, r, now);
    gvm_heap_unlock();
    return true;
}

/* ---- allocation ------------------------------------------------------- */

static CUresult new_region(size_t rounded, int device, CUcontext ctx, const struct gvm_place *pl, int tag,
                           struct gvm_region **out)
{
    struct gvm_region *r = gvm_region_new();
    if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = gvm_region_reserve(r, rounded + gvm_heap_headroom(rounded));
    if (rc != CUDA_SUCCESS) {
        gvm_region_recycle(r);
        return rc;
    }
    GVM_STORE(r->kind, GVM_REGION_LARGE);
    r->device = device;
    GVM_STORE(r->home, pl->spill ? device : pl->loc);   /* the policy reads it lock-free */
    r->ctx = ctx;
    /* Memory nothing is expected to move comes in few large pieces: fewer
     * driver calls (region.h). */
    size_t cap = pl->loc == device && !pl->spill && !tag ? gvm_settings.grow_block : gvm_settings.block_size;
    if (pl->interleave)
        rc = gvm_region_grow_striped(r, rounded, pl->interleave);
    else
        rc = gvm_region_grow_by(r, rounded, pl->loc, cap);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && !pl->interleave && gvm_heap_trim(pl->loc))
        rc = gvm_region_grow_by(r, rounded, pl->loc, cap);
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
        gvm_stat_local_inc(cache_hits);
        r->ctx = ctx;
    } else {
        gvm_stat_local_inc(cache_misses);
        CUresult rc = new_region(rounded, device, ctx, pl, tag, &r);
        if (rc != CUDA_SUCCESS) return rc;
    }
    GVM_STORE(r->size, size);
    GVM_STORE(r->tag, tag);
    GVM_STORE(r->flags, 0u);
    GVM_STORE(r->read_by_handle, false);   /* a new allocation: no texture reads it yet */
    r->served_at = gvm_trace_now();
    GVM_STORE(r->buffer_id, gvm_next_buffer_id());
    GVM_STORE(r->last_use, gvm_clock_tick());   /* a new allocation is about to be used */
    GVM_STORE(r->nlaunches, 0u);                /* a new buffer: its uses start now */
    GVM_STORE(r->spilled_at, pl->spill ? gvm_clock_tick() : 0);
    if (pl->spill) {
        gvm_stat_inc(spills);
        gvm_stat_add(spilled_bytes, rounded);
    }
    __atomic_store_n(&r->state, GVM_REGION_LIVE, __ATOMIC_RELEASE);
    gvm_live_add(r);
    *out = r->base;
    return CUDA_SUCCESS;
}

/* The error a native cuMemAlloc gives for a valid request that cannot be
 * served: the driver's own error when the native call can return it too
 * (the driver is shutting down, no context, a sticky fault), else out of
 * memory. gvmshim's calls fail with errors that describe those calls (an
 * access grant refused: invalid value), never the program's request.
 * CUDA_ERROR_NOT_SUPPORTED stays: the caller passes the request through. */
static CUresult native_alloc_error(CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_UNKNOWN:
        return rc;
    default:
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

CUresult gvm_heap_alloc(size_t size, int device, CUcontext ctx, const struct gvm_place *place, int tag,
                        uintptr_t *out)
{
    if (!size) return CUDA_ERROR_INVALID_VALUE;
    if (size > GVM_HEAP_ALLOC_MAX) {
        gvm_stat_inc(alloc_failures);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gvm_heap_settle_deferred();
    gvm_topo_note_context(device, ctx);   /* moves wait for its work too */
    CUresult rc;
    if (size <= gvm_settings.small_max && place->loc == device && !place->interleave) {
        rc = gvm_slab_alloc(device, size, tag, ctx, out);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_heap_trim(device))
            rc = gvm_slab_alloc(device, size, tag, ctx, out);
        if (rc == CUDA_SUCCESS) gvm_stat_local_inc(small_allocations);
    } else {
        rc = alloc_large(size, device, ctx, place, tag, out);
    }
    if (rc != CUDA_SUCCESS) {
        gvm_stat_inc(alloc_failures);
        return native_alloc_error(rc);
    }
    gvm_stat_inc(allocations_total);
    gvm_stats_live(device, (int64_t)size);
    return CUDA_SUCCESS;
}

/* ---- lookup ----------------------------------------------------------- */

struct gvm_region *gvm_heap_region(uintptr_t p)
{
    struct gvm_region *r = gvm_vamap_get(p);
    /* An alias record recycled meanwhile has no target: not ours now. */
    if (r && GVM_LOAD(r->kind) == GVM_REGION_ALIAS) r = __atomic_load_n(&r->target, __ATOMIC_ACQUIRE);
    return r;
}

/* The allocation in live region r at p (an address of r's own range). */
static bool find_in(struct gvm_region *r, uintptr_t p, struct gvm_ref *ref)
{
    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != GVM_REGION_LIVE) return false;
    uintptr_t base = GVM_LOAD(r->base);
    ref->region = r;
    if (GVM_LOAD(r->kind) == GVM_REGION_CHUNK) {
        if (!gvm_slab_find(r, p, &ref->base, &ref->size, &ref->slot)) return false;
    } else {
        size_t size = GVM_LOAD(r->size);   /* gvm_realloc may change it meanwhile */
        if (p < base || p >= base + size) return false;
        ref->base = base;
        ref->size = size;
        ref->slot = -1;
    }
    ref->off = ref->base - base;
    return true;
}

/* gvm_heap_find for the record r (a region or an alias) the address map
 * holds for p. */
static bool find_view(struct gvm_region *r, uintptr_t p, struct gvm_ref *ref)
{
    /* Records may be retired and reused while we read them: what we read
     * counts only if neither the view nor the region changed generation. */
    unsigned vgen = gvm_region_gen(r);
    struct gvm_region *view = r;
    uintptr_t shift = 0;
    int only_slot = -1;
    if (GVM_LOAD(r->kind) == GVM_REGION_ALIAS) {
        if (__atomic_load_n(&view->state, __ATOMIC_ACQUIRE) != GVM_REGION_LIVE ||
            p >= GVM_LOAD(view->base) + GVM_LOAD(view->mapped))
            return false;
        r = __atomic_load_n(&view->target, __ATOMIC_ACQUIRE);
        if (!r) return false;
        shift = GVM_LOAD(view->base) - GVM_LOAD(r->base);
        p -= shift;
        only_slot = GVM_LOAD(view->alias_slot);
    }
    unsigned rgen = gvm_region_gen(r);
    if (!find_in(r, p, ref)) return false;
    /* An alias of a small allocation shows its whole chunk, but only that
     * allocation has a second address. */
    if (only_slot >= 0 && ref->slot != only_slot) return false;
    if (!gvm_region_stable(view, vgen) || !gvm_region_stable(r, rgen)) return false;
    ref->base += shift;
    return true;
}

bool gvm_heap_find(uintptr_t p, struct gvm_ref *ref)
{
    struct gvm_region *r = gvm_vamap_get(p);
    return r && find_view(r, p, ref);
}

/* An alias outlives the allocation it shows when the program frees that
 * first: its bound is then the freed allocation's (a large one keeps its
 * size in the orphaned region; a small one is bounded by its slot). */
static struct gvm_region *survivor(struct gvm_region *a, uintptr_t p, size_t *room)
{
    *room = 0;
    if (__atomic_load_n(&a->state, __ATOMIC_ACQUIRE) != GVM_REGION_LIVE) return NULL;
    struct gvm_region *t = __atomic_load_n(&a->target, __ATOMIC_ACQUIRE);
    if (!t) return NULL;
    size_t off = p - a->base, start = 0, end;
    if (a->alias_slot >= 0) {
        start = (size_t)a->alias_slot * t->slab->cls;
        end = start + t->slab->cls;
    } else if (GVM_LOAD(t->flags) & GVM_RF_ORPHAN) {
        end = GVM_LOAD(t->size);
    } else {
        return NULL;
    }
    if (end > GVM_LOAD(a->mapped)) end = GVM_LOAD(a->mapped);
    if (off < start || off >= end) return NULL;
    *room = end - off;
    return t;
}

struct gvm_region *gvm_heap_span(uintptr_t p, size_t *room)
{
    struct gvm_region *v = gvm_vamap_get(p);
    if (!v) {
        *room = SIZE_MAX;
        return NULL;
    }
    bool alias = __atomic_load_n(&v->kind, __ATOMIC_RELAXED) == GVM_REGION_ALIAS;
    struct gvm_ref ref;
    if (!find_view(v, p, &ref)) {
        if (alias) return survivor(v, p, room);
        *room = 0;
        return NULL;
    }
    *room = ref.base + ref.size - p;
    if (alias) {
        /* An alias keeps the length it had when its target grew. */
        size_t view = v->base + GVM_LOAD(v->mapped) - p;
        if (view < *room) *room = view;
    }
    return ref.region;
}

uint64_t gvm_heap_buffer_id(const struct gvm_ref *ref)
{
    if (ref->slot >= 0) return gvm_slab_buffer_id(ref->region, ref->slot);
    return GVM_LOAD(ref->region->buffer_id);
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

/* Whether r lived past cache_idle: then its free gives the memory back at
 * once, as a native free does (nvidia-smi and other processes see it go);
 * a loop that frees and allocates again sooner keeps reusing the cache,
 * and a slower one loses little by making its memory anew. A free that
 * must not wait (stream-ordered, or beside an open capture) caches it
 * anyway: the give-back returns it later. */
static bool long_lived(const struct gvm_region *r, uint64_t now)
{
    uint64_t idle = __atomic_load_n(&cache_idle_ns, __ATOMIC_RELAXED);
    if (!idle || !gvm_topo_reuse_waits() || gvm_capture_open(r->device)) return false;
    return now - r->served_at >= idle;
}

/* Sets *dead when r was released: the caller recycles it after unlocking. */
static CUresult free_large(struct gvm_region *r, uintptr_t p, bool *dead)
{
    if (p != r->base) return p < r->base + r->size ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_FOUND;
    uint64_t now = gvm_trace_now();   /* one clock read per free: its age and its time in the cache */
    bool give_back = long_lived(r, now);
    bool cacheable = !r->aliases && r->home == r->device && !(r->flags & (GVM_RF_PAUSED | GVM_RF_SHARED)) &&
                     gvm_region_location(r) == r->device && !give_back;
    if (cacheable) {
        /* Kept mapped and not reused before the device settles. */
        r->freed_at = gvm_topo_epoch(r->device);
        r->freed_on = gvm_topo_ordered_stream();
        gvm_live_remove(r);
        gvm_stats_live(r->device, -(int64_t)r->size);
        if (cache_put(r, now)) return CUDA_SUCCESS;
        __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
        CUresult rc = gvm_topo_settle(r->device, r->freed_at);
        if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
            defer(r);
            return CUDA_SUCCESS;
        }
        if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc))
            gvm_warn("waiting for the device before an unmap failed (%d)", rc);
        *dead = region_release(r);
        return CUDA_SUCCESS;
    }
    CUresult rc = wait_for_users(r);
    bool capturing = rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc != CUDA_SUCCESS && !capturing) return rc;
    gvm_live_remove(r);
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
    if (give_back) r->flags |= GVM_RF_GIVE_BACK;
    __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
    *dead = region_release(r);
    return CUDA_SUCCESS;
}

CUresult gvm_heap_free(uintptr_t p)
{
    gvm_heap_settle_deferred();
    struct gvm_region *r = gvm_vamap_get(p);
    if (!r || GVM_LOAD(r->kind) == GVM_REGION_ALIAS) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&r->op);
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    bool dead = false;
    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == GVM_REGION_LIVE) {
        int slot;
        uint64_t id;
        bool shared = gvm_share_key(r, p, &slot, &id);   /* CUDA IPC: core/share_hold.h */
        rc = r->kind == GVM_REGION_CHUNK ? free_small(r, p) : free_large(r, p, &dead);
        if (rc == CUDA_SUCCESS && shared) gvm_share_freed(r, slot, id);
    }
    pthread_mutex_unlock(&r->op);
    /* Only now: a record on the free list may be reset and reused at once. */
    if (dead) gvm_region_recycle(r);
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

size_t gvm_heap_trim_idle(int device, uint64_t idle_ns)
{
    uint64_t now = gvm_trace_now();
    struct evict_until u = {.cached_before = now > idle_ns ? now - idle_ns + 1 : 1};
    size_t freed = cache_evict_until(device, &u);
    /* Their pieces went to the pool, which gives back what it keeps as
     * long unused (a round later for these). */
    freed += gvm_phys_trim_idle(device, idle_ns);
    if (freed) gvm_debug("gave back %zu bytes idle on device %d for %.0f ms", freed, device, idle_ns / 1e6);
    return freed;
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
