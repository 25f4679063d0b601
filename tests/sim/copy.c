/* Every cuMemcpy* entry point. All memory is host memory here, so a copy
 * is a memmove once both ends are validated; a device end must be memory
 * a kernel could touch, which catches a shim that forgot cuMemSetAccess.
 * Nothing is touched when any check fails. */
#include "sim.h"

#include <string.h>

/* The device whose context issues the copy under way on this thread, -1
 * when none is known (graph replays): like the real driver (H200 pair),
 * the sim refuses a copy of VMM memory whose mapping that device was not
 * granted, while a cuMemAlloc buffer is copied from any context. */
static __thread int copy_dev = -1;

/* One end of a copy, resolved to memory the sim may touch. */
static CUresult sim_resolve(uintptr_t p, int kind, size_t span, char **out)
{
    if (kind == SIM_UNIFIED)
        kind = sim_is_dev_addr(p) ? SIM_DEVMEM : SIM_HOSTMEM;
    if (kind == SIM_DEVMEM ? !sim_dev_span_ok_for(p, span, copy_dev) : p == 0)
        return CUDA_ERROR_INVALID_VALUE;
    *out = kind == SIM_DEVMEM ? sim_dev_view(p, span) : (char *)p;
    return CUDA_SUCCESS;
}

CUresult sim_copy_1d(uintptr_t dst, int dkind, uintptr_t src, int skind, size_t n)
{
    char *d, *s;
    if (n == 0)
        return CUDA_SUCCESS;
    CUresult rc = sim_resolve(dst, dkind, n, &d);
    if (rc == CUDA_SUCCESS)
        rc = sim_resolve(src, skind, n, &s);
    if (rc == CUDA_SUCCESS)
        sim_bulk_move(d, s, n);
    return rc;
}

static CUresult sim_copy_as(int dev, uintptr_t dst, int dkind, uintptr_t src, int skind, size_t n)
{
    copy_dev = dev;
    CUresult rc = sim_copy_1d(dst, dkind, src, skind, n);
    copy_dev = -1;
    return rc;
}

/* Synchronous copies run in the current context; asynchronous ones in
 * their stream's. */
static CUresult sim_copy_sync(uintptr_t dst, int dkind, uintptr_t src, int skind, size_t n)
{
    int dev = -1;
    CUresult rc = sim_need_ctx(&dev);
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_unsafe();
    return rc != CUDA_SUCCESS ? rc : sim_copy_as(dev, dst, dkind, src, skind, n);
}

static CUresult sim_copy_async(uintptr_t dst, int dkind, uintptr_t src, int skind, size_t n,
                               CUstream s)
{
    int dev = -1;
    CUresult rc = sim_stream_dev(s, &dev);
    struct sim_node node = {.kind = SIM_NODE_COPY, .dst = dst, .dkind = dkind, .src = src,
                            .skind = skind, .n = n};
    if (rc == CUDA_SUCCESS && sim_capture_add(s, &node, &rc))
        return rc;
    if (rc == CUDA_SUCCESS)
        rc = sim_copy_as(dev, dst, dkind, src, skind, n);
    if (rc == CUDA_SUCCESS)
        sim_flight_op(s, dst, n, src, n);
    return rc;
}

/* ---- linear copies ---------------------------------------------------- */

SIM_API2(cuMemcpy, cuMemcpy_ptds, SIM_READ,
         (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),
         sim_copy_sync(dst, SIM_UNIFIED, src, SIM_UNIFIED, ByteCount))

SIM_API2(cuMemcpyAsync, cuMemcpyAsync_ptsz, SIM_READ,
         (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
         sim_copy_async(dst, SIM_UNIFIED, src, SIM_UNIFIED, ByteCount, hStream))

SIM_API2(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
         sim_copy_sync(dstDevice, SIM_DEVMEM, (uintptr_t)srcHost, SIM_HOSTMEM, ByteCount))

SIM_API2(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, SIM_READ,
         (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
         sim_copy_sync((uintptr_t)dstHost, SIM_HOSTMEM, srcDevice, SIM_DEVMEM, ByteCount))

SIM_API2(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
         sim_copy_sync(dstDevice, SIM_DEVMEM, srcDevice, SIM_DEVMEM, ByteCount))

SIM_API2(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
         sim_copy_async(dstDevice, SIM_DEVMEM, (uintptr_t)srcHost, SIM_HOSTMEM, ByteCount,
                        hStream))

SIM_API2(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, SIM_READ,
         (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
         sim_copy_async((uintptr_t)dstHost, SIM_HOSTMEM, srcDevice, SIM_DEVMEM, ByteCount,
                        hStream))

SIM_API2(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
         sim_copy_async(dstDevice, SIM_DEVMEM, srcDevice, SIM_DEVMEM, ByteCount, hStream))

/* CUDA arrays are not simulated. */
SIM_API2(cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds, SIM_NOLOCK,
         (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
         CUDA_ERROR_NOT_SUPPORTED)

SIM_API2(cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds, SIM_NOLOCK,
         (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
         CUDA_ERROR_NOT_SUPPORTED)

/* ---- peer copies ------------------------------------------------------ */

static CUresult sim_copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                              size_t n, CUstream s, int async)
{
    if (!sim_ctx_valid(dctx) || !sim_ctx_valid(sctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (async)
        return sim_copy_async(dst, SIM_DEVMEM, src, SIM_DEVMEM, n, s);
    return sim_copy_1d(dst, SIM_DEVMEM, src, SIM_DEVMEM, n);
}

SIM_API2(cuMemcpyPeer, cuMemcpyPeer_ptds, SIM_READ,
         (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
          CUcontext srcContext, size_t ByteCount),
         sim_copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 0))

SIM_API2(cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
          CUcontext srcContext, size_t ByteCount, CUstream hStream),
         sim_copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 1))

/* ---- 2D and 3D copies ------------------------------------------------- */

/* One end of a pitched copy, in the terms shared by the 2D, 3D and 3D
 * peer descriptors. */
struct sim_side {
    CUmemorytype type;
    uintptr_t host, dev;
    size_t x, y, z, pitch, height;
    CUcontext ctx;
};

struct sim_extent {
    size_t w, h, d;
};

static int sim_mul_add(size_t a, size_t b, size_t c, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
}

/* Resolves a side to the address of its first byte; the rows and layers
 * between there and the last byte copied must all be valid memory. */
static CUresult sim_side_origin(const struct sim_side *s, struct sim_extent e, char **origin)
{
    size_t rows, off, span;
    if (s->type == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (s->type != CU_MEMORYTYPE_HOST && s->type != CU_MEMORYTYPE_DEVICE &&
        s->type != CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->ctx && !sim_ctx_valid(s->ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    int pitched = e.h > 1 || e.d > 1 || s->y || s->z;
    int layered = e.d > 1 || s->z;
    if ((pitched && (s->pitch < s->x || s->pitch - s->x < e.w)) ||
        (layered && (s->height < s->y || s->height - s->y < e.h)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_mul_add(s->z, s->height, s->y, &rows) || !sim_mul_add(rows, s->pitch, s->x, &off) ||
        !sim_mul_add(e.d - 1, s->height, e.h - 1, &rows) ||
        !sim_mul_add(rows, s->pitch, e.w, &span))
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t base = s->type == CU_MEMORYTYPE_HOST ? s->host : s->dev;
    if (base == 0 || base + off < base)
        return CUDA_ERROR_INVALID_VALUE;
    int kind = s->type == CU_MEMORYTYPE_HOST     ? SIM_HOSTMEM
               : s->type == CU_MEMORYTYPE_DEVICE ? SIM_DEVMEM
                                                 : SIM_UNIFIED;
    return sim_resolve(base + off, kind, span, origin);
}

static CUresult sim_copy_3d(const struct sim_side *dst, const struct sim_side *src,
                            struct sim_extent e)
{
    char *d, *s;
    if (e.w == 0 || e.h == 0 || e.d == 0)
        return CUDA_SUCCESS;
    CUresult rc = sim_side_origin(dst, e, &d);
    if (rc == CUDA_SUCCESS)
        rc = sim_side_origin(src, e, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    for (size_t k = 0; k < e.d; k++)
        for (size_t j = 0; j < e.h; j++)
            sim_bulk_move(d + (k * dst->height + j) * dst->pitch,
                    s + (k * src->height + j) * src->pitch, e.w);
    return CUDA_SUCCESS;
}

static CUresult sim_copy_2d(const CUDA_MEMCPY2D *p, CUstream s, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = async ? sim_stream_dev(s, NULL) : sim_need_ctx(NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_side src = {p->srcMemoryType, (uintptr_t)p->srcHost, p->srcDevice,
                           p->srcXInBytes, p->srcY, 0, p->srcPitch, 0, NULL};
    struct sim_side dst = {p->dstMemoryType, (uintptr_t)p->dstHost, p->dstDevice,
                           p->dstXInBytes, p->dstY, 0, p->dstPitch, 0, NULL};
    return sim_copy_3d(&dst, &src, (struct sim_extent){p->WidthInBytes, p->Height, 1});
}

SIM_API2(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, SIM_READ,
         (const CUDA_MEMCPY2D *pCopy), sim_copy_2d(pCopy, NULL, 0))

SIM_API2(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds, SIM_READ,
         (const CUDA_MEMCPY2D *pCopy), sim_copy_2d(pCopy, NULL, 0))

SIM_API2(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz, SIM_READ,
         (const CUDA_MEMCPY2D *pCopy, CUstream hStream), sim_copy_2d(pCopy, hStream, 1))

static CUresult sim_copy_3d_desc(const CUDA_MEMCPY3D *p, CUstream s, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = async ? sim_stream_dev(s, NULL) : sim_need_ctx(NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_side src = {p->srcMemoryType, (uintptr_t)p->srcHost, p->srcDevice,
                           p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight, NULL};
    struct sim_side dst = {p->dstMemoryType, (uintptr_t)p->dstHost, p->dstDevice,
                           p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight, NULL};
    return sim_copy_3d(&dst, &src, (struct sim_extent){p->WidthInBytes, p->Height, p->Depth});
}

SIM_API2(cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, SIM_READ,
         (const CUDA_MEMCPY3D *pCopy), sim_copy_3d_desc(pCopy, NULL, 0))

SIM_API2(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz, SIM_READ,
         (const CUDA_MEMCPY3D *pCopy, CUstream hStream), sim_copy_3d_desc(pCopy, hStream, 1))

/* Peer copies name their contexts, so the synchronous form needs no
 * current one. */
static CUresult sim_copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = async ? sim_stream_dev(s, NULL) : CUDA_SUCCESS;
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_side src = {p->srcMemoryType, (uintptr_t)p->srcHost, p->srcDevice,
                           p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight,
                           p->srcContext};
    struct sim_side dst = {p->dstMemoryType, (uintptr_t)p->dstHost, p->dstDevice,
                           p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight,
                           p->dstContext};
    return sim_copy_3d(&dst, &src, (struct sim_extent){p->WidthInBytes, p->Height, p->Depth});
}

SIM_API2(cuMemcpy3DPeer, cuMemcpy3DPeer_ptds, SIM_READ,
         (const CUDA_MEMCPY3D_PEER *pCopy), sim_copy_3d_peer(pCopy, NULL, 0))

SIM_API2(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz, SIM_READ,
         (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), sim_copy_3d_peer(pCopy, hStream, 1))

/* ---- batches ---------------------------------------------------------- */

static CUresult sim_batch_check(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t i)
{
    char *d, *s;
    if (sizes[i] == 0)
        return CUDA_SUCCESS;
    CUresult rc = sim_resolve(dsts[i], SIM_UNIFIED, sizes[i], &d);
    return rc != CUDA_SUCCESS ? rc : sim_resolve(srcs[i], SIM_UNIFIED, sizes[i], &s);
}

/* All copies are checked before any runs, so a bad entry copies nothing.
 * The attributes only order and hint, so they are checked for shape. */
static CUresult sim_copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                               CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs,
                               size_t *fail_idx, CUstream s)
{
    if (!dsts || !srcs || !sizes || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (nattrs && (!attrs || !idxs || idxs[0] != 0 || nattrs > count))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_stream_dev(s, NULL);
    size_t i = 0;
    for (; i < count && rc == CUDA_SUCCESS; i++)
        rc = sim_batch_check(dsts, srcs, sizes, i);
    if (rc != CUDA_SUCCESS) {
        if (fail_idx)
            *fail_idx = i ? i - 1 : SIZE_MAX;
        return rc;
    }
    for (i = 0; i < count && rc == CUDA_SUCCESS; i++) {
        rc = sim_copy_1d(dsts[i], SIM_UNIFIED, srcs[i], SIM_UNIFIED, sizes[i]);
        if (rc == CUDA_SUCCESS)
            sim_flight_op(s, dsts[i], sizes[i], srcs[i], sizes[i]);
    }
    return rc;
}

SIM_API2(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz, SIM_READ,
         (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
          CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
         sim_copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream))

/* CUDA 12.8's names the copy that failed (SIZE_MAX: none in particular). */
SIM_API2(cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz, SIM_READ,
         (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
          CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
          CUstream hStream),
         !failIdx ? CUDA_ERROR_INVALID_VALUE
                  : sim_copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx,
                                   hStream))

/* ---- 3D batches: pointer operands only (CUDA arrays are not simulated) -- */

/* Bytes from an operand's base to one past the last byte a copy of e
 * touches (elements are bytes between pointers). */
static size_t sim_operand_span(const CUmemcpy3DOperand *o, const CUextent3D *e)
{
    size_t row = o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width;
    size_t layer = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
    return ((e->depth - 1) * layer + e->height - 1) * row + e->width;
}

static CUresult sim_3d_op_check(const CUDA_MEMCPY3D_BATCH_OP *op)
{
    const CUextent3D *e = &op->extent;
    const CUmemcpy3DOperand *side[2] = {&op->dst, &op->src};
    if (!e->width || !e->height || !e->depth)
        return CUDA_ERROR_INVALID_VALUE;
    for (int k = 0; k < 2; k++) {
        char *at;
        if (side[k]->type != CU_MEMCPY_OPERAND_TYPE_POINTER)
            return CUDA_ERROR_NOT_SUPPORTED;
        if ((side[k]->op.ptr.rowLength && side[k]->op.ptr.rowLength < e->width) ||
            (side[k]->op.ptr.layerHeight && side[k]->op.ptr.layerHeight < e->height))
            return CUDA_ERROR_INVALID_VALUE;
        CUresult rc = sim_resolve(side[k]->op.ptr.ptr, SIM_UNIFIED, sim_operand_span(side[k], e), &at);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

static void sim_3d_op_run(const CUDA_MEMCPY3D_BATCH_OP *op, CUstream s)
{
    const CUextent3D *e = &op->extent;
    const CUmemcpy3DOperand *d = &op->dst, *src = &op->src;
    size_t drow = d->op.ptr.rowLength ? d->op.ptr.rowLength : e->width;
    size_t dlayer = d->op.ptr.layerHeight ? d->op.ptr.layerHeight : e->height;
    size_t srow = src->op.ptr.rowLength ? src->op.ptr.rowLength : e->width;
    size_t slayer = src->op.ptr.layerHeight ? src->op.ptr.layerHeight : e->height;
    for (size_t z = 0; z < e->depth; z++)
        for (size_t y = 0; y < e->height; y++)
            sim_copy_1d(d->op.ptr.ptr + (z * dlayer + y) * drow, SIM_UNIFIED,
                        src->op.ptr.ptr + (z * slayer + y) * srow, SIM_UNIFIED, e->width);
    sim_flight_op(s, d->op.ptr.ptr, sim_operand_span(d, e), src->op.ptr.ptr, sim_operand_span(src, e));
}

/* Every operation is checked before any runs; fail_idx (CUDA 12.8's
 * entry point) names the first bad one. */
static CUresult sim_copy_3d_batch(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                                  unsigned long long flags, CUstream s)
{
    if (!ops || n == 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc != CUDA_SUCCESS && fail_idx)
        *fail_idx = SIZE_MAX;   /* no copy in particular */
    for (size_t i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        rc = sim_3d_op_check(&ops[i]);
        if (rc != CUDA_SUCCESS && fail_idx)
            *fail_idx = i;
    }
    for (size_t i = 0; i < n && rc == CUDA_SUCCESS; i++)
        sim_3d_op_run(&ops[i], s);
    return rc;
}

SIM_API2(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz, SIM_READ,
         (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream),
         sim_copy_3d_batch(numOps, opList, NULL, flags, hStream))

SIM_API2(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz, SIM_READ,
         (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
          CUstream hStream),
         !failIdx ? CUDA_ERROR_INVALID_VALUE : sim_copy_3d_batch(numOps, opList, failIdx, flags, hStream))
