/* The size of a CUDA array's or texture's element, for the spans the
 * hooks check (a 3D batch copy beside an array, a pitched texture). */
#include "preload/shim.h"

size_t gvm_shim_element_bytes(CUarray_format format, unsigned channels)
{
    size_t channel;
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: channel = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: channel = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: channel = 4; break;
    default: return 0;   /* normalized, compressed and planar formats */
    }
    return channels >= 1 && channels <= 4 ? channel * channels : 0;
}

size_t gvm_shim_array_element_bytes(CUarray array)
{
    __typeof__(cuArray3DGetDescriptor_v2) *get = GVM_REAL_OPT(cuArray3DGetDescriptor_v2);
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (!array || !get || get(&d, array) != CUDA_SUCCESS) return 0;
    return gvm_shim_element_bytes(d.Format, d.NumChannels);
}
