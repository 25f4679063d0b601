/* What the tests of a program linked with libcuda share: the program links
 * the simulated driver and runs with LD_PRELOAD=libgvmshim.so, so its cu*
 * calls land on gvmshim's hooks (test_bounds.c, test_spill_copy.c). */
#ifndef GVM_TEST_LINKED_H
#define GVM_TEST_LINKED_H

#include "core/cuda_api.h"
#include "harness.h"

#define MiB ((size_t)1 << 20)

static CUcontext ctx;   /* device 0's primary context */

/* As cudart starts: device 0's primary context current. */
static void start(void)
{
    CUdevice dev;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

/* A native allocation of n bytes: cuMemAllocAsync from a pool the program
 * made current stays with the driver, so a test compares gvmshim's answer
 * with the driver's own. */
static inline CUdeviceptr driver_alloc(size_t n)
{
    CUdeviceptr p = 0;
    CUmemoryPool def;
    CHECK_EQ(cuDeviceGetDefaultMemPool(&def, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceSetMemPool(0, (CUmemoryPool)0x77), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocAsync(&p, n, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceSetMemPool(0, def), CUDA_SUCCESS);
    return p;
}

#endif
