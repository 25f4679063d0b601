/* The size of a CUDA array's element, for the span a 3D batch copy
 * beside an array reaches in gvmshim memory. */
#include "preload/shim.h"

/* Bytes of one element of `format` with `channels` channels; 0 when not
 * known here (compressed and planar formats). */
static size_t element_bytes(CUarray_format format, unsigned channels)
{
    size_t channel;
    switch (format) {
    /* Formats that name their channels. */
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1: return 1;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: return 2;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT_101010_2: return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4: return 8;
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: channel = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: channel = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: channel = 4; break;
    default: return 0;
    }
    return channels >= 1 && channels <= 4 ? channel * channels : 0;
}

size_t gvm_shim_array_element_bytes(CUarray array)
{
    __typeof__(cuArray3DGetDescriptor_v2) *get = GVM_REAL_OPT(cuArray3DGetDescriptor_v2);
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (!array || !get || get(&d, array) != CUDA_SUCCESS) return 0;
    return element_bytes(d.Format, d.NumChannels);
}
