/* Pointer queries answer exactly as natively (tests/pointer_table.h): the
 * table run against the simulated driver with cuMemAlloc'd memory and no
 * shim, and again with the shim preloaded, compared line by line. The
 * program links the simulated libcuda.so.1, so its driver calls reach the
 * shim's exported hooks when it is preloaded. */
#define _GNU_SOURCE
#include "../pointer_table.h"

static CUresult alloc(CUdeviceptr *p, size_t n) { return cuMemAlloc(p, n); }
static CUresult release(CUdeviceptr p) { return cuMemFree(p); }

static int table_main(void)
{
    CUdevice dev;
    CUcontext ctx;
    int ndev = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDeviceGetCount(&ndev) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot start the driver\n");
        return 1;
    }
    struct pt_env e = {alloc, release, ctx, ndev, NULL, NULL, NULL, NULL, 0};
    pt_find_gvm_api(&e);
    int rc = pt_table(&e);
    fflush(stdout);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) { return pt_main(argc, argv, table_main); }
