/* A read loop for the launch log (GVM_LAUNCH_LOG), run under the shim on
 * the simulated driver by check_launch_log.py: N allocations of 8 MiB (5 by default), a
 * fake kernel launched on each in turn, for STEPS steps (the loop
 * scripts/probe/optimal.py is checked against in tests/cpu/check_optimal.py),
 * and one launch on none; with a third argument, that many threads run
 * the loop at once (the log's records from several threads). Links
 * neither gvmshim nor the driver. */
#define _GNU_SOURCE
#include "core/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)
#define LOOK(lib, name) ((__typeof__(name) *)dlsym(lib, #name))

typedef CUfunction simcuda_function_fn(void (*body)(void **), unsigned, const size_t *);

static void read_one(void **params) { (void)params; }

static struct loop {
    int n, steps;
    CUcontext ctx;
    CUfunction k;
    CUdeviceptr p[64];
    __typeof__(cuLaunchKernel) *launch;
    __typeof__(cuCtxSetCurrent) *set_current;
} loop;

static void *run_loop(void *arg)
{
    (void)arg;
    if (loop.set_current(loop.ctx)) return (void *)1;
    for (int s = 0; s < loop.steps; s++)
        for (int i = 0; i < loop.n; i++) {
            void *params[] = {&loop.p[i]};
            if (loop.launch(loop.k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)) return (void *)1;
        }
    return NULL;
}

int main(int argc, char **argv)
{
    loop.n = argc > 1 ? atoi(argv[1]) : 5;
    loop.steps = argc > 2 ? atoi(argv[2]) : 8;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda || loop.n < 1 || loop.n > 64 || threads < 1 || threads > 16) return 2;
    simcuda_function_fn *make = (simcuda_function_fn *)dlsym(cuda, "simcuda_function");
    loop.set_current = LOOK(cuda, cuCtxSetCurrent);
    if (!make || LOOK(cuda, cuInit)(0) || LOOK(cuda, cuDevicePrimaryCtxRetain)(&loop.ctx, 0) ||
        loop.set_current(loop.ctx))
        return 3;
    size_t size = sizeof(CUdeviceptr);
    loop.k = make(read_one, 1, &size);
    CUfunction none = make(read_one, 0, NULL);
    loop.launch = (__typeof__(cuLaunchKernel) *)dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    for (int i = 0; i < loop.n; i++)
        if (LOOK(cuda, cuMemAlloc_v2)(&loop.p[i], 8 * MiB)) return 4;
    pthread_t t[16];
    for (int i = 1; i < threads; i++)
        if (pthread_create(&t[i], NULL, run_loop, NULL)) return 5;
    void *failed = run_loop(NULL);
    for (int i = 1; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r) failed = r;
    }
    if (failed) return 5;
    if (loop.launch(none, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)) return 6;
    if (LOOK(cuda, cuCtxSynchronize)()) return 7;
    puts("launched");
    return 0;
}
