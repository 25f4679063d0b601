/* The end of a context: cudaDeviceReset (cudart calls
 * cuDevicePrimaryCtxReset_v2; the unsuffixed symbol is the CUDA 10 one),
 * and cuCtxDestroy of a context the program made. The driver destroys the context;
 * then the core frees what the program had allocated in it, which
 * natively went with it (core/reset.h), and the records of peer access and
 * stream-ordered allocations that answer the program's queries forget it. */
#include "preload/shim.h"

#include "core/reset.h"
#include "policy/idle.h"

static CUresult reset(CUresult(CUDAAPI *real)(CUdevice), CUdevice dev)
{
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    if (!gvm_shim_active() || dev < 0 || dev >= gvm_topo.ndev) return real(dev);
    CUcontext ctx = gvm_topo_primary(dev);
    gvm_idle_hold(true);   /* no give-back round half done under the reset */
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS) {
        if (ctx) gvm_shim_peer_forget(ctx);
        gvm_shim_ordered_forget(dev);
        gvm_reset_device(dev, ctx);
    }
    gvm_idle_hold(false);
    return rc;
}

/* A context the program made: its allocations go with it, as natively. */
static CUresult destroy(CUresult(CUDAAPI *real)(CUcontext), CUcontext ctx)
{
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    int dev = ctx && gvm_shim_active() ? gvm_shim_device_of(ctx) : -1;
    if (dev < 0 || dev >= gvm_topo.ndev) return real(ctx);
    gvm_idle_hold(true);   /* as for a reset: the clean-up finds no round half done */
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS) {
        gvm_shim_peer_forget(ctx);
        gvm_reset_context(dev, ctx);
    }
    gvm_idle_hold(false);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    gvm_hook_count(GVM_FN_cuCtxDestroy_v2);
    return destroy(GVM_REAL(cuCtxDestroy_v2), ctx);
}

GVM_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    gvm_hook_count(GVM_FN_cuCtxDestroy);
    return destroy(GVM_REAL(cuCtxDestroy), ctx);
}

GVM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    gvm_hook_count(GVM_FN_cuDevicePrimaryCtxReset_v2);
    return reset(GVM_REAL(cuDevicePrimaryCtxReset_v2), dev);
}

GVM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    gvm_hook_count(GVM_FN_cuDevicePrimaryCtxReset);
    return reset(GVM_REAL(cuDevicePrimaryCtxReset), dev);
}
