/* migrate: end-to-end throughput of gvm_migrate next to the plain copy
 * bandwidth of the same link, measured in the same process. Runs only
 * under gvmshim (scripts/bench sets GVM_HOST_POOL and GVM_POOL_LIMIT large
 * enough that warm moves reuse memory).
 *
 * For each size (default 64 MiB, 1 GiB, 8 GiB; a size that does not fit in
 * free device or host memory is skipped): an allocation is filled with a
 * pattern on device 0, then moved device -> host and back --rounds times
 * (the first move of each direction is reported as cold, the median of the
 * others as warm); with two GPUs with peer access also device 0 -> device 1
 * and back. After every move a kernel checks the pattern, so a fast but
 * wrong move cannot pass. The link: pinned cudaMemcpy H2D/D2H with a
 * cudaMallocHost buffer, and cudaMemcpyPeer, with copies of
 * min(size, 1 GiB), best of 8 (a slow stretch of the host must not
 * lower the link and flatter the ratio).
 *
 *     bench-migrate [--sizes 64M,1G,8G] [--rounds 4] */
#define GT_FAIL_EXITS
#include "gpu_test.h"
#include "gvmshim.h"

#include <dlfcn.h>

using namespace gt;

static decltype(&gvm_migrate) g_migrate;
static decltype(&gvm_strerror) g_strerror;
static unsigned long long *g_bad;   /* pinned, mapped: [mismatches] */

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

__global__ void k_check(const uint32_t *p, size_t n, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != pattern(i);
    if (mine) atomicAdd(bad, mine);
}

static void check(const uint32_t *p, size_t n, const char *after)
{
    *g_bad = 0;
    k_check<<<2048, 256>>>(p, n, g_bad);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (*g_bad) fail_at(__FILE__, __LINE__, "after %s: %llu of %zu words are wrong", after, *g_bad, n);
}

static double move_ms(const void *p, int to)
{
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    gvm_status st = g_migrate(p, to);
    double t = (now_us() - t0) / 1000;
    if (st != GVM_OK) fail_at(__FILE__, __LINE__, "gvm_migrate(%p, %d) -> %d (%s)", p, to, st, g_strerror(st));
    return t;
}

static size_t parse_size(const char *s)
{
    char *end = nullptr;
    double v = strtod(s, &end);
    size_t m = 1;
    if (end && (*end == 'K' || *end == 'k')) m = KiB;
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

static std::string row(size_t size, const char *dir, double first_ms, const std::vector<double> &warm_ms,
                       double link, const char *link_what, size_t link_bytes)
{
    std::vector<double> gbps;
    for (double ms : warm_ms) gbps.push_back((double)size / (ms * 1e6));
    char nb[32];
    printf("%-8s %-12s first %8.2f ms (%6.2f GB/s)  warm %8.2f ms (%6.2f GB/s)  link %6.2f GB/s  ratio %.2f\n",
           human(size, nb, sizeof nb), dir, first_ms, (double)size / (first_ms * 1e6), median(warm_ms),
           median(gbps), link, link > 0 ? median(gbps) / link : 0);
    fflush(stdout);
    Obj o;
    o.n("size", (double)size).str("dir", dir).n("first_ms", first_ms).n("first_gbps", (double)size / (first_ms * 1e6));
    o.n("warm_ms", median(warm_ms)).n("warm_gbps", median(gbps)).add("warm_all_ms", nums(warm_ms));
    o.n("link_gbps", link).str("link", link_what).n("link_bytes", (double)link_bytes);
    return o.done();
}

int main(int argc, char **argv)
{
    watchdog(300);
    std::vector<size_t> sizes = {64 * MiB, 1 * GiB, 8 * GiB};
    int rounds = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            sizes.clear();
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(nullptr, ",")) sizes.push_back(parse_size(tok));
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--sizes 64M,1G,8G] [--rounds N]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 2) rounds = 2;
    int ndev = device_count_or_skip();
    g_migrate = (decltype(g_migrate))dlsym(RTLD_DEFAULT, "gvm_migrate");
    g_strerror = (decltype(g_strerror))dlsym(RTLD_DEFAULT, "gvm_strerror");
    if (!g_migrate || !g_strerror) {
        fprintf(stderr, "bench-migrate needs gvmshim: run it with LD_PRELOAD=libgvmshim.so\n");
        return 2;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CK(cudaHostAlloc((void **)&g_bad, sizeof *g_bad, cudaHostAllocMapped | cudaHostAllocPortable));
    bool peer = false;
    if (ndev >= 2) {
        int a = 0, b = 0;
        CK(cudaDeviceCanAccessPeer(&a, 0, 1));
        CK(cudaDeviceCanAccessPeer(&b, 1, 0));
        peer = a && b;
        if (peer) {
            cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
            CK(cudaSetDevice(1));
            e = cudaDeviceEnablePeerAccess(0, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
            CK(cudaSetDevice(0));
            (void)cudaGetLastError();
        }
    }
    printf("devices %d, peer moves %s\n", ndev, peer ? "on" : "off (needs 2 GPUs with peer access)");

    std::vector<std::string> rows, skipped;
    for (size_t size : sizes) {
        char nb[32];
        size_t link_n = std::min(size, (size_t)GiB);
        size_t dfree = 0, dtotal = 0;
        CK(cudaMemGetInfo(&dfree, &dtotal));
        size_t hfree = host_available();
        size_t need_dev = size + link_n + 2 * GiB, need_host = size + link_n + 4 * GiB;
        if (dfree < need_dev || (hfree && hfree < need_host)) {
            printf("%-8s skipped: needs %zu MiB device (%zu free) and %zu MiB host (%zu available)\n",
                   human(size, nb, sizeof nb), need_dev / MiB, dfree / MiB, need_host / MiB, hfree / MiB);
            skipped.push_back(q(human(size, nb, sizeof nb)));
            continue;
        }
        size_t n = size / 4;
        uint32_t *p = nullptr;
        CK(cudaMalloc((void **)&p, size));
        k_fill<<<2048, 256>>>(p, n);
        CK(cudaGetLastError());
        check(p, n, "the fill");

        /* The link, natively: pinned host buffer <-> device buffer. */
        void *h = nullptr, *d = nullptr;
        CK(cudaMallocHost(&h, link_n));
        CK(cudaMalloc(&d, link_n));
        memset(h, 0, link_n);
        double h2d = link_gbps(link_n, [&] { CK(cudaMemcpy(d, h, link_n, cudaMemcpyHostToDevice)); });
        double d2h = link_gbps(link_n, [&] { CK(cudaMemcpy(h, d, link_n, cudaMemcpyDeviceToHost)); });
        CK(cudaFreeHost(h));

        std::vector<double> to_host, to_dev;
        for (int r = 0; r < rounds; r++) {
            to_host.push_back(move_ms(p, GVM_HOST));
            check(p, n, "a move to host");
            to_dev.push_back(move_ms(p, 0));
            check(p, n, "a move back to device 0");
        }
        rows.push_back(row(size, "d2h", to_host[0], std::vector<double>(to_host.begin() + 1, to_host.end()), d2h,
                           "pinned cudaMemcpy D2H", link_n));
        rows.push_back(row(size, "h2d", to_dev[0], std::vector<double>(to_dev.begin() + 1, to_dev.end()), h2d,
                           "pinned cudaMemcpy H2D", link_n));

        if (peer) {
            size_t f1 = 0, t1 = 0;
            CK(cudaSetDevice(1));
            CK(cudaMemGetInfo(&f1, &t1));
            void *d1 = nullptr;
            bool fits = f1 >= size + link_n + 2 * GiB;
            if (fits) CK(cudaMalloc(&d1, link_n));
            CK(cudaSetDevice(0));
            if (!fits) {
                printf("%-8s peer moves skipped: device 1 has %zu MiB free\n", human(size, nb, sizeof nb), f1 / MiB);
            } else {
                double p01 = link_gbps(link_n, [&] { CK(cudaMemcpyPeer(d1, 1, d, 0, link_n)); });
                double p10 = link_gbps(link_n, [&] { CK(cudaMemcpyPeer(d, 0, d1, 1, link_n)); });
                std::vector<double> to_peer, back;
                for (int r = 0; r < rounds; r++) {
                    to_peer.push_back(move_ms(p, 1));
                    check(p, n, "a move to device 1");
                    back.push_back(move_ms(p, 0));
                    check(p, n, "a move back from device 1");
                }
                rows.push_back(row(size, "d2p", to_peer[0], std::vector<double>(to_peer.begin() + 1, to_peer.end()),
                                   p01, "cudaMemcpyPeer 0->1", link_n));
                rows.push_back(row(size, "p2d", back[0], std::vector<double>(back.begin() + 1, back.end()), p10,
                                   "cudaMemcpyPeer 1->0", link_n));
                CK(cudaSetDevice(1));
                CK(cudaFree(d1));
                CK(cudaSetDevice(0));
            }
        }
        CK(cudaFree(d));
        CK(cudaFree(p));
        CK(cudaDeviceSynchronize());
    }
    Obj o = header("migrate", true);
    o.n("peer", peer ? 1 : 0).n("rounds", rounds).add("skipped", list(skipped)).add("rows", list(rows));
    emit(o);
    return 0;
}
