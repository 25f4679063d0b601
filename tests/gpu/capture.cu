/* CUDA graph capture under gvmshim, compared with the native run call by
 * call. The program runs itself twice per scenario: once without
 * LD_PRELOAD and once with it (GVM_TEST_LIB, or the LD_PRELOAD it was
 * started with). Each child captures, in one capture mode, a sequence of
 * cudaMalloc / cudaMemcpyAsync / cudaMemsetAsync / a kernel / cudaFree,
 * prints every call's result, ends the capture and replays the graph (and
 * under the shim replays it again after moving its memory). The printed
 * results must be identical; the replayed data is checked in the child.
 *
 *   capture                 parent: every scenario, native vs shim
 *   capture --child NAME    one scenario, in this process
 *
 * The "spill" scenario sets GVM_DEVICE_LIMIT=0:1G GVM_SPILL=host and fills
 * the device to the limit first, so the allocations made during the
 * capture must spill while it is open. The "graph-memory" scenarios
 * allocate and free inside the capture (graph memory nodes). Exit 77
 * without a GPU. */
#include "gpu_test.h"

#include <string>
#include <vector>

using namespace gt;

static Gvm gvm;

static void rec(const char *what, cudaError_t e)
{
    printf("%-44s %s\n", what, cudaGetErrorName(e));
    fflush(stdout);
}
#define REC(call) ([&] { cudaError_t e_ = (call); rec(#call, e_); return e_; }())

__global__ static void k_add_one(uint8_t *p, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i]++;
}

static std::vector<uint8_t> host_in(MiB);

static void check_replayed(uint8_t *a, uint8_t *b, uint8_t *c, const char *when)
{
    std::vector<uint8_t> out(2 * MiB), small(4096), copy(2 * MiB);
    CK(cudaMemcpy(out.data(), a, out.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < MiB; i++)
        EXPECT(out[i] == (uint8_t)(host_in[i] + 1), "%s: a[%zu] = %d", when, i, out[i]);
    for (size_t i = MiB; i < 2 * MiB; i++) EXPECT(out[i] == 0x5b, "%s: a[%zu] = %d", when, i, out[i]);
    CK(cudaMemcpy(small.data(), b, small.size(), cudaMemcpyDeviceToHost));
    EXPECT(!memcmp(small.data(), out.data(), small.size()), "%s: b differs from a", when);
    if (c) {
        CK(cudaMemcpy(copy.data(), c, copy.size(), cudaMemcpyDeviceToHost));
        EXPECT(!memcmp(copy.data(), out.data(), copy.size()), "%s: c differs from a", when);
    }
}

/* mode: the capture's; relaxed_allocs: cudaMalloc/cudaFree in relaxed
 * thread mode (what PyTorch's allocator does); filler: bytes allocated
 * before the capture (to reach a device limit). */
static void sequence(cudaStreamCaptureMode mode, bool relaxed_allocs, size_t filler)
{
    for (size_t i = 0; i < host_in.size(); i++) host_in[i] = (uint8_t)(i * 7 + 3);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint8_t *a, *b, *d, *e, *f, *x = nullptr, *c = nullptr, *c2 = nullptr, *h;
    CK(cudaMallocHost((void **)&h, MiB));
    memcpy(h, host_in.data(), MiB);
    CK(cudaMalloc((void **)&a, 8 * MiB));
    CK(cudaMalloc((void **)&b, 4096));
    CK(cudaMalloc((void **)&d, 6 * MiB));
    CK(cudaMalloc((void **)&e, 512));
    if (filler) CK(cudaMalloc((void **)&x, filler));
    CK(cudaMalloc((void **)&f, 64 * MiB));
    CK(cudaFree(f));   /* under the shim: cached, not yet settled */
    CK(cudaMemset(a, 0, 8 * MiB));
    CK(cudaDeviceSynchronize());

    cudaStreamCaptureMode saved = cudaStreamCaptureModeRelaxed;
    REC(cudaStreamBeginCapture(s, mode));
    if (relaxed_allocs) CK(cudaThreadExchangeStreamCaptureMode(&saved));
    if (REC(cudaMalloc((void **)&c, 64 * MiB)) != cudaSuccess) c = nullptr;
    if (REC(cudaMalloc((void **)&c2, 1000)) != cudaSuccess) c2 = nullptr;
    if (relaxed_allocs) CK(cudaThreadExchangeStreamCaptureMode(&saved));
    (void)cudaGetLastError();
    REC(cudaMemcpyAsync(a, h, MiB, cudaMemcpyHostToDevice, s));
    REC(cudaMemsetAsync(a + MiB, 0x5a, MiB, s));
    k_add_one<<<256, 256, 0, s>>>(a, 2 * MiB);
    REC(cudaGetLastError());
    REC(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDeviceToDevice, s));
    if (c) REC(cudaMemcpyAsync(c, a, 2 * MiB, cudaMemcpyDeviceToDevice, s));
    saved = cudaStreamCaptureModeRelaxed;
    if (relaxed_allocs) CK(cudaThreadExchangeStreamCaptureMode(&saved));
    REC(cudaFree(d));
    REC(cudaFree(e));
    if (c2) REC(cudaFree(c2));
    if (relaxed_allocs) CK(cudaThreadExchangeStreamCaptureMode(&saved));
    (void)cudaGetLastError();
    cudaGraph_t g = nullptr;
    REC(cudaStreamEndCapture(s, &g));
    (void)cudaGetLastError();
    printf("graph %s\n", g ? "yes" : "no");
    if (!g) return;
    cudaGraphExec_t ge;
    REC(cudaGraphInstantiate(&ge, g, 0));
    REC(cudaGraphLaunch(ge, s));
    REC(cudaStreamSynchronize(s));
    check_replayed(a, b, c, "first replay");
    if (gvm.present) {
        /* The graph binds addresses: moved memory replays the same. */
        CKG(gvm, gvm.migrate(a, GVM_HOST));
        if (c) CKG(gvm, gvm.migrate(c, GVM_HOST));
        CK(cudaMemset(a, 0, 8 * MiB));
        /* Checked, not recorded: the native run has no move to replay after. */
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        check_replayed(a, b, c, "replay after a move to host");
        CKG(gvm, gvm.migrate(a, 0));
        if (filler && c) {
            gvm_info info;
            CKG(gvm, gvm.query(x, &info));
            EXPECT(info.location == 0, "the filler was evicted during the capture (location %d)", info.location);
        }
    }
    REC(cudaGraphExecDestroy(ge));
    REC(cudaGraphDestroy(g));
}

/* Graph memory nodes: cudaMallocAsync / cudaFreeAsync inside a capture
 * belong to the graph (the driver's graph pool), whatever gvmshim serves
 * outside captures. The graph copies into memory the shim serves (a
 * cudaMalloc buffer and a stream-ordered one from before the capture), is
 * replayed three times, and leaves one allocation to the program, freed
 * after the launch. cross_free: the capture also frees the stream-ordered
 * buffer from before it (what the driver answers, the shim must too). */
__global__ static void k_set(uint8_t *p, size_t n, uint8_t v)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = (uint8_t)(v + i % 7);
}

static void graph_memory(bool cross_free)
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint8_t *a = nullptr, *before = nullptr, *g1 = nullptr, *g2 = nullptr;
    CK(cudaMalloc((void **)&a, 4 * MiB));
    CK(cudaMallocAsync((void **)&before, 2 * MiB, s));
    CK(cudaMemsetAsync(a, 0, 4 * MiB, s));
    CK(cudaMemsetAsync(before, 0, 2 * MiB, s));
    CK(cudaStreamSynchronize(s));

    REC(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (REC(cudaMallocAsync((void **)&g1, 32 * MiB, s)) != cudaSuccess) g1 = nullptr;
    if (REC(cudaMallocAsync((void **)&g2, MiB, s)) != cudaSuccess) g2 = nullptr;
    if (g1 && g2) {
        k_set<<<128, 256, 0, s>>>(g1, 32 * MiB, 11);
        REC(cudaGetLastError());
        REC(cudaMemcpyAsync(a, g1 + MiB, 4 * MiB, cudaMemcpyDeviceToDevice, s));
        REC(cudaMemcpyAsync(before, g1, 2 * MiB, cudaMemcpyDeviceToDevice, s));
        REC(cudaMemcpyAsync(g2, a, MiB, cudaMemcpyDeviceToDevice, s));
        REC(cudaFreeAsync(g1, s));
    }
    if (cross_free) REC(cudaFreeAsync(before, s));
    cudaGraph_t g = nullptr;
    REC(cudaStreamEndCapture(s, &g));
    (void)cudaGetLastError();
    printf("graph %s\n", g ? "yes" : "no");
    if (g && g1 && g2) {
        cudaGraphExec_t ge = nullptr;
        if (REC(cudaGraphInstantiate(&ge, g, 0)) == cudaSuccess) {
            std::vector<uint8_t> out(4 * MiB), want(4 * MiB);
            for (size_t i = 0; i < want.size(); i++) want[i] = (uint8_t)(11 + (i + MiB) % 7);
            for (int round = 0; round < 3; round++) {
                /* A graph that leaves memory allocated is launched again only
                 * once that memory is freed. */
                REC(cudaGraphLaunch(ge, s));
                REC(cudaStreamSynchronize(s));
                CK(cudaMemcpy(out.data(), a, out.size(), cudaMemcpyDeviceToHost));
                EXPECT(!memcmp(out.data(), want.data(), out.size()), "replay %d: the cudaMalloc buffer", round);
                CK(cudaMemcpy(out.data(), g2, MiB, cudaMemcpyDeviceToHost));
                EXPECT(!memcmp(out.data(), want.data(), MiB), "replay %d: the graph's own allocation", round);
                if (!cross_free) {
                    CK(cudaMemcpy(out.data(), before, 2 * MiB, cudaMemcpyDeviceToHost));
                    for (size_t i = 0; i < 2 * MiB; i++)
                        EXPECT(out[i] == (uint8_t)(11 + i % 7), "replay %d: before[%zu] = %d", round, i, out[i]);
                }
                cudaPointerAttributes pa;
                REC(cudaPointerGetAttributes(&pa, g2));
                printf("  graph allocation: type %d, device %d\n", (int)pa.type, pa.device);
                REC(round == 2 ? cudaFree(g2) : cudaFreeAsync(g2, s));
                REC(cudaStreamSynchronize(s));
            }
            REC(cudaGraphExecDestroy(ge));
        }
        REC(cudaGraphDestroy(g));
    }
    REC(cudaFree(a));
    if (!cross_free) REC(cudaFreeAsync(before, s));
    REC(cudaStreamSynchronize(s));
    REC(cudaStreamDestroy(s));
}

static int child(const std::string &name)
{
    watchdog(120);
    device_count_or_skip();
    gvm = load_gvm();
    Runner r;
    if (name == "global") r.run(name.c_str(), [] { sequence(cudaStreamCaptureModeGlobal, false, 0); });
    else if (name == "thread-local") r.run(name.c_str(), [] { sequence(cudaStreamCaptureModeThreadLocal, false, 0); });
    else if (name == "relaxed") r.run(name.c_str(), [] { sequence(cudaStreamCaptureModeRelaxed, false, 0); });
    else if (name == "torch") r.run(name.c_str(), [] { sequence(cudaStreamCaptureModeGlobal, true, 0); });
    else if (name == "spill") r.run(name.c_str(), [] { sequence(cudaStreamCaptureModeGlobal, true, GiB - 96 * MiB); });
    else if (name == "graph-memory") r.run(name.c_str(), [] { graph_memory(false); });
    else if (name == "graph-memory-cross-free") r.run(name.c_str(), [] { graph_memory(true); });
    else return 2;
    return r.finish();
}

/* ---- the parent ----------------------------------------------------------- */

static void scenario_env(const std::string &name)
{
    if (name == "spill") {
        setenv("GVM_DEVICE_LIMIT", "0:1G", 1);
        setenv("GVM_SPILL", "host", 1);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    return compare_with_native({"global", "thread-local", "relaxed", "torch", "spill", "graph-memory",
                                "graph-memory-cross-free"},
                               scenario_env, false);
}
