// Shared by the gpu suite's CUDA programs: checks, the closing line, and
// the gvmshim API looked up in the running process (absent when run
// without the shim).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gvmshim.h"

static int g_passed, g_failed, g_skipped;

#define CK(x)                                                                             \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            printf("FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            printf("%d passed, %d failed\n", g_passed, g_failed + 1);                     \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define EXPECT(cond, ...)                                                                 \
    do {                                                                                  \
        if (cond) {                                                                       \
            g_passed++;                                                                   \
        } else {                                                                          \
            g_failed++;                                                                   \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            printf(__VA_ARGS__);                                                          \
            printf("\n");                                                                 \
        }                                                                                 \
    } while (0)

static inline int finish(void)
{
    printf("%d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
    return g_failed ? 1 : 0;
}

static inline double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// Exit 77 (meson: skipped) without a GPU.
static inline int gpu_count_or_skip(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no GPU: skipped\n");
        exit(77);
    }
    return n;
}

struct gvm_api {
    gvm_status (*migrate)(const void *, int);
    gvm_status (*alias)(const void *, void **);
    gvm_status (*unalias)(void *);
    gvm_status (*realloc)(const void *, size_t);
    gvm_status (*query)(const void *, gvm_info *);
    const char *(*strerror)(gvm_status);
};

static inline bool gvm_api_load(gvm_api *a)
{
    a->migrate = (gvm_status(*)(const void *, int))dlsym(RTLD_DEFAULT, "gvm_migrate");
    a->alias = (gvm_status(*)(const void *, void **))dlsym(RTLD_DEFAULT, "gvm_alias");
    a->unalias = (gvm_status(*)(void *))dlsym(RTLD_DEFAULT, "gvm_unalias");
    a->realloc = (gvm_status(*)(const void *, size_t))dlsym(RTLD_DEFAULT, "gvm_realloc");
    a->query = (gvm_status(*)(const void *, gvm_info *))dlsym(RTLD_DEFAULT, "gvm_query");
    a->strerror = (const char *(*)(gvm_status))dlsym(RTLD_DEFAULT, "gvm_strerror");
    return a->migrate && a->query;
}

__device__ __forceinline__ unsigned pattern(size_t i, unsigned seed) { return (unsigned)(i * 2654435761u) ^ seed; }

__global__ void k_fill(unsigned *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, seed);
}

__global__ void k_check(const unsigned *p, size_t n, unsigned seed, unsigned long long *bad)
{
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (p[i] != pattern(i, seed)) local++;
    if (local) atomicAdd(bad, local);
}

static inline unsigned host_pattern(size_t i, unsigned seed) { return (unsigned)(i * 2654435761u) ^ seed; }

// Mismatches of p against the pattern, counted by a kernel on the current device.
static inline unsigned long long mismatches(const void *p, size_t bytes, unsigned seed)
{
    unsigned long long *bad, h = 0;
    CK(cudaMalloc(&bad, sizeof *bad));
    CK(cudaMemset(bad, 0, sizeof *bad));
    k_check<<<1024, 256>>>((const unsigned *)p, bytes / 4, seed, bad);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
    CK(cudaFree(bad));
    return h;
}

static inline void fill(void *p, size_t bytes, unsigned seed)
{
    k_fill<<<1024, 256>>>((unsigned *)p, bytes / 4, seed);
    CK(cudaDeviceSynchronize());
}
