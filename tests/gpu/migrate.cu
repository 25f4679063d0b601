/* The forum scenario done right: a 1 GiB cudaMalloc allocation moves to
 * another GPU, to host memory and back under the same pointer, and every
 * kernel, copy, CPU read, captured graph and alias keeps working.
 * Runs only under gvmshim (exit 77 without its API). With one GPU, or
 * without peer access, the peer steps are skipped, not failed. */
#include "gpu_test.h"

#include <chrono>
#include <vector>

using namespace gt;

static Gvm gvm;
static int ndev;
static bool peer_ok;        /* devices 0 and 1 reach each other */
static Counter *cnt;

static const size_t kBig = 1 * GiB, kBigN = kBig / 4;
static uint32_t *big;
static const uint32_t kBigSeed = 1;

static gvm_info query(const void *p)
{
    gvm_info info;
    memset(&info, 0, sizeof info);
    CKG(gvm, gvm.query(p, &info));
    return info;
}

static void expect_location(const void *p, int want, const char *what)
{
    gvm_info info = query(p);
    char a[32], b[32];
    EXPECT(info.location == want, "%s: gvm_query says %s, want %s", what, loc_name(info.location, a, sizeof a),
           loc_name(want, b, sizeof b));
    EXPECT(info.device == 0, "%s: allocated on device %d, want 0", what, info.device);
}

static void verify_big(const char *what, int device = 0)
{
    CK(cudaSetDevice(device));
    try {
        verify_words(*cnt, big, kBigN, 0, kBigSeed, what);
    } catch (...) {
        cudaSetDevice(0);
        throw;
    }
    CK(cudaSetDevice(0));
}

static void need_big()
{
    if (!big) skip("the 1 GiB allocation of the first case is missing");
}

/* ---- cases ------------------------------------------------------------------ */

static void fill_1gib()
{
    CK(cudaMalloc((void **)&big, kBig));
    fill_words(big, kBigN, 0, kBigSeed);
    CK(cudaDeviceSynchronize());
    verify_big("after fill");
    expect_location(big, 0, "after fill");
    gvm_info info = query(big + 12345);
    EXPECT(info.base == big && info.size == kBig && !info.packed, "query: base %p size %zu packed %d", info.base,
           info.size, info.packed);
}

static void migrate_to_peer()
{
    need_big();
    if (!peer_ok) skip("needs 2 GPUs with peer access (have %d device(s))", ndev);
    auto t0 = std::chrono::steady_clock::now();
    CKG(gvm, gvm.migrate(big, 1));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    printf("     1 GiB device 0 -> device 1: %.1f ms\n", ms);
    expect_location(big, 1, "after the move to device 1");
    gvm_info info = query(big);
    EXPECT(info.bytes_on_device == 0, "%zu bytes still on device 0", info.bytes_on_device);
    verify_big("read by a kernel on device 1", 1);
    verify_big("read by a kernel on device 0 (peer)", 0);
}

static void cpu_verify_big(const char *what)
{
    const volatile uint32_t *h = big;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < kBigN; i++) {
        if (h[i] != word_pattern(i, kBigSeed)) {
            if (!bad) first = i;
            bad++;
        }
    }
    EXPECT(bad == 0, "%s: %zu of %zu words wrong, first at %zu", what, bad, kBigN, first);
}

static void migrate_to_host()
{
    need_big();
    auto t0 = std::chrono::steady_clock::now();
    CKG(gvm, gvm.migrate(big, GVM_HOST));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    printf("     1 GiB -> host: %.1f ms\n", ms);
    expect_location(big, GVM_HOST, "after the move to host");
    gvm_info info = query(big);
    EXPECT(info.bytes_on_host >= kBig, "only %zu bytes on host", info.bytes_on_host);

    verify_big("read by a kernel on device 0 from host memory", 0);
    if (peer_ok) verify_big("read by a kernel on device 1 from host memory", 1);

    /* The program's view of the pointer does not change. */
    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    CK(cudaPointerGetAttributes(&a, big + 1000));
    EXPECT(a.type == cudaMemoryTypeDevice && a.device == 0, "pointer attributes after the move: type %d device %d",
           (int)a.type, a.device);
    auto range = driver_fn<mem_get_address_range_fn>("cuMemGetAddressRange");
    CUdeviceptr base = 0;
    size_t size = 0;
    CKD(range(&base, &size, (CUdeviceptr)(big + kBigN - 1)));
    EXPECT(base == (CUdeviceptr)big && size == kBig, "address range after the move: %#llx + %zu",
           (unsigned long long)base, size);

    /* Copies into and out of the host-resident allocation. */
    const size_t off = 12345, cnt_words = 4096;
    std::vector<uint32_t> zeros(cnt_words, 0), back(cnt_words, 1), orig(cnt_words);
    CK(cudaMemcpy(orig.data(), big + off, cnt_words * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < cnt_words; i++)
        EXPECT(orig[i] == word_pattern(off + i, kBigSeed), "D2H from host-resident memory: word %zu", off + i);
    CK(cudaMemcpy(big + off, zeros.data(), cnt_words * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(back.data(), big + off, cnt_words * 4, cudaMemcpyDeviceToHost));
    EXPECT(back == zeros, "H2D into host-resident memory did not land");
    CK(cudaMemcpy(big + off, orig.data(), cnt_words * 4, cudaMemcpyHostToDevice));

    /* The CPU reads through the same pointer (access granted on first touch). */
    auto t1 = std::chrono::steady_clock::now();
    cpu_verify_big("read by the CPU through the device pointer");
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    printf("     CPU read 1 GiB through the pointer: %.1f ms\n", ms);
}

/* Copies the program issues from device 1's context, without peer access,
 * reach device 0's memory natively (the driver stages them): they must
 * too where gvmshim granted the memory to device 0 only, on device and on
 * host. */
static void copies_from_another_devices_context()
{
    if (ndev < 2) skip("needs 2 GPUs (have %d device(s))", ndev);
    const size_t n = 8 * MiB / 4;
    uint32_t *p = nullptr, *q = nullptr;
    std::vector<uint32_t> h(n);
    CK(cudaMalloc((void **)&p, n * 4));
    fill_words(p, n, 0, 11);
    CK(cudaDeviceSynchronize());
    for (int round = 0; round < 2; round++) {
        const char *where = round ? "on host" : "on device 0";
        if (round) CKG(gvm, gvm.migrate(p, GVM_HOST));
        CK(cudaSetDevice(1));
        CK(cudaMalloc((void **)&q, n * 4));
        std::fill(h.begin(), h.end(), 0u);
        cudaError_t e1 = cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != word_pattern(i, 11);
        cudaError_t e2 = cudaMemcpy(q, p, n * 4, cudaMemcpyDeviceToDevice);
        cudaError_t e3 = cudaMemcpyPeer(q, 1, p, 0, n * 4);
        cudaError_t e4 = cudaMemcpy(p, q, 4096, cudaMemcpyDeviceToDevice);   /* into p: same words */
        cudaError_t e5 = cudaDeviceSynchronize();
        (void)cudaGetLastError();
        if (e2 == cudaSuccess && e3 == cudaSuccess) verify_words(*cnt, q, n, 0, 11, where);
        CK(cudaFree(q));
        CK(cudaSetDevice(0));
        EXPECT(e1 == cudaSuccess && bad == 0, "%s: D2H from device 1's context: %s, %zu words wrong", where,
               cudaGetErrorString(e1), bad);
        EXPECT(e2 == cudaSuccess && e3 == cudaSuccess && e4 == cudaSuccess && e5 == cudaSuccess,
               "%s: copies from device 1's context: D2D %s, peer %s, back %s, sync %s", where,
               cudaGetErrorString(e2), cudaGetErrorString(e3), cudaGetErrorString(e4), cudaGetErrorString(e5));
        verify_words(*cnt, p, n, 0, 11, where);
    }
    CK(cudaFree(p));
}

/* Natively a kernel on device 1 reaches device 0's cudaMalloc memory once
 * the program enabled peer access; gvmshim grants host-resident memory to
 * the devices that reach it, so that grant must follow the enable, for
 * memory already on host and memory that goes there later. */
static void peer_enabled_device_reads_host_memory()
{
    if (!peer_ok) skip("needs 2 GPUs with peer access (have %d device(s))", ndev);
    const size_t n = 64 * MiB / 4;
    uint32_t *early = nullptr, *late = nullptr;
    CK(cudaMalloc((void **)&early, n * 4));
    CK(cudaMalloc((void **)&late, n * 4));
    fill_words(early, n, 0, 7);
    fill_words(late, n, 0, 8);
    CK(cudaDeviceSynchronize());
    CKG(gvm, gvm.migrate(early, GVM_HOST));
    CK(cudaSetDevice(1));
    cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else CK(e);
    CK(cudaSetDevice(0));
    CKG(gvm, gvm.migrate(late, GVM_HOST));
    CK(cudaSetDevice(1));
    try {
        verify_words(*cnt, early, n, 0, 7, "host memory moved before the enable, read on device 1");
        verify_words(*cnt, late, n, 0, 8, "host memory moved after the enable, read on device 1");
    } catch (...) {
        cudaSetDevice(0);
        throw;
    }
    CK(cudaSetDevice(0));
    verify_words(*cnt, early, n, 0, 7, "read on device 0");
    CK(cudaFree(early));
    CK(cudaFree(late));
}

static void migrate_back_to_device()
{
    need_big();
    CKG(gvm, gvm.migrate(big, 0));
    expect_location(big, 0, "after the move back to device 0");
    gvm_info info = query(big);
    EXPECT(info.bytes_on_host == 0 && info.bytes_on_device >= kBig, "on device %zu, on host %zu",
           info.bytes_on_device, info.bytes_on_host);
    verify_big("after the move back");
    /* A moved allocation is still an ordinary one: kernels write it. */
    fill_words(big, kBigN, 0, kBigSeed);
    CK(cudaDeviceSynchronize());
    verify_big("rewritten after the moves");
}

__global__ static void k_incr(uint32_t *p, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] += 1;
}

static void graph_replay_across_moves()
{
    const size_t gn = 64 * MiB / 4, sbytes = 4096;
    uint32_t *g = nullptr, *s = nullptr;
    CK(cudaMalloc((void **)&g, gn * 4));
    CK(cudaMalloc((void **)&s, sbytes));
    CK(cudaMemset(g, 0, gn * 4));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    k_incr<<<grid_for(gn), 256, 0, st>>>(g, gn);
    cudaError_t launch = cudaGetLastError();
    cudaError_t ms = cudaMemsetAsync(s, 0x5A, sbytes, st);
    cudaError_t end = cudaStreamEndCapture(st, &graph);
    CK(launch);
    CK(ms);
    CK(end);
    CK(cudaGraphInstantiate(&exec, graph, 0));

    uint32_t replays = 0;
    auto replay = [&](const char *where) {
        CK(cudaMemset(s, 0, sbytes));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        replays++;
        verify_words(*cnt, g, gn, 0, 0, format("kernel node after %s", where).c_str(), 1, replays);
        verify_words(*cnt, s, sbytes / 4, 0, 0, format("memset node after %s", where).c_str(), 1, 0x5A5A5A5Au);
    };
    replay("capture (on device 0)");
    CKG(gvm, gvm.migrate(g, GVM_HOST));
    CKG(gvm, gvm.migrate(s, GVM_HOST));
    expect_location(g, GVM_HOST, "graph buffer");
    expect_location(s, GVM_HOST, "graph memset buffer");
    replay("the move to host");
    if (peer_ok) {
        CKG(gvm, gvm.migrate(g, 1));
        CKG(gvm, gvm.migrate(s, 1));
        expect_location(g, 1, "graph buffer");
        replay("the move to device 1");
    } else {
        printf("     (peer step skipped: needs 2 GPUs with peer access)\n");
    }
    CKG(gvm, gvm.migrate(g, 0));
    CKG(gvm, gvm.migrate(s, 0));
    expect_location(g, 0, "graph buffer");
    replay("the move back to device 0");
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(g));
    CK(cudaFree(s));
}

static void alias_read_write()
{
    const size_t n = 8 * MiB / 4;
    uint32_t *x = nullptr, *y = nullptr, *y2 = nullptr;
    CK(cudaMalloc((void **)&x, n * 4));
    fill_words(x, n, 0, 5);
    CK(cudaDeviceSynchronize());
    CKG(gvm, gvm.alias(x, (void **)&y));
    EXPECT(y && y != x, "alias %p of %p", (void *)y, (void *)x);
    EXPECT((uintptr_t)y + n * 4 <= (uintptr_t)x || (uintptr_t)x + n * 4 <= (uintptr_t)y,
           "the alias overlaps the allocation");
    EXPECT(query(x).aliases == 1, "aliases %d, want 1", query(x).aliases);
    verify_words(*cnt, y, n, 0, 5, "original data read through the alias");
    fill_words(y, n, 0, 6);
    CK(cudaDeviceSynchronize());
    verify_words(*cnt, x, n, 0, 6, "written through the alias, read through the original");
    fill_words(x, n, 0, 7);
    CK(cudaDeviceSynchronize());
    verify_words(*cnt, y, n, 0, 7, "written through the original, read through the alias");
    /* Copies through the alias. */
    std::vector<uint32_t> h(1024);
    CK(cudaMemcpy(h.data(), y + 500, h.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); i++) EXPECT(h[i] == word_pattern(500 + i, 7), "D2H through the alias: %zu", i);
    /* Alias of an interior pointer: the second address of that very word. */
    CKG(gvm, gvm.alias(x + 1000, (void **)&y2));
    verify_words(*cnt, y2, 1000, 1000, 7, "interior alias");
    EXPECT(query(x).aliases == 2, "aliases %d, want 2", query(x).aliases);
    /* A move remaps the aliases too. */
    CKG(gvm, gvm.migrate(x, GVM_HOST));
    verify_words(*cnt, y, n, 0, 7, "alias after the original moved to host");
    fill_words(y, n, 0, 8);
    CK(cudaDeviceSynchronize());
    CKG(gvm, gvm.migrate(x, 0));
    verify_words(*cnt, x, n, 0, 8, "written through the alias on host, read after the move back");
    CKG(gvm, gvm.unalias(y2));
    CKG(gvm, gvm.unalias(y));
    gvm_info info;
    EXPECT(gvm.query(y, &info) == GVM_ERR_UNKNOWN_POINTER, "an unaliased address is still known");
    EXPECT(query(x).aliases == 0, "aliases %d after unalias", query(x).aliases);
    verify_words(*cnt, x, n, 0, 8, "original after unalias");
    CK(cudaFree(x));
}

static void alias_small_and_outliving()
{
    /* A packed small allocation: its whole chunk is aliased. */
    uint32_t *z = nullptr, *zy = nullptr;
    CK(cudaMalloc((void **)&z, 4096));
    CKG(gvm, gvm.alias(z, (void **)&zy));
    fill_words(zy, 1024, 0, 21);
    CK(cudaDeviceSynchronize());
    verify_words(*cnt, z, 1024, 0, 21, "small allocation written through its alias");
    CKG(gvm, gvm.unalias(zy));
    CK(cudaFree(z));

    /* The memory lives until the allocation and all its aliases are gone. */
    const size_t n = 4 * MiB / 4;
    uint32_t *w = nullptr, *wy = nullptr;
    CK(cudaMalloc((void **)&w, n * 4));
    fill_words(w, n, 0, 22);
    CK(cudaDeviceSynchronize());
    CKG(gvm, gvm.alias(w, (void **)&wy));
    CK(cudaFree(w));
    verify_words(*cnt, wy, n, 0, 22, "alias read after the original was freed");
    CKG(gvm, gvm.unalias(wy));
}

static void realloc_grow_shrink()
{
    const size_t n0 = 64 * MiB / 4;
    uint32_t *r = nullptr;
    CK(cudaMalloc((void **)&r, n0 * 4));
    fill_words(r, n0, 0, 3);
    CK(cudaDeviceSynchronize());
    gvm_info info = query(r);
    size_t target = 200 * MiB;
    if (info.reserved < target) {
        gvm_status st = gvm.realloc(r, target);
        EXPECT(st == GVM_ERR_NO_HEADROOM, "growing past the reservation (%zu MiB) -> %d, want NO_HEADROOM",
               info.reserved / MiB, st);
        printf("     reservation is %zu MiB (GVM_HEADROOM): growing to that instead of 200 MiB\n",
               info.reserved / MiB);
        target = info.reserved;
        if (target <= n0 * 4) skip("no headroom at all (GVM_HEADROOM=0?)");
    }
    const size_t n1 = target / 4;
    CKG(gvm, gvm.realloc(r, target));
    info = query(r);
    EXPECT(info.size == target && info.base == r, "after growing: base %p size %zu", info.base, info.size);
    auto range = driver_fn<mem_get_address_range_fn>("cuMemGetAddressRange");
    CUdeviceptr base = 0;
    size_t size = 0;
    CKD(range(&base, &size, (CUdeviceptr)(r + n1 - 1)));
    EXPECT(base == (CUdeviceptr)r && size == target, "address range after growing: %#llx + %zu",
           (unsigned long long)base, size);
    fill_words(r + n0, n1 - n0, n0, 4);
    CK(cudaDeviceSynchronize());
    verify_words(*cnt, r, n0, 0, 3, "prefix kept by the growth");
    verify_words(*cnt, r + n0, n1 - n0, n0, 4, "new tail");
    /* Shrink back, then grow a little again. */
    CKG(gvm, gvm.realloc(r, n0 * 4));
    info = query(r);
    EXPECT(info.size == n0 * 4, "after shrinking: size %zu", info.size);
    verify_words(*cnt, r, n0, 0, 3, "prefix after shrinking");
    const size_t n2 = n0 + 8 * MiB / 4;
    CKG(gvm, gvm.realloc(r, n2 * 4));
    fill_words(r + n0, n2 - n0, n0, 5);
    CK(cudaDeviceSynchronize());
    verify_words(*cnt, r, n0, 0, 3, "prefix after growing again");
    verify_words(*cnt, r + n0, n2 - n0, n0, 5, "tail after growing again");
    CK(cudaFree(r));
}

static void api_errors()
{
    int on_stack = 0;
    gvm_info info;
    EXPECT(gvm.migrate(&on_stack, GVM_HOST) == GVM_ERR_UNKNOWN_POINTER, "migrate(stack address)");
    EXPECT(gvm.query(&on_stack, &info) == GVM_ERR_UNKNOWN_POINTER, "query(stack address)");
    need_big();
    EXPECT(gvm.migrate(big, 99) == GVM_ERR_INVALID, "migrate to device 99 -> %d", gvm.migrate(big, 99));
    EXPECT(gvm.migrate(big, -7) == GVM_ERR_INVALID, "migrate to location -7 -> %d", gvm.migrate(big, -7));
    EXPECT(gvm.realloc(big, 0) == GVM_ERR_INVALID, "realloc to 0");
    EXPECT(gvm.alias(big, nullptr) == GVM_ERR_INVALID, "alias with a NULL out pointer");
    EXPECT(gvm.unalias(big) == GVM_ERR_UNKNOWN_POINTER, "unalias of a non-alias");
    for (int s = 0; s >= -8; s--) EXPECT(gvm.strerror(s) && *gvm.strerror(s), "strerror(%d)", s);
    verify_big("after the refused calls");
}

static void free_everything()
{
    need_big();
    CK(cudaFree(big));
    gvm_info info;
    EXPECT(gvm.query(big, &info) == GVM_ERR_UNKNOWN_POINTER, "the freed allocation is still known");
    big = nullptr;
    CK(cudaDeviceSynchronize());
}

/* A fault gvmshim does not claim ends here, with a message. It is
 * installed before gvmshim's handler, which chains to it. */
static void on_segv(int sig, siginfo_t *si, void *)
{
    char msg[160];
    int n = snprintf(msg, sizeof msg,
                     "\nFAIL signal %d at address %p: a CPU access was not granted (or a real crash)\n"
                     "0 passed, 1 failed\n",
                     sig, si ? si->si_addr : nullptr);
    ssize_t w = write(STDOUT_FILENO, msg, n > 0 ? (size_t)n : 0);
    (void)w;
    _exit(1);
}

int main()
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    watchdog(240);
    ndev = device_count_or_skip();
    gvm = load_gvm();
    if (!gvm.present) {
        printf("SKIP: the gvmshim API is absent (run under LD_PRELOAD=libgvmshim.so)\n0 passed, 0 failed\n");
        return 77;
    }
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        printf("SKIP: cannot create a context on device 0\n0 passed, 0 failed\n");
        return 77;
    }
    if (ndev >= 2) {
        int a = 0, b = 0;
        if (cudaDeviceCanAccessPeer(&a, 0, 1) == cudaSuccess && cudaDeviceCanAccessPeer(&b, 1, 0) == cudaSuccess)
            peer_ok = a && b;
        (void)cudaGetLastError();
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device 0: %s; %d device(s); peer steps %s\n", prop.name, ndev, peer_ok ? "on" : "skipped");
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b < 3 * GiB) {
        printf("SKIP: only %zu MiB free on device 0\n0 passed, 0 failed\n", free_b / MiB);
        return 77;
    }
    Runner r;
    try {
        cnt = new Counter();
    } catch (const std::exception &e) {
        printf("FAIL setup: %s\n0 passed, 1 failed\n", e.what());
        return 1;
    }
    r.run("fill_1gib", fill_1gib);
    r.run("migrate_to_peer", migrate_to_peer);
    r.run("migrate_to_host", migrate_to_host);
    r.run("copies_from_another_devices_context", copies_from_another_devices_context);
    r.run("peer_enabled_device_reads_host_memory", peer_enabled_device_reads_host_memory);
    r.run("migrate_back_to_device", migrate_back_to_device);
    r.run("graph_replay_across_moves", graph_replay_across_moves);
    r.run("alias_read_write", alias_read_write);
    r.run("alias_small_and_outliving", alias_small_and_outliving);
    r.run("realloc_grow_shrink", realloc_grow_shrink);
    r.run("api_errors", api_errors);
    r.run("free_everything", free_everything);
    return r.finish();
}
