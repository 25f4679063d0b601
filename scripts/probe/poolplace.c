/* Where the driver's default stream-ordered pool places each allocation,
 * and what it then reserves: an LD_PRELOAD interposer on the runtime's
 * stream-ordered calls that logs, after each, the pointer, the size, the
 * stream and the pool's reserved and used bytes. The log of a native run
 * is what core/pooluse.c's model of the pool is checked against.
 *
 *   gcc -shared -fPIC -O2 -o poolplace.so scripts/probe/poolplace.c -ldl -I$CUDA/include
 *   POOLPLACE_OUT=log.txt LD_PRELOAD=./poolplace.so python3 prog.py
 *
 * Lines: "alloc PTR SIZE STREAM RESERVED USED", "free PTR STREAM ...",
 * "sync - - - ...", "trim - KEEP - ...". */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *real(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "poolplace: no %s\n", name);
        abort();
    }
    return f;
}

static void note(const char *op, const void *p, size_t size, const void *stream)
{
    typedef cudaError_t (*getpool_t)(cudaMemPool_t *, int);
    typedef cudaError_t (*getattr_t)(cudaMemPool_t, enum cudaMemPoolAttr, void *);
    typedef cudaError_t (*getdev_t)(int *);
    static getpool_t getpool;
    static getattr_t getattr;
    static getdev_t getdev;
    if (!getpool) {
        getpool = (getpool_t)real("cudaDeviceGetDefaultMemPool");
        getattr = (getattr_t)real("cudaMemPoolGetAttribute");
        getdev = (getdev_t)real("cudaGetDevice");
    }
    int dev = 0;
    cudaMemPool_t pool;
    unsigned long long reserved = 0, used = 0;
    if (getdev(&dev) == cudaSuccess && getpool(&pool, dev) == cudaSuccess) {
        getattr(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
        getattr(pool, cudaMemPoolAttrUsedMemCurrent, &used);
    }
    pthread_mutex_lock(&lock);
    if (!out) {
        const char *path = getenv("POOLPLACE_OUT");
        out = path ? fopen(path, "w") : stderr;
        if (!out)
            out = stderr;
    }
    fprintf(out, "%s %p %zu %p %llu %llu\n", op, p, size, stream, reserved, used);
    fflush(out);
    pthread_mutex_unlock(&lock);
}

cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s)
{
    typedef cudaError_t (*f_t)(void **, size_t, cudaStream_t);
    static f_t f;
    if (!f)
        f = (f_t)real("cudaMallocAsync");
    cudaError_t rc = f(p, size, s);
    note(rc == cudaSuccess ? "alloc" : "allocfail", rc == cudaSuccess ? *p : NULL, size, s);
    return rc;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    typedef cudaError_t (*f_t)(void *, cudaStream_t);
    static f_t f;
    if (!f)
        f = (f_t)real("cudaFreeAsync");
    cudaError_t rc = f(p, s);
    note("free", p, 0, s);
    return rc;
}

cudaError_t cudaDeviceSynchronize(void)
{
    typedef cudaError_t (*f_t)(void);
    static f_t f;
    if (!f)
        f = (f_t)real("cudaDeviceSynchronize");
    cudaError_t rc = f();
    note("sync", NULL, 0, NULL);
    return rc;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    typedef cudaError_t (*f_t)(cudaStream_t);
    static f_t f;
    if (!f)
        f = (f_t)real("cudaStreamSynchronize");
    cudaError_t rc = f(s);
    note("ssync", NULL, 0, s);
    return rc;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep)
{
    typedef cudaError_t (*f_t)(cudaMemPool_t, size_t);
    static f_t f;
    if (!f)
        f = (f_t)real("cudaMemPoolTrimTo");
    cudaError_t rc = f(pool, keep);
    note("trim", NULL, keep, NULL);
    return rc;
}
