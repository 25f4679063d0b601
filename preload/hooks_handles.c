/* Memory that kernels reach through a handle or descriptor rather than a
 * pointer argument the launch scan could find: texture objects
 * (cuTexObjectCreate, which cudaCreateTextureObject calls) and Hopper TMA
 * tensor maps (cuTensorMapEncodeTiled/Im2col/Im2colWide,
 * cuTensorMapReplaceAddress; CUTLASS and Triton make them on the host).
 * A lazily spilled region would be read unmapped, so the region is mapped
 * for the call (announced as a copy's is) and marked: later spills keep
 * it mapped on host (core/region.h, gvm_region_note_handle_read).
 * Surface objects take CUDA arrays only, never gvmshim memory. */
#include "preload/shim.h"

/* Announces the region at p for a call that makes a handle on it; NULL
 * when p is not in a live allocation of gvmshim's (the driver judges the
 * address and the span). *unmapped: it could not be mapped (the call must
 * not be made). */
static struct gvm_region *use_for_handle(uintptr_t p, bool *unmapped)
{
    bool outside = false;
    uint64_t tick = 0;
    struct gvm_region *r = p ? gvm_shim_use_span(p, 1, &outside, &tick, NULL) : NULL;
    *unmapped = r && gvm_policy_unmapped(r);
    return r;
}

/* The end of such a call: on success the region is marked, still
 * announced, so no move can have begun. */
static CUresult handle_made(CUresult rc, struct gvm_region *r)
{
    if (r && rc == CUDA_SUCCESS) gvm_region_note_handle_read(r);
    gvm_shim_used_end(r);
    return rc;
}

/* ---- texture objects ---------------------------------------------------- */

/* The memory a resource names, or 0 (a CUDA array). */
static CUdeviceptr resource_ptr(const CUDA_RESOURCE_DESC *res)
{
    if (!res) return 0;
    if (res->resType == CU_RESOURCE_TYPE_LINEAR) return res->res.linear.devPtr;
    if (res->resType == CU_RESOURCE_TYPE_PITCH2D) return res->res.pitch2D.devPtr;
    return 0;
}

/* The driver does not hold a texture to its allocation's size: one 4 KiB
 * past a 3,000,000-byte buffer, inside its rounding, is made natively (H100,
 * driver 580, 2026-11-28; gpu-memops). So the span is the driver's to
 * judge, as the tensor maps' below: only the region at the address is
 * announced. */
GVM_EXPORT CUresult CUDAAPI cuTexObjectCreate(CUtexObject *tex, const CUDA_RESOURCE_DESC *res,
                                              const CUDA_TEXTURE_DESC *desc, const CUDA_RESOURCE_VIEW_DESC *view)
{
    gvm_hook_count(GVM_FN_cuTexObjectCreate);
    __typeof__(cuTexObjectCreate) *real = GVM_REAL_OPT(cuTexObjectCreate);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    bool unmapped;
    struct gvm_region *r = use_for_handle(resource_ptr(res), &unmapped);
    if (unmapped) return handle_made(CUDA_ERROR_OUT_OF_MEMORY, r);
    return handle_made(real(tex, res, desc, view), r);
}

/* ---- TMA tensor maps ----------------------------------------------------- */

/* An encode reads no memory and checks no allocation's bounds: only the
 * region at the global address is announced, and an address outside any
 * live allocation is the driver's to judge, as for textures. */
#define ENCODE_HOOK(fn, sig, args)                                             \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        __typeof__(fn) *real_ = GVM_REAL_OPT(fn);                              \
        if (!real_) return CUDA_ERROR_NOT_SUPPORTED;                           \
        bool unmapped_;                                                        \
        struct gvm_region *r_ = use_for_handle((uintptr_t)globalAddress, &unmapped_); \
        if (unmapped_) return handle_made(CUDA_ERROR_OUT_OF_MEMORY, r_);       \
        return handle_made(real_ args, r_);                                    \
    }

ENCODE_HOOK(cuTensorMapEncodeTiled,
            (CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *globalAddress,
             const cuuint64_t *dim, const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *estrides,
             CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob),
            (map, type, rank, globalAddress, dim, strides, box, estrides, il, sw, l2, oob))

ENCODE_HOOK(cuTensorMapEncodeIm2col,
            (CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *globalAddress,
             const cuuint64_t *dim, const cuuint64_t *strides, const int *lower, const int *upper,
             cuuint32_t channels, cuuint32_t pixels, const cuuint32_t *estrides, CUtensorMapInterleave il,
             CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob),
            (map, type, rank, globalAddress, dim, strides, lower, upper, channels, pixels, estrides, il, sw, l2, oob))

ENCODE_HOOK(cuTensorMapEncodeIm2colWide,
            (CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *globalAddress,
             const cuuint64_t *dim, const cuuint64_t *strides, int lower, int upper, cuuint32_t channels,
             cuuint32_t pixels, const cuuint32_t *estrides, CUtensorMapInterleave il, CUtensorMapIm2ColWideMode mode,
             CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob),
            (map, type, rank, globalAddress, dim, strides, lower, upper, channels, pixels, estrides, il, mode, sw,
             l2, oob))

ENCODE_HOOK(cuTensorMapReplaceAddress, (CUtensorMap *map, void *globalAddress), (map, globalAddress))
