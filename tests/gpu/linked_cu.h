/* For the gpu programs linked with libcuda (-lcuda): a driver call that
 * must succeed, failing the case with the error's name, and the start. */
#ifndef GVM_GPU_LINKED_CU_H
#define GVM_GPU_LINKED_CU_H

#include "gpu_test.h"

#define CU(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char *n_ = nullptr;                                          \
            cuGetErrorName(r_, &n_);                                           \
            gt::fail_at(__FILE__, __LINE__, "%s -> %d (%s)", #call, (int)r_, n_ ? n_ : "?"); \
        }                                                                      \
    } while (0)

/* Device 0's primary context made current with the driver API alone;
 * *ndev: the devices. 0, or 77 (skipped) after printing why, as every gpu
 * program ends then. */
static inline int linked_start(CUdevice *dev, CUcontext *ctx, int *ndev)
{
    CUresult rc = cuInit(0);
    *ndev = 0;
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetCount(ndev);
    if (rc != CUDA_SUCCESS || *ndev <= 0) {
        printf("SKIP: no CUDA device (cuInit/cuDeviceGetCount -> %d, %d devices)\n0 passed, 0 failed\n", (int)rc,
               *ndev);
        return 77;
    }
    if (cuDeviceGet(dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(ctx, *dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(*ctx) != CUDA_SUCCESS) {
        printf("SKIP: cannot make device 0's primary context current\n0 passed, 0 failed\n");
        return 77;
    }
    return 0;
}

#endif
