/* A driver-API program linked against libcuda (-lcuda): under LD_PRELOAD
 * its calls land on gvmshim's exported symbols directly, without going
 * through any resolver. The first interposed call it makes is
 * cuMemGetInfo, before any allocation and before the runtime is touched:
 * the shim must work when that is the first thing it sees (checked in a
 * child process, so a crash there fails one case).
 *
 *   cuMemGetInfo first; cuMemAlloc of several sizes, cuMemsetD32,
 *   cuMemcpyHtoD/DtoH/DtoD, cuMemGetAddressRange, cuPointerGetAttribute,
 *   a kernel through cuLaunchKernel, cuMemFree; gvm_query knows the
 *   pointers under the shim. */
#include "linked_cu.h"

#include <sys/wait.h>

#include <vector>

using namespace gt;

static Gvm gvm;
static CUcontext ctx;

__global__ static void k_add(uint32_t *p, size_t n, uint32_t v)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] += v;
}

/* In a child process forked before CUDA is touched: cuInit, a current
 * context, then cuMemGetInfo as the very first interposed call. A crash
 * there fails this case only. */
static void meminfo_first()
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail_at(__FILE__, __LINE__, "fork failed");
    if (pid == 0) {
        CUdevice d;
        CUcontext c;
        size_t f = 0, t = 0;
        int count = 0;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1) _exit(77);
        if (cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
            cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)
            _exit(3);
        printf("     child: calling cuMemGetInfo before any allocation\n");
        fflush(stdout);
        CUresult rc = cuMemGetInfo(&f, &t);
        if (rc != CUDA_SUCCESS) {
            printf("     child: cuMemGetInfo -> %d\n", (int)rc);
            _exit(4);
        }
        if (!(t > 0 && f <= t)) _exit(5);
        /* And the first pointer query, on a pointer that is not the shim's. */
        unsigned int type = 0;
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS) _exit(6);
        if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
            type != CU_MEMORYTYPE_DEVICE)
            _exit(7);
        cuMemFree(p);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) skip("no CUDA device");
    if (WIFSIGNALED(status))
        fail_at(__FILE__, __LINE__, "the child was killed by signal %d in the calls above", WTERMSIG(status));
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited %d (3: no context, 4: cuMemGetInfo "
           "failed, 5: bad values, 6: cuMemAlloc failed, 7: pointer attribute)", WEXITSTATUS(status));
}

static void alloc_copy_set_free()
{
    const size_t sizes[] = {4, 4096, 1 * MiB + 4, 2 * MiB, 48 * MiB};
    for (size_t n : sizes) {
        CUdeviceptr p = 0, q = 0;
        CU(cuMemAlloc(&p, n));
        CU(cuMemAlloc(&q, n));
        /* (After an allocation: calling it first is meminfo_first's case.) */
        size_t f0 = 0, t0 = 0;
        CU(cuMemGetInfo(&f0, &t0));
        EXPECT(t0 > 0 && f0 <= t0, "cuMemGetInfo: free %zu total %zu", f0, t0);
        size_t words = n / 4;
        CU(cuMemsetD32(p, 0xC0FFEE11u, words));
        std::vector<uint32_t> h(words), back(words);
        CU(cuMemcpyDtoH(back.data(), p, n));
        for (size_t i = 0; i < words; i++) EXPECT(back[i] == 0xC0FFEE11u, "memset word %zu of %zu B", i, n);
        for (size_t i = 0; i < words; i++) h[i] = word_pattern(i, 31);
        CU(cuMemcpyHtoD(p, h.data(), n));
        CU(cuMemcpyDtoD(q, p, n));
        CU(cuMemcpyDtoH(back.data(), q, n));
        EXPECT(back == h, "HtoD/DtoD/DtoH round trip of %zu B differs", n);

        CUdeviceptr base = 0;
        size_t size = 0;
        CU(cuMemGetAddressRange(&base, &size, p + n - 1));
        EXPECT(base == p, "%zu B: base %#llx, want %#llx", n, (unsigned long long)base, (unsigned long long)p);
        EXPECT(gvm.present ? size == n : size >= n, "%zu B: range size %zu", n, size);
        unsigned int type = 0;
        int ordinal = -1;
        CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + n / 2));
        CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
        EXPECT(type == CU_MEMORYTYPE_DEVICE && ordinal == 0, "%zu B: type %u ordinal %d", n, type, ordinal);
        if (gvm.present) {
            gvm_info info;
            CKG(gvm, gvm.query((const void *)(p + n - 1), &info));
            EXPECT(info.base == (void *)p && info.size == n, "%zu B: gvm_query base %p size %zu", n, info.base,
                   info.size);
        }
        CU(cuMemFree(p));
        CU(cuMemFree(q));
    }
}

static void launch_through_driver()
{
    const size_t n = 1 << 20;
    CUdeviceptr p = 0;
    CU(cuMemAlloc(&p, n * 4));
    CU(cuMemsetD32(p, 5, n));
    cudaFunction_t f = nullptr;
    CK(cudaGetFuncBySymbol(&f, (const void *)k_add));
    uint32_t *dp = (uint32_t *)p;
    size_t nn = n;
    uint32_t v = 37;
    void *args[] = {&dp, &nn, &v};
    CU(cuLaunchKernel((CUfunction)f, 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
    CU(cuCtxSynchronize());
    std::vector<uint32_t> back(n);
    CU(cuMemcpyDtoH(back.data(), p, n * 4));
    for (size_t i = 0; i < n; i++) EXPECT(back[i] == 42, "word %zu is %u after the kernel, want 42", i, back[i]);
    CU(cuMemFree(p));
}

int main()
{
    watchdog(120);
    Runner r;
    /* Before this process touches CUDA (the case forks). */
    r.run("meminfo_first", meminfo_first, false);
    /* Driver API only until the first interposed call. */
    CUdevice dev;
    int n = 0;
    if (int skip = linked_start(&dev, &ctx, &n)) return skip;
    gvm = load_gvm();
    printf("%d device(s); gvmshim API %s\n", n, gvm.present ? "present" : "absent (native run)");
    r.run("alloc_copy_set_free", alloc_copy_set_free);
    r.run("launch_through_driver", launch_through_driver);
    int ret = r.finish();
    cuDevicePrimaryCtxRelease(dev);
    return ret;
}
