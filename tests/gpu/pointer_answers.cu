/* Pointer queries answer exactly as natively (docs/supported.md) on a real
 * driver: the table of tests/pointer_table.h, plus cudaPointerGetAttributes
 * at every point, run natively (cudaMalloc memory) and under the shim
 * ($GVM_TEST_LIB preloaded), compared line by line; any difference other
 * than the documented ones fails. `pointer-answers --table` prints one run's
 * table. Exits 77 without a usable GPU. */
#include "../pointer_table.h"

#include <cuda_runtime.h>

static CUresult alloc(CUdeviceptr *p, size_t n)
{
    void *q = nullptr;
    cudaError_t e = cudaMalloc(&q, n);
    *p = (CUdeviceptr)q;
    return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult release(CUdeviceptr p)
{
    return cudaFree((void *)p) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* What most programs ask: the runtime's view. */
static void runtime_attributes(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    cudaPointerAttributes a;
    memset(&a, PT_FILL, sizeof a);
    cudaError_t e = cudaPointerGetAttributes(&a, (const void *)p);
    cudaGetLastError();   /* older runtimes leave the error sticky */
    uintptr_t dp = (uintptr_t)a.devicePointer, hp = (uintptr_t)a.hostPointer;
    char vd[32], vh[32], val[160];
    pt_norm(vd, sizeof vd, PT_ADDR, (const unsigned char *)&dp, s, p);
    pt_norm(vh, sizeof vh, PT_ADDR, (const unsigned char *)&hp, s, p);
    snprintf(val, sizeof val, "type=%d,device=%d,devicePointer=%s,hostPointer=%s", (int)a.type, a.device, vd, vh);
    pt_row(cas, "cudaPointerGetAttributes", "-", (CUresult)e, val);
}

static int table_main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 77;
    CUcontext ctx = nullptr;
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess || cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot start CUDA\n");
        return 1;
    }
    pt_extra = runtime_attributes;
    struct pt_env e = {alloc, release, ctx, ndev, nullptr, nullptr, nullptr, nullptr, 0};
    pt_find_gvm_api(&e);
    int rc = pt_table(&e);
    fflush(stdout);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) { return pt_main(argc, argv, table_main); }
