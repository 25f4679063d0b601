/* Run by the installed gvmrun: allocates through the driver (the simulated
 * one, found as libcuda.so.1) the way cudart does, and reports which
 * libgvmshim served the allocation, so the test can check it is the
 * installed one. Links neither gvmshim nor the driver. */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "gvmshim.h"

#include <dlfcn.h>
#include <stdio.h>

#define LOOK(lib, name) ((__typeof__(name) *)dlsym(lib, #name))

int main(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        fprintf(stderr, "probe: no libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    CUcontext ctx;
    CUdeviceptr p = 0;
    if (LOOK(cuda, cuInit)(0) || LOOK(cuda, cuDevicePrimaryCtxRetain)(&ctx, 0) ||
        LOOK(cuda, cuCtxSetCurrent)(ctx) || LOOK(cuda, cuMemAlloc_v2)(&p, 1 << 20)) {
        fprintf(stderr, "probe: the allocation failed\n");
        return 1;
    }
    __typeof__(gvm_query) *query = (__typeof__(gvm_query) *)dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info info;
    Dl_info where;
    if (!query || query((void *)p, &info) != GVM_OK || !dladdr((void *)query, &where)) {
        fprintf(stderr, "probe: the allocation was not served by gvmshim\n");
        return 1;
    }
    printf("served by %s\n", where.dli_fname);
    return LOOK(cuda, cuMemFree_v2)(p) != CUDA_SUCCESS;
}
