/* grow: gvm_realloc growing an allocation in place (S -> 2S) next to its
 * native anchor measured in the same process: one cuMemCreate + cuMemMap +
 * cuMemSetAccess of the extra S bytes into a range reserved beforehand
 * (what a hand-written growable vector on the VMM API does).
 *
 * For each size S (default 1 GiB, 8 GiB; skipped when 3S does not fit in
 * free device memory), two patterns, each timed natively and under the shim:
 *  - fresh: every round starts from nothing (native and shim rounds
 *    alternate).
 *    native: reserve 2S, create and map the first S (untimed), then time
 *    create+map+access of the second S; all released at the round's end.
 *    shim (when gvmshim is preloaded): cudaMalloc(S), a kernel fills it,
 *    then gvm_realloc(p, 2S) is timed; the base must not change (gvm_query),
 *    the first S must hold the pattern and the new S must be writable (a
 *    kernel checks both); cudaFree at the round's end.
 *  - regrow: one allocation shrunk back to S between rounds, then grown
 *    again. native: the second S is unmapped and released between rounds;
 *    shim: gvm_realloc(p, S). A piece released just before is slow to come
 *    back from the driver (measured on an H100: cuMemCreate of 8 GiB takes
 *    ~2.2 ms right after an 8 GiB release, ~0.14 ms otherwise), so this
 *    pattern is compared with its own native figure.
 * The first round of each is reported as cold, the median of the others as
 * warm. The anchor's handle asks for nothing but pinned device memory; the
 * shim's pieces also ask for POSIX file-descriptor export and RDMA where
 * the device offers them, so the fresh pattern has a second anchor
 * (native-export) whose handle asks for the same.
 *
 * With --sweep S: natively, S in pieces of 64 MiB, 256 MiB, 1 GiB and S,
 * created by 1, 4 or 8 threads, mapped in order, one access grant: what
 * grow_block and parallel creation would buy on this driver.
 *
 *     bench-grow [--sizes 1G,8G] [--rounds 5] [--sweep 8G] */
#define GT_FAIL_EXITS
#include "gpu_test.h"
#include "gvmshim.h"

#include <cuda.h>
#include <dlfcn.h>
#include <thread>

using namespace gt;

static unsigned long long *g_bad;   /* pinned, mapped: [mismatches] */

__device__ __host__ static inline uint32_t pattern(uint64_t i, uint32_t seed)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed;
    return h ^ (h >> 15);
}

__global__ void k_fill(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, seed);
}

__global__ void k_check(const uint32_t *p, size_t n, uint32_t seed, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != pattern(i, seed);
    if (mine) atomicAdd(bad, mine);
}

static void fill(uint32_t *p, size_t n, uint32_t seed)
{
    k_fill<<<2048, 256>>>(p, n, seed);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

static void check(const uint32_t *p, size_t n, uint32_t seed, const char *after)
{
    *g_bad = 0;
    k_check<<<2048, 256>>>(p, n, seed, g_bad);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (*g_bad) fail_at(__FILE__, __LINE__, "after %s: %llu of %zu words are wrong", after, *g_bad, n);
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

/* The driver's VMM calls, through entry points (no -lcuda: without a
 * driver the program still starts, and skips). */
struct Vmm {
    decltype(&cuMemGetAllocationGranularity) granularity;
    decltype(&cuMemAddressReserve) reserve;
    decltype(&cuMemAddressFree) unreserve;
    decltype(&cuMemCreate) create;
    decltype(&cuMemRelease) release;
    decltype(&cuMemMap) map;
    decltype(&cuMemUnmap) unmap;
    decltype(&cuMemSetAccess) access;
    decltype(&cuDeviceGetAttribute) attribute;
};

static Vmm vmm(void)
{
    Vmm v;
    v.granularity = driver_fn<decltype(v.granularity)>("cuMemGetAllocationGranularity");
    v.reserve = driver_fn<decltype(v.reserve)>("cuMemAddressReserve");
    v.unreserve = driver_fn<decltype(v.unreserve)>("cuMemAddressFree");
    v.create = driver_fn<decltype(v.create)>("cuMemCreate");
    v.release = driver_fn<decltype(v.release)>("cuMemRelease");
    v.map = driver_fn<decltype(v.map)>("cuMemMap");
    v.unmap = driver_fn<decltype(v.unmap)>("cuMemUnmap");
    v.access = driver_fn<decltype(v.access)>("cuMemSetAccess");
    v.attribute = driver_fn<decltype(v.attribute)>("cuDeviceGetAttribute");
    return v;
}

struct Anchor {
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    size_t gran;
};

/* exported: the handle asks for what the shim's pieces ask for (POSIX
 * file-descriptor export and RDMA where device 0 offers them), so the
 * driver's part of a shim growth has its own native figure. */
static Anchor anchor_setup(const Vmm &v, bool exported)
{
    Anchor a;
    memset(&a, 0, sizeof a);
    a.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    a.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.prop.location.id = 0;
    if (exported) {
        int fd = 0, rdma = 0;
        CKD(v.attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
        CKD(v.attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0));
        if (fd) a.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        if (rdma) a.prop.allocFlags.gpuDirectRDMACapable = 1;
    }
    a.acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.acc.location.id = 0;
    a.acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CKD(v.granularity(&a.gran, &a.prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    return a;
}

/* Times create+map+access of [va+S, va+2S) (ms); the grown range must work. */
static double anchor_grow(const Vmm &v, const Anchor &a, CUdeviceptr va, size_t s, CUmemGenericAllocationHandle *h1,
                          uint32_t seed)
{
    /* As in the shim's rounds, a kernel has just written the first half, so
     * both meet the driver in the same state. */
    fill((uint32_t *)va, s / 4, seed ^ 0x5a5a);
    double t0 = now_us();
    CKD(v.create(h1, s, &a.prop, 0));
    CKD(v.map(va + s, s, 0, *h1, 0));
    CKD(v.access(va + s, s, &a.acc, 1));
    double ms = (now_us() - t0) / 1000;
    fill((uint32_t *)va, 2 * s / 4, seed);
    check((const uint32_t *)va, 2 * s / 4, seed, "the native growth");
    return ms;
}

/* Native, both patterns: `regrow` keeps the first half mapped across rounds
 * and releases only the second half between them. */
static std::vector<double> anchor_rounds(const Vmm &v, size_t s, int rounds, bool regrow, bool exported = false)
{
    Anchor a = anchor_setup(v, exported);
    std::vector<double> ms;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h0 = 0, h1 = 0;
    for (int r = 0; r < rounds; r++) {
        if (!regrow || r == 0) {
            CKD(v.reserve(&va, 2 * s, a.gran, 0, 0));
            CKD(v.create(&h0, s, &a.prop, 0));
            CKD(v.map(va, s, 0, h0, 0));
            CKD(v.access(va, s, &a.acc, 1));
        }
        ms.push_back(anchor_grow(v, a, va, s, &h1, 3 + r));
        CKD(v.unmap(va + s, s));
        CKD(v.release(h1));
        if (!regrow || r + 1 == rounds) {
            CKD(v.unmap(va, s));
            CKD(v.release(h0));
            CKD(v.unreserve(va, 2 * s));
        }
    }
    return ms;
}

/* What piece size and threads cost natively: growing [S, 2S) in pieces of
 * `piece` bytes, created by `threads` threads at once, mapped in order,
 * one access grant over the span (what gvmshim does). Median ms of
 * `rounds`. Tells which grow_block and whether parallel creation pays on
 * this driver. */
static double sweep_once(const Vmm &v, size_t s, size_t piece, int threads)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t n = s / piece;
    CUdeviceptr va = 0;
    CKD(v.reserve(&va, s, piece, 0, 0));
    std::vector<CUmemGenericAllocationHandle> h(n);
    std::vector<CUresult> rc(n, CUDA_SUCCESS);
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    if (threads <= 1) {
        for (size_t i = 0; i < n; i++) rc[i] = v.create(&h[i], piece, &prop, 0);
    } else {
        std::vector<std::thread> t;
        for (int k = 0; k < threads; k++)
            t.emplace_back([&, k] {
                for (size_t i = (size_t)k; i < n; i += (size_t)threads) rc[i] = v.create(&h[i], piece, &prop, 0);
            });
        for (auto &x : t) x.join();
    }
    for (size_t i = 0; i < n; i++) CKD(rc[i]);
    for (size_t i = 0; i < n; i++) CKD(v.map(va + i * piece, piece, 0, h[i], 0));
    CKD(v.access(va, s, &acc, 1));
    double ms = (now_us() - t0) / 1000;
    CKD(v.unmap(va, s));
    for (size_t i = 0; i < n; i++) CKD(v.release(h[i]));
    CKD(v.unreserve(va, s));
    return ms;
}

static std::string row(const char *what, size_t s, const std::vector<double> &ms, int pieces)
{
    std::vector<double> warm(ms.begin() + 1, ms.end());
    char nb[32];
    printf("%-7s %8s -> 2x: first %8.3f ms  warm %8.3f ms (median of %zu)%s\n", what, human(s, nb, sizeof nb),
           ms[0], median(warm), warm.size(), pieces ? format("  pieces %d", pieces).c_str() : "");
    fflush(stdout);
    Obj o;
    o.str("what", what).n("size", (double)s).n("first_ms", ms[0]).n("warm_ms", median(warm));
    o.add("all_ms", nums(ms)).n("pieces", pieces);
    return o.done();
}

/* Under the shim, both patterns. Returns the ms of each round (empty when
 * the reservation leaves no room to grow in place); *pieces: pieces added. */
static std::vector<double> shim_rounds(const Gvm &g, size_t s, int rounds, bool regrow, int *pieces)
{
    std::vector<double> ms;
    uint32_t *p = nullptr;
    gvm_info before, after;
    for (int r = 0; r < rounds; r++) {
        if (!p) {
            CK(cudaMalloc((void **)&p, s));
            CKG(g, g.query(p, &before));
            if (before.reserved < 2 * s) {
                char nb[32];
                printf("%-8s shim skipped: the reservation holds %zu MiB (GVM_HEADROOM below 100%%?)\n",
                       human(s, nb, sizeof nb), before.reserved / MiB);
                CK(cudaFree(p));
                return {};
            }
        }
        fill(p, s / 4, 7 + r);
        double t0 = now_us();
        CKG(g, g.realloc(p, 2 * s));
        ms.push_back((now_us() - t0) / 1000);
        CKG(g, g.query(p, &after));
        if (after.base != before.base || after.size != 2 * s)
            fail_at(__FILE__, __LINE__, "gvm_realloc moved or mis-sized the allocation: base %p -> %p, size %zu",
                    before.base, after.base, after.size);
        *pieces = (int)(after.pieces - before.pieces);
        check(p, s / 4, 7 + r, "the growth (old half)");
        k_fill<<<2048, 256>>>(p + s / 4, s / 4, 99);
        CK(cudaGetLastError());
        check(p + s / 4, s / 4, 99, "a write to the new half");
        check(p, s / 4, 7 + r, "a write to the new half (old half)");
        if (regrow && r + 1 < rounds) {
            CKG(g, g.realloc(p, s));
        } else {
            CK(cudaFree(p));
            CK(cudaDeviceSynchronize());
            p = nullptr;
        }
    }
    return ms;
}

int main(int argc, char **argv)
{
    watchdog(300);
    std::vector<size_t> sizes = {1 * GiB, 8 * GiB};
    int rounds = 5;
    size_t sweep_size = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            sizes.clear();
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(nullptr, ",")) sizes.push_back(parse_size(tok));
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--sweep") && i + 1 < argc) {
            sweep_size = parse_size(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--sizes 1G,8G] [--rounds N] [--sweep 8G]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 2) rounds = 2;
    device_count_or_skip();
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CK(cudaHostAlloc((void **)&g_bad, sizeof *g_bad, cudaHostAllocMapped | cudaHostAllocPortable));
    Vmm v = vmm();
    Gvm g = load_gvm();
    printf("gvmshim %s\n", g.present ? "preloaded: native anchor and gvm_realloc" : "absent: native anchor only");

    std::vector<std::string> rows, skipped;
    for (size_t s : sizes) {
        char nb[32];
        size_t dfree = 0, dtotal = 0;
        CK(cudaMemGetInfo(&dfree, &dtotal));
        if (dfree < 3 * s) {
            printf("%-8s skipped: needs %zu MiB free, %zu free\n", human(s, nb, sizeof nb), 3 * s / MiB, dfree / MiB);
            skipped.push_back(q(human(s, nb, sizeof nb)));
            continue;
        }
        /* fresh: native and shim rounds alternate, so both meet the driver
         * in the same state (a release just before slows a create). */
        std::vector<double> nat, exported, shim;
        int pieces = 0;
        for (int r = 0; r < rounds; r++) {
            nat.push_back(anchor_rounds(v, s, 1, false)[0]);
            exported.push_back(anchor_rounds(v, s, 1, false, true)[0]);
            if (!g.present) continue;
            std::vector<double> one = shim_rounds(g, s, 1, false, &pieces);
            if (one.empty()) break;
            shim.push_back(one[0]);
        }
        rows.push_back(row("native", s, nat, 1));
        rows.push_back(row("native-export", s, exported, 1));
        if (shim.size() == (size_t)rounds) rows.push_back(row("shim", s, shim, pieces));
        rows.push_back(row("native-regrow", s, anchor_rounds(v, s, rounds, true), 1));
        if (!g.present || shim.size() != (size_t)rounds) continue;
        shim = shim_rounds(g, s, rounds, true, &pieces);
        if (!shim.empty()) rows.push_back(row("shim-regrow", s, shim, pieces));
    }
    std::vector<std::string> sweep;
    if (sweep_size) {
        size_t dfree = 0, dtotal = 0;
        CK(cudaMemGetInfo(&dfree, &dtotal));
        if (dfree < sweep_size + GiB) {
            printf("sweep skipped: needs %zu MiB free\n", (sweep_size + GiB) / MiB);
        } else {
            for (size_t piece : {64 * MiB, 256 * MiB, 1 * GiB, sweep_size})
                for (int threads : {1, 4, 8}) {
                    if (piece > sweep_size || (piece == sweep_size && threads > 1)) continue;
                    std::vector<double> ms;
                    for (int r = 0; r < 3; r++) ms.push_back(sweep_once(v, sweep_size, piece, threads));
                    char nb[32], pb[32];
                    printf("sweep %s in pieces of %s, %d thread(s): %.3f ms\n", human(sweep_size, nb, sizeof nb),
                           human(piece, pb, sizeof pb), threads, median(ms));
                    Obj o;
                    o.n("size", (double)sweep_size).n("piece", (double)piece).n("threads", threads);
                    o.n("ms", median(ms));
                    sweep.push_back(o.done());
                }
        }
    }
    Obj o = header("grow", g.present);
    o.n("rounds", rounds).add("skipped", list(skipped)).add("rows", list(rows)).add("sweep", list(sweep));
    emit(o);
    return 0;
}
