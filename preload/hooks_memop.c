/* Stream memory operations: cuStreamWriteValue32/64, cuStreamWaitValue32/64
 * and cuStreamBatchMemOp, in every ABI (the CUDA 11.7 _v2, the unsuffixed
 * one, each with its per-thread twin). Each writes or polls 4 or 8 bytes
 * of device memory from the stream, so it is served as a tiny copy is
 * (preload/hooks_copy.c): the region is announced (a move waits for the
 * call, a lazily spilled region is mapped first), its completion counts as
 * unknown, and an address inside gvmshim's space but outside any live
 * allocation fails with CUDA_ERROR_INVALID_VALUE without reaching the
 * driver (natively no such address is mapped; here it may be a
 * neighbour's memory). Flushes and barriers name no memory and pass. */
#include "preload/shim.h"

static struct gvm_region *use_value(CUdeviceptr addr, size_t n, bool *bad)
{
    uint64_t tick = 0;
    struct gvm_region *r = gvm_shim_use_span(addr, n, bad, &tick, NULL);
    if (!r && !*bad) gvm_stat_local_inc(passthrough_calls);
    return r;
}

#define VALUE_HOOK(fn, type)                                                   \
    GVM_EXPORT CUresult CUDAAPI fn(CUstream s, CUdeviceptr addr, type value, unsigned int flags) \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        __typeof__(fn) *real_ = GVM_REAL_OPT(fn);                              \
        if (!real_) return CUDA_ERROR_NOT_SUPPORTED;                           \
        bool bad_ = false;                                                     \
        struct gvm_region *r_ = use_value(addr, sizeof(type), &bad_);          \
        if (bad_) return CUDA_ERROR_INVALID_VALUE;                             \
        CUresult rc_ = real_(s, addr, value, flags);                           \
        gvm_shim_used_end(r_);                                                 \
        return rc_;                                                            \
    }

#define VALUE_HOOKS(op, type)                                                  \
    VALUE_HOOK(op, type) VALUE_HOOK(op##_ptsz, type)                           \
    VALUE_HOOK(op##_v2, type) VALUE_HOOK(op##_v2_ptsz, type)

VALUE_HOOKS(cuStreamWriteValue32, cuuint32_t)
VALUE_HOOKS(cuStreamWaitValue32, cuuint32_t)
VALUE_HOOKS(cuStreamWriteValue64, cuuint64_t)
VALUE_HOOKS(cuStreamWaitValue64, cuuint64_t)

/* The bytes one batched operation reaches: 0 for those that name none
 * (and for kinds a later driver may add, which are passed on as given). */
static size_t op_bytes(const CUstreamBatchMemOpParams *op, CUdeviceptr *addr)
{
    switch (op->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        *addr = op->waitValue.address;
        return op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        *addr = op->writeValue.address;
        return op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
    default:
        return 0;
    }
}

#define MEMOP_BATCH_MAX 256u

static CUresult batch_memop(enum gvm_driver_fn fn, __typeof__(cuStreamBatchMemOp_v2) *real, CUstream s,
                            unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags)
{
    gvm_hook_count(fn);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    struct gvm_shim_uses u;
    /* cuda.h: fewer than 256 operations; more is the driver's to refuse. */
    bool look = gvm_shim_active() && ops && count < MEMOP_BATCH_MAX;
    if (!gvm_shim_uses_open(&u, look ? count : 0)) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; look && i < count && !u.bad; i++) {
        CUdeviceptr addr = 0;
        size_t n = op_bytes(&ops[i], &addr);
        gvm_shim_uses_add(&u, n ? addr : 0, n, false);
    }
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!u.bad) {
        if (!gvm_shim_uses_ours(&u)) gvm_stat_local_inc(passthrough_calls);
        rc = real(s, count, ops, flags);
    }
    gvm_shim_uses_close(&u);
    return rc;
}

#define BATCH_HOOK(fn)                                                         \
    GVM_EXPORT CUresult CUDAAPI fn(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, \
                                   unsigned int flags)                         \
    {                                                                          \
        return batch_memop(GVM_FN_##fn, GVM_REAL_OPT(fn), s, count, ops, flags); \
    }

BATCH_HOOK(cuStreamBatchMemOp)
BATCH_HOOK(cuStreamBatchMemOp_ptsz)
BATCH_HOOK(cuStreamBatchMemOp_v2)
BATCH_HOOK(cuStreamBatchMemOp_v2_ptsz)
