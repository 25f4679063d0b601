/* Every cuMemset* entry point: 8, 16 and 32-bit fills of device memory,
 * linear or pitched, synchronous or on a stream. */
#include "sim.h"

#include <string.h>

static void sim_fill_row(unsigned char *p, unsigned value, unsigned elem, size_t width)
{
    unsigned short v16 = (unsigned short)value;
    const void *pattern = elem == 2 ? (const void *)&v16 : (const void *)&value;
    if (elem == 1) {
        sim_bulk_set(p, (int)value, width);
        return;
    }
    /* One element, then the filled part copied onto what follows it,
     * doubling: a few calls instead of one per element. */
    size_t done = elem, total = width * elem;
    memcpy(p, pattern, elem);
    while (done < total) {
        size_t n = done < total - done ? done : total - done;
        sim_bulk_move(p + done, p, n);
        done += n;
    }
}

/* Fills `height` rows of `width` elements of `elem` bytes, `pitch` apart.
 * Like the real driver, the destination must be aligned to the element. */
CUresult sim_fill(uintptr_t dst, size_t pitch, unsigned value, unsigned elem,
                         size_t width, size_t height)
{
    size_t row, span;
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    if (dst % elem || __builtin_mul_overflow(width, elem, &row))
        return CUDA_ERROR_INVALID_VALUE;
    if (height > 1 && (pitch < row || pitch % elem))
        return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_mul_overflow(height - 1, pitch, &span) ||
        __builtin_add_overflow(span, row, &span) || !sim_dev_span_ok(dst, span))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char *at = (unsigned char *)sim_dev_view(dst, span);
    for (size_t j = 0; j < height; j++)
        sim_fill_row(at + j * pitch, value, elem, width);
    return CUDA_SUCCESS;
}

static CUresult sim_fill_sync(uintptr_t dst, size_t pitch, unsigned value, unsigned elem,
                              size_t width, size_t height)
{
    CUresult rc = sim_need_ctx(NULL);
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_unsafe();
    return rc != CUDA_SUCCESS ? rc : sim_fill(dst, pitch, value, elem, width, height);
}

static CUresult sim_fill_async(uintptr_t dst, size_t pitch, unsigned value, unsigned elem,
                               size_t width, size_t height, CUstream s)
{
    CUresult rc = sim_stream_dev(s, NULL);
    struct sim_node node = {.kind = SIM_NODE_FILL, .dst = dst, .pitch = pitch, .value = value,
                            .elem = elem, .width = width, .height = height};
    if (rc == CUDA_SUCCESS && sim_capture_add(s, &node, &rc))
        return rc;
    if (rc == CUDA_SUCCESS)
        rc = sim_fill(dst, pitch, value, elem, width, height);
    if (rc == CUDA_SUCCESS && width && height)
        sim_flight_op(s, dst, pitch * (height - 1) + width * elem, 0, 0);
    return rc;
}

/* ---- linear ----------------------------------------------------------- */

SIM_API2(cuMemsetD8_v2, cuMemsetD8_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, unsigned char uc, size_t N),
         sim_fill_sync(dstDevice, N, uc, 1, N, 1))

SIM_API2(cuMemsetD16_v2, cuMemsetD16_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, unsigned short us, size_t N),
         sim_fill_sync(dstDevice, 2 * N, us, 2, N, 1))

SIM_API2(cuMemsetD32_v2, cuMemsetD32_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, unsigned int ui, size_t N),
         sim_fill_sync(dstDevice, 4 * N, ui, 4, N, 1))

SIM_API2(cuMemsetD8Async, cuMemsetD8Async_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
         sim_fill_async(dstDevice, N, uc, 1, N, 1, hStream))

SIM_API2(cuMemsetD16Async, cuMemsetD16Async_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
         sim_fill_async(dstDevice, 2 * N, us, 2, N, 1, hStream))

SIM_API2(cuMemsetD32Async, cuMemsetD32Async_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
         sim_fill_async(dstDevice, 4 * N, ui, 4, N, 1, hStream))

/* ---- pitched ---------------------------------------------------------- */

SIM_API2(cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
         sim_fill_sync(dstDevice, dstPitch, uc, 1, Width, Height))

SIM_API2(cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
         sim_fill_sync(dstDevice, dstPitch, us, 2, Width, Height))

SIM_API2(cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, SIM_READ,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
         sim_fill_sync(dstDevice, dstPitch, ui, 4, Width, Height))

SIM_API2(cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
          CUstream hStream),
         sim_fill_async(dstDevice, dstPitch, uc, 1, Width, Height, hStream))

SIM_API2(cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height,
          CUstream hStream),
         sim_fill_async(dstDevice, dstPitch, us, 2, Width, Height, hStream))

SIM_API2(cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, SIM_READ,
         (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height,
          CUstream hStream),
         sim_fill_async(dstDevice, dstPitch, ui, 4, Width, Height, hStream))
