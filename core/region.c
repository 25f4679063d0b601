#include "core/region.h"

#include "core/driver.h"
#include "core/log.h"
#include "core/phys_batch.h"
#include "core/settings.h"
#include "core/topo.h"
#include "core/vamap.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gvm_region *free_records;

/* Resets a reused record field by field: its mutex is never copied (an
 * unlock landing on a copy would leave the real one locked with no owner),
 * and `users` stays, since an announcement made on the old allocation may
 * still end (gvm_use_end) after the reuse. Runs under r->op, so whoever
 * takes the lock next sees the reset. */
static void region_reset(struct gvm_region *r)
{
    GVM_STORE(r->kind, GVM_REGION_LARGE);
    GVM_STORE(r->state, GVM_REGION_FREE);
    GVM_STORE(r->base, (uintptr_t)0);
    GVM_STORE(r->reserved, (size_t)0);
    GVM_STORE(r->mapped, (size_t)0);
    GVM_STORE(r->size, (size_t)0);
    GVM_STORE(r->target, (struct gvm_region *)NULL);
    GVM_STORE(r->slab, (struct gvm_slab *)NULL);
    GVM_STORE(r->home, 0);
    GVM_STORE(r->held_on, 0u);
    GVM_STORE(r->copied_from, 0u);
    GVM_STORE(r->tag, 0);
    GVM_STORE(r->flags, 0u);
    GVM_STORE(r->read_by_handle, false);
    GVM_STORE(r->spilled_at, (uint64_t)0);
    GVM_STORE(r->last_use, (uint64_t)0);
    GVM_STORE(r->nlaunches, 0u);
    GVM_STORE(r->buffer_id, (uint64_t)0);
    r->device = 0;
    r->ctx = NULL;
    r->nblocks = 0;
    r->aliases = NULL;
    GVM_STORE(r->alias_slot, 0);
    r->paused_loc = 0;
    GVM_STORE(r->shelf, (struct gvm_phys **)NULL);   /* dropped when the region was destroyed */
    r->nshelf = 0;
    GVM_STORE(r->shelf_spill, false);
    GVM_STORE(r->shelf_pause, false);
    r->freed_at = 0;
    r->freed_on = 0;
    r->last_error = CUDA_SUCCESS;
    gvm_usemark_reset(r);
    r->next = r->lru_prev = r->lru_next = NULL;
}

struct gvm_region *gvm_region_new(void)
{
    pthread_mutex_lock(&records_lock);
    struct gvm_region *r = free_records;
    if (r) free_records = r->next;
    pthread_mutex_unlock(&records_lock);
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return NULL;
        pthread_mutex_init(&r->op, NULL);
        return r;
    }
    /* A stale reader (the policy with an old candidate, a lookup that
     * raced with the free) may hold the lock to look at the state. */
    pthread_mutex_lock(&r->op);
    region_reset(r);
    pthread_mutex_unlock(&r->op);
    return r;
}

void gvm_region_recycle(struct gvm_region *r)
{
    __atomic_store_n(&r->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
    __atomic_add_fetch(&r->gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&records_lock);
    r->next = free_records;
    free_records = r;
    pthread_mutex_unlock(&records_lock);
}

CUresult gvm_region_reserve(struct gvm_region *r, size_t reserved)
{
    CUdeviceptr va = 0;
    CUresult rc = DRV(cuMemAddressReserve, &va, reserved, gvm_topo.gran, 0, 0);
    if (rc != CUDA_SUCCESS) return rc;
    GVM_STORE(r->base, (uintptr_t)va);
    GVM_STORE(r->reserved, reserved);
    return CUDA_SUCCESS;
}

int gvm_region_publish(struct gvm_region *r)
{
    return gvm_vamap_set(r->base, r->reserved, r);
}

void gvm_region_unpublish(struct gvm_region *r)
{
    gvm_vamap_set(r->base, r->reserved, NULL);
}

/* The views of block b: the region itself and each alias that covers it. */
static int views_of(struct gvm_region *r, const struct gvm_block *b, uintptr_t *out, int max)
{
    int n = 0;
    out[n++] = r->base + b->off;
    for (struct gvm_region *a = r->aliases; a && n < max; a = a->aliases)
        if (b->off + b->size <= a->mapped) out[n++] = a->base + b->off;
    return n;
}

#define MAX_VIEWS 64

static bool cpu_wanted(const struct gvm_block *b, int loc)
{
    if (loc != GVM_LOC_HOST) return false;
    return gvm_settings.host_access == GVM_HOST_ACCESS_EAGER || b->cpu;
}

void gvm_region_keep_reach(struct gvm_region *r, int dev)
{
    if (dev >= 0 && dev < GVM_MAX_DEVICES) __atomic_fetch_or(&r->held_on, 1u << dev, __ATOMIC_RELEASE);
}

uint32_t gvm_region_reach(const struct gvm_region *r)
{
    if (r->kind == GVM_REGION_ALIAS && r->target) r = r->target;
    uint32_t mask = __atomic_load_n(&gvm_topo.reach[r->device], __ATOMIC_ACQUIRE) | GVM_LOAD(r->held_on) |
                    GVM_LOAD(r->copied_from);
    int home = GVM_LOAD(r->home);
    return home >= 0 ? mask | 1u << home : mask;
}

/* Memory is granted to the devices that reach it natively (the device
 * holding it and gvm_region_reach), not to every device: each device
 * granted costs about as much again, and a move pays for it on its
 * critical path (two H200s, 2026-11-23, 128 MiB in 64 MiB pieces: host
 * memory mapped in 1.1-1.5 ms for one device and 3.0-4.9 ms for two;
 * device memory in 0.1 ms for its own device and 1.6 ms with the peer). */
static int access_of(const struct gvm_region *r, int loc, bool cpu, CUmemAccessDesc *descs)
{
    uint32_t mask = gvm_region_reach(r);
    if (loc >= 0) mask |= 1u << loc;
    return gvm_topo_access_mask(loc, mask, cpu, descs);
}

static CUresult map_at(const struct gvm_region *r, uintptr_t va, struct gvm_phys *p, bool cpu)
{
    CUresult rc = DRV(cuMemMap, (CUdeviceptr)va, p->size, 0, p->handle, 0);
    if (rc != CUDA_SUCCESS) return rc;
    CUmemAccessDesc descs[GVM_MAX_DEVICES + 1];
    int n = access_of(r, p->loc, cpu, descs);
    rc = DRV(cuMemSetAccess, (CUdeviceptr)va, p->size, descs, (size_t)n);
    if (rc != CUDA_SUCCESS) DRV(cuMemUnmap, (CUdeviceptr)va, p->size);
    return rc;
}

static int ensure_blocks(struct gvm_region *r, int need)
{
    if (need <= r->cap_blocks) return 0;
    int cap = r->cap_blocks ? r->cap_blocks : 4;
    while (cap < need) cap *= 2;
    struct gvm_block *nb = realloc(r->blocks, (size_t)cap * sizeof *nb);
    if (!nb) return -1;
    r->blocks = nb;
    r->cap_blocks = cap;
    return 0;
}

/* Undoes a failed grow: the blocks from `first` on were mapped in r's own
 * range only. */
/* Unmaps block b's piece at va in view (r or one of its aliases). One that
 * stays mapped is never given back, and the view's range never freed. */
static void unmap_view(struct gvm_region *view, uintptr_t va, struct gvm_block *b)
{
    if (gvm_phys_unmap((CUdeviceptr)va, b->size) == CUDA_SUCCESS) return;
    b->phys->stuck = true;
    view->flags |= GVM_RF_LEAKED;
}

static void drop_new_blocks(struct gvm_region *r, int first)
{
    for (int i = r->nblocks - 1; i >= first; i--) {
        unmap_view(r, r->base + r->blocks[i].off, &r->blocks[i]);
        gvm_phys_put(r->blocks[i].phys);
    }
    r->nblocks = first;
}

/* Largest power-of-two multiple of the granularity within the limits, so
 * pieces come in few sizes and pooled ones fit again. */
static size_t piece_size(size_t remaining, size_t cap)
{
    size_t limit = cap < remaining ? cap : remaining;
    size_t p = gvm_topo.gran;
    while (p * 2 <= limit) p *= 2;
    return p;
}

/* Host pieces are created on several threads at once (pinning is the slow
 * part and the kernel does it in parallel). On failure none is kept. */
static CUresult host_pieces(size_t len, size_t cap, struct gvm_phys ***out, int *n)
{
    int count = 0;
    for (size_t o = 0; o < len; o += piece_size(len - o, cap)) count++;
    size_t *sizes = calloc((size_t)count, sizeof *sizes);
    struct gvm_phys **p = calloc((size_t)count, sizeof *p);
    CUresult rc = sizes && p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    size_t o = 0;
    for (int i = 0; i < count && rc == CUDA_SUCCESS; i++) o += sizes[i] = piece_size(len - o, cap);
    if (rc == CUDA_SUCCESS) rc = gvm_phys_get_many(GVM_LOC_HOST, sizes, count, false, p);
    free(sizes);
    if (rc != CUDA_SUCCESS) {
        free(p);
        return rc;
    }
    *out = p;
    *n = count;
    return CUDA_SUCCESS;
}

size_t gvm_region_piece_cap(const struct gvm_region *r, int loc)
{
    /* Memory likely to move keeps the pieces moves pipeline. */
    bool settled = loc >= 0 && loc == r->device && !GVM_LOAD(r->tag) && !GVM_LOAD(r->spilled_at);
    return settled ? gvm_settings.grow_block : gvm_settings.block_size;
}

CUresult gvm_region_grow(struct gvm_region *r, size_t len, int loc)
{
    return gvm_region_grow_by(r, len, loc, gvm_settings.block_size);
}

static double grow_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

CUresult gvm_region_grow_by(struct gvm_region *r, size_t len, int loc, size_t cap)
{
    double t0 = grow_us(), t_get = 0, t_map = 0;
    int first = r->nblocks;
    size_t off = r->mapped;
    size_t end = off + len;
    CUresult rc = CUDA_SUCCESS;
    if (cap < gvm_topo.gran) cap = gvm_topo.gran;
    int nready = 0, used = 0;
    struct gvm_phys **ready = NULL;
    if (loc == GVM_LOC_HOST && (rc = host_pieces(len, cap, &ready, &nready)) != CUDA_SUCCESS) return rc;
    while (off < end) {
        size_t sz = piece_size(end - off, cap);
        struct gvm_phys *p = NULL;
        if (ensure_blocks(r, r->nblocks + 1)) { rc = CUDA_ERROR_OUT_OF_MEMORY; break; }
        double t1 = grow_us();
        if (used < nready)
            p = ready[used++];
        else if ((rc = gvm_phys_get(loc, sz, false, &p)) != CUDA_SUCCESS)
            break;
        double t2 = grow_us();
        t_get += t2 - t1;
        struct gvm_block *b = &r->blocks[r->nblocks];
        b->phys = p;
        b->off = off;
        b->size = sz;
        b->cpu = loc == GVM_LOC_HOST && gvm_settings.host_access == GVM_HOST_ACCESS_EAGER;
        rc = DRV(cuMemMap, (CUdeviceptr)(r->base + off), sz, 0, p->handle, 0);
        t_map += grow_us() - t2;
        if (rc != CUDA_SUCCESS) { gvm_phys_put(p); break; }
        r->nblocks++;
        off += sz;
    }
    double t3 = grow_us();
    if (rc == CUDA_SUCCESS) {
        /* One call over all new mappings: the driver accepts a range that
         * spans several mappings of one location. */
        CUmemAccessDesc descs[GVM_MAX_DEVICES + 1];
        int n = access_of(r, loc, cpu_wanted(&r->blocks[first], loc), descs);
        rc = DRV(cuMemSetAccess, (CUdeviceptr)(r->base + r->mapped), len, descs, (size_t)n);
    }
    for (int i = used; i < nready; i++) gvm_phys_put(ready[i]);   /* pieces a failure left unused */
    free(ready);
    if (rc != CUDA_SUCCESS) {
        drop_new_blocks(r, first);
        return rc;
    }
    for (int i = first; i < r->nblocks; i++) gvm_stats_resident(loc, (int64_t)r->blocks[i].size);
    GVM_STORE(r->mapped, end);
    gvm_debug("grow of %#lx by %zu bytes at %d: %d piece(s), get %.0f, map %.0f, access %.0f, all %.0f us",
              (unsigned long)r->base, len, loc, r->nblocks - first, t_get, t_map, grow_us() - t3, grow_us() - t0);
    return CUDA_SUCCESS;
}

CUresult gvm_region_grow_striped(struct gvm_region *r, size_t len, uint64_t devices)
{
    int devs[GVM_MAX_DEVICES], ndevs = 0;
    for (int d = 0; d < gvm_topo.ndev; d++)
        if ((devices >> d & 1) && gvm_topo.dev[d].vmm) devs[ndevs++] = d;
    if (!ndevs) return CUDA_ERROR_INVALID_VALUE;
    /* Memory spread over devices is used from each of them: every stripe
     * is granted to all (gvm_region_reach), from the first piece on. */
    for (int i = 0; i < ndevs; i++) gvm_region_keep_reach(r, devs[i]);
    int first = r->nblocks;
    size_t unit = gvm_topo.gran, start = r->mapped;
    CUresult rc = CUDA_SUCCESS;
    for (size_t off = start, k = 0; off < start + len; off += unit, k++) {
        struct gvm_phys *p = NULL;
        int loc = devs[k % (size_t)ndevs];
        if (ensure_blocks(r, r->nblocks + 1)) { rc = CUDA_ERROR_OUT_OF_MEMORY; break; }
        if ((rc = gvm_phys_get(loc, unit, false, &p)) != CUDA_SUCCESS) break;
        if ((rc = map_at(r, r->base + off, p, false)) != CUDA_SUCCESS) { gvm_phys_put(p); break; }
        r->blocks[r->nblocks++] = (struct gvm_block){.phys = p, .off = off, .size = unit};
    }
    if (rc != CUDA_SUCCESS) {
        drop_new_blocks(r, first);
        return rc;
    }
    for (int i = first; i < r->nblocks; i++) gvm_stats_resident(r->blocks[i].phys->loc, (int64_t)unit);
    GVM_STORE(r->mapped, start + len);
    return CUDA_SUCCESS;
}

static void drop_block(struct gvm_region *r, struct gvm_block *b)
{
    if (!b->phys) return;
    unmap_view(r, r->base + b->off, b);
    for (struct gvm_region *a = r->aliases; a; a = a->aliases)
        if (b->off + b->size <= a->mapped) unmap_view(a, a->base + b->off, b);
    gvm_stats_resident(b->phys->loc, -(int64_t)b->size);
    /* Shared pieces may still be mapped by an importing process: never
     * handed to another allocation from the pool; nor the device pieces of
     * memory given back at its free (host pieces, slow to make and not the
     * GPU's, return to the host pool). */
    if ((r->flags & GVM_RF_SHARED) || ((r->flags & GVM_RF_GIVE_BACK) && b->phys->loc != GVM_LOC_HOST))
        gvm_phys_destroy(b->phys);
    else
        gvm_phys_put(b->phys);
    b->phys = NULL;
}

void gvm_region_shrink(struct gvm_region *r, int first)
{
    for (int i = r->nblocks - 1; i >= first; i--) drop_block(r, &r->blocks[i]);
    r->nblocks = first;
    GVM_STORE(r->mapped, first ? r->blocks[first - 1].off + r->blocks[first - 1].size : 0);
    for (struct gvm_region *a = r->aliases; a; a = a->aliases)
        if (a->mapped > r->mapped) GVM_STORE(a->mapped, r->mapped);
}

/* The views of [off, off+len): the region and each alias covering it. */
static int views_of_range(struct gvm_region *r, size_t off, size_t len, uintptr_t *out, int max)
{
    int n = 0;
    out[n++] = r->base;
    for (struct gvm_region *a = r->aliases; a && n < max; a = a->aliases)
        if (off + len <= a->mapped) out[n++] = a->base;
    return n;
}

/* Maps pieces from va on, then grants access over the whole span. On
 * failure nothing stays mapped. */
static CUresult map_pieces(const struct gvm_region *r, uintptr_t va, size_t len, struct gvm_phys *const *p, int n,
                           bool cpu)
{
    size_t o = 0;
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < n; i++) {
        if ((rc = DRV(cuMemMap, (CUdeviceptr)(va + o), p[i]->size, 0, p[i]->handle, 0)) != CUDA_SUCCESS) break;
        o += p[i]->size;
    }
    if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc descs[GVM_MAX_DEVICES + 1];
        int nd = access_of(r, p[0]->loc, cpu, descs);
        rc = DRV(cuMemSetAccess, (CUdeviceptr)va, len, descs, (size_t)nd);
    }
    /* One unmap may span several adjacent mappings. */
    if (rc != CUDA_SUCCESS && o) DRV(cuMemUnmap, (CUdeviceptr)va, o);
    return rc;
}

CUresult gvm_region_respan(struct gvm_region *r, size_t off, size_t len, struct gvm_phys *const *from, int nfrom,
                           bool from_cpu, struct gvm_phys *const *to, int nto)
{
    uintptr_t views[MAX_VIEWS];
    int nv = views_of_range(r, off, len, views, MAX_VIEWS);
    bool to_cpu = gvm_settings.host_access == GVM_HOST_ACCESS_EAGER;
    CUresult rc = CUDA_SUCCESS;
    int done = 0;   /* views switched to `to` */
    for (; done < nv; done++) {
        uintptr_t va = views[done] + off;
        if ((rc = DRV(cuMemUnmap, (CUdeviceptr)va, len)) != CUDA_SUCCESS) break;
        if ((rc = map_pieces(r, va, len, to, nto, to_cpu)) != CUDA_SUCCESS) {
            if (map_pieces(r, va, len, from, nfrom, from_cpu) != CUDA_SUCCESS && !gvm_driver_gone(CUDA_SUCCESS))
                gvm_error("cannot restore mapping at %#lx after a failed remap", (unsigned long)va);
            break;
        }
    }
    if (rc != CUDA_SUCCESS) {
        for (int v = 0; v < done; v++) {
            uintptr_t va = views[v] + off;
            DRV(cuMemUnmap, (CUdeviceptr)va, len);
            if (map_pieces(r, va, len, from, nfrom, from_cpu) != CUDA_SUCCESS && !gvm_driver_gone(CUDA_SUCCESS))
                gvm_error("cannot restore mapping at %#lx after a failed remap", (unsigned long)va);
        }
        return rc;
    }
    gvm_stats_resident(from[0]->loc, -(int64_t)len);
    gvm_stats_resident(to[0]->loc, (int64_t)len);
    return CUDA_SUCCESS;
}

int gvm_region_splice(struct gvm_region *r, int b0, int b1, struct gvm_phys *const *pieces, int n)
{
    int grow = n - (b1 - b0);
    if (grow > 0 && ensure_blocks(r, r->nblocks + grow)) return -1;
    size_t off = r->blocks[b0].off;
    memmove(&r->blocks[b0 + n], &r->blocks[b1], (size_t)(r->nblocks - b1) * sizeof *r->blocks);
    bool cpu = gvm_settings.host_access == GVM_HOST_ACCESS_EAGER;
    for (int i = 0; i < n; i++) {
        r->blocks[b0 + i] = (struct gvm_block){.phys = pieces[i], .off = off, .size = pieces[i]->size,
                                               .cpu = cpu && pieces[i]->loc == GVM_LOC_HOST};
        off += pieces[i]->size;
    }
    r->nblocks += grow;
    return 0;
}

CUresult gvm_region_unmap_block(struct gvm_region *r, int i, struct gvm_phys **old)
{
    struct gvm_block *b = &r->blocks[i];
    uintptr_t views[MAX_VIEWS];
    int nv = views_of(r, b, views, MAX_VIEWS);
    for (int v = 0; v < nv; v++) {
        CUresult rc = DRV(cuMemUnmap, (CUdeviceptr)views[v], b->size);
        if (rc != CUDA_SUCCESS) {
            for (int u = 0; u < v; u++) map_at(r, views[u], b->phys, cpu_wanted(b, b->phys->loc));
            return rc;
        }
    }
    gvm_stats_resident(b->phys->loc, -(int64_t)b->size);
    *old = b->phys;
    b->phys = NULL;
    b->cpu = false;
    return CUDA_SUCCESS;
}

CUresult gvm_region_map_block(struct gvm_region *r, int i, struct gvm_phys *np)
{
    struct gvm_block *b = &r->blocks[i];
    uintptr_t views[MAX_VIEWS];
    int nv = views_of(r, b, views, MAX_VIEWS);
    bool cpu = np->loc == GVM_LOC_HOST && gvm_settings.host_access == GVM_HOST_ACCESS_EAGER;
    for (int v = 0; v < nv; v++) {
        CUresult rc = map_at(r, views[v], np, cpu);
        if (rc != CUDA_SUCCESS) {
            for (int u = 0; u < v; u++) DRV(cuMemUnmap, (CUdeviceptr)views[u], b->size);
            return rc;
        }
    }
    gvm_stats_resident(np->loc, (int64_t)b->size);
    b->phys = np;
    b->cpu = cpu;
    return CUDA_SUCCESS;
}

CUresult gvm_region_grant_cpu(struct gvm_region *r, int i)
{
    struct gvm_block *b = &r->blocks[i];
    if (b->cpu || !b->phys || b->phys->loc != GVM_LOC_HOST) return CUDA_SUCCESS;
    uintptr_t views[MAX_VIEWS];
    int nv = views_of(r, b, views, MAX_VIEWS);
    CUmemAccessDesc descs[GVM_MAX_DEVICES + 1];
    int n = access_of(r, GVM_LOC_HOST, true, descs);
    for (int v = 0; v < nv; v++) {
        CUresult rc = DRV(cuMemSetAccess, (CUdeviceptr)views[v], b->size, descs, (size_t)n);
        if (rc != CUDA_SUCCESS) return rc;
    }
    b->cpu = true;
    return CUDA_SUCCESS;
}

CUresult gvm_region_grant(struct gvm_region *r, int dev)
{
    for (int i = 0; i < r->nblocks; i++) {
        struct gvm_block *b = &r->blocks[i];
        CUmemAccessDesc d[GVM_MAX_DEVICES + 1];
        int n = b->phys ? gvm_topo_access_mask(b->phys->loc, 1u << dev, false, d) : 0;
        if (!n) continue;
        uintptr_t views[MAX_VIEWS];
        int nv = views_of(r, b, views, MAX_VIEWS);
        for (int v = 0; v < nv; v++) {
            CUresult rc = DRV(cuMemSetAccess, (CUdeviceptr)views[v], b->size, d, (size_t)n);
            if (rc != CUDA_SUCCESS) return rc;
        }
    }
    return CUDA_SUCCESS;
}

bool gvm_region_grant_copier(struct gvm_region *r, int dev)
{
    if (dev < 0 || dev >= gvm_topo.ndev || (gvm_region_reach(r) >> dev & 1)) return false;
    struct gvm_region *o = r->kind == GVM_REGION_ALIAS && r->target ? r->target : r;
    /* First the bit, so that what is mapped from now on includes dev. */
    __atomic_fetch_or(&o->copied_from, 1u << dev, __ATOMIC_ACQ_REL);
    CUresult rc = gvm_region_grant(o, dev);
    if (rc != CUDA_SUCCESS)
        gvm_warn("granting device %d access to %#lx for a copy failed (%d)", dev, (unsigned long)o->base, rc);
    return true;
}

int gvm_region_location_now(struct gvm_region *r)
{
    pthread_mutex_lock(&r->op);
    /* A record freed meanwhile may be rebuilt for a new allocation,
     * without the lock, until it is published live. */
    int loc = gvm_region_live(r) ? gvm_region_location(r) : GVM_LOC_NONE;
    pthread_mutex_unlock(&r->op);
    return loc;
}

int gvm_region_location(const struct gvm_region *r)
{
    int loc = r->shelf ? GVM_LOC_HOST : GVM_LOC_NONE;
    for (int i = 0; i < r->nblocks; i++) {
        if (!r->blocks[i].phys) continue;
        int l = r->blocks[i].phys->loc;
        if (loc == GVM_LOC_NONE)
            loc = l;
        else if (loc != l)
            return GVM_LOC_MIXED;
    }
    return loc;
}

size_t gvm_region_bytes_at(const struct gvm_region *r, int loc)
{
    size_t n = 0;
    for (int i = 0; i < r->nblocks; i++)
        if (r->blocks[i].phys && r->blocks[i].phys->loc == loc) n += r->blocks[i].size;
    return n;
}

int gvm_region_block_at(const struct gvm_region *r, size_t off)
{
    int lo = 0, hi = r->nblocks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct gvm_block *b = &r->blocks[mid];
        if (off < b->off)
            hi = mid - 1;
        else if (off >= b->off + b->size)
            lo = mid + 1;
        else
            return mid;
    }
    return -1;
}

size_t gvm_region_shelf_bytes(const struct gvm_region *r)
{
    size_t n = 0;
    for (int k = 0; k < r->nshelf; k++) n += r->shelf[k]->size;
    return n;
}

unsigned gvm_region_shelf_spills;

void gvm_region_set_shelf(struct gvm_region *r, struct gvm_phys **pieces, int n, bool spill)
{
    r->nshelf = n;
    GVM_STORE(r->shelf, pieces);
    if (spill) {
        GVM_STORE(r->shelf_spill, true);
        __atomic_fetch_add(&gvm_region_shelf_spills, 1, __ATOMIC_RELAXED);
    }
    gvm_stats_resident(GVM_LOC_HOST, (int64_t)gvm_region_shelf_bytes(r));
}

unsigned gvm_region_shelf_pauses;

void gvm_region_shelf_paused(struct gvm_region *r)
{
    if (r->shelf_pause) {
        GVM_STORE(r->shelf_pause, false);
        __atomic_fetch_sub(&gvm_region_shelf_pauses, 1, __ATOMIC_SEQ_CST);
    }
    if (!r->shelf_spill) return;
    GVM_STORE(r->shelf_spill, false);
    __atomic_fetch_sub(&gvm_region_shelf_spills, 1, __ATOMIC_RELAXED);
}

void gvm_region_shelf_pause_later(struct gvm_region *r)
{
    if (!r->shelf_spill || r->shelf_pause) return;
    GVM_STORE(r->shelf_pause, true);
    __atomic_fetch_add(&gvm_region_shelf_pauses, 1, __ATOMIC_SEQ_CST);
}

/* Takes the shelf off r: its pieces stop counting as held for r. */
static struct gvm_phys **detach_shelf(struct gvm_region *r, int *n)
{
    struct gvm_phys **p = r->shelf;
    gvm_stats_resident(GVM_LOC_HOST, -(int64_t)gvm_region_shelf_bytes(r));
    *n = r->nshelf;
    GVM_STORE(r->shelf, (struct gvm_phys **)NULL);
    r->nshelf = 0;
    gvm_region_shelf_paused(r);   /* no longer a lazy spill either */
    return p;
}

void gvm_region_drop_shelf(struct gvm_region *r)
{
    if (!r->shelf) return;
    int n;
    struct gvm_phys **p = detach_shelf(r, &n);
    for (int k = 0; k < n; k++) gvm_phys_put(p[k]);
    free(p);
}

void gvm_region_release_shelf(struct gvm_region *r)
{
    int n;
    free(detach_shelf(r, &n));
}

void gvm_region_destroy(struct gvm_region *r)
{
    gvm_region_drop_shelf(r);
    gvm_region_shrink(r, 0);
    if (r->flags & GVM_RF_LEAKED) {
        if (!gvm_driver_gone(CUDA_SUCCESS))   /* else the range went with the driver */
            gvm_warn("leaking the address range at %#lx: a mapping in it could not be removed",
                     (unsigned long)r->base);
        return;
    }
    gvm_phys_free_range((CUdeviceptr)r->base, r->reserved);
}

CUresult gvm_region_mirror(struct gvm_region *alias, struct gvm_region *target)
{
    for (int i = 0; i < target->nblocks; i++) {
        struct gvm_block *b = &target->blocks[i];
        if (!b->phys) continue;
        CUresult rc = map_at(target, alias->base + b->off, b->phys, cpu_wanted(b, b->phys->loc));
        if (rc != CUDA_SUCCESS) {
            for (int j = i - 1; j >= 0; j--)
                if (target->blocks[j].phys)
                    DRV(cuMemUnmap, (CUdeviceptr)(alias->base + target->blocks[j].off), target->blocks[j].size);
            return rc;
        }
    }
    GVM_STORE(alias->mapped, target->mapped);
    return CUDA_SUCCESS;
}

void gvm_region_unmirror(struct gvm_region *alias)
{
    struct gvm_region *t = alias->target;
    for (int i = 0; i < t->nblocks; i++) {
        struct gvm_block *b = &t->blocks[i];
        if (b->phys && b->off + b->size <= alias->mapped) unmap_view(alias, alias->base + b->off, b);
    }
    GVM_STORE(alias->mapped, (size_t)0);
}
