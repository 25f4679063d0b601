/* Stream memory operations: 32 and 64-bit writes and waits on device
 * memory, alone or batched, in every ABI the driver exports (and below,
 * the other handles on memory: texture objects, TMA tensor maps). Work here
 * runs when queued, so a wait can only be one already satisfied: one that
 * is not fails with CUDA_ERROR_NOT_SUPPORTED (the sim cannot block the
 * stream), and a test must not rely on it. Capture is not simulated. */
#include "sim.h"

#include <string.h>

#define SIM_WAIT_KIND_MASK 0x3u   /* GEQ, EQ, AND, NOR; the flush flag is above */

static int sim_wait_met(uint64_t have, uint64_t want, unsigned flags, int wide)
{
    if (!wide) {
        have = (uint32_t)have;
        want = (uint32_t)want;
    }
    switch (flags & SIM_WAIT_KIND_MASK) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return wide ? (int64_t)(have - want) >= 0 : (int32_t)(uint32_t)(have - want) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return have == want;
    case CU_STREAM_WAIT_VALUE_AND:
        return (have & want) != 0;
    default:
        return (wide ? ~(have | want) : (uint32_t)~(have | want)) != 0;
    }
}

/* One operation on [addr, addr+n): checked, then (run) done. */
static CUresult sim_value_op(CUstream s, int write, uintptr_t addr, uint64_t value, unsigned flags,
                             size_t n, int run)
{
    int dev = -1;
    CUresult rc = sim_stream_dev(s, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (addr % n || !sim_dev_span_ok_for(addr, n, dev))
        return CUDA_ERROR_INVALID_VALUE;
    char *at = sim_dev_view(addr, n);
    uint64_t have = 0;
    memcpy(&have, at, n);   /* little-endian, as the GPU's */
    if (!write && !sim_wait_met(have, value, flags, n == 8))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (run && write)
        memcpy(at, &value, n);
    if (run)
        sim_flight_op(s, addr, n, 0, 0);
    return CUDA_SUCCESS;
}

static CUresult sim_value(CUstream s, int write, uintptr_t addr, uint64_t value, unsigned flags, size_t n)
{
    if (sim_capture_break(s))
        return CUDA_ERROR_NOT_SUPPORTED;
    return sim_value_op(s, write, addr, value, flags, n, 1);
}

#define SIM_VALUE_APIS(op, type, write)                                        \
    SIM_API2(op, op##_ptsz, SIM_READ, (CUstream s, CUdeviceptr addr, type value, unsigned int flags), \
             sim_value(s, write, addr, value, flags, sizeof(type)))            \
    SIM_API2(op##_v2, op##_v2_ptsz, SIM_READ,                                   \
             (CUstream s, CUdeviceptr addr, type value, unsigned int flags),   \
             sim_value(s, write, addr, value, flags, sizeof(type)))

SIM_VALUE_APIS(cuStreamWriteValue32, cuuint32_t, 1)
SIM_VALUE_APIS(cuStreamWaitValue32, cuuint32_t, 0)
SIM_VALUE_APIS(cuStreamWriteValue64, cuuint64_t, 1)
SIM_VALUE_APIS(cuStreamWaitValue64, cuuint64_t, 0)

static CUresult sim_batch_op(CUstream s, const CUstreamBatchMemOpParams *op, int run)
{
    switch (op->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        return sim_value_op(s, 0, op->waitValue.address, op->waitValue.value64, op->waitValue.flags,
                            op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8, run);
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        return sim_value_op(s, 1, op->writeValue.address,
                            op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? op->writeValue.value
                                                                              : op->writeValue.value64,
                            op->writeValue.flags, op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8, run);
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
    case CU_STREAM_MEM_OP_BARRIER:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* Every operation is checked before any runs. */
static CUresult sim_batch_memop(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags)
{
    if (!ops || count == 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_capture_break(s))
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = CUDA_SUCCESS;
    for (unsigned i = 0; i < count && rc == CUDA_SUCCESS; i++)
        rc = sim_batch_op(s, &ops[i], 0);
    for (unsigned i = 0; i < count && rc == CUDA_SUCCESS; i++)
        rc = sim_batch_op(s, &ops[i], 1);
    return rc;
}

#define SIM_BATCH_API(fn)                                                      \
    CUresult CUDAAPI fn(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags) \
    {                                                                          \
        SIM_API(fn, SIM_READ, sim_batch_memop(s, count, ops, flags));          \
    }

SIM_BATCH_API(cuStreamBatchMemOp)
SIM_BATCH_API(cuStreamBatchMemOp_ptsz)
SIM_BATCH_API(cuStreamBatchMemOp_v2)
SIM_BATCH_API(cuStreamBatchMemOp_v2_ptsz)

/* ---- texture objects: made and destroyed; nothing reads through them --- */

static CUresult sim_tex_create(CUtexObject *tex, const CUDA_RESOURCE_DESC *res)
{
    if (!tex || !res)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = 0;
    size_t n = 0;
    if (res->resType == CU_RESOURCE_TYPE_LINEAR) {
        p = res->res.linear.devPtr;
        n = res->res.linear.sizeInBytes;
    } else if (res->resType == CU_RESOURCE_TYPE_PITCH2D) {
        p = res->res.pitch2D.devPtr;
        n = res->res.pitch2D.pitchInBytes * res->res.pitch2D.height;
    } else {
        return CUDA_ERROR_NOT_SUPPORTED;   /* CUDA arrays are not simulated */
    }
    /* Memory a kernel may touch: a texture made on unmapped addresses is
     * what a shim must never let a program do. */
    if (!n || !sim_dev_span_ok(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    *tex = (CUtexObject)sim_new_id();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTexObjectCreate(CUtexObject *tex, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *desc,
                                   const CUDA_RESOURCE_VIEW_DESC *view)
{
    (void)desc;
    (void)view;
    SIM_API(cuTexObjectCreate, SIM_WRITE, sim_tex_create(tex, res));
}

CUresult CUDAAPI cuTexObjectDestroy(CUtexObject tex)
{
    SIM_API(cuTexObjectDestroy, SIM_READ, tex ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* ---- TMA tensor maps: encoded on the host, nothing checked against any
 * allocation (as the real encode); the address is kept in the map ------- */

static CUresult sim_tensor_map(CUtensorMap *map, cuuint32_t rank, void *addr)
{
    if (!map || rank < 1 || rank > 5 || !addr || (uintptr_t)addr % 16)
        return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, sizeof *map);
    memcpy(map, &addr, sizeof addr);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *addr,
                                        const cuuint64_t *dim, const cuuint64_t *strides, const cuuint32_t *box,
                                        const cuuint32_t *estrides, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                        CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    (void)type, (void)dim, (void)strides, (void)box, (void)estrides, (void)il, (void)sw, (void)l2, (void)oob;
    SIM_API(cuTensorMapEncodeTiled, SIM_NOLOCK, sim_tensor_map(map, rank, addr));
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *addr,
                                         const cuuint64_t *dim, const cuuint64_t *strides, const int *lower,
                                         const int *upper, cuuint32_t channels, cuuint32_t pixels,
                                         const cuuint32_t *estrides, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                         CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    (void)type, (void)dim, (void)strides, (void)lower, (void)upper, (void)channels, (void)pixels, (void)estrides;
    (void)il, (void)sw, (void)l2, (void)oob;
    SIM_API(cuTensorMapEncodeIm2col, SIM_NOLOCK, sim_tensor_map(map, rank, addr));
}

CUresult CUDAAPI cuTensorMapEncodeIm2colWide(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                             void *addr, const cuuint64_t *dim, const cuuint64_t *strides, int lower,
                                             int upper, cuuint32_t channels, cuuint32_t pixels,
                                             const cuuint32_t *estrides, CUtensorMapInterleave il,
                                             CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle sw,
                                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    (void)type, (void)dim, (void)strides, (void)lower, (void)upper, (void)channels, (void)pixels, (void)estrides;
    (void)il, (void)mode, (void)sw, (void)l2, (void)oob;
    SIM_API(cuTensorMapEncodeIm2colWide, SIM_NOLOCK, sim_tensor_map(map, rank, addr));
}

CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap *map, void *addr)
{
    SIM_API(cuTensorMapReplaceAddress, SIM_NOLOCK,
            !map || !addr || (uintptr_t)addr % 16 ? CUDA_ERROR_INVALID_VALUE
                                                  : (memcpy(map, &addr, sizeof addr), CUDA_SUCCESS));
}

/* CUDA arrays are not simulated: no handle names one. */
CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray array)
{
    (void)desc, (void)array;
    SIM_API(cuArray3DGetDescriptor_v2, SIM_READ, CUDA_ERROR_INVALID_HANDLE);
}
