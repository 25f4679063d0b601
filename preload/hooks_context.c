/* Contexts the program makes (cuCtxCreate, every version). A move waits
 * for the work queued in the contexts it knows of (core/topo.h), and
 * cuCtxSynchronize waits for one context only: a context the program made
 * and queued work in, on memory allocated elsewhere, would otherwise go
 * unwaited for, and a move could unmap memory that work still reaches.
 * The core is started here if need be (cuCtxCreate needs cuInit done), so
 * that a context made before the first allocation is known too. */
#include "preload/shim.h"

static CUresult noted(CUresult rc, CUcontext *pctx, CUdevice dev)
{
    if (rc == CUDA_SUCCESS && pctx && *pctx && gvm_shim_serving() && dev >= 0 && dev < gvm_topo.ndev)
        gvm_topo_note_context((int)dev, *pctx);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    gvm_hook_count(GVM_FN_cuCtxCreate);
    __typeof__(cuCtxCreate) *real = GVM_REAL_OPT(cuCtxCreate);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    return noted(real(pctx, flags, dev), pctx, dev);
}

GVM_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    gvm_hook_count(GVM_FN_cuCtxCreate_v2);
    __typeof__(cuCtxCreate_v2) *real = GVM_REAL_OPT(cuCtxCreate_v2);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    return noted(real(pctx, flags, dev), pctx, dev);
}

GVM_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams,
                                           unsigned int flags, CUdevice dev)
{
    gvm_hook_count(GVM_FN_cuCtxCreate_v3);
    __typeof__(cuCtxCreate_v3) *real = GVM_REAL_OPT(cuCtxCreate_v3);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    return noted(real(pctx, params, nparams, flags, dev), pctx, dev);
}

GVM_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                           CUdevice dev)
{
    gvm_hook_count(GVM_FN_cuCtxCreate_v4);
    __typeof__(cuCtxCreate_v4) *real = GVM_REAL_OPT(cuCtxCreate_v4);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    return noted(real(pctx, params, flags, dev), pctx, dev);
}
