/* Native (non-VMM) device memory: cuMemAlloc and friends, backed by
 * private anonymous host mappings and charged against the device. */
#define _GNU_SOURCE
#include "sim.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t sim_page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) & ~(page - 1);
}

struct sim_native *sim_native_at(uintptr_t p)
{
    for (size_t i = 0; i < sim.natives.len; i++) {
        struct sim_native *n = sim.natives.item[i];
        if (p >= n->base && p - n->base < n->size)
            return n;
    }
    return NULL;
}

static void sim_native_destroy(struct sim_native *n)
{
    munmap((void *)n->base, n->maplen);
    sim_uncharge(n->dev, n->size);
    free(n);
}

void sim_native_reset(void)
{
    for (size_t i = 0; i < sim.natives.len; i++)
        sim_native_destroy(sim.natives.item[i]);
    sim.natives.len = 0;
}

void sim_native_drop_ctx(struct CUctx_st *c)
{
    for (size_t i = sim.natives.len; i-- > 0;) {
        struct sim_native *n = sim.natives.item[i];
        if (n->ctx != c)
            continue;
        sim_vec_remove(&sim.natives, n);
        sim_native_destroy(n);
    }
}

/* low32: the CUDA 3.1 ABI, whose device pointers are 32-bit. */
static CUresult sim_native_alloc(uintptr_t *out, size_t size, int dev, int low32)
{
    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_charge(dev, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_native *n = calloc(1, sizeof *n);
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_32BIT
    if (low32)
        flags |= MAP_32BIT;
#endif
    size_t len = sim_page_round(size);
    void *p = n ? mmap(NULL, len, PROT_READ | PROT_WRITE, flags, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED || (low32 && (uintptr_t)p + len > UINT32_MAX) ||
        sim_vec_push(&sim.natives, n)) {
        if (p != MAP_FAILED)
            munmap(p, len);
        free(n);
        sim_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *n = (struct sim_native){(uintptr_t)p, size, len, dev, sim_ctx_current(), sim_new_id(), 0, NULL};
    *out = (uintptr_t)p;
    return CUDA_SUCCESS;
}

/* A refused allocation writes 0 (an H100's driver, 580.159.04: cudaMalloc
 * of 1 << 50 bytes leaves the pointer null). */
static CUresult sim_mem_alloc(CUdeviceptr *dptr, size_t size)
{
    int dev;
    CUresult rc = sim_need_ctx(&dev);
    uintptr_t p = 0;
    if (rc == CUDA_SUCCESS)
        rc = sim_native_alloc(dptr ? &p : NULL, size, dev, 0);
    if (dptr)
        *dptr = p;
    return rc;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    SIM_API(cuMemAlloc_v2, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_alloc(dptr, bytesize));
}

static CUresult sim_mem_alloc_v1(unsigned int *dptr, unsigned int size)
{
    int dev;
    CUresult rc = sim_need_ctx(&dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    uintptr_t p = 0;
    rc = sim_native_alloc(dptr ? &p : NULL, size, dev, 1);
    if (rc == CUDA_SUCCESS)
        *dptr = (unsigned int)p;
    return rc;
}

CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    SIM_API(cuMemAlloc, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_alloc_v1(dptr, bytesize));
}

/* Pitch rounds rows to 512 bytes, the texture pitch alignment of real
 * GPUs, so tests see pitch != width. */
static CUresult sim_mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                    size_t height, unsigned elem)
{
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511;
    if (p < width || height > SIZE_MAX / p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_mem_alloc(dptr, p * height);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    SIM_API(cuMemAllocPitch_v2, SIM_WRITE,
            sim_capture_unsafe() ?: sim_mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

/* Freeing needs the allocation's base: interior pointers are refused. */
static CUresult sim_mem_free(CUdeviceptr p)
{
    if (p == 0)
        return CUDA_SUCCESS;
    struct sim_native *n = sim_native_at(p);
    if (!n || n->base != p)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->pool)
        sim_pool_note_free(n->pool, n->base, n->size);
    sim_vec_remove(&sim.natives, n);
    sim_native_destroy(n);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_API(cuMemFree_v2, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_free(dptr));
}

/* Stream-ordered allocation is immediate here; it charges the stream's
 * device, not the current context's. */
/* pool: the one named, NULL for the device's current one (the sim's
 * allocations ignore pools but for the default pools' access grants). */
static CUresult sim_mem_alloc_in(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
    int dev;
    CUresult rc = sim_stream_dev(s, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    uintptr_t p = 0;
    rc = sim_native_alloc(dptr ? &p : NULL, size, dev, 0);
    if (rc == CUDA_SUCCESS) {
        struct sim_native *n = sim_native_at(p);
        n->pool = pool ? pool : sim_pool_current_of(dev);
        n->pooled = n->pool == sim_pool_default_of(dev);
        sim_pool_note_alloc(n->pool, p, size);
        *dptr = p;
    }
    return rc;
}

static CUresult sim_mem_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return sim_mem_alloc_in(dptr, size, NULL, s);
}

/* Pools are handles only here (device.c): any non-null one serves. */
static CUresult sim_mem_alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
    return pool ? sim_mem_alloc_in(dptr, size, pool, s) : CUDA_ERROR_INVALID_VALUE;
}

SIM_API2(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, SIM_WRITE,
         (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
         sim_mem_alloc_from_pool(dptr, bytesize, pool, hStream))

SIM_API2(cuMemAllocAsync, cuMemAllocAsync_ptsz, SIM_WRITE,
         (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
         sim_mem_alloc_async(dptr, bytesize, hStream))

/* On a capturing stream a free becomes a node freeing a graph allocation,
 * which the sim has none of: the call fails and breaks the capture. */
static CUresult sim_mem_free_async(CUdeviceptr p, CUstream s)
{
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc == CUDA_SUCCESS && sim_capture_break(s))
        return CUDA_ERROR_INVALID_VALUE;
    return rc != CUDA_SUCCESS ? rc : sim_mem_free(p);
}

SIM_API2(cuMemFreeAsync, cuMemFreeAsync_ptsz, SIM_WRITE,
         (CUdeviceptr dptr, CUstream hStream), sim_mem_free_async(dptr, hStream))

static CUresult sim_mem_get_info(size_t *free_bytes, size_t *total)
{
    int dev;
    CUresult rc = sim_need_ctx(&dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    size_t cap = sim.dev[dev].capacity, used = sim.dev[dev].used;
    *total = cap;
    *free_bytes = used < cap ? cap - used : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    SIM_API(cuMemGetInfo_v2, SIM_READ, sim_mem_get_info(free, total));
}
