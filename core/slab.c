#include "core/slab.h"

#include "core/driver.h"
#include "core/heap.h"
#include "core/log.h"
#include "core/move.h"
#include "core/settings.h"
#include "core/topo.h"

#include <stdlib.h>
#include <string.h>

#define NCLASSES 24

/* Freed slots waiting for the device to settle, per device. */
#define PENDING_MAX 4096
struct pending {
    struct gvm_slab *slab[PENDING_MAX];
    uint32_t slot[PENDING_MAX];
    uint64_t stamp;               /* the newest free's epoch */
    int n;
    bool overflow;                /* more frees than fit (no wait was allowed): found by a scan */
};

static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending pending[GVM_MAX_DEVICES];

static void flush_locked(int device);
static struct gvm_slab *lists[GVM_MAX_DEVICES][NCLASSES];
static size_t idle_bytes[GVM_MAX_DEVICES];
static uint64_t buffer_ids;

uint64_t gvm_next_buffer_id(void) { return __atomic_add_fetch(&buffer_ids, 1, __ATOMIC_RELAXED); }

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

static void slab_free_record(struct gvm_slab *s)
{
    free(s->sizes);
    free(s->ids);
    free(s->aliased);
    free(s);
}

static CUresult slab_new(int device, int cidx, int tag, CUcontext ctx, struct gvm_slab **out)
{
    struct gvm_slab *s = calloc(1, sizeof *s);
    struct gvm_region *r = gvm_region_new();
    size_t chunk = gvm_topo.gran;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!s || !r) goto fail;
    s->cls = class_size(cidx);
    s->nslots = s->nfree = (unsigned)(chunk / s->cls);
    s->sizes = calloc(s->nslots, sizeof *s->sizes);
    s->ids = calloc(s->nslots, sizeof *s->ids);
    s->aliased = calloc(s->nslots, sizeof *s->aliased);
    if (!s->sizes || !s->ids || !s->aliased) goto fail;
    if ((rc = gvm_region_reserve(r, chunk)) != CUDA_SUCCESS) goto fail;
    r->kind = GVM_REGION_CHUNK;
    r->device = r->home = device;
    r->ctx = ctx;
    r->tag = tag;
    r->slab = s;
    if ((rc = gvm_region_grow(r, chunk, device)) != CUDA_SUCCESS) goto unreserve;
    if (gvm_region_publish(r)) { rc = CUDA_ERROR_OUT_OF_MEMORY; goto unmap; }
    __atomic_store_n(&r->state, GVM_REGION_LIVE, __ATOMIC_RELEASE);
    r->last_use = gvm_clock_tick();
    gvm_heap_track(r);   /* chunks move, spill and pause like any region */
    s->chunk = r;
    s->device = device;
    s->cidx = cidx;
    s->tag = tag;
    *out = s;
    return CUDA_SUCCESS;
unmap:
    gvm_region_unpublish(r);
unreserve:
    gvm_region_destroy(r);   /* nothing may be left mapped in a range it frees */
fail:
    if (r) gvm_region_recycle(r);
    if (s) slab_free_record(s);
    return rc;
}

/* A chunk may take new slots only where its device's allocations belong. */
static bool slab_usable(const struct gvm_slab *s, int tag)
{
    const struct gvm_region *r = s->chunk;
    return s->nfree && s->tag == tag && !(r->flags & GVM_RF_PAUSED) &&
           gvm_region_location(r) == s->device;
}

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

CUresult gvm_slab_alloc(int device, size_t size, int tag, CUcontext ctx, uintptr_t *out)
{
    int cidx = class_of(size);
    if (cidx < 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&slab_lock);
    struct gvm_slab *s = lists[device][cidx];
    while (s && !slab_usable(s, tag)) s = s->next;
    if (!s && pending[device].n) {
        /* Rather than a new chunk: the slots freed earlier, once settled. */
        flush_locked(device);
        for (s = lists[device][cidx]; s && !slab_usable(s, tag);) s = s->next;
    }
    CUresult rc = CUDA_SUCCESS;
    if (!s) {
        rc = slab_new(device, cidx, tag, ctx, &s);
        if (rc != CUDA_SUCCESS) {
            pthread_mutex_unlock(&slab_lock);
            return rc;
        }
        list_push(s);
        idle_bytes[device] += s->chunk->mapped;
    }
    int slot = take_slot(s);
    s->sizes[slot] = (uint32_t)size;
    s->ids[slot] = gvm_next_buffer_id();
    pthread_mutex_unlock(&slab_lock);
    *out = s->chunk->base + (uintptr_t)slot * s->cls;
    return CUDA_SUCCESS;
}

bool gvm_slab_find(const struct gvm_region *r, uintptr_t p, uintptr_t *base, size_t *size, int *slot)
{
    const struct gvm_slab *s = r->slab;
    if (!s || p < r->base) return false;
    size_t i = (p - r->base) / s->cls;
    if (i >= s->nslots) return false;
    uint32_t sz = __atomic_load_n(&s->sizes[i], __ATOMIC_ACQUIRE);
    uintptr_t b = r->base + i * s->cls;
    if (!sz || p >= b + sz) return false;
    *base = b;
    *size = sz;
    if (slot) *slot = (int)i;
    return true;
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
    pd->slot[pd->n++] = slot;
}

void gvm_slab_flush(int device)
{
    pthread_mutex_lock(&slab_lock);
    flush_locked(device);
    pthread_mutex_unlock(&slab_lock);
}

/* Keeps one empty chunk per class for reuse; destroys the others. Called
 * with slab_lock held. */
static void maybe_drop_chunk(struct gvm_slab *s)
{
    if (s->nfree != s->nslots || s->chunk->aliases) return;
    bool other_empty = false;
    for (struct gvm_slab *o = lists[s->device][s->cidx]; o; o = o->next)
        if (o != s && o->nfree == o->nslots) other_empty = true;
    if (!other_empty && gvm_region_location(s->chunk) == s->device) return;
    list_remove(s);
    idle_bytes[s->device] -= s->chunk->mapped;
    struct gvm_region *r = s->chunk;
    gvm_heap_untrack(r);
    gvm_region_unpublish(r);
    gvm_region_destroy(r);
    gvm_region_recycle(r);
    slab_free_record(s);
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
    size_t freed = 0;
    pthread_mutex_lock(&slab_lock);
    for (int c = 0; c < NCLASSES; c++) {
        struct gvm_slab *s = lists[device][c];
        while (s) {
            struct gvm_slab *next = s->next;
            /* A chunk being moved is busy, not idle: leave it. */
            if (s->nfree == s->nslots && !s->chunk->aliases &&
                pthread_mutex_trylock(&s->chunk->op) == 0) {
                pthread_mutex_unlock(&s->chunk->op);
                freed += s->chunk->mapped;
                list_remove(s);
                idle_bytes[device] -= s->chunk->mapped;
                gvm_heap_untrack(s->chunk);
                gvm_region_unpublish(s->chunk);
                gvm_region_destroy(s->chunk);
                gvm_region_recycle(s->chunk);
                slab_free_record(s);
            }
            s = next;
        }
    }
    pthread_mutex_unlock(&slab_lock);
    return freed;
}

void gvm_slab_renew_ids(struct gvm_region *r)
{
    struct gvm_slab *s = r->slab;
    pthread_mutex_lock(&slab_lock);
    for (unsigned i = 0; i < s->nslots; i++)
        if (s->sizes[i]) s->ids[i] = gvm_next_buffer_id();
    pthread_mutex_unlock(&slab_lock);
}
