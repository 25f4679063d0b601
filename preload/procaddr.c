/* Handing out hooks. cudart (static or shared), PyTorch, CuPy and ctypes
 * users all resolve driver entry points by dlsym on libcuda or through
 * cuGetProcAddress. In both cases the real resolver answers first, and the
 * answer is replaced only when it is the exact real function one of our
 * hooks stands in for: so the ABI of the version and flags asked for is
 * kept (cuMemAlloc at 3020 is the _v2 function, cuMemcpy with the
 * per-thread flag is cuMemcpy_ptds), legacy symbols stay untouched, and
 * libraries whose names merely start with "cu" are never matched. */
#define _GNU_SOURCE
#include "preload/shim.h"

#include <dlfcn.h>
#include <string.h>

#define HOOK_ENTRY(name) [GVM_FN_##name] = (void *)&name,
void *const gvm_hook_table[GVM_FN_COUNT] = {
    HOOK_ENTRY(cuGetProcAddress) HOOK_ENTRY(cuGetProcAddress_v2) HOOK_ENTRY(cuMemCreate) HOOK_ENTRY(cuMemRelease)
        HOOK_ENTRY(cuMemRetainAllocationHandle)
        HOOK_ENTRY(cuStreamDestroy_v2) HOOK_ENTRY(cuCtxSynchronize) HOOK_ENTRY(cuStreamSynchronize)
            HOOK_ENTRY(cuEventSynchronize)
        GVM_DRIVER_HOOKED(HOOK_ENTRY, HOOK_ENTRY)};
#undef HOOK_ENTRY

#define LAUNCH_ENTRY(name) [GVM_FN_##name] = 1,
static const unsigned char is_launch[GVM_FN_COUNT] = {GVM_DRIVER_LAUNCH(LAUNCH_ENTRY, LAUNCH_ENTRY)};
#undef LAUNCH_ENTRY

static void *hook_at(int i)
{
    if (!gvm_hook_table[i]) return NULL;
    if (is_launch[i] && !gvm_shim_hooks_launches()) return NULL;
    return gvm_hook_table[i];
}

void *gvm_shim_hook_for(void *real)
{
    if (!real) return NULL;
    void *const *slots = (void *const *)&gvm_drv;
    for (int i = 0; i < GVM_FN_COUNT; i++)
        if (slots[i] == real) return hook_at(i);
    /* A driver may hand out a pointer other than its exported symbol:
     * identify it by the symbol it belongs to. */
    Dl_info info;
    if (!dladdr(real, &info) || !info.dli_sname || info.dli_saddr != real) return NULL;
    if (gvm_driver_handle() && info.dli_fbase) {
        for (int i = 0; i < GVM_FN_COUNT; i++)
            if (!strcmp(gvm_driver_names[i], info.dli_sname)) return hook_at(i);
    }
    return NULL;
}

/* Without a driver table gvmshim serves nothing: the driver's answer
 * stands unchanged. */
static void substitute(void **pfn)
{
    if (!pfn || !*pfn || gvm_cfg_disabled() || !gvm_shim_driver()) return;
    void *h = gvm_shim_hook_for(*pfn);
    if (h) *pfn = h;
}

/* Like every hook, the resolvers forward to the real function even when
 * the driver table could not be loaded (GVM_REAL falls back to the next
 * definition): a shim that cannot serve must be invisible. */
GVM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                                cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    gvm_hook_count(GVM_FN_cuGetProcAddress_v2);
    CUresult rc = GVM_REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS) substitute(pfn);
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    gvm_hook_count(GVM_FN_cuGetProcAddress);
    CUresult rc = GVM_REAL(cuGetProcAddress)(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS) substitute(pfn);
    return rc;
}
