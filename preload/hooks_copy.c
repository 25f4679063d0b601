/* Copies and sets: each hook announces the gvmshim regions it touches (so
 * a migration waits for the call and the call waits for a migration),
 * marks them used, and forwards to the matching real entry point: the
 * _ptds/_ptsz hooks call the _ptds/_ptsz real functions. Pointers that are
 * not gvmshim's cost one two-level table lookup each. */
#include "preload/shim.h"

#include <stdlib.h>

static inline void count_pass(struct gvm_region *a, struct gvm_region *b)
{
    if (!a && !b) gvm_stat_inc(passthrough_calls);
}

/* Two pointer arguments (device or host side), one real call. */
#define TWO_PTR_HOOK(fn, sig, args, pa, pb, use_a, use_b)                      \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct gvm_region *a_ = use_a(pa), *b_ = use_b(pb);                    \
        count_pass(a_, b_);                                                    \
        CUresult rc_ = GVM_REAL(fn) args;                                        \
        gvm_use_end(a_);                                                       \
        gvm_use_end(b_);                                                       \
        return rc_;                                                            \
    }

#define DEV(p) gvm_shim_use((uintptr_t)(p))
/* Every 1D hook names its byte count n. */
#define HOST(p) gvm_shim_use_host((const void *)(p), n)
#define NONE(p) ((void)(p), (struct gvm_region *)0)

/* Base and per-thread-stream variant share one body. */
#define BOTH_DS(fn, sig, args, pa, pb, ua, ub)                                 \
    TWO_PTR_HOOK(fn, sig, args, pa, pb, ua, ub)                                \
    TWO_PTR_HOOK(fn##_ptds, sig, args, pa, pb, ua, ub)
#define BOTH_SZ(fn, sig, args, pa, pb, ua, ub)                                 \
    TWO_PTR_HOOK(fn, sig, args, pa, pb, ua, ub)                                \
    TWO_PTR_HOOK(fn##_ptsz, sig, args, pa, pb, ua, ub)

BOTH_DS(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), dst, src, DEV, DEV)
BOTH_SZ(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
        dst, src, DEV, DEV)
BOTH_DS(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),
        (dst, dc, src, sc, n), dst, src, DEV, DEV)
BOTH_SZ(cuMemcpyPeerAsync,
        (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
        (dst, dc, src, sc, n, s), dst, src, DEV, DEV)
BOTH_DS(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n), dst, src, DEV,
        HOST)
BOTH_DS(cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n), (dst, src, n), dst, src, HOST, DEV)
BOTH_DS(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), dst, src, DEV,
        DEV)
BOTH_DS(cuMemcpyDtoA_v2, (CUarray dst, size_t off, CUdeviceptr src, size_t n), (dst, off, src, n), dst,
        src, NONE, DEV)
BOTH_DS(cuMemcpyAtoD_v2, (CUdeviceptr dst, CUarray src, size_t off, size_t n), (dst, src, off, n), dst,
        src, DEV, NONE)
BOTH_SZ(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream s),
        (dst, src, n, s), dst, src, DEV, HOST)
BOTH_SZ(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
        dst, src, HOST, DEV)
BOTH_SZ(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
        (dst, src, n, s), dst, src, DEV, DEV)

/* ---- 2D / 3D descriptors ---------------------------------------------- */

/* The bytes one side of a pitched copy spans: from its first byte copied
 * to its last, rows and layers between included. */
struct side_extent {
    size_t x, y, z, pitch, height;   /* origin and layout of the side */
    size_t w, h, d;                  /* the copy's extent */
};

static bool side_span(const struct side_extent *e, size_t *first, size_t *len)
{
    size_t rows, last_row;
    if (!e->w || !e->h || !e->d) return false;
    if (__builtin_mul_overflow(e->z, e->height, &rows) || __builtin_add_overflow(rows, e->y, &rows) ||
        __builtin_mul_overflow(rows, e->pitch, first) || __builtin_add_overflow(*first, e->x, first))
        return false;
    if (__builtin_mul_overflow(e->d - 1, e->height, &rows) || __builtin_add_overflow(rows, e->h - 1, &rows) ||
        __builtin_mul_overflow(rows, e->pitch, &last_row) || __builtin_add_overflow(last_row, e->w, len))
        return false;
    return true;
}

static struct gvm_region *use_side(CUmemorytype type, CUdeviceptr dev, const void *host,
                                   struct side_extent e)
{
    if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED)
        return gvm_shim_use(type == CU_MEMORYTYPE_UNIFIED && !dev ? (uintptr_t)host : dev);
    if (type != CU_MEMORYTYPE_HOST) return NULL;
    size_t first, len;
    /* A descriptor the driver will refuse: nothing to grant. */
    if (!side_span(&e, &first, &len)) return gvm_shim_use_host(host, 1);
    return gvm_shim_use_host((const char *)host + first, len);
}

/* The sides' extents: 2D descriptors have no layers. */
#define EXTENT_2D(d, s)                                                        \
    ((struct side_extent){(d)->s##XInBytes, (d)->s##Y, 0, (d)->s##Pitch, 0,   \
                          (d)->WidthInBytes, (d)->Height, 1})
#define EXTENT_3D(d, s)                                                        \
    ((struct side_extent){(d)->s##XInBytes, (d)->s##Y, (d)->s##Z, (d)->s##Pitch, \
                          (d)->s##Height, (d)->WidthInBytes, (d)->Height, (d)->Depth})

#define DESC_HOOK(fn, sig, args, desc, EXTENT)                                 \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct gvm_region *a_ = NULL, *b_ = NULL;                              \
        if (desc) {                                                            \
            a_ = use_side((desc)->srcMemoryType, (desc)->srcDevice, (desc)->srcHost, \
                          EXTENT(desc, src));                                  \
            b_ = use_side((desc)->dstMemoryType, (desc)->dstDevice, (desc)->dstHost, \
                          EXTENT(desc, dst));                                  \
        }                                                                      \
        count_pass(a_, b_);                                                    \
        CUresult rc_ = GVM_REAL(fn) args;                                        \
        gvm_use_end(a_);                                                       \
        gvm_use_end(b_);                                                       \
        return rc_;                                                            \
    }

#define DESC_DS(fn, sig, args, d, E) DESC_HOOK(fn, sig, args, d, E) DESC_HOOK(fn##_ptds, sig, args, d, E)
#define DESC_SZ(fn, sig, args, d, E) DESC_HOOK(fn, sig, args, d, E) DESC_HOOK(fn##_ptsz, sig, args, d, E)

DESC_DS(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p), (p), p, EXTENT_2D)
DESC_DS(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *p), (p), p, EXTENT_2D)
DESC_SZ(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream s), (p, s), p, EXTENT_2D)
DESC_DS(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p), (p), p, EXTENT_3D)
DESC_SZ(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream s), (p, s), p, EXTENT_3D)
DESC_DS(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *p), (p), p, EXTENT_3D)
DESC_SZ(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *p, CUstream s), (p, s), p, EXTENT_3D)

/* ---- batches ---------------------------------------------------------- */

#define BATCH_STACK 32

static CUresult batch(enum gvm_driver_fn fn, __typeof__(cuMemcpyBatchAsync_v2) *real, CUdeviceptr *dsts,
                      CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
                      size_t *idxs, size_t nattrs, CUstream s)
{
    gvm_hook_count(fn);
    struct gvm_region *stack[2 * BATCH_STACK];
    struct gvm_region **used = stack;
    size_t n = 0;
    if (gvm_shim_active() && dsts && srcs) {
        if (count > BATCH_STACK) used = malloc(2 * count * sizeof *used);
        if (!used) return CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; i < count; i++) {
            used[n++] = gvm_shim_use(dsts[i]);
            used[n++] = gvm_shim_use(srcs[i]);
        }
    }
    CUresult rc = real(dsts, srcs, sizes, count, attrs, idxs, nattrs, s);
    bool ours = false;
    for (size_t i = 0; i < n; i++) {
        ours |= used[i] != NULL;
        gvm_use_end(used[i]);
    }
    if (!ours) gvm_stat_inc(passthrough_calls);
    if (used != stack) free(used);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr *d, CUdeviceptr *s, size_t *z, size_t c,
                                                  CUmemcpyAttributes *a, size_t *i, size_t n,
                                                  CUstream st)
{
    return batch(GVM_FN_cuMemcpyBatchAsync_v2, GVM_REAL(cuMemcpyBatchAsync_v2), d, s, z, c, a, i, n, st);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *d, CUdeviceptr *s, size_t *z,
                                                       size_t c, CUmemcpyAttributes *a, size_t *i,
                                                       size_t n, CUstream st)
{
    return batch(GVM_FN_cuMemcpyBatchAsync_v2_ptsz, GVM_REAL(cuMemcpyBatchAsync_v2_ptsz), d, s, z, c, a, i,
                 n, st);
}

/* ---- sets --------------------------------------------------------------- */

#define SET_HOOK(fn, sig, args)                                                \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct gvm_region *a_ = gvm_shim_use(dst);                             \
        count_pass(a_, NULL);                                                  \
        CUresult rc_ = GVM_REAL(fn) args;                                        \
        gvm_use_end(a_);                                                       \
        return rc_;                                                            \
    }
#define SET_DS(fn, sig, args) SET_HOOK(fn, sig, args) SET_HOOK(fn##_ptds, sig, args)
#define SET_SZ(fn, sig, args) SET_HOOK(fn, sig, args) SET_HOOK(fn##_ptsz, sig, args)

SET_DS(cuMemsetD8_v2, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n))
SET_DS(cuMemsetD16_v2, (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n))
SET_DS(cuMemsetD32_v2, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n))
SET_DS(cuMemsetD2D8_v2, (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h),
       (dst, pitch, v, w, h))
SET_DS(cuMemsetD2D16_v2, (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h),
       (dst, pitch, v, w, h))
SET_DS(cuMemsetD2D32_v2, (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h),
       (dst, pitch, v, w, h))
SET_SZ(cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream s), (dst, v, n, s))
SET_SZ(cuMemsetD16Async, (CUdeviceptr dst, unsigned short v, size_t n, CUstream s), (dst, v, n, s))
SET_SZ(cuMemsetD32Async, (CUdeviceptr dst, unsigned int v, size_t n, CUstream s), (dst, v, n, s))
SET_SZ(cuMemsetD2D8Async,
       (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),
       (dst, pitch, v, w, h, s))
SET_SZ(cuMemsetD2D16Async,
       (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),
       (dst, pitch, v, w, h, s))
SET_SZ(cuMemsetD2D32Async,
       (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s),
       (dst, pitch, v, w, h, s))

/* A host-side argument may be gvmshim memory living in host memory: the
 * driver's CPU side copies through it, so every block of [p, p+n) needs CPU
 * access before the call (a fault inside the driver would run the fault
 * handler inside a driver call). Granting locks the region, so it comes
 * before the announcement (a move waits for announced calls while holding
 * the lock); a move that lands in between is seen by the buffer id the
 * move changes, and the range is granted again. */
struct gvm_region *gvm_shim_use_host(const void *p, size_t n)
{
    if (!p || !gvm_shim_active()) return NULL;
    struct gvm_region *r = gvm_heap_region((uintptr_t)p);
    if (!r) return NULL;
    for (int tries = 0;; tries++) {
        uint64_t id = GVM_LOAD(r->buffer_id);
        struct gvm_capture_guard g;
        gvm_shim_relax(&g);   /* the grant is a VMM call of gvmshim's own */
        gvm_hostaccess_grant_range((uintptr_t)p, n ? n : 1);
        gvm_shim_capture_leave(&g);
        struct gvm_region *u = gvm_use_begin((uintptr_t)p);
        if (!u || u != r || GVM_LOAD(r->buffer_id) == id || tries == 3) return u;
        gvm_use_end(u);
    }
}
