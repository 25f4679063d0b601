/* Pointer queries answer exactly as natively (tests/pointer_table.h): the
 * table run against the simulated driver with cuMemAlloc'd memory and no
 * shim, and again with the shim preloaded, compared line by line. The
 * program links the simulated libcuda.so.1, so its driver calls reach the
 * shim's exported hooks when it is preloaded. */
#define _GNU_SOURCE
#include "../pointer_table.h"

static CUresult alloc(CUdeviceptr *p, size_t n) { return cuMemAlloc(p, n); }
static CUresult release(CUdeviceptr p) { return cuMemFree(p); }

#define EXPECT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);   \
            return 1;                                                          \
        }                                                                      \
    } while (0)

/* What has no native counterpart to compare with, checked under the shim
 * only: an alias of a small allocation maps its whole chunk, but the
 * neighbours have no second address. */
static int shim_only_checks(const struct pt_env *e)
{
    if (!e->alias) return 0;
    CUdeviceptr a = 0, b = 0, base = 0;
    size_t size = 0;
    EXPECT(cuMemAlloc(&a, 1000) == CUDA_SUCCESS && cuMemAlloc(&b, 1000) == CUDA_SUCCESS);
    EXPECT((a >> 21) == (b >> 21));   /* one chunk */
    void *alias = NULL;
    EXPECT(e->alias((const void *)a, &alias) == GVM_OK);
    EXPECT(cuMemGetAddressRange(&base, &size, (CUdeviceptr)alias + 10) == CUDA_SUCCESS);
    EXPECT(base == (CUdeviceptr)alias && size == 1000);
    CUdeviceptr beside = (CUdeviceptr)alias + (b - a);
    EXPECT(cuMemGetAddressRange(&base, &size, beside + 10) == CUDA_ERROR_NOT_FOUND);
    unsigned type = 7;
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    void *data = &type;
    EXPECT(cuPointerGetAttributes(1, &attr, &data, beside) == CUDA_SUCCESS && type == 0);
    EXPECT(cuPointerGetAttribute(&type, attr, beside) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(e->unalias(alias) == GVM_OK);
    EXPECT(cuMemFree(a) == CUDA_SUCCESS && cuMemFree(b) == CUDA_SUCCESS);
    return 0;
}

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
    return rc || shim_only_checks(&e) ? 1 : 0;
}

int main(int argc, char **argv) { return pt_main(argc, argv, table_main); }
