/* Legacy CUDA IPC entry points (preload/ipc.h): gvmshim memory and gvmshim
 * handles are served here; other pointers and handles go to the driver
 * untouched. Event IPC is not hooked. */
#include "preload/ipc.h"
#include "preload/shim.h"

/* A default pool's memory is not legacy IPC's (the driver answers
 * CUDA_ERROR_INVALID_VALUE for it: two H100s, driver 580), so neither is
 * the stream-ordered memory gvmshim serves for one. */
static bool pool_memory(CUdeviceptr p)
{
    struct gvm_ref ref;
    return gvm_heap_find((uintptr_t)p, &ref) && gvm_shim_ordered_pool(ref.base);
}

GVM_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr p)
{
    gvm_hook_count(GVM_FN_cuIpcGetMemHandle);
    if (handle && p && gvm_shim_active()) {
        if (pool_memory(p)) return CUDA_ERROR_INVALID_VALUE;
        CUresult rc = gvm_ipc_export(handle, p);
        if (rc != CUDA_ERROR_NOT_FOUND) return rc;
    }
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuIpcGetMemHandle)(handle, p);
}

static CUresult open_handle(__typeof__(cuIpcOpenMemHandle_v2) *real, enum gvm_driver_fn fn, CUdeviceptr *p,
                            CUipcMemHandle h, unsigned flags)
{
    gvm_hook_count(fn);
    if (!gvm_cfg_disabled()) {
        CUresult rc = gvm_ipc_open(p, &h, flags);
        if (rc != CUDA_ERROR_NOT_FOUND) return rc;
    }
    gvm_stat_local_inc(passthrough_calls);
    return real(p, h, flags);
}

GVM_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
    return open_handle(GVM_REAL(cuIpcOpenMemHandle_v2), GVM_FN_cuIpcOpenMemHandle_v2, p, h, flags);
}

GVM_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
    return open_handle(GVM_REAL(cuIpcOpenMemHandle), GVM_FN_cuIpcOpenMemHandle, p, h, flags);
}

GVM_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr p)
{
    gvm_hook_count(GVM_FN_cuIpcCloseMemHandle);
    if (p && !gvm_cfg_disabled()) {
        CUresult rc = gvm_ipc_close(p);
        if (rc != CUDA_ERROR_NOT_FOUND) return rc;
    }
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuIpcCloseMemHandle)(p);
}
