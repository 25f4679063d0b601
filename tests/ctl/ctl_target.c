/* A program run under the shim for gvmctl's tests: allocates tagged and
 * untagged memory with a known pattern, says "ready", then answers commands
 * on stdin, one per line, until EOF:
 *   where   the location of the tagged allocation (gvm_query)
 *   check   "ok" when both allocations hold their pattern, "zero" when the
 *           tagged one reads all zeroes (discarded), else "bad"
 *   launch  a kernel reaching both allocations, through the cuLaunchKernel
 *           that cuGetProcAddress gave at start (as cudart resolves it):
 *           "ok" or the error */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "gvmshim.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define SIZE (24 * MiB)
#define LOOK(lib, name) ((__typeof__(name) *)dlsym(lib, #name))
#define API(name) ((__typeof__(name) *)dlsym(RTLD_DEFAULT, #name))

static unsigned char pattern(size_t i, int seed) { return (unsigned char)(i * 131 + (size_t)seed); }

static const char *state(void *cuda, CUdeviceptr p, int seed, unsigned char *buf)
{
    if (LOOK(cuda, cuMemcpyDtoH_v2)(buf, p, SIZE)) return "bad";
    bool ok = true, zero = true;
    for (size_t i = 0; i < SIZE; i++) {
        ok &= buf[i] == pattern(i, seed);
        zero &= buf[i] == 0;
    }
    return ok ? "ok" : zero ? "zero" : "bad";
}

int main(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUcontext ctx;
    if (!cuda || !API(gvm_tag_push) || LOOK(cuda, cuInit)(0) || LOOK(cuda, cuDevicePrimaryCtxRetain)(&ctx, 0) ||
        LOOK(cuda, cuCtxSetCurrent)(ctx))
        return 2;
    unsigned char *buf = malloc(SIZE);
    CUdeviceptr tagged, plain;
    API(gvm_tag_push)("weights");
    CUresult rc = LOOK(cuda, cuMemAlloc_v2)(&tagged, SIZE);
    API(gvm_tag_pop)();
    if (rc || LOOK(cuda, cuMemAlloc_v2)(&plain, SIZE) || !buf) return 3;
    for (size_t i = 0; i < SIZE; i++) buf[i] = pattern(i, 1);
    LOOK(cuda, cuMemcpyHtoD_v2)(tagged, buf, SIZE);
    for (size_t i = 0; i < SIZE; i++) buf[i] = pattern(i, 2);
    LOOK(cuda, cuMemcpyHtoD_v2)(plain, buf, SIZE);
    /* Resolved before any option changes, as cudart does at its start. */
    __typeof__(cuLaunchKernel) *launch = NULL;
    CUfunction (*make)(void (*)(void **), unsigned, const size_t *) =
        (CUfunction(*)(void (*)(void **), unsigned, const size_t *))dlsym(cuda, "simcuda_function");
    size_t sizes[2] = {sizeof(CUdeviceptr), sizeof(CUdeviceptr)};
    CUfunction kernel = make ? make(NULL, 2, sizes) : NULL;
    if (!kernel || LOOK(cuda, cuGetProcAddress_v2)("cuLaunchKernel", (void **)&launch, 4000, 0, NULL) || !launch)
        return 4;
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "where", 5)) {
            gvm_info info;
            printf("%d\n", API(gvm_query)((void *)tagged, &info) ? -99 : info.location);
        } else if (!strncmp(line, "launch", 6)) {
            void *params[] = {&tagged, &plain};
            CUresult lrc = launch(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
            if (!lrc) lrc = LOOK(cuda, cuCtxSynchronize)();
            if (lrc) printf("error %d\n", (int)lrc);
            else printf("ok\n");
        } else if (!strncmp(line, "check", 5)) {
            const char *t = state(cuda, tagged, 1, buf), *p = state(cuda, plain, 2, buf);
            printf("%s\n", strcmp(p, "ok") ? "bad" : t);
        }
        fflush(stdout);
    }
    free(buf);
    return 0;
}
