/* Self-test of the simulated driver: the CPU suite trusts the sim, so the
 * sim's own model of the driver is checked here, through its public ABI. */
#define _GNU_SOURCE
#include "simcuda.h"

#include "../check.h"

#include "../../core/driver_list.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cuda.h maps the name to the _v2 ABI; this is the legacy 32-bit symbol. */
#undef cuMemAlloc
CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);

#define MiB ((size_t)1 << 20)

#define CHECK_RC(call, want)                                                   \
    do {                                                                       \
        CUresult rc_ = (call);                                                 \
        if (rc_ != (want))                                                     \
            fprintf(stderr, "%s:%d: %s returned %d, want %d\n", __FILE__,      \
                    __LINE__, #call, (int)rc_, (int)(want));                   \
        check_result(rc_ == (want));                                           \
    } while (0)

#define CU_OK(call) CHECK_RC(call, CUDA_SUCCESS)

/* ---- fixtures --------------------------------------------------------- */

/* A clean, initialized sim with the default configuration and device 0's
 * primary context current on this thread. */
static void fresh(void)
{
    CUcontext ctx;
    simcuda_reset();
    simcuda_set_devices(2);
    simcuda_set_capacity(0, 256 * MiB);
    simcuda_set_capacity(1, 256 * MiB);
    simcuda_set_capacity(SIMCUDA_LOC_HOST, 1024 * MiB);
    simcuda_set_vmm(1);
    simcuda_set_peer(1);
    CU_OK(cuInit(0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuCtxSetCurrent(ctx));
}

static void check_no_leaks(void)
{
    CHECK(simcuda_live_handles() == 0);
    CHECK(simcuda_live_reservations() == 0);
    CHECK(simcuda_live_mappings() == 0);
    CHECK(simcuda_live_native() == 0);
    CHECK(simcuda_phys_bytes(0) == 0);
    CHECK(simcuda_phys_bytes(1) == 0);
    CHECK(simcuda_phys_bytes(SIMCUDA_LOC_HOST) == 0);
}

static CUmemAllocationProp prop_at(CUmemLocationType type, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    return p;
}

static CUmemGenericAllocationHandle create_on(int dev, size_t size)
{
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, dev);
    CU_OK(cuMemCreate(&h, size, &p, 0));
    CHECK(h != 0);
    return h;
}

static void grant(CUdeviceptr p, size_t size, CUmemLocationType type, int id,
                  CUmemAccess_flags flags, CUresult want)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = type;
    d.location.id = id;
    d.flags = flags;
    CHECK_RC(cuMemSetAccess(p, size, &d, 1), want);
}

/* reserve + create + map + grant device `dev`: the usual VMM allocation. */
static CUdeviceptr vmm_alloc(int dev, size_t size, CUmemGenericAllocationHandle *h)
{
    CUdeviceptr p;
    CU_OK(cuMemAddressReserve(&p, size, 0, 0, 0));
    *h = create_on(dev, size);
    CU_OK(cuMemMap(p, size, 0, *h, 0));
    grant(p, size, CU_MEM_LOCATION_TYPE_DEVICE, dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_SUCCESS);
    return p;
}

static void vmm_free(CUdeviceptr p, size_t size, CUmemGenericAllocationHandle h)
{
    CU_OK(cuMemUnmap(p, size));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAddressFree(p, size));
}

/* ---- init and devices ------------------------------------------------- */

static void test_init(void)
{
    int n, v;
    const char *s;
    simcuda_reset();
    CHECK_RC(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemAddressReserve(NULL, 0, 0, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_OK(cuDriverGetVersion(&v));
    CHECK(v == 13000);
    CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    CU_OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK(s && *s);
    CHECK_RC(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);

    simcuda_set_devices(0);
    CHECK_RC(cuInit(0), CUDA_ERROR_NO_DEVICE);
    simcuda_set_devices(2);
    CHECK_RC(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&n));
    CHECK(n == 2);
}

static int attr(CUdevice_attribute a, int dev)
{
    int v = -1;
    CU_OK(cuDeviceGetAttribute(&v, a, dev));
    return v;
}

static void test_devices(void)
{
    CUdevice d;
    char name[64];
    size_t total;
    int can;
    fresh();
    CU_OK(cuDeviceGet(&d, 1));
    CHECK(d == 1);
    CHECK_RC(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    CU_OK(cuDeviceGetName(name, sizeof name, 1));
    CHECK(strcmp(name, "gvmshim simulated GPU 1") == 0);
    CU_OK(cuDeviceTotalMem_v2(&total, 0));
    CHECK(total == 256 * MiB);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0) == 0);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0) == 4);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == 9);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0) == 0);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0) == 0);
    simcuda_set_vmm(0);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == 0);
    simcuda_set_vmm(1);

    CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 1);
    CU_OK(cuDeviceCanAccessPeer(&can, 0, 0));
    CHECK(can == 0);
    simcuda_set_peer(0);
    CU_OK(cuDeviceCanAccessPeer(&can, 1, 0));
    CHECK(can == 0);
    simcuda_set_peer(1);
    CHECK_RC(cuDeviceCanAccessPeer(&can, 0, 7), CUDA_ERROR_INVALID_DEVICE);

    CU_OK(cuDeviceGetP2PAttribute(&can, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 0, 1));
    CHECK(can == 1);
    simcuda_set_peer_pcie(1);
    CU_OK(cuDeviceGetP2PAttribute(&can, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 0, 1));
    CHECK(can == 0);
    CU_OK(cuDeviceGetP2PAttribute(&can, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
    CHECK(can == 1);
    simcuda_set_peer_pcie(0);
    CHECK_RC(cuDeviceGetP2PAttribute(&can, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0), CUDA_ERROR_INVALID_DEVICE);
}

static void test_contexts(void)
{
    CUcontext c0, c1, cur;
    CUdevice d;
    CUdeviceptr p;
    unsigned flags;
    int active;
    simcuda_reset();
    CU_OK(cuInit(0));
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    CHECK_RC(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemAlloc_v2(&p, 256), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxPopCurrent_v2(&cur), CUDA_ERROR_INVALID_CONTEXT);

    CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    CHECK(active == 0);
    CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(c0 && c1 && c0 != c1);
    CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    CHECK(active == 1);
    CU_OK(cuCtxSetCurrent(c0));
    CU_OK(cuCtxPushCurrent_v2(c1));
    CU_OK(cuCtxGetDevice(&d));
    CHECK(d == 1);
    CU_OK(cuCtxPopCurrent_v2(&cur));
    CHECK(cur == c1);
    CU_OK(cuCtxGetDevice(&d));
    CHECK(d == 0);
    CU_OK(cuCtxSynchronize());
    CU_OK(cuCtxSetCurrent(NULL)); /* pops */
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    CHECK_RC(cuCtxPushCurrent_v2((CUcontext)&p), CUDA_ERROR_INVALID_CONTEXT);

    CU_OK(cuDevicePrimaryCtxRelease_v2(1));
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuDevicePrimaryCtxRelease_v2(0));
}

/* A primary context's reset, as measured on an H100 (driver 580). */
static void test_primary_reset(void)
{
    CUcontext c0, c1, again;
    CUdeviceptr n, n1, r;
    CUmemGenericAllocationHandle h;
    CUstream s;
    CUevent e;
    unsigned flags;
    int active;
    static char host[4096];
    fresh();
    CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));   /* a second holder: the count is kept */
    CU_OK(cuMemAlloc_v2(&n, 1000));
    CU_OK(cuStreamCreate(&s, 0));
    CU_OK(cuEventCreate(&e, 0));
    CU_OK(cuMemHostRegister_v2(host, sizeof host, CU_MEMHOSTREGISTER_PORTABLE));
    r = vmm_alloc(0, 2 * MiB, &h);
    CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CU_OK(cuCtxPushCurrent_v2(c1));
    CU_OK(cuMemAlloc_v2(&n1, 1000));
    CU_OK(cuCtxEnablePeerAccess(c0, 0));
    CU_OK(cuCtxPopCurrent_v2(&again));
    CHECK_RC(cuDevicePrimaryCtxReset_v2(7), CUDA_ERROR_INVALID_DEVICE);
    CU_OK(cuDevicePrimaryCtxReset_v2(0));
    CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0);
    CHECK_RC(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);   /* still current */
    CHECK(simcuda_live_native() == 1);                                /* device 1's stays */
    CHECK(simcuda_registered_bytes() == 0);
    CHECK(simcuda_phys_bytes(0) == 2 * MiB);                          /* VMM memory stays */
    CHECK_RC(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuCtxPushCurrent_v2(c1));
    CHECK_RC(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    CU_OK(cuMemFree_v2(n1));
    CU_OK(cuCtxPopCurrent_v2(&again));
    CU_OK(cuDevicePrimaryCtxRetain(&again, 0));   /* made again, the same handle */
    CHECK(again == c0);
    CU_OK(cuCtxSynchronize());
    CHECK_RC(cuMemFree_v2(n), CUDA_ERROR_INVALID_VALUE);
    vmm_free(r, 2 * MiB, h);
    check_no_leaks();
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

/* A context the program makes: current at once, its cuMemAlloc memory
 * and streams go with it, VMM memory stays; a primary one is not its to
 * destroy. */
static void test_user_context(void)
{
    CUcontext prim, user, cur;
    CUdeviceptr n, keep, r;
    CUmemGenericAllocationHandle h;
    CUstream s;
    CUdevice d;
    fresh();
    CU_OK(cuCtxGetCurrent(&prim));
    CU_OK(cuMemAlloc_v2(&keep, 1000));
    CU_OK(cuCtxCreate_v2(&user, 0, 1));
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK(cur == user && user != prim);
    CU_OK(cuCtxGetDevice(&d));
    CHECK(d == 1);
    CU_OK(cuMemAlloc_v2(&n, 1000));
    CU_OK(cuStreamCreate(&s, 0));
    r = vmm_alloc(1, 2 * MiB, &h);
    CHECK(simcuda_live_native() == 2);
    CHECK_RC(cuCtxDestroy_v2(prim), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuCtxDestroy_v2(user));
    CHECK_RC(cuCtxDestroy_v2(user), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK(cur == prim);                       /* popped from the stack */
    CHECK(simcuda_live_native() == 1);
    CHECK(simcuda_phys_bytes(1) == 2 * MiB);  /* VMM memory stays */
    CHECK_RC(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuMemFree_v2(n), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(keep));
    vmm_free(r, 2 * MiB, h);
    check_no_leaks();
}

/* ---- native memory ---------------------------------------------------- */

static void test_native(void)
{
    CUdeviceptr p, q;
    size_t free0, free1, total, pitch;
    unsigned char buf[1000], back[1000];
    fresh();
    CU_OK(cuMemGetInfo_v2(&free0, &total));
    CHECK(total == 256 * MiB && free0 == total);
    CU_OK(cuMemAlloc_v2(&p, sizeof buf));
    CHECK(p && p % 256 == 0);
    CU_OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(free0 - free1 == sizeof buf);
    CHECK(simcuda_live_native() == 1);
    CHECK(simcuda_location_of(p + 10) == 0);
    CHECK(simcuda_access_mask(p) == 1);

    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 7);
    CU_OK(cuMemcpyHtoD_v2(p, buf, sizeof buf));
    CU_OK(cuMemcpyDtoH_v2(back, p, sizeof back));
    CHECK(memcmp(buf, back, sizeof buf) == 0);
    CHECK_RC(cuMemcpyHtoD_v2(p + 1, buf, sizeof buf), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyHtoD_v2((CUdeviceptr)buf, buf, 1), CUDA_ERROR_INVALID_VALUE);

    CHECK_RC(cuMemFree_v2(p + 8), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(p));
    CHECK_RC(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(0));
    CHECK_RC(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAlloc_v2(&p, 257 * MiB), CUDA_ERROR_OUT_OF_MEMORY);

    CU_OK(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 4));
    CHECK(pitch >= 100 && pitch % 256 == 0);
    CHECK_RC(cuMemAllocPitch_v2(&q, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(p));

    /* Stream-ordered allocation charges the stream's device. */
    CUcontext c1;
    CUstream s1;
    CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CU_OK(cuCtxPushCurrent_v2(c1));
    CU_OK(cuStreamCreate(&s1, 0));
    CU_OK(cuCtxPopCurrent_v2(NULL));
    CU_OK(cuMemAllocAsync(&p, 4096, s1));
    CU_OK(cuMemAllocAsync_ptsz(&q, 4096, NULL));
    CHECK(simcuda_location_of(p) == 1 && simcuda_location_of(q) == 0);
    CU_OK(cuMemFreeAsync(p, s1));
    CU_OK(cuMemFreeAsync_ptsz(q, CU_STREAM_PER_THREAD));
    CU_OK(cuStreamDestroy_v2(s1));
    CU_OK(cuDevicePrimaryCtxRelease_v2(1));

    /* The legacy ABI hands out 32-bit device pointers. */
    unsigned int p32 = 0;
    CU_OK(cuMemAlloc(&p32, 4096));
    CHECK(p32 != 0);
    CU_OK(cuMemsetD8_v2(p32, 0xab, 4096));
    CHECK(((unsigned char *)(uintptr_t)p32)[4095] == 0xab);
    CU_OK(cuMemFree_v2(p32));
    check_no_leaks();
}

/* ---- VMM -------------------------------------------------------------- */

static void test_vmm_alias(void)
{
    CUdeviceptr base;
    CUmemGenericAllocationHandle h;
    size_t free0, free1, total;
    char msg[] = "written through the first mapping";
    char back[sizeof msg];
    fresh();
    CU_OK(cuMemGetInfo_v2(&free0, &total));
    CU_OK(cuMemAddressReserve(&base, 8 * MiB, 0, 0, 0));
    CHECK(base % (2 * MiB) == 0);
    CHECK(simcuda_live_reservations() == 1);
    h = create_on(0, 2 * MiB);
    CHECK(simcuda_phys_bytes(0) == 2 * MiB);
    CU_OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(free0 - free1 == 2 * MiB);

    CUdeviceptr a = base, b = base + 4 * MiB;
    CU_OK(cuMemMap(a, 2 * MiB, 0, h, 0));
    CU_OK(cuMemMap(b, 2 * MiB, 0, h, 0));
    CHECK(simcuda_live_mappings() == 2);
    CHECK(simcuda_access_mask(a) == 0);
    /* No access yet: a copy must fail without touching memory. */
    CHECK_RC(cuMemcpyHtoD_v2(a, msg, sizeof msg), CUDA_ERROR_INVALID_VALUE);
    grant(a, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_SUCCESS);
    grant(b, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, CU_MEM_ACCESS_FLAGS_PROT_READ,
          CUDA_SUCCESS);
    CHECK(simcuda_access_mask(a) == 1 && simcuda_access_mask(b) == 2);
    CHECK(simcuda_location_of(b) == 0);
    CHECK(simcuda_location_of(base + 2 * MiB) == SIMCUDA_LOC_UNMAPPED);

    memcpy((void *)(a + 100), msg, sizeof msg);
    /* The compiler sees distinct addresses and may reorder the read of b
     * before the write to a; a memory clobber makes it read again. */
    __asm__ volatile("" ::: "memory");
    CHECK(memcmp((void *)(b + 100), msg, sizeof msg) == 0);
    CU_OK(cuMemcpyHtoD_v2(a + 2 * MiB - 8, "01234567", 8));
    /* A copy from device 0's context of a mapping only device 1 was
     * granted is refused, as by the real driver (H200 pair). */
    CHECK_RC(cuMemcpyDtoH_v2(back, b + 2 * MiB - 8, 8), CUDA_ERROR_INVALID_VALUE);
    grant(b, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READ, CUDA_SUCCESS);
    CU_OK(cuMemcpyDtoH_v2(back, b + 2 * MiB - 8, 8));
    CHECK(memcmp(back, "01234567", 8) == 0);
    /* The hole between the mappings is not device memory. */
    CHECK_RC(cuMemcpyHtoD_v2(a + 2 * MiB - 8, msg, 9), CUDA_ERROR_INVALID_VALUE);

    unsigned long long acc;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
    CU_OK(cuMemGetAccess(&acc, &loc, b));
    CHECK(acc == CU_MEM_ACCESS_FLAGS_PROT_READ);
    CU_OK(cuMemGetAccess(&acc, &loc, a));
    CHECK(acc == CU_MEM_ACCESS_FLAGS_PROT_NONE);

    /* Only whole mappings can be unmapped. */
    CHECK_RC(cuMemUnmap(a, 4 * MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemUnmap(a + 2 * MiB, 2 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemUnmap(a, 2 * MiB));
    CHECK(simcuda_location_of(a) == SIMCUDA_LOC_UNMAPPED);
    CHECK_RC(cuMemcpyDtoH_v2(back, a, 1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemUnmap(b, 2 * MiB));
    CU_OK(cuMemRelease(h));
    CHECK_RC(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAddressFree(base, 4 * MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAddressFree(base + 2 * MiB, 6 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAddressFree(base, 8 * MiB));
    CU_OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(free1 == free0);
    check_no_leaks();
}

/* Memory lives until released and unmapped, in either order. */
static void test_vmm_refcount(void)
{
    CUmemGenericAllocationHandle h, h2;
    fresh();
    CUdeviceptr p = vmm_alloc(1, 4 * MiB, &h);
    memset((void *)p, 0x5a, 4 * MiB);
    CU_OK(cuMemRelease(h));
    CHECK(simcuda_live_handles() == 1 && simcuda_phys_bytes(1) == 4 * MiB);
    CHECK(((unsigned char *)p)[4 * MiB - 1] == 0x5a);
    CHECK_RC(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);

    CU_OK(cuMemRetainAllocationHandle(&h2, (void *)(p + 12345)));
    CHECK(h2 == h);
    CUmemAllocationProp prop;
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&prop, h2));
    CHECK(prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop.location.id == 1);
    CU_OK(cuMemRelease(h2));
    CHECK_RC(cuMemRetainAllocationHandle(&h2, (void *)(p + 4 * MiB)), CUDA_ERROR_INVALID_VALUE);

    CU_OK(cuMemUnmap(p, 4 * MiB));
    CHECK(simcuda_live_handles() == 0 && simcuda_phys_bytes(1) == 0);
    CU_OK(cuMemAddressFree(p, 4 * MiB));

    /* Freeing a reservation with a mapping inside leaks the mapping. */
    p = vmm_alloc(0, 2 * MiB, &h);
    CU_OK(cuMemAddressFree(p, 2 * MiB));
    CHECK(simcuda_live_mappings() == 1 && simcuda_live_reservations() == 0);
    CHECK_RC(cuMemUnmap(p, 2 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemRelease(h));
    CHECK(simcuda_live_handles() == 1);
    simcuda_reset();
    check_no_leaks();
}

static void test_vmm_rules(void)
{
    CUdeviceptr r;
    CUmemGenericAllocationHandle h, hh;
    size_t g;
    fresh();
    CU_OK(cuMemAddressReserve(&r, 16 * MiB, 0, 0, 0));
    h = create_on(0, 4 * MiB);
    CHECK_RC(cuMemMap(r, 4 * MiB, 2 * MiB, h, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_RC(cuMemMap(r, 2 * MiB, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_RC(cuMemMap(r + 4096, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemMap(r + 14 * MiB, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemMap(r, 4 * MiB, 0, h + 1000, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemMap(r, 4 * MiB, 0, h, 0));
    CHECK_RC(cuMemMap(r + 2 * MiB, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemMap(r + 4 * MiB, 4 * MiB, 0, h, 0));

    /* Access: whole mappings, own device or a peer, no CPU on device memory. */
    grant(r, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_ERROR_INVALID_VALUE);
    grant(r, 12 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_ERROR_INVALID_VALUE);
    grant(r, 8 * MiB, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_ERROR_NOT_SUPPORTED);
    grant(r, 8 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 5, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_ERROR_INVALID_DEVICE);
    simcuda_set_peer(0);
    grant(r, 8 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_ERROR_INVALID_DEVICE);
    simcuda_set_peer(1);
    grant(r, 8 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          CUDA_SUCCESS);
    CHECK(simcuda_access_mask(r) == 2 && simcuda_access_mask(r + 6 * MiB) == 2);
    /* A copy may span adjacent mappings. */
    CU_OK(cuMemsetD8_v2(r + 3 * MiB, 0x11, 2 * MiB));
    CHECK(((unsigned char *)r)[5 * MiB - 1] == 0x11);
    grant(r, 8 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, CU_MEM_ACCESS_FLAGS_PROT_NONE,
          CUDA_SUCCESS);
    CHECK(simcuda_access_mask(r) == 0);
    CHECK_RC(cuMemsetD8_v2(r, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemUnmap(r, 8 * MiB)); /* two adjacent mappings at once */
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAddressFree(r, 16 * MiB));

    /* cuMemCreate's checks. */
    CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CHECK_RC(cuMemCreate(&hh, MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemCreate(&hh, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
    CHECK_RC(cuMemCreate(&hh, 2 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 2);
    CHECK_RC(cuMemCreate(&hh, 2 * MiB, &p, 0), CUDA_ERROR_INVALID_DEVICE);
    p = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CHECK_RC(cuMemCreate(&hh, 2 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
    CHECK_RC(cuMemCreate(&hh, 2 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 1);
    CHECK_RC(cuMemCreate(&hh, 2 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    simcuda_set_vmm(0);
    p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CHECK_RC(cuMemCreate(&hh, 2 * MiB, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
    simcuda_set_vmm(1);
    CU_OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(g == 2 * MiB);
    CHECK_RC(cuMemAddressReserve(&r, 4097, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAddressReserve(&r, 2 * MiB, 3 * MiB, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAddressReserve(&r, 2 * MiB, 64 * MiB, 0, 0));
    CHECK(r % (64 * MiB) == 0);
    CU_OK(cuMemAddressFree(r, 2 * MiB));
    check_no_leaks();
}

/* Host-located memory: CPU access, HOST memory type, host accounting. */
static void test_vmm_host(void)
{
    CUdeviceptr r;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    unsigned type = 0;
    int ordinal = -1;
    fresh();
    CU_OK(cuMemCreate(&h, 2 * MiB, &p, 0));
    CHECK(simcuda_phys_bytes(SIMCUDA_LOC_HOST) == 2 * MiB);
    CU_OK(cuMemAddressReserve(&r, 2 * MiB, 0, 0, 0));
    CU_OK(cuMemMap(r, 2 * MiB, 0, h, 0));
    CHECK(simcuda_location_of(r) == SIMCUDA_LOC_HOST);
    CUmemAccessDesc d[2] = {
        {{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
        {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
    };
    CU_OK(cuMemSetAccess(r, 2 * MiB, d, 2));
    CHECK((unsigned)simcuda_access_mask(r) == (SIMCUDA_CPU_BIT | 2u));
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, r));
    CHECK(type == CU_MEMORYTYPE_HOST);
    CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, r));
    CHECK(ordinal == 0);
    CU_OK(cuMemUnmap(r, 2 * MiB));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAddressFree(r, 2 * MiB));

    p = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    simcuda_set_capacity(SIMCUDA_LOC_HOST, 4 * MiB);
    CU_OK(cuMemCreate(&h, 4 * MiB, &p, 0));
    CUmemGenericAllocationHandle h2;
    CHECK_RC(cuMemCreate(&h2, 2 * MiB, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemRelease(h));
    simcuda_set_capacity(SIMCUDA_LOC_HOST, 1024 * MiB);
    check_no_leaks();
}

/* Shareable handles are dups of the memfd: an import maps the same bytes,
 * and the memory lives while any handle, mapping or descriptor does. */
static void test_vmm_share(void)
{
    fresh();
    CUdeviceptr a, b;
    CUmemGenericAllocationHandle h, plain, imp;
    CUmemAllocationProp p = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 1);
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CU_OK(cuMemCreate(&h, 2 * MiB, &p, 0));
    int fd = -1;
    CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(fd >= 0);
    plain = create_on(0, 2 * MiB);   /* no handle type requested: not exportable */
    int fd2 = -1;
    CHECK_RC(cuMemExportToShareableHandle(&fd2, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemRelease(plain));
    CU_OK(cuMemRelease(h));   /* the descriptor keeps the memory */
    CU_OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUmemAllocationProp got;
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, imp));
    CHECK(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 1);
    CU_OK(cuMemAddressReserve(&a, 2 * MiB, 0, 0, 0));
    CU_OK(cuMemAddressReserve(&b, 2 * MiB, 0, 0, 0));
    CU_OK(cuMemMap(a, 2 * MiB, 0, imp, 0));
    CU_OK(cuMemMap(b, 2 * MiB, 0, imp, 0));
    grant(a, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CUDA_SUCCESS);
    grant(b, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CUDA_SUCCESS);
    ((volatile char *)a)[12345] = 42;
    CHECK(((volatile char *)b)[12345] == 42);
    CHECK(simcuda_location_of(b) == 1);
    CU_OK(cuMemRelease(imp));
    CU_OK(cuMemUnmap(a, 2 * MiB));
    CU_OK(cuMemUnmap(b, 2 * MiB));
    CU_OK(cuMemAddressFree(a, 2 * MiB));
    CU_OK(cuMemAddressFree(b, 2 * MiB));
    /* Descriptors that are not the sim's memory. */
    int devnull = open("/dev/null", O_RDONLY);
    CHECK_RC(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)devnull,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
             CUDA_ERROR_INVALID_VALUE);
    close(devnull);
    /* Legacy IPC of native memory: a handle, but nothing can open it. */
    CUdeviceptr n;
    CUipcMemHandle ih;
    CU_OK(cuMemAlloc_v2(&n, 4096));
    CU_OK(cuIpcGetMemHandle(&ih, n));
    CHECK(!memcmp(ih.reserved, "SIMIPC", 6));
    CHECK_RC(cuIpcGetMemHandle(&ih, n + 1), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr o;
    CHECK_RC(cuIpcOpenMemHandle_v2(&o, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuIpcCloseMemHandle(n), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree_v2(n));
    check_no_leaks();
}

static void test_capacity(void)
{
    CUmemGenericAllocationHandle a, b, c;
    CUdeviceptr p;
    fresh();
    simcuda_set_capacity(0, 4 * MiB);
    a = create_on(0, 2 * MiB);
    b = create_on(0, 2 * MiB);
    CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CHECK_RC(cuMemCreate(&c, 2 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RC(cuMemAlloc_v2(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
    c = create_on(1, 2 * MiB); /* the other device is unaffected */
    CU_OK(cuMemRelease(b));
    CU_OK(cuMemAlloc_v2(&p, 1));
    CU_OK(cuMemFree_v2(p));
    CU_OK(cuMemRelease(a));
    CU_OK(cuMemRelease(c));
    simcuda_set_capacity(0, 256 * MiB);
    check_no_leaks();
}

/* ---- copies and sets -------------------------------------------------- */

static void test_copies(void)
{
    CUdeviceptr d, e;
    CUmemGenericAllocationHandle h;
    size_t pitch;
    unsigned char host[64][100], back[64][100];
    fresh();
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 100; x++)
            host[y][x] = (unsigned char)(x + 3 * y);
    CU_OK(cuMemAllocPitch_v2(&d, &pitch, 100, 64, 4));

    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = host;
    c.srcPitch = 100;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = d;
    c.dstPitch = pitch;
    c.WidthInBytes = 100;
    c.Height = 64;
    CU_OK(cuMemcpy2D_v2(&c));
    CHECK(memcmp((void *)(d + 5 * pitch), host[5], 100) == 0);
    /* Back with offsets, through the unified type. */
    memset(back, 0, sizeof back);
    CUDA_MEMCPY2D r;
    memset(&r, 0, sizeof r);
    r.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    r.srcDevice = d;
    r.srcPitch = pitch;
    r.srcXInBytes = 10;
    r.srcY = 2;
    r.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    r.dstDevice = (CUdeviceptr)back;
    r.dstPitch = 100;
    r.WidthInBytes = 90;
    r.Height = 62;
    CU_OK(cuMemcpy2DAsync_v2_ptsz(&r, NULL));
    CHECK(memcmp(back[0], &host[2][10], 90) == 0 && memcmp(back[61], &host[63][10], 90) == 0);
    CHECK(back[0][95] == 0);
    r.Height = 63; /* one row past the allocation */
    CHECK_RC(cuMemcpy2D_v2_ptds(&r), CUDA_ERROR_INVALID_VALUE);
    r.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    CHECK_RC(cuMemcpy2DUnaligned_v2(&r), CUDA_ERROR_NOT_SUPPORTED);

    /* 3D: a 4x3x2 box out of a 16x8x4 device volume. */
    unsigned char vol[2][3][4];
    CU_OK(cuMemAlloc_v2(&e, 16 * 8 * 4));
    for (int i = 0; i < 16 * 8 * 4; i++)
        ((unsigned char *)e)[i] = (unsigned char)i;
    CUDA_MEMCPY3D c3;
    memset(&c3, 0, sizeof c3);
    c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.srcDevice = e;
    c3.srcPitch = 16;
    c3.srcHeight = 8;
    c3.srcXInBytes = 1;
    c3.srcY = 2;
    c3.srcZ = 1;
    c3.dstMemoryType = CU_MEMORYTYPE_HOST;
    c3.dstHost = vol;
    c3.dstPitch = 4;
    c3.dstHeight = 3;
    c3.WidthInBytes = 4;
    c3.Height = 3;
    c3.Depth = 2;
    CU_OK(cuMemcpy3D_v2(&c3));
    CHECK(vol[0][0][0] == (unsigned char)(128 + 32 + 1));
    CHECK(vol[1][2][3] == (unsigned char)(256 + 64 + 3 + 1));
    c3.Depth = 4; /* past the end of the volume */
    CHECK_RC(cuMemcpy3DAsync_v2(&c3, NULL), CUDA_ERROR_INVALID_VALUE);

    CUcontext c0;
    CU_OK(cuCtxGetCurrent(&c0));
    CUDA_MEMCPY3D_PEER cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = e;
    cp.srcContext = c0;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = d;
    cp.dstContext = c0;
    cp.WidthInBytes = 16;
    cp.Height = 1;
    cp.Depth = 1;
    CU_OK(cuMemcpy3DPeer(&cp));
    CHECK(((unsigned char *)d)[15] == 15);

    /* Peer copy into VMM memory on device 1, then 1-D variants. */
    CUdeviceptr v = vmm_alloc(1, 2 * MiB, &h);
    /* The copies below run in device 0's context: it needs the grant. */
    grant(v, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CUDA_SUCCESS);
    CU_OK(cuMemcpyPeer(v, c0, e, c0, 512));
    CHECK(((unsigned char *)v)[511] == 255);
    CHECK_RC(cuMemcpyPeer(v, NULL, e, c0, 1), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuMemcpyDtoD_v2(v + 1024, e, 16));
    CU_OK(cuMemcpy(v + 2048, (CUdeviceptr)"unified", 8));
    CHECK(strcmp((char *)(v + 2048), "unified") == 0);

    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr dsts[2] = {v + 4096, (CUdeviceptr)back};
    CUdeviceptr srcs[2] = {(CUdeviceptr)"batch", v + 4096};
    size_t sizes[2] = {6, 6};
    CUmemcpyAttributes at;
    memset(&at, 0, sizeof at);
    size_t idx = 0;
    CU_OK(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, &at, &idx, 1, s));
    CHECK(strcmp((char *)back, "batch") == 0);
    dsts[1] = v + 2 * MiB - 3; /* runs off the mapping: nothing may be copied */
    memset((void *)(v + 4096), 0, 6);
    CHECK_RC(cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, 2, &at, &idx, 1, s),
             CUDA_ERROR_INVALID_VALUE);
    CHECK(((char *)v)[4096] == 0);

    /* Memsets: alignment, pitch, width. */
    CU_OK(cuMemsetD32Async(v, 0xdeadbeef, 4, s));
    CHECK(((unsigned *)v)[3] == 0xdeadbeef && ((unsigned *)v)[4] != 0xdeadbeef);
    CHECK_RC(cuMemsetD32_v2(v + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemsetD16_v2_ptds(v + 2, 0x1234, 3));
    CHECK(((unsigned short *)v)[1] == 0x1234 && ((unsigned short *)v)[3] == 0x1234);
    CU_OK(cuMemsetD2D32_v2(d, pitch, 7, 10, 64));
    CHECK(((unsigned *)(d + 63 * pitch))[9] == 7 && ((unsigned *)(d + 63 * pitch))[10] != 7);
    CHECK_RC(cuMemsetD2D8_v2(d, pitch, 0, 100, 65), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemsetD2D16Async_ptsz(d, pitch, 0xffff, 1, 64, s));

    /* Streams and events. */
    CUevent ev;
    CU_OK(cuEventCreate(&ev, 0));
    CU_OK(cuEventRecord(ev, s));
    CU_OK(cuEventRecord_ptsz(ev, NULL));
    CU_OK(cuStreamWaitEvent(s, ev, 0));
    CU_OK(cuEventSynchronize(ev));
    CU_OK(cuEventQuery(ev));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuStreamQuery_ptsz(CU_STREAM_LEGACY));
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    CU_OK(cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
    CU_OK(cuEventDestroy_v2(ev));
    CHECK_RC(cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuStreamDestroy_v2(s));
    CHECK_RC(cuMemsetD8Async(v, 0, 1, s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuMemcpyDtoA_v2(NULL, 0, v, 1), CUDA_ERROR_NOT_SUPPORTED);

    vmm_free(v, 2 * MiB, h);
    CU_OK(cuMemFree_v2(d));
    CU_OK(cuMemFree_v2(e));
    check_no_leaks();
}

/* ---- pointer queries -------------------------------------------------- */

static void test_pointers(void)
{
    CUdeviceptr n, r, base;
    CUmemGenericAllocationHandle h;
    size_t size;
    unsigned long long id1 = 0, id2 = 0;
    CUcontext ctx = NULL, cur;
    unsigned type;
    fresh();
    CU_OK(cuCtxGetCurrent(&cur));
    CU_OK(cuMemAlloc_v2(&n, 1000));
    CU_OK(cuMemGetAddressRange_v2(&base, &size, n + 999));
    CHECK(base == n && size == 1000);
    CU_OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, n + 5));
    CHECK(ctx == cur);
    CU_OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, n));
    CU_OK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, n + 5));
    CHECK(base == n);

    CU_OK(cuMemAddressReserve(&r, 8 * MiB, 0, 0, 0));
    h = create_on(1, 2 * MiB);
    CU_OK(cuMemMap(r + 2 * MiB, 2 * MiB, 0, h, 0));
    CU_OK(cuMemGetAddressRange_v2(&base, &size, r + 3 * MiB));
    CHECK(base == r + 2 * MiB && size == 2 * MiB); /* the mapping, not the VA range */
    CU_OK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, r + 3 * MiB));
    CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, r + 3 * MiB));
    CHECK(base == r && size == 8 * MiB);
    CU_OK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, r + 3 * MiB));
    CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, r + 3 * MiB));
    CHECK(base == r + 2 * MiB && size == 2 * MiB);
    CU_OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, r + 3 * MiB));
    CHECK(id1 != id2);
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, r + 3 * MiB));
    CHECK(type == CU_MEMORYTYPE_DEVICE);
    int ordinal = -1;
    CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, r + 3 * MiB));
    CHECK(ordinal == 1);
    CHECK_RC(cuMemGetAddressRange_v2(&base, &size, r), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, r),
             CUDA_ERROR_INVALID_VALUE);
    /* Reserved without memory: the range attributes name the reservation. */
    CU_OK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, r + 5));
    CHECK(base == r);
    unsigned flag = 7;
    CU_OK(cuPointerGetAttribute(&flag, CU_POINTER_ATTRIBUTE_MAPPED, r + 5));
    CHECK(flag == 0);
    /* cuMemAlloc memory only: legacy IPC and nv-p2p tokens. */
    CU_OK(cuPointerGetAttribute(&flag, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, n));
    CHECK(flag == 1);
    CU_OK(cuPointerGetAttribute(&flag, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, r + 3 * MiB));
    CHECK(flag == 0);
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tokens;
    CU_OK(cuPointerGetAttribute(&tokens, CU_POINTER_ATTRIBUTE_P2P_TOKENS, n));
    CHECK_RC(cuPointerGetAttribute(&tokens, CU_POINTER_ATTRIBUTE_P2P_TOKENS, r + 3 * MiB),
             CUDA_ERROR_INVALID_VALUE);
    /* The address range needs a current context. */
    CU_OK(cuCtxSetCurrent(NULL));
    CHECK_RC(cuMemGetAddressRange_v2(&base, &size, n), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuCtxSetCurrent(cur));
    CHECK_RC(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&type),
             CUDA_ERROR_INVALID_VALUE);

    /* The batch query zero-fills for unknown pointers. */
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    type = 77;
    ordinal = 77;
    size = 77;
    void *data[3] = {&type, &ordinal, &size};
    CU_OK(cuPointerGetAttributes(3, attrs, data, (CUdeviceptr)&type));
    CHECK(type == 0 && ordinal == 0 && size == 0);
    CU_OK(cuPointerGetAttributes(3, attrs, data, r + 2 * MiB));
    CHECK(type == CU_MEMORYTYPE_DEVICE && ordinal == 1 && size == 8 * MiB);
    CU_OK(cuPointerGetAttributes(3, attrs, data, r + 5));
    CHECK(type == 0 && ordinal == 0 && size == 8 * MiB);

    CU_OK(cuMemUnmap(r + 2 * MiB, 2 * MiB));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAddressFree(r, 8 * MiB));
    CU_OK(cuMemFree_v2(n));
    check_no_leaks();
}

/* ---- fault injection and counters ------------------------------------- */

static void *count_devices(void *arg)
{
    int n;
    *(CUresult *)arg = cuDeviceGetCount(&n);
    return NULL;
}

/* A fault armed for this thread's calls skips another thread's. */
static void test_faults_here(void)
{
    int n;
    fresh();
    simcuda_reset_counts();
    simcuda_fail_nth_here(2, CUDA_ERROR_UNKNOWN);
    CU_OK(cuDeviceGetCount(&n));
    CUresult other = CUDA_ERROR_UNKNOWN;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, count_devices, &other) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(other == CUDA_SUCCESS);
    CHECK(simcuda_call_count() == 2 && simcuda_call_count_here() == 1);
    CHECK_RC(cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN);
    CU_OK(cuDeviceGetCount(&n));
    CHECK(simcuda_call_count_here() == 3);
}

static void test_faults(void)
{
    CUdeviceptr r, p = 0;
    CUmemGenericAllocationHandle h;
    int n;
    fresh();
    simcuda_reset_counts();
    CU_OK(cuDeviceGetCount(&n));
    CHECK(simcuda_call_count() == 1 && simcuda_calls_of("cuDeviceGetCount") == 1);
    CHECK(simcuda_calls_of("noSuchCall") == 0);

    simcuda_fail_nth(2, CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuDeviceGetCount(&n));
    p = 0x1234;
    CHECK_RC(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(p == 0x1234 && simcuda_live_native() == 0); /* no side effect */
    CU_OK(cuMemAlloc_v2(&p, 4096));
    CU_OK(cuMemFree_v2(p));

    CU_OK(cuMemAddressReserve(&r, 2 * MiB, 0, 0, 0));
    h = create_on(0, 2 * MiB);
    simcuda_fail_call("cuMemMap", 1, CUDA_ERROR_UNKNOWN);
    CHECK_RC(cuMemMap(r, 2 * MiB, 0, h, 0), CUDA_ERROR_UNKNOWN);
    CHECK(simcuda_live_mappings() == 0);
    CU_OK(cuMemMap(r, 2 * MiB, 0, h, 0));
    CHECK(simcuda_calls_of("cuMemMap") == 2);

    simcuda_fail_call("cuMemUnmap", 2, CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RC(cuMemUnmap(r, MiB), CUDA_ERROR_INVALID_VALUE); /* 1st: real error */
    CHECK_RC(cuMemUnmap(r, 2 * MiB), CUDA_ERROR_ILLEGAL_STATE);
    CHECK(simcuda_live_mappings() == 1);
    simcuda_fail_call("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN);
    simcuda_fail_call("cuMemUnmap", 0, CUDA_ERROR_UNKNOWN); /* cancelled */
    CU_OK(cuMemUnmap(r, 2 * MiB));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAddressFree(r, 2 * MiB));

    /* An injected failure wins even before cuInit. */
    simcuda_reset();
    simcuda_fail_call("cuInit", 1, CUDA_ERROR_NO_DEVICE);
    CHECK_RC(cuInit(0), CUDA_ERROR_NO_DEVICE);
    CHECK_RC(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CU_OK(cuInit(0));
    CHECK(simcuda_calls_of("cuInit") == 2);
    check_no_leaks();
}

/* ---- cuGetProcAddress ------------------------------------------------- */

static void *proc(const char *name, int version, cuuint64_t flags, CUresult want,
                  CUdriverProcAddressQueryResult want_status)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
    CHECK_RC(cuGetProcAddress_v2(name, &fn, version, flags, &st), want);
    CHECK(st == want_status);
    CHECK((fn != NULL) == (want == CUDA_SUCCESS));
    return fn;
}

static void *sym(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (!fn)
        fprintf(stderr, "libcuda.so.1 does not export %s\n", name);
    CHECK(fn != NULL);
    return fn;
}

static void test_procaddr(void)
{
    const int OK = CU_GET_PROC_ADDRESS_SUCCESS;
    const int PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    simcuda_reset(); /* works before cuInit */

    CHECK(proc("cuMemAlloc", 12000, 0, 0, OK) == sym(lib, "cuMemAlloc_v2"));
    CHECK(proc("cuMemAlloc", 3010, 0, 0, OK) == sym(lib, "cuMemAlloc"));
    proc("cuMemcpyHtoD", 3010, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK(proc("cuMemcpyHtoD", 12000, 0, 0, OK) == sym(lib, "cuMemcpyHtoD_v2"));
    CHECK(proc("cuMemcpyHtoD", 12000, PT, 0, OK) == sym(lib, "cuMemcpyHtoD_v2_ptds"));
    CHECK(proc("cuMemcpyHtoD", 6050, PT, 0, OK) == sym(lib, "cuMemcpyHtoD_v2"));
    CHECK(proc("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 0, OK) ==
          sym(lib, "cuMemcpyHtoD_v2"));
    CHECK(proc("cuStreamSynchronize", 12000, PT, 0, OK) == sym(lib, "cuStreamSynchronize_ptsz"));
    CHECK(proc("cuLaunchKernel", 12000, PT, 0, OK) == sym(lib, "cuLaunchKernel_ptsz"));
    CHECK(proc("cuMemAlloc", 12000, PT, 0, OK) == sym(lib, "cuMemAlloc_v2"));
    CHECK(proc("cuCtxPopCurrent", 4000, 0, 0, OK) == sym(lib, "cuCtxPopCurrent_v2"));
    CHECK(proc("cuDevicePrimaryCtxRelease", 11000, 0, 0, OK) ==
          sym(lib, "cuDevicePrimaryCtxRelease_v2"));
    proc("cuDevicePrimaryCtxRelease", 10020, 0, CUDA_ERROR_NOT_FOUND,
         CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK(proc("cuMemcpyBatchAsync", 13000, PT, 0, OK) ==
          sym(lib, "cuMemcpyBatchAsync_v2_ptsz"));
    CHECK(proc("cuMemcpyBatchAsync", 12080, 0, 0, OK) == sym(lib, "cuMemcpyBatchAsync"));
    proc("cuMemcpy3DBatchAsync", 12070, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(proc("cuCtxCreate", 12050, 0, 0, OK) == sym(lib, "cuCtxCreate_v4"));
    CHECK(proc("cuCtxCreate", 11000, 0, 0, OK) == sym(lib, "cuCtxCreate_v2"));
    CHECK(proc("cuStreamWriteValue32", 12000, PT, 0, OK) == sym(lib, "cuStreamWriteValue32_v2_ptsz"));
    CHECK(proc("cuStreamBatchMemOp", 11000, 0, 0, OK) == sym(lib, "cuStreamBatchMemOp"));
    CHECK(proc("cuGetProcAddress", 12000, 0, 0, OK) == sym(lib, "cuGetProcAddress_v2"));
    CHECK(proc("cuGetProcAddress", 11030, 0, 0, OK) == sym(lib, "cuGetProcAddress"));
    proc("cuGetProcAddress", 11020, 0, CUDA_ERROR_NOT_FOUND,
         CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    proc("cuNoSuchThing", 13000, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK_RC(cuGetProcAddress_v2("cuInit", NULL, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    void *fn = NULL;
    CHECK_RC(cuGetProcAddress_v2("cuInit", &fn, 13000, 4, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuGetProcAddress("cuMemMap", &fn, 11040, 0));
    CHECK(fn == sym(lib, "cuMemMap"));

    /* cuStreamBeginCapture takes a mode from CUDA 10.1 on (the _v2). */
    CHECK(proc("cuStreamBeginCapture", 13000, 0, 0, OK) == sym(lib, "cuStreamBeginCapture_v2"));
    CHECK(proc("cuStreamBeginCapture", 13000, PT, 0, OK) == sym(lib, "cuStreamBeginCapture_v2_ptsz"));
    CHECK(proc("cuStreamBeginCapture", 10000, PT, 0, OK) == sym(lib, "cuStreamBeginCapture_ptsz"));
    CHECK(proc("cuIpcOpenMemHandle", 11000, 0, 0, OK) == sym(lib, "cuIpcOpenMemHandle_v2"));
    CHECK(proc("cuIpcOpenMemHandle", 4010, 0, 0, OK) == sym(lib, "cuIpcOpenMemHandle"));
    CHECK(proc("cuDevicePrimaryCtxReset", 11000, 0, 0, OK) == sym(lib, "cuDevicePrimaryCtxReset_v2"));
    CHECK(proc("cuDevicePrimaryCtxReset", 10020, 0, 0, OK) == sym(lib, "cuDevicePrimaryCtxReset"));
    /* Every entry point of the driver list, by exact name (but those whose
     * base name is versioned). */
#define SIM_VERSIONED(name)                                                    \
    (!strcmp(name, "cuGetProcAddress") || !strcmp(name, "cuStreamBeginCapture") ||         \
     !strcmp(name, "cuIpcOpenMemHandle") || !strcmp(name, "cuDevicePrimaryCtxReset") ||             \
     !strcmp(name, "cuCtxDestroy") || !strcmp(name, "cuCtxCreate") ||                      \
     !strcmp(name, "cuMemcpyBatchAsync") || !strcmp(name, "cuMemcpy3DBatchAsync") ||        \
     !strcmp(name, "cuStreamWriteValue32") || !strcmp(name, "cuStreamWaitValue32") ||       \
     !strcmp(name, "cuStreamWriteValue64") || !strcmp(name, "cuStreamWaitValue64") ||       \
     !strcmp(name, "cuStreamBatchMemOp"))
#define SIM_CHECK_EXPORT(name)                                                 \
    CHECK(proc(#name, 13000, 0, 0, OK) == sym(lib, #name) || SIM_VERSIONED(#name));
    GVM_DRIVER_ALL(SIM_CHECK_EXPORT, SIM_CHECK_EXPORT)
#undef SIM_CHECK_EXPORT
    /* Every per-thread twin, with and without the flag. */
#define SIM_CHECK_TWIN(base, sfx)                                              \
    CHECK(SIM_VERSIONED(#base) || proc(#base, 13000, PT, 0, OK) == sym(lib, #base #sfx)); \
    CHECK(SIM_VERSIONED(#base) || proc(#base, 13000, 0, 0, OK) == sym(lib, #base));
    GVM_PT_VARIANTS(SIM_CHECK_TWIN)
#undef SIM_CHECK_TWIN
#undef SIM_VERSIONED
    dlclose(lib);
}

/* ---- kernels ---------------------------------------------------------- */

static int seen_i;
static double seen_d;
static char seen_c;
static int launches;

static void body3(void **params)
{
    seen_i = *(int *)params[0];
    seen_d = *(double *)params[1];
    seen_c = *(char *)params[2];
    launches++;
}

/* A kernel that calls the driver itself: launches must not hold the lock. */
static void body_reenter(void **params)
{
    CU_OK(cuMemsetD8_v2(*(CUdeviceptr *)params[0], 0x42, 16));
}

static void test_launch(void)
{
    const size_t sizes[3] = {4, 8, 1};
    CUfunction f = simcuda_function(body3, 3, sizes);
    size_t off, size;
    int i = 7;
    double d = 2.5;
    char c = 'x';
    void *params[3] = {&i, &d, &c};
    fresh();
    CU_OK(cuFuncGetParamInfo(f, 1, &off, &size));
    CHECK(off == 8 && size == 8);
    CU_OK(cuKernelGetParamInfo((CUkernel)(void *)f, 2, &off, &size));
    CHECK(off == 16 && size == 1);
    CHECK_RC(cuFuncGetParamInfo(f, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);

    CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    CHECK(seen_i == 7 && seen_d == 2.5 && seen_c == 'x' && launches == 1);
    CHECK_RC(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuLaunchKernel((CUfunction)&i, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
             CUDA_ERROR_INVALID_HANDLE);
    CHECK(launches == 1);

    /* The packed-buffer form. */
    unsigned char buf[17];
    size_t bufsize = sizeof buf;
    i = 9, d = -1.0, c = 'y';
    memcpy(buf, &i, 4);
    memcpy(buf + 8, &d, 8);
    buf[16] = (unsigned char)c;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bufsize,
                     CU_LAUNCH_PARAM_END};
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
    CHECK(seen_i == 9 && seen_d == -1.0 && seen_c == 'y');

    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    i = 11;
    CU_OK(cuLaunchKernelEx(&cfg, f, params, NULL));
    CU_OK(cuLaunchKernelEx_ptsz(&cfg, f, params, NULL));
    CU_OK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params));
    CU_OK(cuLaunchCooperativeKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL, params));
    CHECK(seen_i == 11 && launches == 6);
    CHECK(cuGraphLaunch(NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphLaunch_ptsz(NULL, NULL) == CUDA_ERROR_INVALID_VALUE);

    const size_t psize = sizeof(CUdeviceptr);
    CUfunction g = simcuda_function(body_reenter, 1, &psize);
    CUdeviceptr p;
    CU_OK(cuMemAlloc_v2(&p, 16));
    void *gp[1] = {&p};
    CU_OK(cuLaunchKernel(g, 1, 1, 1, 1, 1, 1, 0, NULL, gp, NULL));
    CHECK(((unsigned char *)p)[15] == 0x42);
    CU_OK(cuMemFree_v2(p));
    check_no_leaks();
}

/* ---- threads ---------------------------------------------------------- */

/* Each thread has its own context stack and allocates, maps, copies and
 * frees concurrently; run under TSan this checks the sim's locking. */
static void *worker(void *arg)
{
    int dev = (int)(intptr_t)arg % 2;
    CUcontext ctx;
    CUdevice d;
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    CU_OK(cuCtxGetDevice(&d));
    CHECK(d == dev);
    for (int round = 0; round < 20; round++) {
        CUmemGenericAllocationHandle h;
        unsigned char out[64], in[64];
        memset(out, (int)(intptr_t)arg + round, sizeof out);
        CUdeviceptr p = vmm_alloc(dev, 2 * MiB, &h);
        CU_OK(cuMemcpyHtoD_v2(p + 4096, out, sizeof out));
        CU_OK(cuMemcpyDtoH_v2(in, p + 4096, sizeof in));
        CHECK(memcmp(in, out, sizeof in) == 0);
        vmm_free(p, 2 * MiB, h);
        CUdeviceptr n;
        CU_OK(cuMemAlloc_v2(&n, 4096));
        CU_OK(cuMemsetD32_v2(n, (unsigned)round, 1024));
        CU_OK(cuMemFree_v2(n));
    }
    CU_OK(cuDevicePrimaryCtxRelease_v2(dev));
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[6];
    fresh();
    for (intptr_t i = 0; i < 6; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < 6; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    check_no_leaks();
}

/* ---- reset ------------------------------------------------------------ */

static void test_reset(void)
{
    CUmemGenericAllocationHandle h;
    CUcontext cur;
    CUdeviceptr n;
    int count;
    fresh();
    vmm_alloc(0, 2 * MiB, &h);
    CU_OK(cuMemAlloc_v2(&n, 100));
    simcuda_fail_nth(5, CUDA_ERROR_UNKNOWN);
    simcuda_reset();
    check_no_leaks();
    CHECK(simcuda_call_count() == 0);
    CHECK_RC(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    simcuda_set_devices(3);
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&count));
    CHECK(count == 3);
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    for (int i = 0; i < 5; i++)
        CU_OK(cuDeviceGetCount(&count)); /* the armed fault was dropped */
    simcuda_trace(1);
    CU_OK(cuDriverGetVersion(&count));
    simcuda_trace(0);
    simcuda_reset();
    simcuda_set_devices(2);
}

/* Stream capture after CUDA's rules (graph.c). */
static void *end_elsewhere(void *arg)
{
    CUgraph g;
    CHECK_RC(cuStreamEndCapture((CUstream)arg, &g), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    return NULL;
}

static void body_inc(void **params)
{
    (*(unsigned char *)(uintptr_t) * (CUdeviceptr *)params[0])++;
}

static void test_capture(void)
{
    fresh();
    CUstream s;
    CUgraph g;
    CUgraphExec x;
    CUevent ev;
    CUdeviceptr d;
    CUstreamCaptureStatus st;
    const size_t psize = sizeof(CUdeviceptr);
    CUfunction inc = simcuda_function(body_inc, 1, &psize);
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventCreate(&ev, 0));
    CU_OK(cuMemAlloc_v2(&d, 4096));
    CU_OK(cuMemsetD8_v2(d, 0, 4096));
    CHECK_RC(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RC(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);

    /* Recorded, not run; replayed by each launch. */
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RC(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    CU_OK(cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CU_OK(cuMemsetD8Async(d, 5, 16, s));
    void *params[] = {&d};
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuMemcpyDtoDAsync_v2(d + 16, d, 16, s));
    CU_OK(cuEventRecord(ev, s));
    CHECK_RC(cuEventQuery(ev), CUDA_ERROR_CAPTURED_EVENT);   /* and invalidates */
    CU_OK(cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK_RC(cuMemsetD8Async(d, 5, 16, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, end_elsewhere, s) == 0);
    pthread_join(t, NULL);
    CHECK_RC(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(g == NULL);

    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU_OK(cuMemsetD8Async(d, 5, 16, s));
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuMemcpyDtoDAsync_v2(d + 16, d, 16, s));
    unsigned char b[32];
    CU_OK(cuMemcpyDtoH_v2(b, d, 32));   /* relaxed: allowed, nothing ran yet */
    CHECK(b[0] == 0 && b[16] == 0);
    CU_OK(cuStreamEndCapture(s, &g));
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CU_OK(cuGraphLaunch(x, s));
    CU_OK(cuMemcpyDtoH_v2(b, d, 32));
    CHECK(b[0] == 6 && b[1] == 5 && b[16] == 6 && b[17] == 5);
    CU_OK(cuGraphLaunch(x, s));
    CU_OK(cuGraphExecDestroy(x));
    CHECK_RC(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuGraphDestroy(g));

    /* Unsafe calls by mode; waits on the device or the stream. */
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUdeviceptr e;
    CHECK_RC(cuMemAlloc_v2(&e, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU_OK(cuThreadExchangeStreamCaptureMode(&m));
    CU_OK(cuMemAlloc_v2(&e, 4096));   /* relaxed thread mode: allowed */
    CU_OK(cuMemFree_v2(e));
    CU_OK(cuThreadExchangeStreamCaptureMode(&m));
    CHECK_RC(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_RC(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RC(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_RC(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RC(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU_OK(cuCtxSynchronize());
    CU_OK(cuStreamSynchronize(s));

    CU_OK(cuMemFree_v2(d));
    CU_OK(cuEventDestroy_v2(ev));
    CU_OK(cuStreamDestroy_v2(s));
    check_no_leaks();
}

/* Kernels in flight (flight.c): an unmap is counted while a launch given
 * a pointer into it is not covered by a wait, and only then. */
static void test_in_flight(void)
{
    fresh();
    simcuda_set_kernels_in_flight(1);
    CUmemGenericAllocationHandle h;
    CUdeviceptr p = vmm_alloc(0, 2 * MiB, &h);
    size_t psize = sizeof(CUdeviceptr);
    CUfunction inc = simcuda_function(body_inc, 1, &psize);
    void *params[] = {&p};
    CUstream s, blocking;
    CUevent e, early;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamCreate(&blocking, 0));
    CU_OK(cuEventCreate(&e, 0));
    CU_OK(cuEventCreate(&early, 0));
    CU_OK(cuEventRecord(early, s));   /* before any launch: covers none */
#define REMAP()                                                                                  \
    do {                                                                                         \
        CU_OK(cuMemUnmap(p, 2 * MiB));                                                           \
        CU_OK(cuMemMap(p, 2 * MiB, 0, h, 0));                                                    \
        grant(p, 2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,    \
              CUDA_SUCCESS);                                                                     \
    } while (0)
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuEventSynchronize(early));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 1);
    CU_OK(cuStreamSynchronize(s));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 1);
    /* An event covers the launches before it on its stream, not after. */
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuEventRecord(e, s));
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuEventSynchronize(e));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 2);
    CU_OK(cuCtxSynchronize());
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 2);
    /* The legacy stream's wait covers blocking streams, not the others. */
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, blocking, params, NULL));
    CU_OK(cuStreamSynchronize(NULL));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 2);
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuStreamSynchronize(NULL));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 3);
    CU_OK(cuStreamSynchronize(s));
    /* Asynchronous copies and memsets count too, by the bytes they reach. */
    static unsigned char host[64];
    CU_OK(cuMemcpyHtoDAsync(p + 2 * MiB - 8, host, 8, s));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 4);
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemsetD8Async(p, 0, 64, s));
    CU_OK(cuStreamSynchronize(s));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 4);
    /* A graph's replayed kernel runs on the stream it was launched on. */
    CUgraph g;
    CUgraphExec x;
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU_OK(cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CU_OK(cuStreamEndCapture(s, &g));
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    REMAP();   /* captured, not run: nothing in flight */
    CHECK(simcuda_unmapped_in_flight() == 4);
    CU_OK(cuGraphLaunch(x, s));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 5);
    CU_OK(cuStreamSynchronize(s));
    REMAP();
    CHECK(simcuda_unmapped_in_flight() == 5);
    CU_OK(cuGraphExecDestroy(x));
    CU_OK(cuGraphDestroy(g));
#undef REMAP
    CU_OK(cuCtxSynchronize());
    CU_OK(cuEventDestroy(e));
    CU_OK(cuEventDestroy(early));
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuStreamDestroy(blocking));
    vmm_free(p, 2 * MiB, h);
    check_no_leaks();
    simcuda_set_kernels_in_flight(0);
}

int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"init", test_init},         {"devices", test_devices},
        {"contexts", test_contexts}, {"primary_reset", test_primary_reset},
        {"user_context", test_user_context},
        {"native", test_native},
        {"vmm_alias", test_vmm_alias}, {"vmm_refcount", test_vmm_refcount},
        {"vmm_rules", test_vmm_rules}, {"vmm_host", test_vmm_host},
        {"vmm_share", test_vmm_share},
        {"capacity", test_capacity}, {"copies", test_copies},
        {"pointers", test_pointers}, {"faults", test_faults}, {"faults-here", test_faults_here},
        {"procaddr", test_procaddr}, {"launch", test_launch},
        {"threads", test_threads},   {"reset", test_reset},
        {"capture", test_capture},   {"in_flight", test_in_flight},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        tests[i].fn();
        printf("ok %zu - %s\n", i + 1, tests[i].name);
    }
    simcuda_reset();
    return 0;
}
