/* A program that moves memory, run under the shim with GVM_TRACE by
 * check_trace.py: allocations of several sizes, migrations to host, to the
 * peer and back (`ROUNDS` times), some frees. Links neither gvmshim nor the
 * driver: cu* functions come through dlsym (the shim's hooks), gvm_migrate
 * from the preloaded library. */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "gvmshim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)
#define LOOK(lib, name) ((__typeof__(name) *)dlsym(lib, #name))

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    __typeof__(gvm_migrate) *migrate = (__typeof__(gvm_migrate) *)dlsym(RTLD_DEFAULT, "gvm_migrate");
    if (!cuda || !migrate) return 2;
    CUcontext ctx;
    if (LOOK(cuda, cuInit)(0) || LOOK(cuda, cuDevicePrimaryCtxRetain)(&ctx, 0) || LOOK(cuda, cuCtxSetCurrent)(ctx))
        return 3;
    CUdeviceptr p[3];
    size_t sizes[3] = {4096, 8 * MiB, 20 * MiB};
    for (int i = 0; i < 3; i++)
        if (LOOK(cuda, cuMemAlloc_v2)(&p[i], sizes[i])) return 4;
    int where[] = {GVM_HOST, 1, 0};
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 3; i++)
            for (int w = 0; w < 3; w++)
                if (migrate((void *)p[i], where[w]) != GVM_OK) return 5;
    if (migrate((void *)p[2], GVM_HOST) != GVM_OK) return 6;   /* ends spilled-like: host resident */
    if (LOOK(cuda, cuMemFree_v2)(p[0])) return 7;
    puts("moved");
    return 0;
}
