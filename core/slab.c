#include "core/slab.h"

#include "core/ids.h"
#include "core/live.h"
#include "core/log.h"
#include "core/topo.h"

#include <stdlib.h>
#include <string.h>

#define NCLASSES 24

/* Freed slots waiting for the device to settle, per device. */
#define PENDING_MAX 4096
struct pending {
    struct gvm_slab *slab[PENDING_MAX];
    uint32_t slot[PENDING_MAX];
    uint64_t stream[PENDING_MAX];   /* freed in order on that stream (topo.h), 0: not */
    uint64_t stamp;               /* the newest free's epoch */
    int n;
    bool overflow;                /* more frees than fit (no wait was allowed): found by a scan */
};

static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending pending[GVM_MAX_DEVICES];

/* Slab records are type-stable, like regions: a lock-free lookup may read
 * one after its chunk is gone. A retired record waits here, never freed,
 * for the next chunk of its class, so its size class and slot arrays never
 * change (the reader checks its chunk's generation, region.h). */
static struct gvm_slab *spare[NCLASSES];
/* Empty chunks taken off their lists, to be destroyed under their own lock
 * by a thread that holds no other (reap): a move of the chunk may be under
 * way, and it holds the chunk's lock, then takes slab_lock. */
static struct gvm_slab *doomed;
/* Reaps under way: doomed chunks taken off the list that their reaper has
 * not destroyed yet. A trim waits for them (gvm_slab_trim). */
static unsigned reapers;
static pthread_cond_t reaped = PTHREAD_COND_INITIALIZER;
static size_t reaped_bytes[GVM_MAX_DEVICES];   /* ever, by any reap: what a waiting trim saw freed */
/* This thread trims for a move's destinations (gvm_slab_set_making_room). */
static __thread bool trims_for_move;

static void flush_locked(int device);
static struct gvm_slab *lists[GVM_MAX_DEVICES][NCLASSES];
static size_t idle_bytes[GVM_MAX_DEVICES];

/* 256, then 512 * 2^k and 768 * 2^k: multiples of cudaMalloc's 256-byte
 * alignment, and at most a third of a slot is wasted. */
static size_t class_size(int c)
{
    if (c == 0) return 256;
    return c & 1 ? (size_t)512 << ((c - 1) / 2) : (size_t)768 << ((c - 2) / 2);
}

static int class_of(size_t size)
{
    for (int c = 0; c < NCLASSES; c++)
        if (class_size(c) >= size) return c;
    return -1;
}

static void list_remove(struct gvm_slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        lists[s->device][s->cidx] = s->next;
    if (s->next) s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

static void list_push(struct gvm_slab *s)
{
    struct gvm_slab **head = &lists[s->device][s->cidx];
    s->prev = NULL;
    s->next = *head;
    if (*head) (*head)->prev = s;
    *head = s;
}

/* Called with slab_lock held. Every slot of a retired record is free
 * (sizes and alias counts zero), as a chunk is destroyed only when empty. */
static void slab_retire(struct gvm_slab *s)
{
    s->chunk = NULL;
    s->next = spare[s->cidx];
    spare[s->cidx] = s;
}

/* A record for a chunk of class cidx: a retired one, or a new one. */
static struct gvm_slab *slab_record(int cidx)
{
    pthread_mutex_lock(&slab_lock);
    struct gvm_slab *s = spare[cidx];
    if (s) spare[cidx] = s->next;
    pthread_mutex_unlock(&slab_lock);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cls = class_size(cidx);
    s->cls_three = s->cls % 3 == 0;
    s->cls_shift = (unsigned)__builtin_ctzll(s->cls);
    s->nslots = (unsigned)(gvm_topo.gran / s->cls);
    s->cidx = cidx;
    s->sizes = calloc(s->nslots, sizeof *s->sizes);
    s->ids = calloc(s->nslots, sizeof *s->ids);
    s->aliased = calloc(s->nslots, sizeof *s->aliased);
    if (s->sizes && s->ids && s->aliased) return s;
    free(s->sizes);
    free(s->ids);
    free(s->aliased);
    free(s);
    return NULL;
}

/* A new chunk, made without slab_lock (its driver calls need not block
 * other allocations, and a reused region record may wait for its lock). */
static CUresult slab_new(int device, int cidx, int tag, CUcontext ctx, struct gvm_slab **out)
{
    struct gvm_slab *s = slab_record(cidx);
    struct gvm_region *r = gvm_region_new();
    size_t chunk = gvm_topo.gran;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!s || !r) goto fail;
    s->nfree = s->nslots;
    s->hint = 0;
    s->flushing = 0;
    s->next = s->prev = NULL;
    if ((rc = gvm_region_reserve(r, chunk)) != CUDA_SUCCESS) goto fail;
    GVM_STORE(r->kind, GVM_REGION_CHUNK);
    r->device = device;
    GVM_STORE(r->home, device);
    r->ctx = ctx;
    GVM_STORE(r->tag, tag);
    /* Released: a lock-free lookup holding a stale pointer to a record
     * recycled into this chunk may read r->slab before r->state tells it
     * apart, and must then see s whole (gvm_slab_find). */
    __atomic_store_n(&r->slab, s, __ATOMIC_RELEASE);
    if ((rc = gvm_region_grow(r, chunk, device)) != CUDA_SUCCESS) goto unreserve;
    if (gvm_region_publish(r)) { rc = CUDA_ERROR_OUT_OF_MEMORY; goto unmap; }
    s->chunk = r;
    s->device = device;
    s->tag = tag;
    s->at_home = true;
    GVM_STORE(r->last_use, gvm_clock_tick());
    __atomic_store_n(&r->state, GVM_REGION_LIVE, __ATOMIC_RELEASE);
    gvm_live_add(r);     /* chunks move, spill and pause like any region */
    *out = s;
    return CUDA_SUCCESS;
unmap:
    gvm_region_unpublish(r);
unreserve:
    gvm_region_destroy(r);   /* nothing may be left mapped in a range it frees */
fail:
    if (r) gvm_region_recycle(r);
    if (s) {
        pthread_mutex_lock(&slab_lock);
        slab_retire(s);
        pthread_mutex_unlock(&slab_lock);
    }
    return rc;
}

/* Whether s's chunk is all on its device and not paused: read under the
 * chunk's lock, which a move holds while it changes the blocks. Called
 * with slab_lock held, so only tried (lock order: a region, then
 * slab_lock); a chunk locked at the moment (a free, a query, a move)
 * answers what it was last seen to be. */
static bool chunk_at_home(struct gvm_slab *s)
{
    struct gvm_region *r = s->chunk;
    if (pthread_mutex_trylock(&r->op) == 0) {
        s->at_home = !(r->flags & GVM_RF_PAUSED) && gvm_region_location(r) == s->device;
        pthread_mutex_unlock(&r->op);
    }
    return s->at_home;
}

/* A chunk may take new slots only where its device's allocations belong,
 * and for one context's allocations, which go with that context
 * (core/reset.h). */
static bool slab_usable(struct gvm_slab *s, int tag, CUcontext ctx)
{
    return s->nfree && s->tag == tag && s->chunk->ctx == ctx && chunk_at_home(s);
}

static size_t reap(int device);

static int take_slot(struct gvm_slab *s)
{
    for (unsigned n = 0; n < s->nslots; n++) {
        unsigned i = (s->hint + n) % s->nslots;
        uint64_t w = __atomic_load_n(&s->bits[i / 64], __ATOMIC_RELAXED);
        if (w & (1ull << (i % 64))) continue;
        __atomic_fetch_or(&s->bits[i / 64], 1ull << (i % 64), __ATOMIC_RELEASE);
        s->hint = i + 1;
        if (s->nfree-- == s->nslots) idle_bytes[s->device] -= s->chunk->mapped;
        return (int)i;
    }
    return -1;
}

/* How far back a stream-ordered allocation looks among pending slots for
 * one its stream freed: a loop frees and allocates the same few sizes. */
#define ORDERED_LOOK 64

/* A slot of class cidx freed in order on the stream this allocation is
 * made on, taken back at once (topo.h), the newest first; -1 if none.
 * Called with slab_lock held. */
static int claim_ordered(int device, int cidx, int tag, struct gvm_slab **out)
{
    uint64_t stream = gvm_topo_ordered_stream();
    struct pending *pd = &pending[device];
    if (!stream) return -1;
    for (int i = pd->n - 1; i >= 0 && i >= pd->n - ORDERED_LOOK; i--) {
        struct gvm_slab *s = pd->slab[i];
        if (pd->stream[i] != stream || s->cidx != cidx || s->tag != tag || !chunk_at_home(s)) continue;
        int slot = (int)pd->slot[i];
        int last = --pd->n;
        pd->slab[i] = pd->slab[last];
        pd->slot[i] = pd->slot[last];
        pd->stream[i] = pd->stream[last];
        *out = s;
        return slot;
    }
    return -1;
}

CUresult gvm_slab_alloc(int device, size_t size, int tag, CUcontext ctx, uintptr_t *out)
{
    int cidx = class_of(size);
    if (cidx < 0) return CUDA_ERROR_INVALID_VALUE;
    reap(-1);
    pthread_mutex_lock(&slab_lock);
    struct gvm_slab *s = NULL;
    int slot = claim_ordered(device, cidx, tag, &s);
    if (slot >= 0) goto claimed;
    s = lists[device][cidx];
    while (s && !slab_usable(s, tag, ctx)) s = s->next;
    if (!s && pending[device].n && (gvm_topo_reuse_waits() || gvm_topo_settled(device, pending[device].stamp))) {
        /* Rather than a new chunk: the slots freed earlier, once settled. */
        flush_locked(device);
        for (s = lists[device][cidx]; s && !slab_usable(s, tag, ctx);) s = s->next;
    }
    if (!s) {
        pthread_mutex_unlock(&slab_lock);
        CUresult rc = slab_new(device, cidx, tag, ctx, &s);
        if (rc != CUDA_SUCCESS) return rc;
        pthread_mutex_lock(&slab_lock);
        list_push(s);
        idle_bytes[device] += s->chunk->mapped;
    }
    slot = take_slot(s);
claimed:
    __atomic_store_n(&s->sizes[slot], (uint32_t)size, __ATOMIC_RELEASE);
    GVM_STORE(s->ids[slot], gvm_next_buffer_id());
    uintptr_t base = s->chunk->base;
    pthread_mutex_unlock(&slab_lock);
    *out = base + (uintptr_t)slot * s->cls;
    return CUDA_SUCCESS;
}

bool gvm_slab_find(const struct gvm_region *r, uintptr_t p, uintptr_t *base, size_t *size, int *slot)
{
    /* Lock-free: s may be retired meanwhile, but its class never changes. */
    const struct gvm_slab *s = __atomic_load_n(&r->slab, __ATOMIC_ACQUIRE);
    uintptr_t rbase = GVM_LOAD(r->base);
    if (!s || p < rbase) return false;
    /* No division by a loaded value on the lookup path: the class is a
     * power of two, or three times one (a constant division). */
    size_t i = (p - rbase) >> s->cls_shift;
    if (s->cls_three) i /= 3;
    if (i >= s->nslots) return false;
    uint32_t sz = __atomic_load_n(&s->sizes[i], __ATOMIC_ACQUIRE);
    uintptr_t b = rbase + i * s->cls;
    if (!sz || p >= b + sz) return false;
    *base = b;
    *size = sz;
    if (slot) *slot = (int)i;
    return true;
}

size_t gvm_slab_live_bases(const struct gvm_region *r, uintptr_t *out, size_t max)
{
    const struct gvm_slab *s = __atomic_load_n(&r->slab, __ATOMIC_ACQUIRE);
    if (!s) return 0;
    uintptr_t rbase = GVM_LOAD(r->base);
    size_t n = 0;
    for (unsigned i = 0; i < s->nslots; i++)
        if (__atomic_load_n(&s->sizes[i], __ATOMIC_ACQUIRE)) {
            if (n < max) out[n] = rbase + (uintptr_t)i * s->cls;
            n++;
        }
    return n;
}

static void release_slot(struct gvm_slab *s, unsigned i)
{
    __atomic_fetch_and(&s->bits[i / 64], ~(1ull << (i % 64)), __ATOMIC_RELEASE);
    if (++s->nfree == s->nslots) idle_bytes[s->device] += s->chunk->mapped;
}

static void maybe_drop_chunk(struct gvm_slab *s);

/* Freed slots that did not fit in the pending list: taken, without a size
 * and without aliases. Called with slab_lock held, once the device settled. */
static void release_unlisted(int device)
{
    pending[device].overflow = false;
    for (int c = 0; c < NCLASSES; c++)
        for (struct gvm_slab *s = lists[device][c]; s; s = s->next)
            for (unsigned i = 0; i < s->nslots; i++)
                if ((s->bits[i / 64] >> (i % 64) & 1) && !s->sizes[i] && !s->aliased[i]) release_slot(s, i);
}

/* Makes every pending slot of device free once the device settled (waits
 * if it has not). Called with slab_lock held. */
static void flush_locked(int device)
{
    struct pending *pd = &pending[device];
    if (!pd->n) return;
    CUresult rc = gvm_topo_settle(device, pd->stamp);
    if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) return;   /* after the capture */
    if (rc != CUDA_SUCCESS) {
        if (!gvm_driver_gone(rc))
            gvm_warn("waiting for device %d failed (%d); freed small blocks stay unused", device, rc);
        return;
    }
    for (int i = 0; i < pd->n; i++) {
        struct gvm_slab *s = pd->slab[i];
        release_slot(s, pd->slot[i]);
        s->flushing = 1;
    }
    int n = pd->n;
    pd->n = 0;
    if (pd->overflow) release_unlisted(device);
    /* Chunks that became empty may go now (each looked at once). */
    for (int i = 0; i < n; i++) {
        struct gvm_slab *s = pd->slab[i];
        if (!s->flushing) continue;
        s->flushing = 0;
        maybe_drop_chunk(s);
    }
}

/* Called with slab_lock held. */
static void make_pending(struct gvm_slab *s, unsigned slot)
{
    struct pending *pd = &pending[s->device];
    if (pd->n == PENDING_MAX) flush_locked(s->device);
    pd->stamp = gvm_topo_epoch(s->device);
    if (pd->n == PENDING_MAX) {
        /* No wait now (a capture is open, or the device failed): the
         * slot stays taken until a flush finds it. */
        pd->overflow = true;
        return;
    }
    pd->slab[pd->n] = s;
    pd->stream[pd->n] = gvm_topo_ordered_stream();
    pd->slot[pd->n++] = slot;
}

void gvm_slab_reap_skipped(void) { reap(-1); }

void gvm_slab_flush(int device)
{
    pthread_mutex_lock(&slab_lock);
    flush_locked(device);
    pthread_mutex_unlock(&slab_lock);
    reap(-1);
}

/* Takes an empty chunk off its list for reap to destroy. An empty chunk
 * has no alias: an alias keeps the slot it was made for taken. Called with
 * slab_lock held. */
static void doom(struct gvm_slab *s)
{
    list_remove(s);
    s->next = doomed;
    __atomic_store_n(&doomed, s, __ATOMIC_RELEASE);
}

/* Destroys the doomed chunks, each under its own lock, so that a move of
 * it (the promoter's, a spill's) ends first. Except when this thread trims
 * to make room for a move: a chunk in the middle of a move then stays
 * doomed, since the move may be this thread's own or one this thread works
 * for (stress test, 2026-11-23: the promoter waited on its own lock), and
 * the move reaps it when it lets go (gvm_slab_reap_skipped). Returns the
 * bytes freed on device. */
static size_t reap(int device)
{
    if (!__atomic_load_n(&doomed, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&slab_lock);
    struct gvm_slab *list = doomed;
    __atomic_store_n(&doomed, NULL, __ATOMIC_RELAXED);
    if (list) reapers++;
    pthread_mutex_unlock(&slab_lock);
    if (!list) return 0;
    size_t freed = 0;
    bool retry = false, making_room = trims_for_move;
    while (list) {
        struct gvm_slab *s = list;
        struct gvm_region *r = s->chunk;
        list = s->next;
        /* A trim for a move runs with the moving regions' locks held: it
         * takes a chunk's only if free at once. A chunk a thread holds
         * before its move begins (a victim just locked) may belong to one
         * that trims too, waiting for a lock this thread holds (three
         * threads swapping in a cycle: ThreadSanitizer, 2026-11-27). */
        if (making_room && (__atomic_load_n(&r->moving, __ATOMIC_SEQ_CST) || pthread_mutex_trylock(&r->op) != 0)) {
            pthread_mutex_lock(&slab_lock);
            s->next = doomed;
            __atomic_store_n(&doomed, s, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&slab_lock);
            /* A move may have ended and reaped before this put it back:
             * then nobody else will. (A lock held without a move is let
             * go soon; the next reap finds the chunk.) */
            if (__atomic_load_n(&r->moving, __ATOMIC_SEQ_CST) == 0 && pthread_mutex_trylock(&r->op) == 0) {
                pthread_mutex_unlock(&r->op);
                retry = true;
            }
            continue;
        }
        if (!making_room) pthread_mutex_lock(&r->op);   /* else taken by the trylock */
        size_t bytes = r->mapped;
        gvm_live_remove(r);
        __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
        gvm_region_unpublish(r);
        gvm_region_destroy(r);
        pthread_mutex_unlock(&r->op);
        gvm_region_recycle(r);
        pthread_mutex_lock(&slab_lock);
        idle_bytes[s->device] -= bytes;
        reaped_bytes[s->device] += bytes;
        if (s->device == device) freed += bytes;
        slab_retire(s);
        pthread_mutex_unlock(&slab_lock);
    }
    pthread_mutex_lock(&slab_lock);
    if (!--reapers) pthread_cond_broadcast(&reaped);
    pthread_mutex_unlock(&slab_lock);
    if (retry) freed += reap(device);
    return freed;
}

/* Keeps one empty chunk per class for reuse; dooms the others. Called
 * with slab_lock held. */
static void maybe_drop_chunk(struct gvm_slab *s)
{
    if (s->nfree != s->nslots) return;
    bool other_empty = false;
    for (struct gvm_slab *o = lists[s->device][s->cidx]; o; o = o->next)
        if (o != s && o->nfree == o->nslots) other_empty = true;
    if (!other_empty && chunk_at_home(s)) return;
    doom(s);
}

CUresult gvm_slab_free(struct gvm_region *r, uintptr_t p)
{
    struct gvm_slab *s = r->slab;
    if (p < r->base || (p - r->base) % s->cls) return CUDA_ERROR_INVALID_VALUE;
    size_t i = (p - r->base) / s->cls;
    pthread_mutex_lock(&slab_lock);
    if (i >= s->nslots || !s->sizes[i]) {
        pthread_mutex_unlock(&slab_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    __atomic_store_n(&s->sizes[i], 0, __ATOMIC_RELEASE);
    if (!s->aliased[i]) make_pending(s, (unsigned)i);
    pthread_mutex_unlock(&slab_lock);
    return CUDA_SUCCESS;
}

void gvm_slab_alias_ref(struct gvm_region *r, int slot, int delta)
{
    struct gvm_slab *s = r->slab;
    pthread_mutex_lock(&slab_lock);
    s->aliased[slot] = (uint16_t)(s->aliased[slot] + delta);
    /* The program freed the slot while an alias showed it: free it now. */
    if (!s->aliased[slot] && !s->sizes[slot] &&
        (__atomic_load_n(&s->bits[slot / 64], __ATOMIC_RELAXED) & (1ull << (slot % 64))))
        make_pending(s, (unsigned)slot);
    pthread_mutex_unlock(&slab_lock);
}

size_t gvm_slab_idle_bytes(int device)
{
    pthread_mutex_lock(&slab_lock);
    size_t b = idle_bytes[device];
    pthread_mutex_unlock(&slab_lock);
    return b;
}

size_t gvm_slab_trim(int device)
{
    pthread_mutex_lock(&slab_lock);
    for (int c = 0; c < NCLASSES; c++) {
        struct gvm_slab *s = lists[device][c];
        while (s) {
            struct gvm_slab *next = s->next;
            if (s->nfree == s->nslots) doom(s);
            s = next;
        }
    }
    pthread_mutex_unlock(&slab_lock);
    size_t freed = reap(device);
    if (trims_for_move) return freed;   /* a reap under way may wait for this thread's move */
    /* Another thread's reap may have taken empty chunks off the list just
     * before this one looked, and not destroyed them yet: the trim is over
     * when they are gone too (stress test, 2026-11-23: a gvmctl set's
     * eviction, or the promoter after a move, still destroyed them when
     * the test counted what was left). */
    pthread_mutex_lock(&slab_lock);
    size_t before = reaped_bytes[device];
    while (reapers || __atomic_load_n(&doomed, __ATOMIC_RELAXED)) {
        if (reapers) {
            pthread_cond_wait(&reaped, &slab_lock);
            continue;
        }
        pthread_mutex_unlock(&slab_lock);
        reap(device);   /* what a reap that made room for a move left doomed */
        pthread_mutex_lock(&slab_lock);
    }
    freed += reaped_bytes[device] - before;   /* the caller may retry what it trimmed for */
    pthread_mutex_unlock(&slab_lock);
    return freed;
}

void gvm_slab_set_making_room(bool on) { trims_for_move = on; }

void gvm_slab_renew_ids(struct gvm_region *r)
{
    struct gvm_slab *s = r->slab;
    bool home = !(r->flags & GVM_RF_PAUSED) && gvm_region_location(r) == r->device;   /* r->op is held */
    pthread_mutex_lock(&slab_lock);
    s->at_home = home;
    for (unsigned i = 0; i < s->nslots; i++)
        if (s->sizes[i]) GVM_STORE(s->ids[i], gvm_next_buffer_id());
    pthread_mutex_unlock(&slab_lock);
}

uint64_t gvm_slab_buffer_id(const struct gvm_region *r, int slot)
{
    const struct gvm_slab *s = __atomic_load_n(&r->slab, __ATOMIC_ACQUIRE);
    return s ? GVM_LOAD(s->ids[slot]) : 0;
}
