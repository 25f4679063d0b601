/* The basic contract of an unmodified cudart program, run under the shim
 * (built twice: static cudart, nvcc's default, and -cudart shared) and
 * without it (the native baseline, where the gvmshim checks are skipped).
 *
 *   allocations of 256 B .. 1 GiB are usable: kernels fill and verify them;
 *   memcpy H2D/D2H/D2D, memset, async copies on a non-blocking stream;
 *   pointer attributes and cuMemGetAddressRange answer like native;
 *   gvm_query knows every pointer (so gvmshim served them);
 *   cudaFree (also nullptr), cudaMallocAsync/cudaFreeAsync, cudaMemGetInfo;
 *   a kernel still running when its buffer is freed is not harmed, even
 *   when the memory is allocated again and overwritten at once. */
#include "gpu_test.h"

#include <chrono>
#include <thread>
#include <vector>

using namespace gt;

static const size_t kSizes[] = {256, 1000, 64 * KiB, 2 * MiB, 3 * MiB + 17, 64 * MiB, 1 * GiB};
static const int kNumSizes = sizeof kSizes / sizeof kSizes[0];

static Gvm gvm;
static uint8_t *bufs[kNumSizes];
static unsigned long long *dcount;   /* device counter: [mismatches, first bad index] */

/* Verifies n bytes at p against the pattern of seed (or a constant byte)
 * with the mismatch counter in device memory. */
static void verify_bytes(const uint8_t *p, size_t n, uint32_t seed, int constant, const char *what,
                         cudaStream_t s = 0)
{
    unsigned long long init[2] = {0, ~0ull}, got[2];
    CK(cudaMemcpyAsync(dcount, init, sizeof init, cudaMemcpyHostToDevice, s));
    k_verify_bytes<<<grid_for(n), 256, 0, s>>>(p, n, seed, constant, dcount);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(got, dcount, sizeof got, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    if (got[0]) {
        int want = constant >= 0 ? constant : byte_pattern(got[1], seed);
        throw Failure(format("%s: %llu of %zu bytes wrong, first at offset %llu (want %#x)", what, got[0], n,
                             got[1], want));
    }
}

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed, cudaStream_t s = 0)
{
    k_fill_bytes<<<grid_for(n), 256, 0, s>>>(p, n, seed);
    CK(cudaGetLastError());
}

static std::string size_name(size_t n)
{
    char b[32];
    return human(n, b, sizeof b);
}

/* ---- cases ------------------------------------------------------------------ */

static void alloc_fill_verify()
{
    CK(cudaMalloc((void **)&dcount, 2 * sizeof(unsigned long long)));
    for (int i = 0; i < kNumSizes; i++) {
        CK(cudaMalloc((void **)&bufs[i], kSizes[i]));
        EXPECT(bufs[i] != nullptr, "cudaMalloc(%s) gave NULL", size_name(kSizes[i]).c_str());
        EXPECT((uintptr_t)bufs[i] % 256 == 0, "cudaMalloc(%s) gave %p, not 256-byte aligned",
               size_name(kSizes[i]).c_str(), (void *)bufs[i]);
        fill_bytes(bufs[i], kSizes[i], 100 + i);
    }
    CK(cudaDeviceSynchronize());
    /* No two allocations overlap. */
    for (int i = 0; i < kNumSizes; i++)
        for (int j = i + 1; j < kNumSizes; j++) {
            uintptr_t a = (uintptr_t)bufs[i], b = (uintptr_t)bufs[j];
            EXPECT(a + kSizes[i] <= b || b + kSizes[j] <= a, "allocations %d and %d overlap", i, j);
        }
    for (int i = 0; i < kNumSizes; i++)
        verify_bytes(bufs[i], kSizes[i], 100 + i, -1, ("fill of " + size_name(kSizes[i])).c_str());
}

static void need_bufs()
{
    for (int i = 0; i < kNumSizes; i++)
        if (!bufs[i]) skip("the allocations of the first case are missing");
}

static void pointer_attributes()
{
    need_bufs();
    for (int i = 0; i < kNumSizes; i++) {
        const uint8_t *ps[3] = {bufs[i], bufs[i] + kSizes[i] / 2, bufs[i] + kSizes[i] - 1};
        for (const uint8_t *p : ps) {
            cudaPointerAttributes a;
            memset(&a, 0, sizeof a);
            CK(cudaPointerGetAttributes(&a, p));
            EXPECT(a.type == cudaMemoryTypeDevice, "%s at +%zu: type %d, want cudaMemoryTypeDevice",
                   size_name(kSizes[i]).c_str(), (size_t)(p - bufs[i]), (int)a.type);
            EXPECT(a.device == 0, "%s: device %d, want 0", size_name(kSizes[i]).c_str(), a.device);
            EXPECT(a.devicePointer == p, "%s: devicePointer %p, want %p", size_name(kSizes[i]).c_str(),
                   a.devicePointer, (const void *)p);
        }
    }
}

static void address_range()
{
    need_bufs();
    auto range = driver_fn<mem_get_address_range_fn>("cuMemGetAddressRange");
    for (int i = 0; i < kNumSizes; i++) {
        const uint8_t *ps[2] = {bufs[i] + kSizes[i] / 2, bufs[i] + kSizes[i] - 1};
        for (const uint8_t *p : ps) {
            CUdeviceptr base = 0;
            size_t size = 0;
            CKD(range(&base, &size, (CUdeviceptr)p));
            EXPECT(base == (CUdeviceptr)bufs[i], "%s at +%zu: base %#llx, want %p", size_name(kSizes[i]).c_str(),
                   (size_t)(p - bufs[i]), (unsigned long long)base, (void *)bufs[i]);
            if (gvm.present)
                EXPECT(size == kSizes[i], "%s: size %zu, want the requested %zu", size_name(kSizes[i]).c_str(),
                       size, kSizes[i]);
            else
                EXPECT(size >= kSizes[i], "%s: size %zu, smaller than requested", size_name(kSizes[i]).c_str(),
                       size);
        }
    }
}

static void gvm_knows_every_pointer()
{
    if (!gvm.present) skip("gvm_query is absent (not running under gvmshim)");
    need_bufs();
    const char *small_env = getenv("GVM_SMALL_MAX");
    for (int i = 0; i < kNumSizes; i++) {
        const uint8_t *ps[2] = {bufs[i], bufs[i] + kSizes[i] - 1};
        for (const uint8_t *p : ps) {
            gvm_info info;
            memset(&info, 0, sizeof info);
            CKG(gvm, gvm.query(p, &info));
            EXPECT(info.base == bufs[i], "%s: base %p, want %p", size_name(kSizes[i]).c_str(), info.base,
                   (void *)bufs[i]);
            EXPECT(info.size == kSizes[i], "%s: size %zu", size_name(kSizes[i]).c_str(), info.size);
            EXPECT(info.device == 0 && info.location == 0, "%s: device %d location %d, want 0 and 0",
                   size_name(kSizes[i]).c_str(), info.device, info.location);
            EXPECT(info.bytes_on_device >= kSizes[i] || info.packed, "%s: %zu bytes on device",
                   size_name(kSizes[i]).c_str(), info.bytes_on_device);
            if (!small_env)
                EXPECT(info.packed == (kSizes[i] <= MiB), "%s: packed %d with the default GVM_SMALL_MAX (1M)",
                       size_name(kSizes[i]).c_str(), info.packed);
        }
    }
    /* Something that is not an allocation is not known. */
    int on_stack = 0;
    gvm_info info;
    gvm_status st = gvm.query(&on_stack, &info);
    EXPECT(st == GVM_ERR_UNKNOWN_POINTER, "gvm_query(stack address) -> %d", st);
}

static void memcpy_round_trips()
{
    need_bufs();
    for (int i = 0; i < kNumSizes; i++) {
        size_t n = kSizes[i];
        std::string name = size_name(n);
        /* 1 GiB: the host side covers its last 64 MiB; D2D covers all. */
        size_t off = n > 64 * MiB ? n - 64 * MiB : 0, hn = n - off;
        std::vector<uint8_t> src(hn), back(hn);
        for (size_t k = 0; k < hn; k++) src[k] = byte_pattern(off + k, 200 + i);
        CK(cudaMemcpy(bufs[i] + off, src.data(), hn, cudaMemcpyHostToDevice));
        if (off) fill_bytes(bufs[i], off, 200 + i);
        verify_bytes(bufs[i], n, 200 + i, -1, ("H2D " + name).c_str());
        CK(cudaMemcpy(back.data(), bufs[i] + off, hn, cudaMemcpyDeviceToHost));
        EXPECT(memcmp(back.data(), src.data(), hn) == 0, "D2H %s differs from what was written", name.c_str());
        uint8_t *other = nullptr;
        CK(cudaMalloc((void **)&other, n));
        CK(cudaMemset(other, 0, n));
        CK(cudaMemcpy(other, bufs[i], n, cudaMemcpyDeviceToDevice));
        verify_bytes(other, n, 200 + i, -1, ("D2D " + name).c_str());
        /* An unaligned interior copy. */
        if (n > 4096) {
            CK(cudaMemset(other, 0, n));
            CK(cudaMemcpy(other + 3, bufs[i] + 3, n - 1000, cudaMemcpyDeviceToDevice));
            std::vector<uint8_t> edge(64);
            CK(cudaMemcpy(edge.data(), other, 64, cudaMemcpyDeviceToHost));
            EXPECT(edge[0] == 0 && edge[1] == 0 && edge[2] == 0, "interior D2D of %s wrote before its start",
                   name.c_str());
            for (int k = 3; k < 64; k++)
                EXPECT(edge[k] == byte_pattern(k, 200 + i), "interior D2D of %s: byte %d", name.c_str(), k);
        }
        CK(cudaFree(other));
    }
}

static void memset_verify()
{
    need_bufs();
    for (int i = 0; i < kNumSizes; i++) {
        CK(cudaMemset(bufs[i], 0xA5, kSizes[i]));
        verify_bytes(bufs[i], kSizes[i], 0, 0xA5, ("memset " + size_name(kSizes[i])).c_str());
        /* An interior range: the bytes around it are untouched. */
        if (kSizes[i] >= 1000) {
            CK(cudaMemset(bufs[i] + 100, 0x3C, kSizes[i] - 200));
            uint8_t head[101], tail[101];
            CK(cudaMemcpy(head, bufs[i], 101, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(tail, bufs[i] + kSizes[i] - 101, 101, cudaMemcpyDeviceToHost));
            for (int k = 0; k < 100; k++) EXPECT(head[k] == 0xA5 && tail[k + 1] == 0xA5, "memset overran");
            EXPECT(head[100] == 0x3C && tail[0] == 0x3C, "interior memset missed its ends");
        }
    }
}

static void memcpy_async_nonblocking()
{
    need_bufs();
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n = 64 * MiB + 4096;
    uint8_t *h_in = nullptr, *h_out = nullptr, *a = nullptr, *b = nullptr;
    CK(cudaMallocHost((void **)&h_in, n));
    CK(cudaMallocHost((void **)&h_out, n));
    CK(cudaMalloc((void **)&a, n));
    CK(cudaMalloc((void **)&b, n));
    for (size_t k = 0; k < n; k++) h_in[k] = byte_pattern(k, 7);
    memset(h_out, 0, n);
    for (int round = 0; round < 3; round++) {
        CK(cudaMemsetAsync(b, 0, n, s));
        CK(cudaMemcpyAsync(a, h_in, n, cudaMemcpyHostToDevice, s));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
        CK(cudaMemcpyAsync(h_out, b, n, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        EXPECT(memcmp(h_in, h_out, n) == 0, "async round trip %d differs", round);
        verify_bytes(b, n, 7, -1, "async D2D", s);
        memset(h_out, 0, n);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFreeHost(h_in));
    CK(cudaFreeHost(h_out));
    CK(cudaStreamDestroy(s));
}

static void pitch_and_2d()
{
    uint8_t *p = nullptr;
    size_t pitch = 0;
    const size_t w = 1000, h = 37;
    CK(cudaMallocPitch((void **)&p, &pitch, w, h));
    EXPECT(pitch >= w, "pitch %zu < width %zu", pitch, w);
    std::vector<uint8_t> src(w * h), back(w * h, 0);
    for (size_t k = 0; k < src.size(); k++) src[k] = byte_pattern(k, 9);
    CK(cudaMemcpy2D(p, pitch, src.data(), w, w, h, cudaMemcpyHostToDevice));
    CK(cudaMemcpy2D(back.data(), w, p, pitch, w, h, cudaMemcpyDeviceToHost));
    EXPECT(src == back, "cudaMemcpy2D round trip through a pitched allocation differs");
    CK(cudaFree(p));
}

/* Many small allocations of assorted sizes: each gets its own bytes. */
__global__ static void k_check_many(uint8_t *const *ptrs, const size_t *sizes, int n, unsigned long long *bad)
{
    for (int a = blockIdx.x; a < n; a += gridDim.x)
        for (size_t i = threadIdx.x; i < sizes[a]; i += blockDim.x)
            if (ptrs[a][i] != (uint8_t)(a * 7 + 1)) atomicAdd(bad, 1ull);
}

static void many_small_distinct()
{
    const int n = 600;
    std::vector<uint8_t *> ptrs(n);
    std::vector<size_t> sizes(n);
    uint32_t x = 12345;
    for (int a = 0; a < n; a++) {
        x = x * 1103515245u + 12345u;
        sizes[a] = 1 + (x >> 8) % 200000;
        CK(cudaMalloc((void **)&ptrs[a], sizes[a]));
        CK(cudaMemset(ptrs[a], (a * 7 + 1) & 0xff, sizes[a]));
    }
    uint8_t **dptrs = nullptr;
    size_t *dsizes = nullptr;
    unsigned long long *bad = nullptr, hbad = 0;
    CK(cudaMalloc((void **)&dptrs, n * sizeof *dptrs));
    CK(cudaMalloc((void **)&dsizes, n * sizeof *dsizes));
    CK(cudaMalloc((void **)&bad, sizeof *bad));
    CK(cudaMemcpy(dptrs, ptrs.data(), n * sizeof *dptrs, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsizes, sizes.data(), n * sizeof *dsizes, cudaMemcpyHostToDevice));
    CK(cudaMemset(bad, 0, sizeof *bad));
    k_check_many<<<256, 256>>>(dptrs, dsizes, n, bad);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost));
    EXPECT(hbad == 0, "%llu bytes of %d small allocations were overwritten by a neighbour", hbad, n);
    if (gvm.present) {
        for (int a = 0; a < n; a += 37) {
            gvm_info info;
            CKG(gvm, gvm.query(ptrs[a] + sizes[a] - 1, &info));
            EXPECT(info.base == ptrs[a] && info.size == sizes[a], "allocation %d: base %p size %zu, want %p %zu", a,
                   info.base, info.size, (void *)ptrs[a], sizes[a]);
        }
    }
    /* Free every other one, allocate again, free all. */
    for (int a = 0; a < n; a += 2) CK(cudaFree(ptrs[a]));
    for (int a = 0; a < n; a += 2) CK(cudaMalloc((void **)&ptrs[a], sizes[a]));
    for (int a = 0; a < n; a++) CK(cudaFree(ptrs[a]));
    CK(cudaFree(dptrs));
    CK(cudaFree(dsizes));
    CK(cudaFree(bad));
}

static void free_all()
{
    need_bufs();
    for (int i = 0; i < kNumSizes; i++) {
        CK(cudaFree(bufs[i]));
        if (gvm.present) {
            gvm_info info;
            gvm_status st = gvm.query(bufs[i], &info);
            EXPECT(st == GVM_ERR_UNKNOWN_POINTER, "gvm_query of freed %s -> %d, want UNKNOWN_POINTER",
                   size_name(kSizes[i]).c_str(), st);
        }
        bufs[i] = nullptr;
    }
    CK(cudaFree(nullptr));
    /* Allocating again after frees (the cache path under the shim). */
    for (int i = 0; i < kNumSizes; i++) {
        void *p = nullptr;
        CK(cudaMalloc(&p, kSizes[i]));
        fill_bytes((uint8_t *)p, kSizes[i], 300 + i);
        verify_bytes((uint8_t *)p, kSizes[i], 300 + i, -1, ("re-allocated " + size_name(kSizes[i])).c_str());
        CK(cudaFree(p));
    }
    CK(cudaGetLastError());
}

/* Freed memory goes back to the GPU, as nvidia-smi shows it: natively at
 * the free, under the shim once it has gone unused for cache_idle (100 ms). */
static void freed_memory_goes_back()
{
    CK(cudaDeviceSynchronize());
    size_t before = nvml_used(0);
    if (!before) skip("NVML cannot say how much memory device 0 uses");
    const size_t n = 2 * GiB;
    void *p[3];
    for (int i = 0; i < 3; i++) {
        CK(cudaMalloc(&p[i], i == 2 ? 96 * MiB : n));
        fill_bytes((uint8_t *)p[i], i == 2 ? 96 * MiB : n, 500 + i);
    }
    CK(cudaDeviceSynchronize());
    size_t held = nvml_used(0);
    EXPECT(held >= before + 2 * n, "NVML shows %zu MiB used, %zu MiB before 4 GiB were made", held >> 20,
           before >> 20);
    for (int i = 0; i < 3; i++) CK(cudaFree(p[i]));
    size_t now = held;
    for (int waited = 0; waited < 1000 && now > before + 64 * MiB; waited += 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        now = nvml_used(0);
    }
    EXPECT(now <= before + 64 * MiB, "1 s after freeing 4 GiB NVML shows %zu MiB used, %zu MiB before they were made",
           now >> 20, before >> 20);
}

static void malloc_async()
{
    int pools = 0;
    CK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
    if (!pools) skip("device 0 has no stream-ordered allocator");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t n : {size_t(4096), 8 * MiB}) {
        uint8_t *p = nullptr;
        CK(cudaMallocAsync((void **)&p, n, s));
        CK(cudaMemsetAsync(p, 0x5A, n, s));
        verify_bytes(p, n, 0, 0x5A, "cudaMallocAsync memory", s);
        fill_bytes(p, n, 11, s);
        verify_bytes(p, n, 11, -1, "cudaMallocAsync memory", s);
        CK(cudaFreeAsync(p, s));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
}

static void mem_get_info()
{
    size_t f0 = 0, t0 = 0, f1 = 0, t1 = 0, f2 = 0, t2 = 0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaMemGetInfo(&f0, &t0));
    EXPECT(t0 > 0 && f0 <= t0, "free %zu total %zu", f0, t0);
    EXPECT(t0 <= prop.totalGlobalMem && t0 >= prop.totalGlobalMem / 2, "total %zu vs totalGlobalMem %zu", t0,
           (size_t)prop.totalGlobalMem);
    const size_t n = 256 * MiB;
    if (f0 < n + 512 * MiB) skip("only %zu MiB free", f0 / MiB);
    void *p = nullptr;
    CK(cudaMalloc(&p, n));
    CK(cudaMemset(p, 1, n));
    CK(cudaMemGetInfo(&f1, &t1));
    EXPECT(t1 == t0, "total changed: %zu -> %zu", t0, t1);
    EXPECT(f1 + 192 * MiB <= f0, "free went %zu -> %zu MiB after a 256 MiB allocation", f0 / MiB, f1 / MiB);
    CK(cudaFree(p));
    CK(cudaMemGetInfo(&f2, &t2));
    EXPECT(f2 >= f1 + 192 * MiB, "free went %zu -> %zu MiB after freeing 256 MiB", f1 / MiB, f2 / MiB);
}

/* Spins about `cycles` clocks, then sums b (so b must still be mapped). */
__global__ static void k_spin_then_sum(const uint32_t *b, size_t n, long long cycles, unsigned long long *c)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    unsigned long long sum = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum += b[i];
    atomicAdd(c, sum);
}

/* A buffer freed while a kernel still reads it: the kernel is not harmed,
 * whether cudaFree waits for it (native) or returns at once and keeps the
 * memory from reuse until the device has finished (gvmshim's quarantine).
 * The memory is allocated again at once and overwritten from another
 * stream while the kernel still spins: the kernel must see the old data. */
static void free_while_kernel_runs()
{
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) != cudaSuccess || khz <= 0) {
        (void)cudaGetLastError();
        khz = 1500000;
    }
    long long cycles = (long long)khz * 200;   /* ~200 ms */
    cudaStream_t other;
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    for (size_t n_bytes : {8 * MiB, 64 * KiB}) {
        size_t n = n_bytes / 4;
        uint32_t *b = nullptr, *again = nullptr;
        unsigned long long *c = nullptr, got = 0, want = 0;
        CK(cudaMalloc((void **)&b, n_bytes));
        CK(cudaMalloc((void **)&c, sizeof *c));
        fill_words(b, n, 0, 77);
        CK(cudaMemset(c, 0, sizeof *c));
        CK(cudaDeviceSynchronize());
        for (size_t i = 0; i < n; i++) want += word_pattern(i, 77);
        cudaEvent_t done;
        CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        k_spin_then_sum<<<8, 256>>>(b, n, cycles, c);
        CK(cudaGetLastError());
        CK(cudaEventRecord(done, 0));
        auto t0 = std::chrono::steady_clock::now();
        CK(cudaFree(b));
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        cudaError_t q = cudaEventQuery(done);
        if (q == cudaErrorNotReady) (void)cudaGetLastError();
        /* Same size again, overwritten at once from a stream that does not
         * wait for the legacy stream. */
        CK(cudaMalloc((void **)&again, n_bytes));
        CK(cudaMemsetAsync(again, 0xEE, n_bytes, other));
        CK(cudaStreamSynchronize(other));
        printf("     %s: cudaFree returned after %.1f ms (kernel %s); the same size was allocated again %s\n",
               size_name(n_bytes).c_str(), ms, q == cudaSuccess ? "finished" : "still running",
               again == b ? "at the same address" : "elsewhere");
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(&got, c, sizeof got, cudaMemcpyDeviceToHost));
        EXPECT(got == want, "%s: checksum %llu, want %llu: the freed memory changed under the running kernel",
               size_name(n_bytes).c_str(), got, want);
        verify_bytes((const uint8_t *)again, n_bytes, 0, 0xEE, "memory allocated again after the free");
        CK(cudaEventDestroy(done));
        CK(cudaFree(again));
        CK(cudaFree(c));
    }
    CK(cudaStreamDestroy(other));
}

int main()
{
    watchdog(150);
    int ndev = device_count_or_skip();
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        printf("SKIP: cannot create a context on device 0\n0 passed, 0 failed\n");
        return 77;
    }
    gvm = load_gvm();
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device 0: %s, %zu MiB; %d device(s); gvmshim API %s\n", prop.name,
               (size_t)prop.totalGlobalMem / MiB, ndev, gvm.present ? "present" : "absent (native run)");
    Runner r;
    r.run("alloc_fill_verify", alloc_fill_verify);
    r.run("pointer_attributes", pointer_attributes);
    r.run("address_range", address_range);
    r.run("gvm_knows_every_pointer", gvm_knows_every_pointer);
    r.run("memcpy_round_trips", memcpy_round_trips);
    r.run("memset_verify", memset_verify);
    r.run("memcpy_async_nonblocking", memcpy_async_nonblocking);
    r.run("pitch_and_2d", pitch_and_2d);
    r.run("many_small_distinct", many_small_distinct);
    r.run("free_all", free_all);
    r.run("freed_memory_goes_back", freed_memory_goes_back);
    r.run("malloc_async", malloc_async);
    r.run("mem_get_info", mem_get_info);
    r.run("free_while_kernel_runs", free_while_kernel_runs);
    return r.finish();
}
