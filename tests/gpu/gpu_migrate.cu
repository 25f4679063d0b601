// The forum scenario done right, and the other operations of gvmshim.h,
// verified by kernels: 1 GiB filled on GPU 0, moved to GPU 1 (checked by
// kernels on both GPUs), to host (checked by a kernel and by the CPU
// through the same pointer), back to GPU 0; a graph captured before the
// moves replays correctly after each; aliases and in-place growth.
// With one GPU the peer steps are reported as skipped.
#include "gpu_common.h"

__global__ void k_inc(unsigned *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i]++;
}

static gvm_api api;

static const char *where(const void *p)
{
    static char buf[32];
    gvm_info info;
    if (api.query(p, &info) != GVM_OK) return "?";
    if (info.location == GVM_HOST) return "host";
    snprintf(buf, sizeof buf, "gpu%d", info.location);
    return buf;
}

static int location(const void *p)
{
    gvm_info info;
    return api.query(p, &info) == GVM_OK ? info.location : -99;
}

static void forum_scenario(int ngpu, bool peer)
{
    const size_t s = (size_t)1 << 30;
    unsigned *p;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&p, s));
    fill(p, s, 11);
    if (ngpu > 1 && peer) {
        EXPECT(api.migrate(p, 1) == GVM_OK, "migrate to GPU 1");
        EXPECT(location(p) == 1, "location %s", where(p));
        CK(cudaSetDevice(1));
        EXPECT(mismatches(p, s, 11) == 0, "kernel on GPU 1 reads wrong data");
        CK(cudaSetDevice(0));
        EXPECT(mismatches(p, s, 11) == 0, "kernel on GPU 0 reads wrong data over the peer link");
    } else {
        printf("skip: peer move (needs two GPUs with peer access)\n");
        g_skipped++;
    }
    EXPECT(api.migrate(p + 1000, GVM_HOST) == GVM_OK, "migrate to host");
    EXPECT(location(p) == GVM_HOST, "location %s", where(p));
    EXPECT(mismatches(p, s, 11) == 0, "kernel reads host-resident memory wrong");
    size_t wrong = 0;
    for (size_t i = 0; i < s / 4; i += 4097) wrong += ((volatile unsigned *)p)[i] != host_pattern(i, 11);
    EXPECT(wrong == 0, "the CPU reads %zu wrong words through the pointer", wrong);
    cudaPointerAttributes a;
    CK(cudaPointerGetAttributes(&a, p));
    EXPECT(a.type == cudaMemoryTypeDevice && a.device == 0, "after the move: type %d device %d", (int)a.type,
           a.device);
    EXPECT(api.migrate(p, 0) == GVM_OK, "migrate back to GPU 0");
    EXPECT(location(p) == 0, "location %s", where(p));
    EXPECT(mismatches(p, s, 11) == 0, "data wrong after the round trip");
    EXPECT(api.migrate(p, 77) == GVM_ERR_INVALID, "a device that does not exist is refused");
    CK(cudaFree(p));
}

static void graph_survives_moves(int ngpu, bool peer)
{
    const size_t s = 64 << 20;
    unsigned *p, *small;
    CK(cudaMalloc(&p, s));
    CK(cudaMalloc(&small, 4096));
    CK(cudaMemset(p, 0, s));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    k_inc<<<512, 256, 0, st>>>(p, s / 4);
    CK(cudaMemsetAsync(small, 0x11, 4096, st));
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    int plan[] = {GVM_HOST, 1, 0, GVM_HOST, 0};
    unsigned want = 0;
    for (int step = 0; step < 5; step++) {
        int to = plan[step];
        if (to == 1 && !(ngpu > 1 && peer)) continue;
        CK(cudaGraphLaunch(ge, st));
        want++;
        CK(cudaStreamSynchronize(st));
        EXPECT(api.migrate(p, to) == GVM_OK && api.migrate(small, to) == GVM_OK, "move to %d", to);
        CK(cudaGraphLaunch(ge, st));
        want++;
        CK(cudaStreamSynchronize(st));
        unsigned h[2];
        unsigned char m;
        CK(cudaMemcpy(h, p + s / 4 - 2, 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&m, small + 1000, 1, cudaMemcpyDeviceToHost));
        EXPECT(h[0] == want && h[1] == want && m == 0x11, "replay after a move to %d: %u %u (want %u), memset %x",
               to, h[0], h[1], want, m);
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(p));
    CK(cudaFree(small));
}

static void alias_and_grow(void)
{
    const size_t s = 96 << 20;
    unsigned *p;
    void *al = NULL;
    CK(cudaMalloc(&p, s));
    EXPECT(api.alias(p, &al) == GVM_OK && al && al != p, "alias");
    fill(al, s, 21);   // written through the alias...
    EXPECT(mismatches(p, s, 21) == 0, "...read through the original");
    fill(p, s, 22);
    EXPECT(mismatches(al, s, 22) == 0, "the alias sees writes through the original");
    EXPECT(api.migrate(p, GVM_HOST) == GVM_OK, "moving an aliased allocation");
    EXPECT(mismatches(al, s, 22) == 0, "the alias follows the move");
    EXPECT(api.migrate(p, 0) == GVM_OK, "and back");
    CK(cudaFree(p));
    EXPECT(mismatches(al, s, 22) == 0, "the alias keeps the memory alive after cudaFree");
    EXPECT(api.unalias(al) == GVM_OK, "unalias");

    // Grow in place (within the default 100% headroom): the prefix stays,
    // the new tail is usable.
    const size_t small = 64 << 20, big = 128 << 20;
    CK(cudaMalloc(&p, small));
    fill(p, small, 31);
    EXPECT(api.realloc(p, big) == GVM_OK, "grow 64 MiB -> 128 MiB in place");
    EXPECT(mismatches(p, small, 31) == 0, "prefix kept");
    k_fill<<<1024, 256>>>(p + small / 4, (big - small) / 4, 32);
    CK(cudaDeviceSynchronize());
    unsigned long long *bad, h = 0;
    CK(cudaMalloc(&bad, 8));
    CK(cudaMemset(bad, 0, 8));
    k_check<<<1024, 256>>>(p + small / 4, (big - small) / 4, 32, bad);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&h, bad, 8, cudaMemcpyDeviceToHost));
    EXPECT(h == 0, "new tail: %llu wrong", h);
    cudaPointerAttributes a;
    CK(cudaPointerGetAttributes(&a, (char *)p + big - 1));
    EXPECT(a.type == cudaMemoryTypeDevice, "the grown tail is device memory");
    EXPECT(api.realloc(p, small) == GVM_OK, "shrink back");
    EXPECT(mismatches(p, small, 31) == 0, "prefix kept after shrinking");
    EXPECT(api.realloc(p, (size_t)1 << 40) == GVM_ERR_NO_HEADROOM, "growing past the reservation is refused");
    CK(cudaFree(bad));
    CK(cudaFree(p));
}

int main()
{
    int ngpu = gpu_count_or_skip();
    if (!gvm_api_load(&api)) {
        printf("gvmshim is not loaded: skipped\n");
        return 77;
    }
    int peer = 0;
    if (ngpu > 1) CK(cudaDeviceCanAccessPeer(&peer, 0, 1));
    printf("%d GPU(s), peer access %s\n", ngpu, peer ? "yes" : "no");
    forum_scenario(ngpu, peer);
    graph_survives_moves(ngpu, peer);
    alias_and_grow();
    return finish();
}
