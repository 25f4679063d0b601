/* pause: gvm_pause(tag, GVM_PAUSE_KEEP) and gvm_resume(tag) of a tagged
 * allocation next to the link they cross, measured in the same process.
 * Runs only under gvmshim.
 *
 * One size per process (--size, default 1 GiB), so the first cycle is the
 * first move to host in a fresh process ("cold"): the tag is pushed, the
 * allocation made and filled by a kernel, and after --settle-ms (default 0:
 * at once; a program loading a model has seconds here, in which gvmshim
 * readies host memory in the background) it is paused and resumed
 * --cycles times (default 3). Each call is timed wall to wall after a
 * device sync; a kernel sums the data before the first pause and after
 * every resume, and the sums must agree. The link is measured last (its
 * cudaMallocHost buffer must not warm anything up): pinned cudaMemcpy D2H
 * and H2D of min(size, 1 GiB), best of 8 (a slow stretch of the host must not
 * lower the link and flatter the ratio).
 *
 * --unmapped: gvm_pause(tag, GVM_PAUSE_UNMAPPED), the copy kept in host
 * memory that is not mapped at the allocation's address.
 *
 * --create-probe: at the end, the rate of creating pinned host memory
 * natively (1, 4, 8 threads), what bounds a move to host without ready
 * memory.
 *
 *     bench-pause [--size 1G] [--cycles 3] [--settle-ms 0] [--unmapped] [--create-probe] */
#define GT_FAIL_EXITS
#include "gpu_test.h"
#include "gvmshim.h"

#include <cuda.h>
#include <dlfcn.h>
#include <thread>

using namespace gt;

static unsigned long long *g_sum;   /* pinned, mapped */

__device__ __host__ static inline uint32_t pattern(uint64_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u;
    return h ^ (h >> 15);
}

__global__ void k_fill(uint32_t *p, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i);
}

/* A position-weighted sum: a word moved to the wrong place changes it. */
__global__ void k_sum(const uint32_t *p, size_t n, unsigned long long *sum)
{
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        mine += (unsigned long long)p[i] * (i % 65521 + 1);
    atomicAdd(sum, mine);
}

static unsigned long long checksum(const uint32_t *p, size_t n)
{
    *g_sum = 0;
    k_sum<<<2048, 256>>>(p, n, g_sum);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return *g_sum;
}

static size_t parse_size(const char *s)
{
    char *end = nullptr;
    double v = strtod(s, &end);
    size_t m = 1;
    if (end && (*end == 'M' || *end == 'm')) m = MiB;
    if (end && (*end == 'G' || *end == 'g')) m = GiB;
    return (size_t)(v * (double)m);
}

static size_t host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * KiB;
}

/* GB/s of creating (and releasing, untimed) 1 GiB of pinned host memory
 * in 64 MiB pieces on `threads` threads: the rate that bounds a move to
 * host without ready memory, and the background fill's. */
static double host_create_gbps(int threads)
{
    auto create = driver_fn<decltype(&cuMemCreate)>("cuMemCreate");
    auto release = driver_fn<decltype(&cuMemRelease)>("cuMemRelease");
    auto attr = driver_fn<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
    int numa = 0, numa_vmm = 0;
    attr(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
    attr(&numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = numa_vmm ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
    prop.location.id = numa_vmm && numa >= 0 ? numa : 0;
    const size_t piece = 64 * MiB, n = GiB / piece;
    std::vector<CUmemGenericAllocationHandle> h(n);
    std::vector<CUresult> rc(n, CUDA_SUCCESS);
    double t0 = now_us();
    std::vector<std::thread> t;
    for (int k = 0; k < threads; k++)
        t.emplace_back([&, k] {
            for (size_t i = (size_t)k; i < n; i += (size_t)threads) rc[i] = create(&h[i], piece, &prop, 0);
        });
    for (auto &x : t) x.join();
    double us = now_us() - t0;
    for (size_t i = 0; i < n; i++) CKD(rc[i]);
    for (size_t i = 0; i < n; i++) CKD(release(h[i]));
    return (double)GiB / (us * 1e3);
}

template <typename F> static double timed_ms(F call)
{
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    call();
    return (now_us() - t0) / 1000;
}

int main(int argc, char **argv)
{
    watchdog(300);
    size_t size = GiB;
    int cycles = 3, settle_ms = 0;
    bool probe = false, unmapped = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            size = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "--cycles") && i + 1 < argc) {
            cycles = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--settle-ms") && i + 1 < argc) {
            settle_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--create-probe")) {
            probe = true;
        } else if (!strcmp(argv[i], "--unmapped")) {
            unmapped = true;
        } else {
            fprintf(stderr, "usage: %s [--size 1G] [--cycles N] [--settle-ms MS] [--unmapped] [--create-probe]\n", argv[0]);
            return 2;
        }
    }
    if (cycles < 2) cycles = 2;
    device_count_or_skip();
    Gvm g = load_gvm();
    if (!g.present || !g.pause || !g.resume || !g.tag_push) {
        fprintf(stderr, "bench-pause needs gvmshim: run it with LD_PRELOAD=libgvmshim.so\n");
        return 2;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CK(cudaHostAlloc((void **)&g_sum, sizeof *g_sum, cudaHostAllocMapped | cudaHostAllocPortable));
    char nb[32];
    size_t link_n = std::min(size, (size_t)GiB);
    size_t dfree = 0, dtotal = 0;
    CK(cudaMemGetInfo(&dfree, &dtotal));
    size_t hfree = host_available();
    if (dfree < size + link_n + GiB || (hfree && hfree < 2 * size + link_n + 4 * GiB)) {
        printf("%s skipped: needs %zu MiB device (%zu free) and %zu MiB host (%zu available)\n",
               human(size, nb, sizeof nb), (size + link_n + GiB) / MiB, dfree / MiB,
               (2 * size + link_n + 4 * GiB) / MiB, hfree / MiB);
        Obj o = header("pause", true);
        o.n("size", (double)size).str("skipped", "memory");
        emit(o);
        return 0;
    }

    CKG(g, g.tag_push("bench-pause"));
    uint32_t *p = nullptr;
    CK(cudaMalloc((void **)&p, size));
    CKG(g, g.tag_pop());
    size_t n = size / 4;
    k_fill<<<2048, 256>>>(p, n);
    CK(cudaGetLastError());
    unsigned long long want = checksum(p, n);
    if (settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));

    std::vector<double> pause_ms, resume_ms;
    for (int c = 0; c < cycles; c++) {
        pause_ms.push_back(timed_ms([&] { CKG(g, g.pause("bench-pause", unmapped ? GVM_PAUSE_UNMAPPED : GVM_PAUSE_KEEP)); }));
        gvm_info info;
        CKG(g, g.query(p, &info));
        if (!info.paused || info.location != GVM_HOST || info.bytes_on_device)
            fail_at(__FILE__, __LINE__, "after gvm_pause: paused %d, location %d, %zu bytes on the device",
                    info.paused, info.location, info.bytes_on_device);
        resume_ms.push_back(timed_ms([&] { CKG(g, g.resume("bench-pause")); }));
        CKG(g, g.query(p, &info));
        if (info.paused || info.location != 0)
            fail_at(__FILE__, __LINE__, "after gvm_resume: paused %d, location %d", info.paused, info.location);
        unsigned long long got = checksum(p, n);
        if (got != want) fail_at(__FILE__, __LINE__, "cycle %d: checksum %llx, want %llx", c + 1, got, want);
        printf("%s cycle %d: pause %8.2f ms (%6.2f GB/s)  resume %8.2f ms (%6.2f GB/s)  checksum ok\n",
               human(size, nb, sizeof nb), c + 1, pause_ms.back(), (double)size / (pause_ms.back() * 1e6),
               resume_ms.back(), (double)size / (resume_ms.back() * 1e6));
        fflush(stdout);
    }
    CK(cudaFree(p));

    void *h = nullptr, *d = nullptr;
    CK(cudaMallocHost(&h, link_n));
    CK(cudaMalloc(&d, link_n));
    memset(h, 0, link_n);
    double h2d = link_gbps(link_n, [&] { CK(cudaMemcpy(d, h, link_n, cudaMemcpyHostToDevice)); });
    double d2h = link_gbps(link_n, [&] { CK(cudaMemcpy(h, d, link_n, cudaMemcpyDeviceToHost)); });
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    printf("link: D2H %.2f GB/s, H2D %.2f GB/s\n", d2h, h2d);
    std::vector<std::string> create_rates;
    if (probe)
        for (int threads : {1, 4, 8}) {
            double r = host_create_gbps(threads);
            printf("creating pinned host memory (64 MiB pieces), %d thread(s): %.2f GB/s\n", threads, r);
            Obj c;
            c.n("threads", threads).n("gbps", r);
            create_rates.push_back(c.done());
        }

    Obj o = header("pause", true);
    o.n("size", (double)size).n("cycles", cycles).n("settle_ms", settle_ms).n("unmapped", unmapped ? 1 : 0);
    o.add("pause_ms", nums(pause_ms)).add("resume_ms", nums(resume_ms));
    o.n("d2h_gbps", d2h).n("h2d_gbps", h2d).n("link_bytes", (double)link_n).str("checksum", "ok");
    o.add("host_create", list(create_rates));
    emit(o);
    return 0;
}
