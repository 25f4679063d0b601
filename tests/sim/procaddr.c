/* cuGetProcAddress, modelled on the real driver's rules: a base name and
 * the caller's CUDA version pick the ABI (_v2 or legacy), the per-thread
 * flag picks the _ptds/_ptsz twin. Lookups use a static table of the
 * sim's own exports, not dlsym, so they work under any loader. */
#include "sim.h"

#include <stdio.h>
#include <string.h>

struct sim_export {
    const char *name;
    void *fn;
};

/* Taking every address here also makes a missing export a link error. */
#define SIM_EXPORT_ENTRY(name) {#name, (void *)&name},
static const struct sim_export sim_exports[] = {SIM_EXPORTS(SIM_EXPORT_ENTRY)};
#undef SIM_EXPORT_ENTRY

struct sim_pt_twin {
    const char *name;
    struct sim_export twin;
};

#define SIM_PT_ENTRY(base, sfx) {#base, {#base #sfx, (void *)&base##sfx}},
static const struct sim_pt_twin sim_pt_twins[] = {GVM_PT_VARIANTS(SIM_PT_ENTRY)};
#undef SIM_PT_ENTRY

/* Base names whose current ABI is the _v2 symbol from version v2_from on.
 * Below it the legacy unsuffixed symbol answers, from legacy_from on. */
struct sim_versioned {
    const char *base;
    int v2_from, legacy_from;
};

/* ... and those with a later ABI still: cuCtxCreate's _v4 (CUDA 12.5;
 * its _v3 of 11.4 is not served: _v2 answers until 12.5). */
static const struct sim_later {
    const char *base, *suffix;
    int from;
} sim_later[] = {{"cuCtxCreate", "_v4", 12050}};

static const struct sim_versioned sim_versioned[] = {
    {"cuMemAlloc", 3020, 0},          {"cuMemFree", 3020, 0},
    {"cuMemAllocPitch", 3020, 0},     {"cuMemGetInfo", 3020, 0},
    {"cuMemGetAddressRange", 3020, 0}, {"cuDeviceTotalMem", 3020, 0},
    {"cuMemcpyHtoD", 3020, 0},        {"cuMemcpyDtoH", 3020, 0},
    {"cuMemcpyDtoD", 3020, 0},        {"cuMemcpyDtoA", 3020, 0},
    {"cuMemcpyAtoD", 3020, 0},        {"cuMemcpyHtoDAsync", 3020, 0},
    {"cuMemcpyDtoHAsync", 3020, 0},   {"cuMemcpyDtoDAsync", 3020, 0},
    {"cuMemcpy2D", 3020, 0},          {"cuMemcpy2DUnaligned", 3020, 0},
    {"cuMemcpy2DAsync", 3020, 0},     {"cuMemcpy3D", 3020, 0},
    {"cuMemcpy3DAsync", 3020, 0},     {"cuMemsetD8", 3020, 0},
    {"cuMemsetD16", 3020, 0},         {"cuMemsetD32", 3020, 0},
    {"cuMemsetD2D8", 3020, 0},        {"cuMemsetD2D16", 3020, 0},
    {"cuMemsetD2D32", 3020, 0},       {"cuCtxPushCurrent", 4000, 0},
    {"cuCtxPopCurrent", 4000, 0},     {"cuStreamDestroy", 4000, 0},
    {"cuEventDestroy", 4000, 0},      {"cuDevicePrimaryCtxRelease", 11000, 0},
    {"cuMemcpyBatchAsync", 13000, 12080}, {"cuGetProcAddress", 12000, 11030},
    {"cuStreamBeginCapture", 10010, 0},
    {"cuIpcOpenMemHandle", 11000, 0}, {"cuDevicePrimaryCtxReset", 11000, 0},
    {"cuCtxDestroy", 4000, 0},        {"cuCtxCreate", 3020, 0},
    {"cuStreamWriteValue32", 11070, 0}, {"cuStreamWaitValue32", 11070, 0},
    {"cuStreamWriteValue64", 11070, 0}, {"cuStreamWaitValue64", 11070, 0},
    {"cuStreamBatchMemOp", 11070, 0}, {"cuMemcpy3DBatchAsync", 13000, 12080},
};

#define SIM_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void *sim_export_find(const char *name)
{
    for (size_t i = 0; i < SIM_COUNT(sim_exports); i++)
        if (strcmp(sim_exports[i].name, name) == 0)
            return sim_exports[i].fn;
    return NULL;
}

static const struct sim_versioned *sim_versioned_find(const char *base)
{
    for (size_t i = 0; i < SIM_COUNT(sim_versioned); i++)
        if (strcmp(sim_versioned[i].base, base) == 0)
            return &sim_versioned[i];
    return NULL;
}

static const struct sim_export *sim_pt_twin(const char *name)
{
    for (size_t i = 0; i < SIM_COUNT(sim_pt_twins); i++)
        if (strcmp(sim_pt_twins[i].name, name) == 0)
            return &sim_pt_twins[i].twin;
    return NULL;
}

/* The function that answers (symbol, version, flags), or the reason
 * there is none. */
static CUdriverProcAddressQueryResult sim_resolve(const char *symbol, int version,
                                                  cuuint64_t flags, void **fn)
{
    char name[128];
    const struct sim_versioned *v = sim_versioned_find(symbol);
    *fn = NULL;
    if (v && version < v->legacy_from)
        return CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    const char *suffix = !v || version < v->v2_from ? "" : "_v2";
    for (size_t i = 0; v && i < SIM_COUNT(sim_later); i++)
        if (!strcmp(sim_later[i].base, symbol) && version >= sim_later[i].from)
            suffix = sim_later[i].suffix;
    if ((size_t)snprintf(name, sizeof name, "%s%s", symbol, suffix) >= sizeof name)
        return CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const struct sim_export *twin = sim_pt_twin(name);
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && version >= 7000 && twin)
        *fn = twin->fn;
    else
        *fn = sim_export_find(name);
    return *fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
}

static CUresult sim_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    void *fn;
    if (!symbol || !pfn || (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                                  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult st = sim_resolve(symbol, version, flags, &fn);
    *pfn = fn;
    if (status)
        *status = st;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    SIM_API(cuGetProcAddress_v2, SIM_NOLOCK | SIM_ANYTIME,
            sim_get_proc(symbol, pfn, cudaVersion, flags, symbolStatus));
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
    SIM_API(cuGetProcAddress, SIM_NOLOCK | SIM_ANYTIME,
            sim_get_proc(symbol, pfn, cudaVersion, flags, NULL));
}
