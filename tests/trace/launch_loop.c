/* A read loop for the launch log (GVM_LAUNCH_LOG), run under the shim on
 * the simulated driver by check_launch_log.py: N allocations of 8 MiB (5 by default), a
 * fake kernel launched on each in turn, for STEPS steps (the loop
 * scripts/probe/optimal.py is checked against in tests/cpu/check_optimal.py),
 * and one launch on none. Links neither gvmshim nor the driver. */
#define _GNU_SOURCE
#include "core/cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)
#define LOOK(lib, name) ((__typeof__(name) *)dlsym(lib, #name))

typedef CUfunction simcuda_function_fn(void (*body)(void **), unsigned, const size_t *);

static void read_one(void **params) { (void)params; }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5, steps = argc > 2 ? atoi(argv[2]) : 8;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda || n < 1 || n > 64) return 2;
    simcuda_function_fn *make = (simcuda_function_fn *)dlsym(cuda, "simcuda_function");
    CUcontext ctx;
    if (!make || LOOK(cuda, cuInit)(0) || LOOK(cuda, cuDevicePrimaryCtxRetain)(&ctx, 0) ||
        LOOK(cuda, cuCtxSetCurrent)(ctx))
        return 3;
    size_t size = sizeof(CUdeviceptr);
    CUfunction k = make(read_one, 1, &size), none = make(read_one, 0, NULL);
    __typeof__(cuLaunchKernel) *launch = (__typeof__(cuLaunchKernel) *)dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    CUdeviceptr p[64];
    for (int i = 0; i < n; i++)
        if (LOOK(cuda, cuMemAlloc_v2)(&p[i], 8 * MiB)) return 4;
    for (int s = 0; s < steps; s++)
        for (int i = 0; i < n; i++) {
            void *params[] = {&p[i]};
            if (launch(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)) return 5;
        }
    if (launch(none, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)) return 6;
    if (LOOK(cuda, cuCtxSynchronize)()) return 7;
    puts("launched");
    return 0;
}
