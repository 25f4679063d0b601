/* Pointer queries answer with the program's allocation (its base, the
 * size it asked for, device memory of the device it was allocated on),
 * wherever its memory lives now and however it is cut into pieces. */
#include "preload/shim.h"

GVM_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    gvm_hook_count(GVM_FN_cuMemGetAddressRange_v2);
    struct gvm_ref ref;
    if (gvm_shim_active() && gvm_heap_find((uintptr_t)dptr, &ref)) {
        if (pbase) *pbase = (CUdeviceptr)ref.base;
        if (psize) *psize = ref.size;
        return CUDA_SUCCESS;
    }
    gvm_stat_inc(passthrough_calls);
    return GVM_REAL(cuMemGetAddressRange_v2)(pbase, psize, dptr);
}

/* Writes our answer for attr, or returns false to let the driver answer
 * (attributes the driver gets right for VMM memory too). */
static bool answer(const struct gvm_ref *ref, CUpointer_attribute attr, void *data, CUresult *rc)
{
    *rc = CUDA_SUCCESS;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = ref->region->ctx; return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_DEVICE; return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = ref->region->device; return true;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)ref->base; return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = ref->size; return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = gvm_heap_buffer_id(ref); return true;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *rc = CUDA_ERROR_INVALID_VALUE; return true;
    default: return false;
    }
}

GVM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    gvm_hook_count(GVM_FN_cuPointerGetAttribute);
    struct gvm_ref ref;
    CUresult rc;
    if (data && gvm_shim_active() && gvm_heap_find((uintptr_t)ptr, &ref)) {
        if (answer(&ref, attr, data, &rc)) return rc;
    } else {
        gvm_stat_inc(passthrough_calls);
    }
    return GVM_REAL(cuPointerGetAttribute)(data, attr, ptr);
}

GVM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                                   CUdeviceptr ptr)
{
    gvm_hook_count(GVM_FN_cuPointerGetAttributes);
    CUresult rc = GVM_REAL(cuPointerGetAttributes)(n, attrs, data, ptr);
    struct gvm_ref ref;
    if (!attrs || !data || !gvm_shim_active() || !gvm_heap_find((uintptr_t)ptr, &ref)) {
        gvm_stat_inc(passthrough_calls);
        return rc;
    }
    /* The driver answered what it knows of the mapping; ours wins where the
     * program's view differs. In the batch form a device pointer reports a
     * NULL host pointer rather than failing. */
    for (unsigned i = 0; i < n; i++) {
        if (!data[i]) continue;
        CUresult one;
        if (attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)
            *(void **)data[i] = NULL;
        else
            answer(&ref, attrs[i], data[i], &one);
    }
    return rc == CUDA_ERROR_INVALID_VALUE ? CUDA_SUCCESS : rc;
}
