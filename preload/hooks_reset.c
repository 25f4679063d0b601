/* cudaDeviceReset: cudart calls cuDevicePrimaryCtxReset_v2 (the
 * unsuffixed symbol is the CUDA 10 one). The driver destroys the context;
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
