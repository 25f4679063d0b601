/* Pointer queries answer as natively. For an address inside an allocation:
 * what cuMemAlloc memory of the device it was allocated on answers (its
 * base, the size it asked for, device memory, its context), wherever its
 * memory lives now and however it is cut into pieces, so the answers do not
 * change when it moves (but for BUFFER_ID and MEMORY_BLOCK_ID, which change
 * so that registration caches notice the new pages). For an address gvmshim
 * holds that is in no allocation (decoy.h): the driver's own answer for an
 * address it does not know. Everything else passes through. */
#include "preload/shim.h"

#include "core/decoy.h"

#include <string.h>

/* p is gvmshim's but in no live allocation. */
static bool stranger(uintptr_t p)
{
    return gvm_heap_region(p) != NULL;
}

static bool context_current(void)
{
    CUcontext c = NULL;
    return GVM_REAL(cuCtxGetCurrent)(&c) == CUDA_SUCCESS && c;
}

/* Whether the current context reaches the allocation as it would reach
 * cuMemAlloc memory: made in it or on its device, or peer access enabled
 * to the allocation's context (preload/hooks_peer.c); a stream-ordered
 * allocation also while its pool grants the device access. No current context:
 * true (callers answer that case themselves). */
static bool reachable(const struct gvm_ref *ref)
{
    CUcontext c = NULL;
    CUdevice d;
    if (GVM_REAL(cuCtxGetCurrent)(&c) != CUDA_SUCCESS || !c || c == ref->region->ctx) return true;
    if (GVM_REAL(cuCtxGetDevice)(&d) != CUDA_SUCCESS || d == ref->region->device) return true;
    return gvm_shim_peer_unknown() || gvm_shim_peer_enabled(c, ref->region->ctx) ||
           gvm_shim_pool_grants(gvm_shim_ordered_pool(ref->base), d);
}

GVM_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    gvm_hook_count(GVM_FN_cuMemGetAddressRange_v2);
    struct gvm_ref ref;
    if (gvm_shim_active()) {
        /* Without a current context the driver's answer is its error. */
        if (gvm_heap_find((uintptr_t)dptr, &ref) && context_current()) {
            if (!reachable(&ref)) {
                if (pbase) *pbase = 0;
                if (psize) *psize = 0;
                return CUDA_ERROR_NOT_FOUND;
            }
            if (pbase) *pbase = (CUdeviceptr)ref.base;
            if (psize) *psize = ref.size;
            return CUDA_SUCCESS;
        }
        if (stranger((uintptr_t)dptr)) {
            CUresult rc = GVM_REAL(cuMemGetAddressRange_v2)(pbase, psize, gvm_decoy_for((uintptr_t)dptr));
            if (rc == CUDA_SUCCESS && pbase) *pbase = gvm_decoy_restore(*pbase, (uintptr_t)dptr);
            return rc;
        }
    }
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuMemGetAddressRange_v2)(pbase, psize, dptr);
}

/* ---- value widths ----------------------------------------------------- */

#define ATTR_MAX 32

/* cuda.h names the type of some values only in prose ("a boolean"); the
 * driver's own width is learnt from what it writes for an unknown address
 * (the batch form assigns every attribute a default), and these are the
 * widths used where it cannot be learnt. */
static size_t documented_width(CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        return 8;
    default:
        return 4;
    }
}

static unsigned char learnt_width[ATTR_MAX];

/* Bytes the driver wrote into a buffer prefilled with `fill`. */
static size_t written_extent(const unsigned char *buf, size_t len, unsigned char fill)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] != fill) n = i + 1;
    return n;
}

static size_t value_width(CUpointer_attribute a)
{
    if ((unsigned)a >= ATTR_MAX) return documented_width(a);
    size_t w = __atomic_load_n(&learnt_width[a], __ATOMIC_RELAXED);
    if (w) return w;
    /* Two fills, so that a default byte equal to one fill is still seen. */
    size_t extent = 0;
    for (int k = 0; k < 2; k++) {
        unsigned char fill = k ? 0x5a : 0xa5;
        unsigned char buf[16] __attribute__((aligned(8)));
        memset(buf, fill, sizeof buf);
        void *data[1] = {buf};
        CUpointer_attribute attrs[1] = {a};
        if (GVM_REAL(cuPointerGetAttributes)(1, attrs, data, gvm_decoy_for(0)) != CUDA_SUCCESS)
            return documented_width(a);
        size_t e = written_extent(buf, sizeof buf, fill);
        if (e > extent) extent = e;
    }
    w = extent == 1 || extent == 2 || extent == 4 || extent == 8 ? extent : documented_width(a);
    __atomic_store_n(&learnt_width[a], (unsigned char)w, __ATOMIC_RELAXED);
    return w;
}

static void store(void *data, CUpointer_attribute a, unsigned long long v)
{
    size_t w = value_width(a);
    if (w == 8) {
        memcpy(data, &v, 8);
    } else if (w == 4) {
        unsigned u = (unsigned)v;
        memcpy(data, &u, 4);
    } else if (w == 2) {
        unsigned short s = (unsigned short)v;
        memcpy(data, &s, 2);
    } else {
        unsigned char c = (unsigned char)v;
        memcpy(data, &c, 1);
    }
}

/* ---- live allocations ------------------------------------------------- */

enum answer { ANSWERED, NO_VALUE, ASK_DRIVER };

static size_t round_gran(size_t n) { return (n + gvm_topo.gran - 1) / gvm_topo.gran * gvm_topo.gran; }

/* What cuMemAlloc memory (or, pool not NULL, that default pool's: the
 * stream-ordered allocations gvmshim serves) answers for attr (the native answers below were
 * read off an H100, driver 580, by tests/gpu/pointer_answers.cu). NO_VALUE:
 * the single query writes 0 and fails with *err, the batch gives 0;
 * ASK_DRIVER: the driver knows better at the real address (tokens gvmshim
 * cannot make, access from other devices, attributes newer than this code). */
static enum answer native_value(const struct gvm_ref *ref, CUmemoryPool pool, CUpointer_attribute attr,
                                uintptr_t p, unsigned long long *v, CUresult *err)
{
    const struct gvm_region *r = ref->region;
    *err = CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    /* A default pool's memory belongs to no context (two H100s, driver 580). */
    case CU_POINTER_ATTRIBUTE_CONTEXT: *v = pool ? 0 : (uintptr_t)r->ctx; return ANSWERED;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *v = CU_MEMORYTYPE_DEVICE; return ANSWERED;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!context_current()) {
            *err = CUDA_ERROR_INVALID_CONTEXT;
            return NO_VALUE;
        }
        if (!reachable(ref)) return NO_VALUE;   /* another device's, no peer access */
        *v = p;
        return ANSWERED;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return NO_VALUE;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *v = gvm_heap_buffer_id(ref); return ANSWERED;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *v = 0; return ANSWERED;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *v = (unsigned)r->device; return ANSWERED;
    /* Legacy IPC, RDMA and decompression are cuMemAlloc memory's; a default
     * pool's answers 0 to each, and names its pool. */
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *v = !pool && gvm_ipc_capable(ref);
        return ANSWERED;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *v = ref->base; return ANSWERED;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *v = ref->size; return ANSWERED;
    /* The driver maps cuMemAlloc memory in granularity-sized blocks, small
     * allocations sharing one: gvmshim's chunk, or the allocation rounded. */
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *v = ref->slot >= 0 ? ref->base - ref->off : ref->base; return ANSWERED;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *v = ref->slot >= 0 ? gvm_topo.gran : round_gran(ref->size); return ANSWERED;
    /* Mapped even while paused or host-resident: the program's view. */
    case CU_POINTER_ATTRIBUTE_MAPPED: *v = 1; return ANSWERED;
    /* cuMemAlloc memory exports through legacy IPC only, not through
     * cuMemExportToShareableHandle (gvmshim's pieces allow POSIX fds). */
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *v = CU_MEM_HANDLE_TYPE_NONE; return ANSWERED;
    /* gvmshim's device pieces are RDMA capable where the device supports
     * it; the answer keeps to the allocating device when they move. */
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *v = !pool && gvm_topo.dev[r->device].rdma;
        return ANSWERED;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *v = (uintptr_t)pool; return ANSWERED;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: *v = !pool; return ANSWERED;
    /* Device memory syncs its memory operations; host-resident pieces
     * would answer 0 at the real address. */
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *v = 1; return ANSWERED;
    /* cuMemAlloc memory reads as read-write from every device's context,
     * peer access enabled or not (two H100s on NVLink, driver 580); the
     * driver's answer for gvmshim's pieces would follow its lazy grants. */
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *v = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; return ANSWERED;
    default: return ASK_DRIVER;   /* P2P_TOKENS, newer ones */
    }
}

/* The driver's answer at the real address; SYNC_MEMOPS, which the program
 * may have set there, reads as its native default 0 where the driver has
 * no answer for VMM memory. */
static CUresult ask_driver(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    CUresult rc = GVM_REAL(cuPointerGetAttribute)(data, attr, p);
    if (rc != CUDA_SUCCESS && attr == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
        store(data, attr, 0);
        rc = CUDA_SUCCESS;
    }
    return rc;
}

static bool address_valued(CUpointer_attribute a)
{
    return a == CU_POINTER_ATTRIBUTE_DEVICE_POINTER || a == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
           a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || a == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR;
}

static void restore_address(void *data, CUpointer_attribute a, uintptr_t p)
{
    if (!data || !address_valued(a)) return;
    uintptr_t v;
    memcpy(&v, data, sizeof v);
    v = gvm_decoy_restore(v, p);
    memcpy(data, &v, sizeof v);
}

GVM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    gvm_hook_count(GVM_FN_cuPointerGetAttribute);
    if (gvm_shim_active()) {
        struct gvm_ref ref;
        if (data && gvm_heap_find((uintptr_t)ptr, &ref)) {
            unsigned long long v;
            CUresult err;
            switch (native_value(&ref, gvm_shim_ordered_pool(ref.base), attr, (uintptr_t)ptr, &v, &err)) {
            case ANSWERED: store(data, attr, v); return CUDA_SUCCESS;
            case NO_VALUE: store(data, attr, 0); return err;
            case ASK_DRIVER: return ask_driver(data, attr, ptr);
            }
        }
        if (stranger((uintptr_t)ptr)) {
            CUresult rc = GVM_REAL(cuPointerGetAttribute)(data, attr, gvm_decoy_for((uintptr_t)ptr));
            if (rc == CUDA_SUCCESS) restore_address(data, attr, (uintptr_t)ptr);
            return rc;
        }
    }
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuPointerGetAttribute)(data, attr, ptr);
}

GVM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                                   CUdeviceptr ptr)
{
    gvm_hook_count(GVM_FN_cuPointerGetAttributes);
    struct gvm_ref ref;
    bool live = gvm_shim_active() && gvm_heap_find((uintptr_t)ptr, &ref);
    if (!live && !(gvm_shim_active() && stranger((uintptr_t)ptr))) {
        gvm_stat_local_inc(passthrough_calls);
        return GVM_REAL(cuPointerGetAttributes)(n, attrs, data, ptr);
    }
    /* The driver checks the arguments and assigns every attribute its
     * default for an address it does not know; a live allocation's values
     * then replace the defaults. */
    CUresult rc = GVM_REAL(cuPointerGetAttributes)(n, attrs, data, gvm_decoy_for((uintptr_t)ptr));
    if (rc != CUDA_SUCCESS) return rc;
    CUmemoryPool pool = live ? gvm_shim_ordered_pool(ref.base) : NULL;   /* once for every attribute */
    for (unsigned i = 0; i < n; i++) {
        if (!data[i]) continue;
        if (!live) {
            restore_address(data[i], attrs[i], (uintptr_t)ptr);
            continue;
        }
        unsigned long long v;
        CUresult err;
        switch (native_value(&ref, pool, attrs[i], (uintptr_t)ptr, &v, &err)) {
        case ANSWERED: store(data[i], attrs[i], v); break;
        case NO_VALUE: store(data[i], attrs[i], 0); break;
        case ASK_DRIVER: ask_driver(data[i], attrs[i], ptr); break;
        }
    }
    return CUDA_SUCCESS;
}
