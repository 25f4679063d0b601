/* Many threads allocating, writing, copying and freeing at once, as a
 * data loader or a multi-stream server does, natively and under the shim:
 * no buffer may change while it is live, whatever the other threads reuse,
 * spill or free beside it.
 *
 * Each of 8 threads, on its own non-blocking stream, repeats: allocate
 * (cudaMalloc or cudaMallocAsync, 256 B to 96 MiB), fill by kernel, set a
 * stretch by cudaMemsetAsync, and keep the buffer in a ring of 5. The
 * oldest leaves the ring checked (a kernel counts wrong bytes, a copy to
 * pinned host memory is compared) and freed, or handed to another thread,
 * which checks and frees it on its own stream (the producer's stream is
 * synchronized first, as CUDA requires). Scenarios:
 *   default     no policy;
 *   spill       GVM_DEVICE_LIMIT=0:1G GVM_SPILL=host: the live set passes
 *               the limit, so allocations spill while other threads' kernels
 *               run;
 *   spill-lazy  the same with GVM_SPILL_HOST_MAP=lazy (spilled memory left
 *               unmapped until a launch or copy needs it);
 *   two-devices threads alternate between devices 0 and 1 (hand-offs stay
 *               on one device), no policy;
 *   peer        the same with a 1 GiB limit on each and GVM_SPILL=peer,host.
 * The two-device scenarios print a skip line (both runs) on one GPU.
 * The transcript (every thread's counts) must be the same natively and
 * under the shim; the runs' times are printed beside.
 *
 *   threads                 parent: every scenario, native vs shim
 *   threads --child NAME    one scenario, in this process */
#include "gpu_test.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace gt;

static const int kThreads = 8, kIterations = 300, kRing = 5;
static Gvm gvm;
static bool spilling;   /* the scenario sets a device limit with spill */
static const size_t kSizes[] = {256, 4000, 65536, 1000000, 2 * MiB, 3 * MiB + 5, 17 * MiB, 64 * MiB, 96 * MiB};
static const size_t kSetLen = 4096;

__global__ static void k_fill(uint8_t *p, size_t n, uint32_t seed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = byte_pattern(i, seed);
}

/* Bytes [set_at, set_at + set_len) hold 0xA5 (the memset), the rest the
 * pattern. */
__global__ static void k_check(const uint8_t *p, size_t n, uint32_t seed, size_t set_at, size_t set_len,
                               unsigned long long *bad)
{
    unsigned long long mine = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint8_t want = i >= set_at && i < set_at + set_len ? (uint8_t)0xA5 : byte_pattern(i, seed);
        mine += p[i] != want;
    }
    if (mine) atomicAdd(bad, mine);
}

struct Buffer {
    uint8_t *p = nullptr;
    size_t n = 0, set_at = 0, set_len = 0;
    uint32_t seed = 0;
    bool ordered = false;   /* from cudaMallocAsync */
};

struct Shared {
    std::mutex lock;
    std::deque<Buffer> handed[2];   /* per device: buffers waiting for another thread */
    std::atomic<int> running{kThreads};
};

struct Worker {
    int id, dev = 0;
    Shared *shared;
    cudaStream_t s = nullptr;
    unsigned long long *bad = nullptr;   /* device counter */
    uint8_t *host = nullptr;             /* pinned, kSetLen + 64 bytes */
    unsigned long long mismatches = 0, host_mismatches = 0;
    int errors = 0, allocated = 0, freed = 0, found_away = 0;
    std::string first_error;

    bool ok(cudaError_t e, const char *what)
    {
        if (e == cudaSuccess) return true;
        if (!errors++) first_error = format("%s: %s", what, cudaGetErrorName(e));
        return false;
    }

    /* Kernel check of the whole buffer, and a copy of the stretch around
     * the memset to host, compared there. */
    void check(const Buffer &b)
    {
        k_check<<<256, 256, 0, s>>>(b.p, b.n, b.seed, b.set_at, b.set_len, bad);
        ok(cudaGetLastError(), "k_check");
        size_t from = b.set_at >= 32 ? b.set_at - 32 : 0;
        size_t len = std::min(b.n - from, b.set_len + 64);
        if (!ok(cudaMemcpyAsync(host, b.p + from, len, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync D2H")) return;
        if (!ok(cudaStreamSynchronize(s), "cudaStreamSynchronize")) return;
        for (size_t i = 0; i < len; i++) {
            size_t at = from + i;
            uint8_t want = at >= b.set_at && at < b.set_at + b.set_len ? (uint8_t)0xA5 : byte_pattern(at, b.seed);
            host_mismatches += host[i] != want;
        }
    }

    void release(const Buffer &b)
    {
        gvm_info info;
        if (gvm.present && gvm.query(b.p, &info) == GVM_OK && info.location != dev) found_away++;
        check(b);
        ok(b.ordered ? cudaFreeAsync(b.p, s) : cudaFree(b.p), b.ordered ? "cudaFreeAsync" : "cudaFree");
        freed++;
    }

    bool take_handed(void)
    {
        Buffer b;
        {
            std::lock_guard<std::mutex> g(shared->lock);
            if (shared->handed[dev].empty()) return false;
            b = shared->handed[dev].front();
            shared->handed[dev].pop_front();
        }
        release(b);
        return true;
    }

    void run(void)
    {
        if (!ok(cudaSetDevice(dev), "cudaSetDevice")) return;
        ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        ok(cudaMalloc((void **)&bad, sizeof *bad), "cudaMalloc(counter)");
        ok(cudaMemsetAsync(bad, 0, sizeof *bad, s), "cudaMemsetAsync(counter)");
        ok(cudaMallocHost((void **)&host, kSetLen + 64), "cudaMallocHost");
        if (errors) return;
        std::deque<Buffer> ring;
        uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
        for (int it = 0; it < kIterations; it++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            Buffer b;
            b.n = kSizes[rng % (sizeof kSizes / sizeof kSizes[0])];
            b.ordered = (rng >> 20) & 1;
            b.seed = (uint32_t)(id * 100000 + it);
            cudaError_t e = b.ordered ? cudaMallocAsync((void **)&b.p, b.n, s) : cudaMalloc((void **)&b.p, b.n);
            if (!ok(e, b.ordered ? "cudaMallocAsync" : "cudaMalloc")) continue;
            allocated++;
            k_fill<<<256, 256, 0, s>>>(b.p, b.n, b.seed);
            ok(cudaGetLastError(), "k_fill");
            b.set_len = std::min(b.n / 2, kSetLen);
            b.set_at = (rng >> 32) % (b.n - b.set_len + 1);
            ok(cudaMemsetAsync(b.p + b.set_at, 0xA5, b.set_len, s), "cudaMemsetAsync");
            ring.push_back(b);
            if ((int)ring.size() > kRing) {
                Buffer old = ring.front();
                ring.pop_front();
                if ((rng >> 40) % 4 == 0) {
                    /* Another thread frees it: its work here must be done. */
                    ok(cudaStreamSynchronize(s), "cudaStreamSynchronize before a hand-off");
                    std::lock_guard<std::mutex> g(shared->lock);
                    shared->handed[dev].push_back(old);
                } else {
                    release(old);
                }
            }
            if (it % 3 == 0) take_handed();
        }
        while (!ring.empty()) {
            release(ring.front());
            ring.pop_front();
        }
        shared->running--;
        /* The last threads take what is still handed over. */
        while (take_handed() || shared->running.load() > 0) std::this_thread::yield();
        unsigned long long counted = 0;
        ok(cudaMemcpyAsync(&counted, bad, sizeof counted, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(counter)");
        ok(cudaStreamSynchronize(s), "cudaStreamSynchronize(end)");
        mismatches = counted;
        ok(cudaFree(bad), "cudaFree(counter)");
        ok(cudaFreeHost(host), "cudaFreeHost");
        ok(cudaStreamDestroy(s), "cudaStreamDestroy");
    }
};

/* devices: 1, or 2 (threads alternate between devices 0 and 1). */
static void threads_scenario(int devices)
{
    int have = 0;
    CK(cudaGetDeviceCount(&have));
    if (have < devices) {
        printf("needs %d devices: skipped\n", devices);
        return;
    }
    Shared shared;
    std::vector<Worker> workers(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; i++) {
        workers[i].id = i;
        workers[i].shared = &shared;
        workers[i].dev = i % devices;
        threads.emplace_back([&workers, i] { workers[i].run(); });
    }
    for (auto &t : threads) t.join();
    int allocated = 0, freed = 0, away = 0;
    for (auto &w : workers) {
        away += w.found_away;
        /* Every thread's counts: the same natively and under the shim. */
        printf("thread %d: allocated %d, wrong bytes on the device %llu, in copies %llu, errors %d%s%s\n", w.id,
               w.allocated, w.mismatches, w.host_mismatches, w.errors, w.errors ? ", first: " : "",
               w.first_error.c_str());
        allocated += w.allocated;
        freed += w.freed;
    }
    printf("freed %s\n", freed == allocated ? "all" : format("%d of %d", freed, allocated).c_str());
    for (auto &w : workers) {
        EXPECT(!w.errors, "thread %d: %d failed call(s), first %s", w.id, w.errors, w.first_error.c_str());
        EXPECT(!w.mismatches && !w.host_mismatches, "thread %d: %llu wrong bytes on the device, %llu in copies",
               w.id, w.mismatches, w.host_mismatches);
    }
    EXPECT(freed == allocated, "%d of %d buffers freed", freed, allocated);
    /* Not in the transcript: the native run has no shim to ask. */
    if (gvm.present) fprintf(stderr, "buffers found off the device when freed: %d of %d\n", away, freed);
    if (gvm.present && spilling) EXPECT(away > 0, "no buffer was ever spilled: the scenario tested nothing");
    CK(cudaDeviceSynchronize());
}

static int child(const std::string &name)
{
    watchdog(240);
    device_count_or_skip();
    gvm = load_gvm();
    spilling = name != "default" && name != "two-devices";
    Runner r;
    if (name == "default" || name == "spill" || name == "spill-lazy") r.run(name.c_str(), [] { threads_scenario(1); });
    else if (name == "two-devices" || name == "peer") r.run(name.c_str(), [] { threads_scenario(2); });
    else return 2;
    return r.finish();
}

static void scenario_env(const std::string &name)
{
    if (name == "spill" || name == "spill-lazy") {
        setenv("GVM_DEVICE_LIMIT", "0:1G", 1);
        setenv("GVM_SPILL", "host", 1);
    }
    if (name == "peer") {
        setenv("GVM_DEVICE_LIMIT", "0:1G,1:1G", 1);
        setenv("GVM_SPILL", "peer,host", 1);
    }
    if (name == "spill-lazy") setenv("GVM_SPILL_HOST_MAP", "lazy", 1);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    return compare_with_native({"default", "spill", "spill-lazy", "two-devices", "peer"}, scenario_env, false);
}
