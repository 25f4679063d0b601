/* Copies and sets: each hook announces the gvmshim regions it touches (so
 * a migration waits for the call and the call waits for a migration),
 * marks them used, and forwards to the matching real entry point: the
 * _ptds/_ptsz hooks call the _ptds/_ptsz real functions. Pointers that are
 * not gvmshim's cost one two-level table lookup each.
 *
 * A call whose gvmshim-owned side runs past the end of the allocation the
 * program asked for (into gvmshim's rounding or a neighbour's slot), or
 * starts in gvmshim's space outside any live allocation, fails with
 * CUDA_ERROR_INVALID_VALUE without reaching the driver: the native answer
 * for a call past the end of a cudaMalloc'd buffer (H200, 2026-11). The
 * bound comes from the lookup the announcement needs anyway. */
#include "preload/shim.h"

/* The current context's device, remembered per thread for the context it
 * was asked for. */
static __thread CUcontext known_ctx;
static __thread int known_dev = -1;

/* Grants r (announced; NULL: nothing) to the current context's device if
 * it has no access yet (core/region.h, gvm_region_grant_copier); true
 * when it granted something. */
static bool grant_copier(struct gvm_region *r)
{
    CUcontext c = NULL;
    if (!r || GVM_REAL(cuCtxGetCurrent)(&c) != CUDA_SUCCESS || !c) return false;
    if (c != known_ctx) {
        CUdevice d = -1;
        if (GVM_REAL(cuCtxGetDevice)(&d) != CUDA_SUCCESS) return false;
        known_ctx = c;
        known_dev = (int)d;
    }
    return gvm_region_grant_copier(r, known_dev);
}

/* A copy or set the driver refused with CUDA_ERROR_INVALID_VALUE may come
 * from a context whose device gvmshim did not grant the memory (natively
 * the driver serves it): true when a grant was made and the call should be
 * made again. Checked on refusal only, so that a call that succeeds costs
 * nothing more (asking the driver for the current context on every copy
 * cost ~0.4 us on two H200s). */
static inline bool granted_on_refusal(CUresult rc, struct gvm_region *a, struct gvm_region *b)
{
    if (__builtin_expect(rc != CUDA_ERROR_INVALID_VALUE, 1) || gvm_topo.ndev < 2) return false;
    bool ga = grant_copier(a), gb = grant_copier(b);
    return ga || gb;
}

static inline void count_pass(struct gvm_region *a, struct gvm_region *b)
{
    if (!a && !b) gvm_stat_local_inc(passthrough_calls);
}

/* Bytes a call touches when a product or sum of its extents wraps: no
 * allocation is that large, so it fails the bound. */
#define HUGE_SPAN SIZE_MAX

/* Two pointer arguments (device or host side) of n bytes, one real call. */
#define TWO_PTR_HOOK(fn, sig, args, pa, pb, use_a, use_b)                      \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        bool bad_ = false;                                                     \
        uint64_t tick_ = 0;                                                    \
        struct gvm_region *a_ = use_a(pa, n, &bad_, &tick_, NULL);             \
        struct gvm_region *b_ = use_b(pb, n, &bad_, &tick_, a_);               \
        CUresult rc_ = CUDA_ERROR_INVALID_VALUE;                               \
        if (!bad_) {                                                           \
            count_pass(a_, b_);                                                \
            rc_ = GVM_REAL(fn) args;                                           \
            if (granted_on_refusal(rc_, a_, b_)) rc_ = GVM_REAL(fn) args; \
        }                                                                      \
        gvm_shim_used_end(a_);                                                 \
        gvm_shim_used_end(b_);                                                 \
        return rc_;                                                            \
    }

#define DEV(p, n, bad, tick, held) gvm_shim_use_span((uintptr_t)(p), (n), (bad), (tick), (held))
#define HOST(p, n, bad, tick, held) use_host_span((const void *)(p), (n), (bad))
#define NONE(p, n, bad, tick, held) ((void)(p), (struct gvm_region *)0)

/* A host-side argument that is gvmshim memory living on host (rare): the
 * bound needs a lookup of its own. */
static struct gvm_region *use_host_span(const void *p, size_t n, bool *bad)
{
    struct gvm_region *r = gvm_shim_use_host(p, n);
    if (!r) return NULL;
    size_t room;
    gvm_heap_span((uintptr_t)p, &room);
    if (n <= room) return r;
    gvm_use_end(r);
    *bad = true;
    return NULL;
}

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

/* One side of a pitched copy, as the 2D, 3D and 3D peer descriptors give it. */
struct side {
    CUmemorytype type;
    CUdeviceptr dev;
    const void *host;
    size_t x, y, z, pitch, height;
};

/* a * b + c, or HUGE_SPAN when it wraps. */
static inline size_t mul_add(size_t a, size_t b, size_t c)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return HUGE_SPAN;
    return r;
}

/* Bytes from the side's base pointer to one past the last byte a copy of
 * w x h x d touches there (0 for an empty copy). */
static size_t side_extent(const struct side *s, size_t w, size_t h, size_t d)
{
    if (!w || !h || !d) return 0;
    size_t first = mul_add(mul_add(s->z, s->height, s->y), s->pitch, s->x);
    size_t span = mul_add(mul_add(d - 1, s->height, h - 1), s->pitch, w);
    return mul_add(1, first, span);
}

static struct gvm_region *use_side(const struct side *s, size_t w, size_t h, size_t d, bool *bad,
                                   uint64_t *tick, const struct gvm_region *held)
{
    if (s->type == CU_MEMORYTYPE_DEVICE || s->type == CU_MEMORYTYPE_UNIFIED) {
        uintptr_t p = s->type == CU_MEMORYTYPE_UNIFIED && !s->dev ? (uintptr_t)s->host : s->dev;
        return gvm_shim_use_span(p, side_extent(s, w, h, d), bad, tick, held);
    }
    if (s->type == CU_MEMORYTYPE_HOST) return use_host_span(s->host, side_extent(s, w, h, d), bad);
    return NULL;
}

#define SIDE(d, which, z_, height_)                                            \
    ((struct side){(d)->which##MemoryType, (d)->which##Device, (d)->which##Host, (d)->which##XInBytes, \
                   (d)->which##Y, (z_), (d)->which##Pitch, (height_)})
#define SIDE_2D(d, which) SIDE(d, which, 0, 0)
#define SIDE_3D(d, which) SIDE(d, which, (d)->which##Z, (d)->which##Height)
#define DEPTH_2D(d) 1
#define DEPTH_3D(d) (d)->Depth

#define DESC_HOOK(fn, sig, args, desc, kind)                                   \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct gvm_region *a_ = NULL, *b_ = NULL;                              \
        bool bad_ = false;                                                     \
        uint64_t tick_ = 0;                                                    \
        if (desc && gvm_shim_active()) {                                       \
            struct side s_ = SIDE_##kind(desc, src), d_ = SIDE_##kind(desc, dst); \
            size_t w_ = (desc)->WidthInBytes, h_ = (desc)->Height, z_ = DEPTH_##kind(desc); \
            a_ = use_side(&s_, w_, h_, z_, &bad_, &tick_, NULL);               \
            b_ = use_side(&d_, w_, h_, z_, &bad_, &tick_, a_);                 \
        }                                                                      \
        CUresult rc_ = CUDA_ERROR_INVALID_VALUE;                               \
        if (!bad_) {                                                           \
            count_pass(a_, b_);                                                \
            rc_ = GVM_REAL(fn) args;                                           \
            if (granted_on_refusal(rc_, a_, b_)) rc_ = GVM_REAL(fn) args; \
        }                                                                      \
        gvm_shim_used_end(a_);                                                 \
        gvm_shim_used_end(b_);                                                 \
        return rc_;                                                            \
    }

#define DESC_DS(fn, sig, args, d, k) DESC_HOOK(fn, sig, args, d, k) DESC_HOOK(fn##_ptds, sig, args, d, k)
#define DESC_SZ(fn, sig, args, d, k) DESC_HOOK(fn, sig, args, d, k) DESC_HOOK(fn##_ptsz, sig, args, d, k)

DESC_DS(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p), (p), p, 2D)
DESC_DS(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *p), (p), p, 2D)
DESC_SZ(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream s), (p, s), p, 2D)
DESC_DS(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p), (p), p, 3D)
DESC_SZ(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream s), (p, s), p, 3D)
DESC_DS(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *p), (p), p, 3D)
DESC_SZ(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *p, CUstream s), (p, s), p, 3D)

/* ---- batches ---------------------------------------------------------- */

/* More copies than arrays of pointers can describe. */
#define BATCH_MAX (SIZE_MAX / (2 * sizeof(void *)))

/* Whether a refused batch may have been refused for want of a grant: the
 * grants are made, and the batch is made again. */
static bool batch_granted(CUresult rc, const struct gvm_shim_uses *u)
{
    bool again = false;
    for (size_t i = 0; i < u->n; i++) again |= granted_on_refusal(rc, u->r[i], NULL);
    return again;
}

/* The first copy whose span was refused (announced last, two
 * announcements a copy), for a batch that reports it in *failIdx. */
static void report_fail(size_t *fail_idx, const struct gvm_shim_uses *u)
{
    if (fail_idx && u->bad) *fail_idx = (u->n - 1) / 2;
}

static CUresult batch_once(void *real, bool v1, CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                           CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail_idx, CUstream s)
{
    if (v1)
        return ((__typeof__(cuMemcpyBatchAsync) *)real)(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail_idx,
                                                          s);
    return ((__typeof__(cuMemcpyBatchAsync_v2) *)real)(dsts, srcs, sizes, count, attrs, idxs, nattrs, s);
}

/* The CUDA 13 batch copy (_v2; real is one) and CUDA 12.8's (v1: real
 * takes failIdx, where a copy gvmshim refuses is named too). */
static CUresult batch(enum gvm_driver_fn fn, void *real, bool v1, CUdeviceptr *dsts, CUdeviceptr *srcs,
                      size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs,
                      size_t *fail_idx, CUstream s)
{
    gvm_hook_count(fn);
    struct gvm_shim_uses u;
    bool look = gvm_shim_active() && dsts && srcs && sizes;
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    if (look && count > BATCH_MAX) return CUDA_ERROR_INVALID_VALUE;
    if (!gvm_shim_uses_open(&u, look ? 2 * count : 0)) return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; look && i < count && !u.bad; i++) {
        gvm_shim_uses_add(&u, dsts[i], sizes[i], false);
        gvm_shim_uses_add(&u, srcs[i], sizes[i], true);
    }
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    report_fail(fail_idx, &u);
    if (!u.bad) {
        if (!gvm_shim_uses_ours(&u)) gvm_stat_local_inc(passthrough_calls);
        for (int tries = 0; tries < 2; tries++) {   /* once more after a grant (batch_granted) */
            rc = batch_once(real, v1, dsts, srcs, sizes, count, attrs, idxs, nattrs, fail_idx, s);
            if (!batch_granted(rc, &u)) break;
        }
    }
    gvm_shim_uses_close(&u);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr *d, CUdeviceptr *s, size_t *z, size_t c,
                                                  CUmemcpyAttributes *a, size_t *i, size_t n,
                                                  CUstream st)
{
    return batch(GVM_FN_cuMemcpyBatchAsync_v2, (void *)GVM_REAL_OPT(cuMemcpyBatchAsync_v2), false, d, s, z, c, a, i,
                 n, NULL, st);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *d, CUdeviceptr *s, size_t *z,
                                                       size_t c, CUmemcpyAttributes *a, size_t *i,
                                                       size_t n, CUstream st)
{
    return batch(GVM_FN_cuMemcpyBatchAsync_v2_ptsz, (void *)GVM_REAL_OPT(cuMemcpyBatchAsync_v2_ptsz), false,
                 d, s, z, c, a, i, n, NULL, st);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr *d, CUdeviceptr *s, size_t *z, size_t c,
                                               CUmemcpyAttributes *a, size_t *i, size_t n, size_t *f,
                                               CUstream st)
{
    return batch(GVM_FN_cuMemcpyBatchAsync, (void *)GVM_REAL_OPT(cuMemcpyBatchAsync), true, d, s, z, c, a, i, n, f,
                 st);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr *d, CUdeviceptr *s, size_t *z, size_t c,
                                                    CUmemcpyAttributes *a, size_t *i, size_t n, size_t *f,
                                                    CUstream st)
{
    return batch(GVM_FN_cuMemcpyBatchAsync_ptsz, (void *)GVM_REAL_OPT(cuMemcpyBatchAsync_ptsz), true, d, s, z, c, a,
                 i, n, f, st);
}

/* ---- 3D batches --------------------------------------------------------- */

/* The bytes of one element of a copy: 1 between two pointers; beside a
 * CUDA array, the array's element (its descriptor asked for). Where that
 * cannot be told, 1: a span no longer than the true one, so that no copy
 * the driver would run is refused. */
static size_t op_element(const CUDA_MEMCPY3D_BATCH_OP *op)
{
    const CUmemcpy3DOperand *a = op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? &op->src
                                 : op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? &op->dst
                                                                                : NULL;
    size_t elem = a ? gvm_shim_array_element_bytes(a->op.array.array) : 1;
    return elem ? elem : 1;
}

/* Bytes from a pointer operand's base to one past the last byte a copy of
 * `e` elements of `elem` bytes touches (rows and layers of the operand's
 * length, or packed where it gives 0). */
static size_t operand_extent(const CUmemcpy3DOperand *o, const CUextent3D *e, size_t elem)
{
    if (!e->width || !e->height || !e->depth) return 0;
    size_t row = o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width;
    size_t layer = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
    size_t elems = mul_add(mul_add(e->depth - 1, layer, e->height - 1), row, e->width);
    return elems == HUGE_SPAN ? HUGE_SPAN : mul_add(elems, elem, 0);
}

static void use_operand(struct gvm_shim_uses *u, const CUmemcpy3DOperand *o, const CUextent3D *e, size_t elem,
                        bool pair)
{
    if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER)
        gvm_shim_uses_add(u, o->op.ptr.ptr, operand_extent(o, e, elem), pair);
    else
        gvm_shim_uses_add(u, 0, 0, pair);   /* an array: not gvmshim's */
}

static CUresult batch_3d_once(void *real, bool v1, size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                              unsigned long long flags, CUstream s)
{
    if (v1) return ((__typeof__(cuMemcpy3DBatchAsync) *)real)(nops, ops, fail_idx, flags, s);
    return ((__typeof__(cuMemcpy3DBatchAsync_v2) *)real)(nops, ops, flags, s);
}

static CUresult batch_3d(enum gvm_driver_fn fn, void *real, bool v1, size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops,
                         size_t *fail_idx, unsigned long long flags, CUstream s)
{
    gvm_hook_count(fn);
    struct gvm_shim_uses u;
    bool look = gvm_shim_active() && ops;
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    if (look && nops > BATCH_MAX) return CUDA_ERROR_INVALID_VALUE;
    if (!gvm_shim_uses_open(&u, look ? 2 * nops : 0)) return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; look && i < nops && !u.bad; i++) {
        size_t elem = op_element(&ops[i]);
        use_operand(&u, &ops[i].dst, &ops[i].extent, elem, false);
        use_operand(&u, &ops[i].src, &ops[i].extent, elem, true);
    }
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    report_fail(fail_idx, &u);
    if (!u.bad) {
        if (!gvm_shim_uses_ours(&u)) gvm_stat_local_inc(passthrough_calls);
        for (int tries = 0; tries < 2; tries++) {   /* once more after a grant (batch_granted) */
            rc = batch_3d_once(real, v1, nops, ops, fail_idx, flags, s);
            if (!batch_granted(rc, &u)) break;
        }
    }
    gvm_shim_uses_close(&u);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long fl,
                                                    CUstream s)
{
    return batch_3d(GVM_FN_cuMemcpy3DBatchAsync_v2, (void *)GVM_REAL_OPT(cuMemcpy3DBatchAsync_v2), false, n, ops,
                    NULL, fl, s);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops,
                                                         unsigned long long fl, CUstream s)
{
    return batch_3d(GVM_FN_cuMemcpy3DBatchAsync_v2_ptsz, (void *)GVM_REAL_OPT(cuMemcpy3DBatchAsync_v2_ptsz), false,
                    n, ops, NULL, fl, s);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *f,
                                                 unsigned long long fl, CUstream s)
{
    return batch_3d(GVM_FN_cuMemcpy3DBatchAsync, (void *)GVM_REAL_OPT(cuMemcpy3DBatchAsync), true, n, ops, f, fl, s);
}

GVM_EXPORT CUresult CUDAAPI cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *f,
                                                      unsigned long long fl, CUstream s)
{
    return batch_3d(GVM_FN_cuMemcpy3DBatchAsync_ptsz, (void *)GVM_REAL_OPT(cuMemcpy3DBatchAsync_ptsz), true, n, ops,
                    f, fl, s);
}

/* ---- sets --------------------------------------------------------------- */

/* Bytes h rows of w elements of `elem` bytes, `pitch` apart, touch. */
static inline size_t set_span(size_t pitch, size_t w, size_t elem, size_t h)
{
    if (!w || !h) return 0;
    size_t row = mul_add(w, elem, 0);
    return row == HUGE_SPAN ? HUGE_SPAN : mul_add(h - 1, pitch, row);
}

#define SET_HOOK(fn, sig, args, span)                                          \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        bool bad_ = false;                                                     \
        uint64_t tick_ = 0;                                                    \
        struct gvm_region *a_ = gvm_shim_use_span(dst, span, &bad_, &tick_, NULL); \
        if (bad_) return CUDA_ERROR_INVALID_VALUE;                             \
        count_pass(a_, NULL);                                                  \
        CUresult rc_ = GVM_REAL(fn) args;                                      \
        if (granted_on_refusal(rc_, a_, NULL)) rc_ = GVM_REAL(fn) args; \
        gvm_shim_used_end(a_);                                                 \
        return rc_;                                                            \
    }
#define SET_DS(fn, sig, args, span) SET_HOOK(fn, sig, args, span) SET_HOOK(fn##_ptds, sig, args, span)
#define SET_SZ(fn, sig, args, span) SET_HOOK(fn, sig, args, span) SET_HOOK(fn##_ptsz, sig, args, span)

#define SPAN_1D(elem) set_span(0, n, elem, 1)
#define SPAN_2D(elem) set_span(pitch, w, elem, h)

SET_DS(cuMemsetD8_v2, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n), SPAN_1D(1))
SET_DS(cuMemsetD16_v2, (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n), SPAN_1D(2))
SET_DS(cuMemsetD32_v2, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n), SPAN_1D(4))
SET_DS(cuMemsetD2D8_v2, (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h),
       (dst, pitch, v, w, h), SPAN_2D(1))
SET_DS(cuMemsetD2D16_v2, (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h),
       (dst, pitch, v, w, h), SPAN_2D(2))
SET_DS(cuMemsetD2D32_v2, (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h),
       (dst, pitch, v, w, h), SPAN_2D(4))
SET_SZ(cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream s), (dst, v, n, s), SPAN_1D(1))
SET_SZ(cuMemsetD16Async, (CUdeviceptr dst, unsigned short v, size_t n, CUstream s), (dst, v, n, s),
       SPAN_1D(2))
SET_SZ(cuMemsetD32Async, (CUdeviceptr dst, unsigned int v, size_t n, CUstream s), (dst, v, n, s),
       SPAN_1D(4))
SET_SZ(cuMemsetD2D8Async,
       (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),
       (dst, pitch, v, w, h, s), SPAN_2D(1))
SET_SZ(cuMemsetD2D16Async,
       (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),
       (dst, pitch, v, w, h, s), SPAN_2D(2))
SET_SZ(cuMemsetD2D32Async,
       (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s),
       (dst, pitch, v, w, h, s), SPAN_2D(4))

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
