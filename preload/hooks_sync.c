/* The synchronize calls. At a stream, event or context synchronize the
 * driver's pools settle the frees queued before it and release what they
 * keep above their release threshold (CUDA programming guide, "physical
 * page caching"): CuPy's MemoryAsyncPool.free_all_blocks() and PyTorch's
 * empty_cache() synchronize before they trim, and a program reads the
 * pools' reserve after. The default pools' figures for the stream-ordered
 * memory gvmshim serves follow the same rule (preload/hooks_mem.c). One
 * load when no pool keeps anything to release. */
#include "preload/shim.h"

#include "core/pooluse.h"

/* The device of the current context, or -1. */
static int current_device(void)
{
    CUdevice d;
    return gvm_drv.cuCtxGetDevice && gvm_drv.cuCtxGetDevice(&d) == CUDA_SUCCESS ? (int)d : -1;
}

/* The device s runs on: the current context's for the default streams. */
static int stream_device(CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return current_device();
    CUcontext ctx = NULL;
    if (!gvm_drv.cuStreamGetCtx || gvm_drv.cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS) return -1;
    return gvm_shim_device_of(ctx);
}

/* Whether a synchronize that answered rc may change a pool's figures. */
static bool settles(CUresult rc) { return rc == CUDA_SUCCESS && gvm_pooluse_releasable(); }

GVM_EXPORT CUresult CUDAAPI cuCtxSynchronize(void)
{
    gvm_hook_count(GVM_FN_cuCtxSynchronize);
    CUresult rc = GVM_REAL(cuCtxSynchronize)();
    if (settles(rc)) gvm_shim_pools_synchronized(current_device());
    return rc;
}

/* CUDA 13's runtime waits for a device (cudaDeviceSynchronize) with
 * this one: NULL is the current context. */
GVM_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    gvm_hook_count(GVM_FN_cuCtxSynchronize_v2);
    CUresult rc = GVM_REAL(cuCtxSynchronize_v2)(ctx);
    if (settles(rc)) gvm_shim_pools_synchronized(ctx ? gvm_shim_device_of(ctx) : current_device());
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream s)
{
    gvm_hook_count(GVM_FN_cuStreamSynchronize);
    CUresult rc = GVM_REAL(cuStreamSynchronize)(s);
    if (settles(rc)) gvm_shim_pools_synchronized(stream_device(s));
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s)
{
    gvm_hook_count(GVM_FN_cuStreamSynchronize_ptsz);
    CUresult rc = GVM_REAL(cuStreamSynchronize_ptsz)(s);
    if (settles(rc)) gvm_shim_pools_synchronized(stream_device(s));
    return rc;
}

/* An event does not tell its device cheaply: every device's pool settles. */
GVM_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent e)
{
    gvm_hook_count(GVM_FN_cuEventSynchronize);
    CUresult rc = GVM_REAL(cuEventSynchronize)(e);
    if (settles(rc)) gvm_shim_pools_synchronized(-1);
    return rc;
}
