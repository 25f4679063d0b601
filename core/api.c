/* The public operations of gvmshim.h: migrate, alias, realloc, query. */
#include "gvmshim.h"

#include "core/capture.h"
#include "core/core_state.h"
#include "core/export.h"
#include "core/heap.h"
#include "core/log.h"
#include "core/relocate.h"
#include "core/slab.h"
#include "core/topo.h"
#include "core/vamap.h"

static __thread CUresult last_driver_error;

static gvm_status from_cu(CUresult rc)
{
    switch (rc) {
    case CUDA_SUCCESS: return GVM_OK;
    case CUDA_ERROR_OUT_OF_MEMORY: return GVM_ERR_NO_MEMORY;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return GVM_ERR_UNSUPPORTED;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return GVM_ERR_BUSY;
    default: last_driver_error = rc; return GVM_ERR_DRIVER;
    }
}

/* Operations that remap memory wait for the devices or make VMM calls on
 * the caller's thread: not while a stream capture is open (core/capture.h). */
static bool capturing(void) { return gvm_capture_open(-1); }

/* Finds ptr's allocation and locks its region, live. */
static gvm_status lock_ref(const void *ptr, struct gvm_ref *ref)
{
    if (!gvm_core_active()) return gvm_core_off() ? GVM_ERR_INACTIVE : GVM_ERR_UNKNOWN_POINTER;
    for (int tries = 0; tries < 4; tries++) {
        if (!gvm_heap_find((uintptr_t)ptr, ref)) return GVM_ERR_UNKNOWN_POINTER;
        pthread_mutex_lock(&ref->region->op);
        struct gvm_ref again;
        if (gvm_heap_find((uintptr_t)ptr, &again) && again.region == ref->region) return GVM_OK;
        pthread_mutex_unlock(&ref->region->op);   /* freed or reused meanwhile */
    }
    return GVM_ERR_UNKNOWN_POINTER;
}

static gvm_status check_location(const struct gvm_region *r, int loc)
{
    if (loc == GVM_LOC_HOST) return gvm_topo.host_vmm ? GVM_OK : GVM_ERR_UNSUPPORTED;
    if (loc < 0 || loc >= gvm_topo.ndev) return GVM_ERR_INVALID;
    if (!gvm_topo.dev[loc].vmm) return GVM_ERR_UNSUPPORTED;
    /* Kernels on the allocating device must still reach the memory. */
    return gvm_topo_reaches(r->device, loc) ? GVM_OK : GVM_ERR_UNSUPPORTED;
}

GVM_EXPORT gvm_status gvm_migrate(const void *ptr, int location)
{
    struct gvm_ref ref;
    gvm_status st = lock_ref(ptr, &ref);
    if (st) return st;
    if (capturing()) {
        pthread_mutex_unlock(&ref.region->op);
        return GVM_ERR_BUSY;
    }
    struct gvm_region *r = ref.region;
    st = check_location(r, location);
    if (!st && (r->flags & GVM_RF_SHARED)) st = GVM_ERR_BUSY;   /* other processes map it (share.h) */
    if (!st) {
        /* The program moves it there to use it there, from then on. */
        if (location >= 0) gvm_region_keep_reach(r, location);
        CUresult rc = gvm_relocate_locked(r, location, GVM_RELOC_EXPLICIT);
        st = rc == CUDA_ERROR_NOT_PERMITTED ? GVM_ERR_BUSY   /* paused */
             : rc == CUDA_ERROR_NOT_FOUND   ? GVM_ERR_UNKNOWN_POINTER
                                            : from_cu(rc);
    }
    pthread_mutex_unlock(&r->op);
    gvm_slab_reap_skipped();
    return st;
}

/* ---- alias ---------------------------------------------------------- */

/* Frees an alias's address range, unless a mapping in it could not be
 * removed (region.h): a range is never freed under a live mapping. */
static void release_range(struct gvm_region *a)
{
    if (a->flags & GVM_RF_LEAKED) {
        if (!gvm_driver_gone(CUDA_SUCCESS))   /* else the range went with the driver */
            gvm_warn("leaking the alias range at %#lx: a mapping in it could not be removed",
                     (unsigned long)a->base);
    } else
        gvm_phys_free_range((CUdeviceptr)a->base, a->reserved);
}

/* r, locked, with lazily spilled memory mapped where it is (core/shelf.h):
 * operations that build on its mapping see it whole. */
static CUresult mapped(struct gvm_region *r)
{
    CUresult rc = gvm_relocate_locked(r, GVM_LOC_HOST, GVM_RELOC_MAPPED);
    return gvm_relocate_refused(rc) ? CUDA_SUCCESS : rc;
}

/* Makes a (a new record) an alias of t, whose lock the caller holds. */
static CUresult make_alias(struct gvm_region *a, struct gvm_region *t, int slot)
{
    CUresult rc = gvm_region_reserve(a, t->mapped);
    if (rc != CUDA_SUCCESS) goto recycle;
    GVM_STORE(a->kind, GVM_REGION_ALIAS);
    __atomic_store_n(&a->target, t, __ATOMIC_RELEASE);
    a->device = t->device;
    GVM_STORE(a->alias_slot, slot);
    if ((rc = gvm_region_mirror(a, t)) != CUDA_SUCCESS) goto unreserve;
    if (gvm_region_publish(a)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        gvm_region_unpublish(a);
        gvm_region_unmirror(a);
        goto unreserve;
    }
    return CUDA_SUCCESS;
unreserve:
    release_range(a);
recycle:
    gvm_region_recycle(a);
    return rc;
}

GVM_EXPORT gvm_status gvm_alias(const void *ptr, void **alias_out)
{
    if (!alias_out) return GVM_ERR_INVALID;
    if (!gvm_core_active()) return gvm_core_off() ? GVM_ERR_INACTIVE : GVM_ERR_UNKNOWN_POINTER;
    /* The record first: taking one may wait for its lock, and no region
     * lock may be held then. */
    struct gvm_region *a = gvm_region_new();
    if (!a) return GVM_ERR_NO_MEMORY;
    struct gvm_ref ref;
    gvm_status st = lock_ref(ptr, &ref);
    if (st) {
        gvm_region_recycle(a);
        return st;
    }
    if (capturing()) {
        pthread_mutex_unlock(&ref.region->op);
        gvm_region_recycle(a);
        return GVM_ERR_BUSY;
    }
    struct gvm_region *t = ref.region;
    /* An alias shows the pieces mapped now: lazily spilled memory first. */
    CUresult rc = mapped(t);
    if (rc == CUDA_SUCCESS) rc = make_alias(a, t, ref.slot);
    else gvm_region_recycle(a);
    if (rc == CUDA_SUCCESS) {
        a->aliases = t->aliases;
        t->aliases = a;
        if (ref.slot >= 0) gvm_slab_alias_ref(t, ref.slot, +1);
        __atomic_store_n(&a->state, GVM_REGION_LIVE, __ATOMIC_RELEASE);
        /* The second address of ptr itself: alias_out - ptr is the same
         * shift for every byte of the allocation. */
        *alias_out = (void *)(a->base + ref.off + ((uintptr_t)ptr - ref.base));
        gvm_stat_inc(aliases);
    }
    pthread_mutex_unlock(&t->op);
    return from_cu(rc);
}

static struct gvm_region *find_alias(uintptr_t p)
{
    struct gvm_region *a = gvm_vamap_get(p);
    return a && GVM_LOAD(a->kind) == GVM_REGION_ALIAS ? a : NULL;
}

static void unlink_alias(struct gvm_region *t, struct gvm_region *a)
{
    struct gvm_region **pp = &t->aliases;
    while (*pp && *pp != a) pp = &(*pp)->aliases;
    if (*pp) *pp = a->aliases;
    a->aliases = NULL;
}

GVM_EXPORT gvm_status gvm_unalias(void *alias)
{
    if (!gvm_core_active()) return gvm_core_off() ? GVM_ERR_INACTIVE : GVM_ERR_UNKNOWN_POINTER;
    struct gvm_region *a = find_alias((uintptr_t)alias);
    if (!a) return GVM_ERR_UNKNOWN_POINTER;
    if (capturing()) return GVM_ERR_BUSY;
    struct gvm_region *t = __atomic_load_n(&a->target, __ATOMIC_ACQUIRE);
    if (!t) return GVM_ERR_UNKNOWN_POINTER;   /* unaliased and reused meanwhile */
    pthread_mutex_lock(&t->op);
    if (__atomic_load_n(&a->state, __ATOMIC_ACQUIRE) != GVM_REGION_LIVE ||
        __atomic_load_n(&a->target, __ATOMIC_ACQUIRE) != t) {
        pthread_mutex_unlock(&t->op);
        return GVM_ERR_UNKNOWN_POINTER;
    }
    /* Like a free: work still queued may read through the alias. */
    CUresult rc = gvm_topo_quiesce();
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&t->op);
        return from_cu(rc);
    }
    __atomic_store_n(&a->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
    unlink_alias(t, a);
    gvm_region_unpublish(a);
    gvm_region_unmirror(a);
    release_range(a);
    if (a->alias_slot >= 0) gvm_slab_alias_ref(t, a->alias_slot, -1);
    gvm_region_recycle(a);
    bool orphan_done = (t->flags & GVM_RF_ORPHAN) && !t->aliases;
    if (orphan_done) {
        __atomic_store_n(&t->state, GVM_REGION_FREE, __ATOMIC_RELEASE);
        gvm_region_unpublish(t);
        gvm_region_destroy(t);
    }
    pthread_mutex_unlock(&t->op);
    if (orphan_done) gvm_region_recycle(t);
    return GVM_OK;
}

/* ---- realloc -------------------------------------------------------- */

static gvm_status resize_small(struct gvm_ref *ref, size_t new_size)
{
    struct gvm_slab *s = ref->region->slab;
    if (new_size > s->cls) return GVM_ERR_NO_HEADROOM;
    gvm_stats_live(ref->region->device, (int64_t)new_size - (int64_t)ref->size);
    __atomic_store_n(&s->sizes[ref->slot], (uint32_t)new_size, __ATOMIC_RELEASE);
    return GVM_OK;
}

static int grow_location(const struct gvm_region *r)
{
    for (int i = r->nblocks - 1; i >= 0; i--)
        if (r->blocks[i].phys) return r->blocks[i].phys->loc;
    return r->home;
}

static gvm_status resize_large(struct gvm_region *r, size_t new_size)
{
    size_t gran = gvm_topo.gran;
    /* Checked before rounding, which would wrap near SIZE_MAX (the
     * reservation is whole granules, so the rounded size then fits too). */
    if (new_size > r->reserved) return GVM_ERR_NO_HEADROOM;
    size_t rounded = (new_size + gran - 1) / gran * gran;
    CUresult rc = CUDA_SUCCESS;
    if (rounded > r->mapped) {
        int loc = grow_location(r);
        rc = gvm_region_grow_by(r, rounded - r->mapped, loc, gvm_region_piece_cap(r, loc));
    } else {
        int first = r->nblocks;
        while (first > 0 && r->blocks[first - 1].off >= rounded) first--;
        if (first < r->nblocks) {
            /* Unmapping memory a kernel still reads kills the kernel. */
            rc = gvm_topo_quiesce();
            if (rc == CUDA_SUCCESS) gvm_region_shrink(r, first);
        }
    }
    if (rc != CUDA_SUCCESS) return from_cu(rc);
    gvm_stats_live(r->device, (int64_t)new_size - (int64_t)r->size);
    GVM_STORE(r->size, new_size);   /* copy hooks read it for their bound */
    return GVM_OK;
}

GVM_EXPORT gvm_status gvm_realloc(const void *ptr, size_t new_size)
{
    if (!new_size) return GVM_ERR_INVALID;
    struct gvm_ref ref;
    gvm_status st = lock_ref(ptr, &ref);
    if (st) return st;
    if ((ref.region->flags & (GVM_RF_PAUSED | GVM_RF_SHARED)) || capturing())
        st = GVM_ERR_BUSY;
    else if (ref.slot >= 0)
        st = resize_small(&ref, new_size);
    else if ((st = from_cu(mapped(ref.region))) == GVM_OK)
        st = resize_large(ref.region, new_size);
    if (!st) gvm_stat_inc(reallocs);
    pthread_mutex_unlock(&ref.region->op);
    return st;
}

/* ---- query ---------------------------------------------------------- */

GVM_EXPORT gvm_status gvm_query(const void *ptr, gvm_info *info)
{
    if (!info) return GVM_ERR_INVALID;
    struct gvm_ref ref;
    gvm_status st = lock_ref(ptr, &ref);
    if (st) return st;
    struct gvm_region *r = ref.region;
    int naliases = 0;
    for (struct gvm_region *a = r->aliases; a; a = a->aliases) naliases++;
    int loc = r->shelf ? GVM_LOC_HOST : gvm_region_location(r);
    *info = (gvm_info){
        .base = (void *)ref.base,
        .size = ref.size,
        .device = r->device,
        .location = loc == GVM_LOC_NONE ? GVM_NOWHERE : loc,
        .packed = ref.slot >= 0,
        .chunk_base = (void *)(ref.base - ref.off),
        .chunk_size = r->mapped,
        .reserved = r->reserved,
        .pieces = r->nblocks,
        .aliases = naliases,
        .paused = (r->flags & GVM_RF_PAUSED) != 0,
        .bytes_on_device = gvm_region_bytes_at(r, r->device),
        .bytes_on_host = gvm_region_bytes_at(r, GVM_LOC_HOST) + gvm_region_shelf_bytes(r),
        .last_driver_error = r->last_error ? (int)r->last_error : (int)last_driver_error,
        .buffer_id = gvm_heap_buffer_id(&ref),
    };
    pthread_mutex_unlock(&r->op);
    return GVM_OK;
}

GVM_EXPORT const char *gvm_strerror(gvm_status status)
{
    switch (status) {
    case GVM_OK: return "success";
    case GVM_ERR_UNKNOWN_POINTER: return "pointer is not inside an allocation gvmshim serves";
    case GVM_ERR_NO_MEMORY: return "no memory at the destination";
    case GVM_ERR_NO_HEADROOM: return "the reservation has no room for that size";
    case GVM_ERR_UNSUPPORTED: return "not supported by the device or the link";
    case GVM_ERR_DRIVER: return "a driver call failed; the allocation is unchanged";
    case GVM_ERR_INVALID: return "invalid argument";
    case GVM_ERR_BUSY: return "the allocation is paused, shared with another process, or a stream capture is under way";
    case GVM_ERR_INACTIVE: return "gvmshim is not active";
    default: return "unknown gvmshim status";
    }
}
