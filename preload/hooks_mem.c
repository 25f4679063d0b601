/* Allocation entry points served by the core through the policy. */
#include "preload/shim.h"

#include "core/capture.h"
#include "core/log.h"
#include "core/reach.h"
#include "policy/idle.h"
#include "policy/place.h"
#include "core/pooluse.h"
#include "core/tally.h"

/* The stream-ordered allocations served for default pools, by address,
 * with the bytes each counts for in its pool: natively they are the
 * pool's, and programs read the pool's use from its attributes (PyTorch's
 * cudaMallocAsync backend as reserved memory, CuPy's async pool as its
 * total and used bytes), so cuMemPoolGetAttribute answers for them as the
 * driver would (core/pooluse.h). Forgotten before any free of them: once
 * freed, another thread may be served the same address in stream order. */
static struct gvm_tally ordered_live = GVM_TALLY_INIT;

static void forget_ordered(uintptr_t p)
{
    int dev;
    size_t bytes;
    if (gvm_tally_take(&ordered_live, p, &dev, &bytes)) gvm_pooluse_free(dev, p, bytes);
}

/* The driver counts a pool allocation at its requested size, unrounded. */
static void remember_ordered(uintptr_t p, int dev, size_t size)
{
    if (gvm_tally_add(&ordered_live, p, dev, size)) gvm_pooluse_alloc(dev, p, size);
}

void gvm_shim_ordered_forget(int dev)
{
    gvm_tally_drop_device(&ordered_live, dev);
    gvm_pooluse_drop(dev);
}

/* The device of the current context, as native allocation calls need it. */
static CUresult current_device(CUcontext *ctx, int *dev)
{
    CUresult rc = GVM_REAL(cuCtxGetCurrent)(ctx);
    if (rc != CUDA_SUCCESS) return rc;
    if (!*ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUdevice d;
    rc = GVM_REAL(cuCtxGetDevice)(&d);
    *dev = d;
    return rc;
}

/* Is s capturing? Asked only while some capture is open; an error (the
 * legacy stream next to a capture) counts as yes. */
static bool stream_capturing(__typeof__(cuStreamIsCapturing) *is_capturing, CUstream s)
{
    if (!gvm_capture_open(-1)) return false;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return is_capturing(s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* dev's default pool (it never changes), or NULL. */
static CUmemoryPool default_pool(int dev)
{
    static CUmemoryPool defaults[GVM_MAX_DEVICES];
    CUmemoryPool def = __atomic_load_n(&defaults[dev], __ATOMIC_RELAXED);
    if (def || !gvm_drv.cuDeviceGetDefaultMemPool) return def;
    if (gvm_drv.cuDeviceGetDefaultMemPool(&def, dev) != CUDA_SUCCESS) return NULL;
    __atomic_store_n(&defaults[dev], def, __ATOMIC_RELAXED);
    return def;
}

/* The pool a stream-ordered allocation on dev draws from: the one named
 * (cuMemAllocFromPoolAsync), else the device's current one. */
static bool from_default_pool(int dev, CUmemoryPool named)
{
    CUmemoryPool def = default_pool(dev), cur = named;
    if (!def) return false;
    if (!cur && (!gvm_drv.cuDeviceGetMemPool || gvm_drv.cuDeviceGetMemPool(&cur, dev) != CUDA_SUCCESS)) return false;
    return cur == def;
}

/* A stream-ordered call: its stream, whether a null stream means the
 * per-thread one (the _ptsz entry points), and the pool it names (NULL:
 * the device's current one). */
struct order {
    CUstream stream;
    bool per_thread;
    CUmemoryPool pool;
};

/* Whether gvmshim may serve a stream-ordered allocation: its stream
 * belongs to the current context (the default streams do; an unknown
 * handle gets the driver's answer), no capture records it (the graph
 * allocates at each replay), and it draws from the device's default pool
 * (a pool the program made has attributes of its own: IPC export, another
 * location, its own reserve). */
static bool serves_stream_ordered(const struct order *o, CUcontext ctx, int dev)
{
    CUstream s = o->stream;
    if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
        CUcontext owner = NULL;
        if (!gvm_drv.cuStreamGetCtx || gvm_drv.cuStreamGetCtx(s, &owner) != CUDA_SUCCESS || owner != ctx)
            return false;
    }
    return !stream_capturing(GVM_REAL(cuStreamIsCapturing), s) && from_default_pool(dev, o->pool);
}

/* The stream's id for reuse on the same stream (topo.h); 0 for the
 * per-thread default stream (one handle, a stream per thread) or when the
 * driver cannot say. */
static uint64_t stream_id(const struct order *o)
{
    if (o->stream == CU_STREAM_PER_THREAD || (o->per_thread && !o->stream)) return 0;
    unsigned long long id = 0;
    if (!gvm_drv.cuStreamGetId || gvm_drv.cuStreamGetId(o->stream, &id) != CUDA_SUCCESS) return 0;
    return id;
}

/* Serves an allocation, or returns CUDA_ERROR_NOT_SUPPORTED to send it
 * to the real driver (device without VMM, shim inactive). ordered: the
 * stream of a stream-ordered allocation, NULL for a plain one. Memory
 * gvmshim serves is usable at once, which stream order allows; only
 * reusing freed memory must not wait for the device there (topo.h). */
static CUresult serve_region(size_t size, CUdeviceptr *out, const struct order *ordered)
{
    if (!gvm_shim_serving()) return CUDA_ERROR_NOT_SUPPORTED;
    CUcontext ctx;
    int dev;
    CUresult rc = current_device(&ctx, &dev);
    if (rc != CUDA_SUCCESS) return ordered ? CUDA_ERROR_NOT_SUPPORTED : rc;
    if (dev < 0 || dev >= gvm_topo.ndev || !gvm_topo.dev[dev].vmm) return CUDA_ERROR_NOT_SUPPORTED;
    if (ordered && !serves_stream_ordered(ordered, ctx, dev)) return CUDA_ERROR_NOT_SUPPORTED;
    struct gvm_capture_guard g;
    if (!gvm_shim_capture_enter(&g)) return CUDA_ERROR_NOT_SUPPORTED;   /* forbidden: the driver answers */
    uintptr_t p = 0;
    if (ordered) gvm_topo_stream_order(true, stream_id(ordered));
    rc = gvm_policy_alloc(size, dev, ctx, gvm_shim_tag(), &p);
    if (ordered) gvm_topo_stream_order(false, 0);
    gvm_shim_capture_leave(&g);
    if (rc == CUDA_SUCCESS) *out = (CUdeviceptr)p;
    if (rc == CUDA_SUCCESS && ordered) remember_ordered(p, dev, size);
    return rc;
}

/* A refused allocation leaves a null pointer behind, as the driver's does:
 * cudart hands the driver's value on, and a program that tests the pointer
 * rather than the error (or frees it on its error path) finds 0, not what
 * the variable held before (gpu test api-compare, 2026-11-27). */
static CUresult serve(size_t size, CUdeviceptr *out, const struct order *ordered)
{
    CUresult rc = serve_region(size, out, ordered);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_SUPPORTED) *out = 0;
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    gvm_hook_count(GVM_FN_cuMemAlloc_v2);
    if (!dptr) return GVM_REAL(cuMemAlloc_v2)(dptr, bytesize);
    CUresult rc = serve(bytesize, dptr, NULL);
    if (rc != CUDA_ERROR_NOT_SUPPORTED) return rc;
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuMemAlloc_v2)(dptr, bytesize);
}

/* Pitched rows start on 512-byte boundaries, the alignment cudaMallocPitch
 * gives on current GPUs. */
#define PITCH_ALIGN 512

GVM_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                               size_t height, unsigned int elem)
{
    gvm_hook_count(GVM_FN_cuMemAllocPitch_v2);
    bool valid = dptr && pitch && width && height && (elem == 4 || elem == 8 || elem == 16);
    size_t p = 0, bytes = 0;
    /* A size that wraps is the driver's to refuse, as natively. */
    if (valid && !__builtin_add_overflow(width, PITCH_ALIGN - 1, &p) &&
        !__builtin_mul_overflow(p / PITCH_ALIGN * PITCH_ALIGN, height, &bytes)) {
        p = p / PITCH_ALIGN * PITCH_ALIGN;
        CUresult rc = serve(bytes, dptr, NULL);
        if (rc != CUDA_ERROR_NOT_SUPPORTED) {
            if (rc == CUDA_SUCCESS) *pitch = p;
            return rc;
        }
    }
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
}

GVM_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    gvm_hook_count(GVM_FN_cuMemFree_v2);
    if (dptr && gvm_shim_active()) {
        struct gvm_capture_guard g;
        if (!gvm_shim_capture_enter(&g)) {
            /* CUDA forbids a free on this thread now: the driver refuses it
             * and invalidates the capture as natively. Should it not refuse,
             * a gvmshim pointer is still freed below. */
            CUresult rc = GVM_REAL(cuMemFree_v2)(dptr);
            if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
                !gvm_heap_region((uintptr_t)dptr))
                return rc;
            gvm_shim_relax(&g);
        }
        forget_ordered((uintptr_t)dptr);
        CUresult rc = gvm_policy_free((uintptr_t)dptr);
        gvm_shim_capture_leave(&g);
        if (rc != CUDA_ERROR_NOT_FOUND) return rc;
    }
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuMemFree_v2)(dptr);
}

/* Stream-ordered allocations from the device's default pool (cudaMallocAsync,
 * PyTorch's cudaMallocAsync backend, CuPy's MemoryAsyncPool) are served
 * like cuMemAlloc, so the limit, spill and pause cover them. */
static CUresult alloc_async(__typeof__(cuMemAllocAsync) *real, enum gvm_driver_fn fn, CUdeviceptr *p,
                            size_t n, CUstream s, bool per_thread)
{
    gvm_hook_count(fn);
    if (p && n) {
        struct order o = {s, per_thread, NULL};
        CUresult rc = serve(n, p, &o);
        if (rc != CUDA_ERROR_NOT_SUPPORTED) return rc;
    }
    gvm_stat_local_inc(passthrough_calls);
    return real(p, n, s);
}

/* A gvmshim pointer freed in stream order is freed at once, without a
 * wait: work queued before the free may still use it, and freed memory is
 * neither reused nor unmapped before a device-wide wait that began after
 * the free has finished (topo.h), which covers that work whatever its
 * stream. On a capturing stream a free becomes a graph node that frees at every
 * replay, which CUDA allows only for memory the graph itself allocated
 * (cuMemAllocAsync in the capture); gvmshim memory never is, so the
 * driver gets the call and gives its native answer. Waiting for the
 * stream instead would invalidate the capture. */
static CUresult free_async(__typeof__(cuMemFreeAsync) *real, __typeof__(cuStreamIsCapturing) *is_capturing,
                           enum gvm_driver_fn fn, CUdeviceptr p, CUstream s, bool per_thread)
{
    gvm_hook_count(fn);
    if (p && gvm_shim_active() && !stream_capturing(is_capturing, s)) {
        struct gvm_ref ref;
        if (gvm_heap_find((uintptr_t)p, &ref)) {
            struct order o = {s, per_thread, NULL};
            gvm_topo_stream_order(true, stream_id(&o));
            forget_ordered((uintptr_t)p);
            CUresult rc = gvm_policy_free((uintptr_t)p);
            gvm_topo_stream_order(false, 0);
            return rc;
        }
    }
    gvm_stat_local_inc(passthrough_calls);
    return real(p, s);
}

GVM_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    return alloc_async(GVM_REAL(cuMemAllocAsync), GVM_FN_cuMemAllocAsync, p, n, s, false);
}

GVM_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
    return alloc_async(GVM_REAL(cuMemAllocAsync_ptsz), GVM_FN_cuMemAllocAsync_ptsz, p, n, s, true);
}

/* Named pools: served when the pool named is the device's default one
 * (what cuda.core's default memory resource names); any other is the
 * program's own and the driver's. */
static CUresult alloc_from_pool(__typeof__(cuMemAllocFromPoolAsync) *real, enum gvm_driver_fn fn, CUdeviceptr *p,
                                size_t n, CUmemoryPool pool, CUstream s, bool per_thread)
{
    gvm_hook_count(fn);
    if (p && n && pool) {
        struct order o = {s, per_thread, pool};
        CUresult rc = serve(n, p, &o);
        if (rc != CUDA_ERROR_NOT_SUPPORTED) return rc;
    }
    gvm_stat_local_inc(passthrough_calls);
    return real(p, n, pool, s);
}

GVM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return alloc_from_pool(GVM_REAL(cuMemAllocFromPoolAsync), GVM_FN_cuMemAllocFromPoolAsync, p, n, pool, s, false);
}

GVM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return alloc_from_pool(GVM_REAL(cuMemAllocFromPoolAsync_ptsz), GVM_FN_cuMemAllocFromPoolAsync_ptsz, p, n, pool,
                           s, true);
}

/* The device whose default pool this is, or -1. Devices by the driver's
 * numbering: gvmshim may not have started. */
static int default_pool_owner(CUmemoryPool pool)
{
    for (int owner = 0; pool && owner < GVM_MAX_DEVICES; owner++) {
        CUmemoryPool def = default_pool(owner);
        if (!def) break;
        if (def == pool) return owner;
    }
    return -1;
}

/* Access to a device's default pool granted to another device is peer
 * access to the stream-ordered memory gvmshim serves for it: that device
 * is granted the owner's allocations, as an enabled peer is
 * (core/reach.h; before gvmshim starts, the grant is kept for the start).
 * Revoking takes nothing back, as disabling peer access does not. */
GVM_EXPORT CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    gvm_hook_count(GVM_FN_cuMemPoolSetAccess);
    CUresult rc = GVM_REAL(cuMemPoolSetAccess)(pool, map, count);
    int owner = rc == CUDA_SUCCESS && map && !gvm_cfg_disabled() ? default_pool_owner(pool) : -1;
    for (size_t i = 0; owner >= 0 && i < count; i++) {
        int dev = map[i].location.id;
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ||
            dev == owner || dev < 0 || dev >= GVM_MAX_DEVICES)
            continue;
        CUresult g = gvm_reach_enable(owner, dev);
        if (g != CUDA_SUCCESS) gvm_warn("granting device %d the memory of device %d failed (%d)", dev, owner, g);
    }
    return rc;
}

CUmemoryPool gvm_shim_ordered_pool(uintptr_t base)
{
    int owner;
    return gvm_tally_find(&ordered_live, base, &owner) ? default_pool(owner) : NULL;
}

/* Whether pool (a default pool, or NULL) grants dev access: natively a
 * pool's memory is reached by the devices its grants name, whatever peer
 * access says, and only while they name them (the pool's own answer, so
 * a revoke counts at once). */
bool gvm_shim_pool_grants(CUmemoryPool pool, int dev)
{
    CUmemLocation at = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return pool && gvm_drv.cuMemPoolGetAccess && gvm_drv.cuMemPoolGetAccess(&flags, pool, &at) == CUDA_SUCCESS &&
           flags != CU_MEM_ACCESS_FLAGS_PROT_NONE;
}

/* The figure of core/pooluse.h a use attribute reads, or -1 for the others
 * (the release threshold and reuse flags: the driver keeps what the program
 * sets, and answers it). */
static int use_figure(CUmemPool_attribute attr)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: return GVM_POOLUSE_USED;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: return GVM_POOLUSE_USED_HIGH;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: return GVM_POOLUSE_RESERVED;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: return GVM_POOLUSE_RESERVED_HIGH;
    default: return -1;
    }
}

/* A default pool's use includes the stream-ordered memory gvmshim serves
 * for it, counted as the driver would have (core/pooluse.h), on top of
 * what the driver's pool holds itself (allocations it served: a capture's,
 * another context's stream). Pools the program made are the driver's. */
GVM_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    gvm_hook_count(GVM_FN_cuMemPoolGetAttribute);
    CUresult rc = GVM_REAL(cuMemPoolGetAttribute)(pool, attr, value);
    if (rc != CUDA_SUCCESS || !value || !gvm_shim_active()) return rc;
    int figure = use_figure(attr), owner = figure >= 0 ? default_pool_owner(pool) : -1;
    if (owner >= 0) *(cuuint64_t *)value += gvm_pooluse_read(owner, (enum gvm_pooluse_figure)figure);
    return rc;
}

/* Resetting a high-water mark (to 0, the only value allowed: the driver
 * refuses any other) resets gvmshim's share of it too. */
GVM_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    gvm_hook_count(GVM_FN_cuMemPoolSetAttribute);
    CUresult rc = GVM_REAL(cuMemPoolSetAttribute)(pool, attr, value);
    int figure = use_figure(attr);
    bool high = figure == GVM_POOLUSE_USED_HIGH || figure == GVM_POOLUSE_RESERVED_HIGH;
    if (rc == CUDA_SUCCESS && high && gvm_shim_active()) {
        int owner = default_pool_owner(pool);
        if (owner >= 0) gvm_pooluse_reset_high(owner, (enum gvm_pooluse_figure)figure);
    }
    return rc;
}

/* A synchronize settles the frees queued before it, and a default pool
 * reserving more than its release threshold releases down to it (the
 * driver's rule at a stream, event or context synchronize): dev, or every
 * device for -1. The threshold is the driver's: it keeps what the program
 * set. */
void gvm_shim_pools_synchronized(int dev)
{
    if (!gvm_pooluse_releasable() || !gvm_shim_active()) return;
    for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? gvm_topo.ndev : dev + 1); d++) {
        if (d < 0 || d >= GVM_MAX_DEVICES || !gvm_pooluse_keeps_extra(d)) continue;
        CUmemoryPool pool = default_pool(d);
        cuuint64_t threshold = 0;
        if (!pool || gvm_drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) != CUDA_SUCCESS)
            continue;
        gvm_pooluse_sync(d, threshold);
    }
}

/* Trimming a default pool releases the freed memory it keeps for gvmshim's
 * allocations as the driver's own (core/pooluse.h). Trimming it to nothing
 * gives its freed memory back to the system natively (PyTorch's
 * cudaMallocAsync backend does it in torch.cuda.empty_cache(), CuPy's
 * MemoryAsyncPool in free_all_blocks()), and nvidia-smi shows it gone at
 * once: gvmshim's freed memory of that device, kept for reuse, goes back
 * with it. A trim that keeps some bytes keeps gvmshim's cache too; none is
 * given back while a capture is open (it may wait for the device). */
GVM_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    gvm_hook_count(GVM_FN_cuMemPoolTrimTo);
    CUresult rc = GVM_REAL(cuMemPoolTrimTo)(pool, keep);
    int owner = rc == CUDA_SUCCESS && gvm_shim_active() ? default_pool_owner(pool) : -1;
    if (owner >= 0) gvm_pooluse_trim(owner, keep);
    if (owner >= 0 && !keep && !gvm_capture_open(owner)) gvm_idle_give_back(owner);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return free_async(GVM_REAL(cuMemFreeAsync), GVM_REAL(cuStreamIsCapturing), GVM_FN_cuMemFreeAsync, p, s, false);
}

GVM_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return free_async(GVM_REAL(cuMemFreeAsync_ptsz), GVM_REAL(cuStreamIsCapturing), GVM_FN_cuMemFreeAsync_ptsz, p,
                      s, true);
}

/* Memory gvmshim holds but the program does not use counts as free; a
 * device limit caps what the program is told it has. */
GVM_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    gvm_hook_count(GVM_FN_cuMemGetInfo_v2);
    if (!free_bytes || !total_bytes) return GVM_REAL(cuMemGetInfo_v2)(free_bytes, total_bytes);
    size_t f = 0, t = 0;
    CUresult rc = GVM_REAL(cuMemGetInfo_v2)(&f, &t);
    if (rc == CUDA_SUCCESS && gvm_shim_active()) {
        CUcontext ctx;
        int dev;
        if (current_device(&ctx, &dev) == CUDA_SUCCESS && dev >= 0 && dev < gvm_topo.ndev)
            gvm_policy_meminfo(dev, &f, &t);
    }
    if (rc == CUDA_SUCCESS) {
        *free_bytes = f;
        *total_bytes = t;
    }
    return rc;
}
