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
 * when p is not gvmshim's. *unmapped: it could not be mapped (the call
 * must not be made). */
static struct gvm_region *use_for_handle(uintptr_t p, size_t n, bool *bad, bool *unmapped)
{
    uint64_t tick = 0;
    struct gvm_region *r = gvm_shim_use_span(p, n, bad, &tick, NULL);
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

/* The memory a resource names and the bytes a texture reads there. */
static CUdeviceptr resource_span(const CUDA_RESOURCE_DESC *res, size_t *n)
{
    *n = 0;
    if (!res) return 0;
    if (res->resType == CU_RESOURCE_TYPE_LINEAR) {
        *n = res->res.linear.sizeInBytes;
        return res->res.linear.devPtr;
    }
    if (res->resType == CU_RESOURCE_TYPE_PITCH2D) {
        const __typeof__(res->res.pitch2D) *p = &res->res.pitch2D;
        size_t elem = gvm_shim_element_bytes(p->format, p->numChannels), row, span;
        if (!elem) elem = 1;   /* not known: a row no longer than the true one */
        if (!p->height || !p->width) return p->devPtr;
        if (__builtin_mul_overflow(p->width, elem, &row) ||
            __builtin_mul_overflow(p->height - 1, p->pitchInBytes, &span) || __builtin_add_overflow(span, row, n))
            *n = SIZE_MAX;
        return p->devPtr;
    }
    return 0;
}

GVM_EXPORT CUresult CUDAAPI cuTexObjectCreate(CUtexObject *tex, const CUDA_RESOURCE_DESC *res,
                                              const CUDA_TEXTURE_DESC *desc, const CUDA_RESOURCE_VIEW_DESC *view)
{
    gvm_hook_count(GVM_FN_cuTexObjectCreate);
    __typeof__(cuTexObjectCreate) *real = GVM_REAL_OPT(cuTexObjectCreate);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    size_t n;
    CUdeviceptr p = resource_span(res, &n);
    bool bad = false, unmapped = false;
    struct gvm_region *r = p ? use_for_handle(p, n ? n : 1, &bad, &unmapped) : NULL;
    if (bad) return CUDA_ERROR_INVALID_VALUE;   /* past its allocation: refused natively too */
    if (unmapped) return handle_made(CUDA_ERROR_OUT_OF_MEMORY, r);
    return handle_made(real(tex, res, desc, view), r);
}

/* ---- TMA tensor maps ----------------------------------------------------- */

/* An encode reads no memory and checks no allocation's bounds: only the
 * region at the global address is announced, and an address outside any
 * live allocation is the driver's to judge. */
#define ENCODE_HOOK(fn, sig, args)                                             \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        __typeof__(fn) *real_ = GVM_REAL_OPT(fn);                              \
        if (!real_) return CUDA_ERROR_NOT_SUPPORTED;                           \
        bool bad_ = false, unmapped_ = false;                                  \
        struct gvm_region *r_ = use_for_handle((uintptr_t)globalAddress, 1, &bad_, &unmapped_); \
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
