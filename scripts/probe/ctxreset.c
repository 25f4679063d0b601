/* One-off probe: what cuDevicePrimaryCtxReset (cudaDeviceReset) does to
 * VMM memory, cuMemAlloc memory, streams and events made before it, and to
 * a retain another party (gvmshim) holds, so the shim's reset hook frees
 * and renews exactly what the driver does.
 *   cc -O2 ctxreset.c -o ctxreset -lcuda && ./ctxreset
 *
 * One H100 80GB, driver 580.159.04, 2026-11-27 12:10 UTC:
 * - the reset succeeds with two retains held; the context is then
 *   inactive, the current context (same handle) answers every call with
 *   CONTEXT_IS_DESTROYED until a retain makes it again, under the same
 *   handle; the retain count is kept (three releases succeeded after).
 * - cuMemAlloc memory is freed (cuMemFree of it: INVALID_VALUE).
 * - VMM memory is not: the 1 GiB mapping kept its bytes and its GiB of
 *   device memory until cuMemRelease; cuMemUnmap/cuMemRelease/
 *   cuMemAddressFree work with no context current. HOST_NUMA pieces too.
 * - streams and events made before: INVALID_HANDLE / CONTEXT_IS_DESTROYED.
 * - a portable cuMemHostRegister registration is gone (unregister:
 *   HOST_MEMORY_NOT_REGISTERED); copies from the pages still work. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s; cuGetErrorName(r_, &s); \
  printf("FAIL %s -> %d %s (line %d)\n", #x, r_, s, __LINE__); exit(1);} } while (0)
#define SAY(x) do { CUresult r_ = (x); const char *s = "?"; cuGetErrorName(r_, &s); \
  printf("%-58s -> %d %s\n", #x, r_, s); } while (0)

static size_t free_mib(void)
{
    size_t f = 0, t = 0;
    CUresult rc = cuMemGetInfo(&f, &t);
    return rc ? (size_t)-1 : f >> 20;
}

static void state(const char *when)
{
    unsigned flags = 0;
    int active = -1;
    cuDevicePrimaryCtxGetState(0, &flags, &active);
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    printf("[%s] primary active=%d flags=%#x current=%p free=%zu MiB\n", when, active, flags, (void *)cur,
           free_mib());
}

int main(void)
{
    const size_t sz = 1ul << 30;
    CK(cuInit(0));
    CUcontext ctx, ctx2, ctx3;
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));    /* the program's (cudart's) retain */
    CK(cuDevicePrimaryCtxRetain(&ctx2, 0));   /* gvmshim's own */
    CK(cuCtxSetCurrent(ctx));
    state("start");

    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va, dptr;
    CK(cuMemCreate(&h, sz, &p, 0));
    CK(cuMemAddressReserve(&va, sz, 0, 0, 0));
    CK(cuMemMap(va, sz, 0, h, 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, sz, &a, 1));
    CK(cuMemsetD8(va, 0x5a, sz));
    CK(cuMemAlloc(&dptr, sz));
    CK(cuMemsetD8(dptr, 0x33, sz));
    CUstream s;
    CUevent e;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(e, s));
    /* A second mapping, unmapped after the reset with no context current. */
    CUmemGenericAllocationHandle h3;
    CUdeviceptr va3;
    CK(cuMemCreate(&h3, 2u << 20, &p, 0));
    CK(cuMemAddressReserve(&va3, 2u << 20, 0, 0, 0));
    CK(cuMemMap(va3, 2u << 20, 0, h3, 0));
    CK(cuMemSetAccess(va3, 2u << 20, &a, 1));
    /* Host memory as gvmshim's pinned pieces: registered PORTABLE, and a
     * HOST_NUMA VMM piece. */
    size_t hsz = 64u << 20;
    void *hmem = aligned_alloc(1u << 21, hsz);
    memset(hmem, 1, hsz);
    CK(cuMemHostRegister(hmem, hsz, CU_MEMHOSTREGISTER_PORTABLE));
    CUmemAllocationProp hp = p;
    hp.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    hp.location.id = 0;
    CUmemGenericAllocationHandle hh;
    CUdeviceptr hva;
    CUresult hrc = cuMemCreate(&hh, 2u << 20, &hp, 0);
    printf("host numa create -> %d\n", hrc);
    if (!hrc) {
        CK(cuMemAddressReserve(&hva, 2u << 20, 0, 0, 0));
        CK(cuMemMap(hva, 2u << 20, 0, hh, 0));
        CK(cuMemSetAccess(hva, 2u << 20, &a, 1));
        CK(cuMemsetD8(hva, 0x77, 2u << 20));
    }
    CK(cuCtxSynchronize());
    state("after 1 GiB VMM + 1 GiB cuMemAlloc");

    SAY(cuDevicePrimaryCtxReset_v2(0));
    state("after reset");
    SAY(cuCtxSynchronize());
    SAY(cuStreamQuery(s));
    SAY(cuEventQuery(e));
    unsigned char b = 0;
    SAY(cuMemcpyDtoH(&b, va, 1));
    printf("  byte at va after reset = %#x\n", b);
    int ord = -1;
    SAY(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va));
    SAY(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr));
    CUdeviceptr base;
    size_t len;
    SAY(cuMemGetAddressRange(&base, &len, dptr));

    SAY(cuCtxSetCurrent(NULL));
    SAY(cuMemUnmap(va3, 2u << 20));
    SAY(cuMemRelease(h3));
    SAY(cuMemAddressFree(va3, 2u << 20));
    unsigned hflags = 0;
    SAY(cuMemHostGetFlags(&hflags, hmem));
    SAY(cuCtxSetCurrent(ctx));
    state("current = the old handle");
    SAY(cuMemAlloc(&base, 1 << 20));
    SAY(cuDevicePrimaryCtxRetain(&ctx3, 0));
    printf("  ctx before %p, after retain %p (same: %d)\n", (void *)ctx, (void *)ctx3, ctx == ctx3);
    SAY(cuCtxSetCurrent(ctx3));
    state("after re-retain");
    SAY(cuCtxSynchronize());
    SAY(cuStreamQuery(s));
    SAY(cuEventQuery(e));
    SAY(cuMemcpyDtoH(&b, va, 1));
    printf("  byte at va = %#x\n", b);
    SAY(cuMemcpyDtoH(&b, dptr, 1));
    SAY(cuMemsetD8(va, 0x11, sz));
    SAY(cuCtxSynchronize());
    SAY(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va));
    printf("  ordinal of va = %d\n", ord);
    SAY(cuMemGetAddressRange(&base, &len, dptr));
    CUmemGenericAllocationHandle h2 = 0;
    SAY(cuMemRetainAllocationHandle(&h2, (void *)va));
    if (h2) SAY(cuMemRelease(h2));
    SAY(cuMemHostGetFlags(&hflags, hmem));
    SAY(cuMemcpyHtoD(va, hmem, hsz));
    CUdeviceptr hdev = 0;
    SAY(cuMemHostGetDevicePointer(&hdev, hmem, 0));
    SAY(cuMemHostUnregister(hmem));
    if (!hrc) {
        SAY(cuMemcpyDtoH(&b, hva, 1));
        printf("  byte at host numa va = %#x\n", b);
        SAY(cuMemUnmap(hva, 2u << 20));
        SAY(cuMemRelease(hh));
    }
    SAY(cuStreamDestroy(s));
    SAY(cuEventDestroy(e));
    SAY(cuMemFree(dptr));
    state("before unmap");
    SAY(cuMemUnmap(va, sz));
    state("after unmap");
    SAY(cuMemRelease(h));
    state("after release");
    SAY(cuMemAddressFree(va, sz));

    /* A reset while gvmshim's retain and a VMM mapping live, then process
     * exit straight after (the samples' pattern). */
    CK(cuMemCreate(&h, sz, &p, 0));
    CK(cuMemAddressReserve(&va, sz, 0, 0, 0));
    CK(cuMemMap(va, sz, 0, h, 0));
    CK(cuMemSetAccess(va, sz, &a, 1));
    state("second VMM 1 GiB");
    SAY(cuDevicePrimaryCtxRelease_v2(0));
    SAY(cuDevicePrimaryCtxRelease_v2(0));
    SAY(cuDevicePrimaryCtxRelease_v2(0));
    state("after releasing every retain (VMM mapping still live)");
    SAY(cuMemUnmap(va, sz));
    SAY(cuMemRelease(h));
    SAY(cuMemAddressFree(va, sz));
    return 0;
}
