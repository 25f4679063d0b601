/* One-off probe: what each VMM step costs for device and host (HOST_NUMA)
 * handles, so the migration design targets the real bottleneck. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s; cuGetErrorString(r_, &s); \
  printf("FAIL %s -> %d %s (line %d)\n", #x, r_, s, __LINE__); exit(1);} } while (0)

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

static void prop_for(CUmemAllocationProp *p, int host, int dev) {
  memset(p, 0, sizeof *p);
  p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  if (host) { p->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA; p->location.id = 0; }
  else { p->location.type = CU_MEM_LOCATION_TYPE_DEVICE; p->location.id = dev;
         p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; }
}

int main(void) {
  CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, d)); CK(cuCtxSetCurrent(ctx));
  int ndev; CK(cuDeviceGetCount(&ndev)); printf("devices %d\n", ndev);
  int v; cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d); printf("host_numa_vmm %d\n", v);
  cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, d); printf("rdma_vmm %d\n", v);
  CUstream st; CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  size_t sizes[] = {2u<<20, 64u<<20, 512u<<20, 1u<<30};
  for (int host = 0; host < 2; host++) for (unsigned si = 0; si < 4; si++) {
    size_t sz = sizes[si]; CUmemAllocationProp p; prop_for(&p, host, 0);
    CUmemGenericAllocationHandle h; double t0 = now_us();
    CK(cuMemCreate(&h, sz, &p, 0)); double t1 = now_us();
    CUdeviceptr va, va2; CK(cuMemAddressReserve(&va, sz, 0, 0, 0)); CK(cuMemAddressReserve(&va2, sz, 0, 0, 0));
    double t2 = now_us(); CK(cuMemMap(va, sz, 0, h, 0)); double t3 = now_us();
    CUmemAccessDesc a[2]; memset(a, 0, sizeof a);
    a[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE; a[0].location.id = 0; a[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    a[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA; a[1].location.id = 0; a[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, sz, a, 1)); double t4 = now_us();
    double t5 = t4; if (host) { CK(cuMemSetAccess(va, sz, a + 1, 1)); t5 = now_us(); }
    /* second mapping of the same handle (alias) */
    double t6 = now_us(); CK(cuMemMap(va2, sz, 0, h, 0)); CK(cuMemSetAccess(va2, sz, a, 1)); double t7 = now_us();
    double t8 = t7; if (host) { CK(cuMemSetAccess(va2, sz, a, 2)); t8 = now_us(); }
    /* unmap one mapping, remap */
    double t9 = now_us(); CK(cuMemUnmap(va2, sz)); double t10 = now_us();
    CK(cuMemMap(va2, sz, 0, h, 0)); CK(cuMemSetAccess(va2, sz, a, host ? 2 : 1)); double t11 = now_us();
    /* copy throughput from a device buffer into va */
    CUdeviceptr src; CK(cuMemAlloc(&src, sz)); CK(cuMemsetD8(src, 7, sz)); CK(cuCtxSynchronize());
    CK(cuMemcpyDtoDAsync(va, src, sz, st)); CK(cuStreamSynchronize(st));
    double t12 = now_us(); for (int i = 0; i < 3; i++) CK(cuMemcpyDtoDAsync(va, src, sz, st)); CK(cuStreamSynchronize(st)); double t13 = now_us();
    double t14 = now_us(); CK(cuMemUnmap(va, sz)); CK(cuMemUnmap(va2, sz)); double t15 = now_us();
    CK(cuMemRelease(h)); double t16 = now_us();
    printf("%s %5zu MiB: create %8.0f reserve2 %6.0f map %6.0f access(dev) %7.0f +host %7.0f | alias map+acc(dev) %7.0f +host %7.0f | unmap %6.0f remap+acc %7.0f | copy %6.1f GB/s | unmap2 %6.0f release %6.0f us\n",
      host ? "HOSTNUMA" : "DEVICE  ", sz >> 20, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t7 - t6, t8 - t7, t10 - t9, t11 - t10,
      3.0 * sz / (t13 - t12) / 1e3, t15 - t14, t16 - t15);
    CK(cuMemFree(src)); CK(cuMemAddressFree(va, sz)); CK(cuMemAddressFree(va2, sz));
  }
  /* idle sync and event costs */
  double t0 = now_us(); for (int i = 0; i < 1000; i++) cuCtxSynchronize(); double t1 = now_us();
  CUevent e; CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  double t2 = now_us(); for (int i = 0; i < 1000; i++) { cuEventRecord(e, 0); cuEventQuery(e); } double t3 = now_us();
  double t4 = now_us(); for (int i = 0; i < 1000; i++) { cuStreamQuery(0); } double t5 = now_us();
  CUdeviceptr p; double t6 = now_us(); for (int i = 0; i < 200; i++) { CK(cuMemAlloc(&p, 256)); CK(cuMemFree(p)); } double t7 = now_us();
  printf("idle ctxsync %.2f us, event record+query %.2f us, streamquery %.2f us, native alloc+free 256B %.1f us\n",
    (t1 - t0) / 1000, (t3 - t2) / 1000, (t5 - t4) / 1000, (t7 - t6) / 200);
  return 0;
}
