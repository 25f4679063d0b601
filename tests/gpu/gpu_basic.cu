// The gpu suite's basic program, built twice (nvcc's default static cudart
// and -cudart shared) and run under the shim: allocations of every size
// class work with kernels, copies and sets; pointer queries answer as
// natively; every allocation was served by gvmshim; a buffer freed while a
// kernel still reads it is not pulled from under the kernel.
#include "gpu_common.h"

typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

__global__ void k_spin_sum(const unsigned *p, size_t n, unsigned long long *out, long long cycles)
{
    long long t0 = clock64();
    unsigned long long s = 0;
    size_t i = threadIdx.x;
    while (clock64() - t0 < cycles) {
        s += p[i % n];
        i += blockDim.x;
    }
    // After the spin, a full pass whose sum the host checks.
    __syncthreads();
    unsigned long long t = 0;
    for (size_t j = threadIdx.x; j < n; j += blockDim.x) t += p[j];
    atomicAdd(out, t + (s == 0xffffffffffffffffull));
}

static void sizes_kernels_copies_queries(const gvm_api &api, bool shim)
{
    const size_t sizes[] = {256, 1000, 64 << 10, 2 << 20, (3 << 20) + 17, 64 << 20, (size_t)1 << 30};
    range_fn range = NULL;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&range, 12000, cudaEnableDefault, &q));
    EXPECT(range && q == cudaDriverEntryPointSuccess, "cuMemGetAddressRange not resolved");
    for (size_t s : sizes) {
        char *p;
        CK(cudaMalloc(&p, s));
        size_t words = s / 4 * 4;
        fill(p, words, (unsigned)s);
        EXPECT(mismatches(p, words, (unsigned)s) == 0, "size %zu: kernel data wrong", s);
        // Host round trip through cudaMemcpy, then a device-to-device copy.
        unsigned *h = (unsigned *)malloc(words ? words : 4);
        CK(cudaMemcpy(h, p, words, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (size_t i = 0; i < words / 4; i++) wrong += h[i] != host_pattern(i, (unsigned)s);
        EXPECT(wrong == 0, "size %zu: %zu words wrong after D2H", s, wrong);
        char *q2;
        CK(cudaMalloc(&q2, s));
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CK(cudaMemcpyAsync(q2, p, s, cudaMemcpyDeviceToDevice, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaStreamDestroy(st));
        EXPECT(mismatches(q2, words, (unsigned)s) == 0, "size %zu: D2D copy wrong", s);
        CK(cudaMemset(q2, 0x5a, s));
        unsigned char last = 0;
        CK(cudaMemcpy(&last, q2 + s - 1, 1, cudaMemcpyDeviceToHost));
        EXPECT(last == 0x5a, "size %zu: memset did not reach the last byte", s);
        CK(cudaMemcpy(q2, h, words, cudaMemcpyHostToDevice));
        EXPECT(mismatches(q2, words, (unsigned)s) == 0, "size %zu: H2D copy wrong", s);
        free(h);
        // Queries answer with the allocation, from base and interior.
        cudaPointerAttributes a;
        CK(cudaPointerGetAttributes(&a, p + s / 2));
        EXPECT(a.type == cudaMemoryTypeDevice && a.device == 0, "size %zu: attributes type %d device %d", s,
               (int)a.type, a.device);
        CUdeviceptr base = 0;
        size_t len = 0;
        EXPECT(range((CUdeviceptr *)&base, &len, (CUdeviceptr)(p + s - 1)) == CUDA_SUCCESS, "range failed");
        EXPECT(base == (CUdeviceptr)p && len == s, "size %zu: range %#llx+%zu, want %p+%zu", s,
               (unsigned long long)base, len, (void *)p, s);
        if (shim) {
            gvm_info info;
            EXPECT(api.query(p + s - 1, &info) == GVM_OK && info.size == s, "size %zu: not served by gvmshim", s);
        }
        CK(cudaFree(q2));
        CK(cudaFree(p));
    }
    if (!shim) {
        printf("skip: gvm_query absent (not running under the shim)\n");
        g_skipped++;
    }
}

static void free_waits_for_the_kernel_reading_it(void)
{
    const size_t n = 1 << 20;
    unsigned *b;
    unsigned long long *out, got = 0;
    CK(cudaMalloc(&b, n * 4));
    CK(cudaMalloc(&out, 8));
    CK(cudaMemset(out, 0, 8));
    fill(b, n * 4, 3);
    unsigned long long want = 0;
    for (size_t i = 0; i < n; i++) want += host_pattern(i, 3);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    k_spin_sum<<<1, 256, 0, st>>>(b, n, out, 300000000LL);   // ~0.2 s
    double t0 = now_us();
    CK(cudaFree(b));
    double t1 = now_us();
    // Reuse the memory at once: the kernel must still see the old data.
    unsigned *c;
    CK(cudaMalloc(&c, n * 4));
    CK(cudaMemsetAsync(c, 0, n * 4, 0));
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaSuccess, "kernel failed after the free: %s", cudaGetErrorString(e));
    CK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
    EXPECT(got == want, "kernel sum %llu, want %llu (memory changed under it)", got, want);
    printf("free during a kernel returned after %.1f ms\n", (t1 - t0) / 1e3);
    CK(cudaFree(c));
    CK(cudaFree(out));
    CK(cudaStreamDestroy(st));
}

static void odds_and_ends(const gvm_api &api, bool shim)
{
    EXPECT(cudaFree(NULL) == cudaSuccess, "cudaFree(NULL)");
    void *a = NULL;
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CK(cudaMallocAsync(&a, 3 << 20, st));
    CK(cudaMemsetAsync(a, 1, 3 << 20, st));
    CK(cudaFreeAsync(a, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamDestroy(st));
    EXPECT(true, "stream-ordered allocations pass through");
    size_t fr = 0, tot = 0;
    CK(cudaMemGetInfo(&fr, &tot));
    EXPECT(fr > 0 && fr <= tot, "cudaMemGetInfo free %zu total %zu", fr, tot);
    void *z;
    EXPECT(cudaMalloc(&z, (size_t)1 << 50) == cudaErrorMemoryAllocation, "a huge cudaMalloc is an OOM");
    cudaGetLastError();
    if (shim) {
        gvm_info info;
        int x;
        EXPECT(api.query(&x, &info) == GVM_ERR_UNKNOWN_POINTER, "host pointer is not ours");
    }
}

int main()
{
    gpu_count_or_skip();
    gvm_api api;
    bool shim = gvm_api_load(&api);
    printf("gvmshim %s\n", shim ? "present" : "absent");
    sizes_kernels_copies_queries(api, shim);
    free_waits_for_the_kernel_reading_it();
    odds_and_ends(api, shim);
    return finish();
}
