/* Texture objects on gvmshim memory (cuTexObjectCreate, which
 * cudaCreateTextureObject calls): a kernel reads the memory through the
 * object's handle, not through a pointer argument the launch scan could
 * find. A lazily spilled region would be read unmapped, so the region is
 * mapped for the call (announced as a copy's is) and marked: later spills
 * keep it mapped on host (core/region.h, gvm_region_note_texture).
 * Surface objects take CUDA arrays only, never gvmshim memory. */
#include "preload/shim.h"

/* The device memory a resource names, or 0. */
static CUdeviceptr resource_ptr(const CUDA_RESOURCE_DESC *res)
{
    if (!res) return 0;
    if (res->resType == CU_RESOURCE_TYPE_LINEAR) return res->res.linear.devPtr;
    if (res->resType == CU_RESOURCE_TYPE_PITCH2D) return res->res.pitch2D.devPtr;
    return 0;
}

GVM_EXPORT CUresult CUDAAPI cuTexObjectCreate(CUtexObject *tex, const CUDA_RESOURCE_DESC *res,
                                              const CUDA_TEXTURE_DESC *desc, const CUDA_RESOURCE_VIEW_DESC *view)
{
    gvm_hook_count(GVM_FN_cuTexObjectCreate);
    if (!GVM_REAL(cuTexObjectCreate)) return CUDA_ERROR_NOT_SUPPORTED;
    CUdeviceptr p = resource_ptr(res);
    bool bad = false;
    uint64_t tick = 0;
    /* The span is the driver's to check: one byte is announced. */
    struct gvm_region *r = p ? gvm_shim_use_span(p, 1, &bad, &tick, NULL) : NULL;
    if (r) gvm_region_note_texture(r);
    CUresult rc = GVM_REAL(cuTexObjectCreate)(tex, res, desc, view);
    gvm_shim_used_end(r);
    return rc;
}
