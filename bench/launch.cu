/* launch: the CPU cost of launching an empty kernel, with 4 pointer
 * arguments and with one 512-byte struct of 64 pointers (the way PyTorch
 * passes tensors), all pointing into cudaMalloc buffers. Launches go in
 * bursts of --burst on a non-blocking stream (synchronized between bursts,
 * untimed); time of the bursts / launches = cost per launch. Two ways in:
 * cudart's <<<>>> and cuLaunchKernel, the symbol this program links from
 * libcuda (under LD_PRELOAD that is gvmshim's exported function).
 * scripts/bench runs it natively and under the shim with
 * GVM_TRACK_LAUNCHES=off and =on.
 *
 *     bench-launch [--launches 100000] [--burst 500] */
#define GT_FAIL_EXITS
#include "gpu_test.h"

#include <dlfcn.h>

using namespace gt;

struct Ptrs {
    float *p[64];
};
static_assert(sizeof(Ptrs) == 512, "the struct argument is 512 bytes");

__global__ void k_four(float *a, float *b, float *c, float *d)
{
    if (threadIdx.x == 1024) *a = *b + *c + *d;   /* never true: keeps the arguments */
}

__global__ void k_struct(Ptrs ps)
{
    if (threadIdx.x == 1024) *ps.p[0] = *ps.p[63];
}

enum Way { RT_FOUR, RT_STRUCT, DRV_FOUR, DRV_STRUCT };

int main(int argc, char **argv)
{
    watchdog(120);
    long launches = 100000;
    int burst = 500;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--launches") && i + 1 < argc) launches = atol(argv[++i]);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc) burst = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--launches N] [--burst N]\n", argv[0]);
            return 2;
        }
    }
    if (launches < 1000 || burst < 1) {
        fprintf(stderr, "--launches must be >= 1000 and --burst >= 1\n");
        return 2;
    }
    device_count_or_skip();
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    bool shim = dlsym(RTLD_DEFAULT, "gvm_query") != nullptr;

    /* Eight 2 MiB buffers: pointers into them, base and interior. */
    float *bufs[8];
    for (auto &b : bufs) CK(cudaMalloc((void **)&b, 2 * MiB));
    Ptrs ps;
    for (int i = 0; i < 64; i++) ps.p[i] = bufs[i % 8] + (i / 8) * 1024;
    float *a = bufs[0], *b = bufs[1] + 7, *c = bufs[2] + 4096, *d = bufs[3];
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaFunction_t f4 = nullptr, fs = nullptr;
    CK(cudaGetFuncBySymbol(&f4, (const void *)k_four));
    CK(cudaGetFuncBySymbol(&fs, (const void *)k_struct));
    void *args4[] = {&a, &b, &c, &d};
    void *argss[] = {&ps};

    auto one = [&](Way w) {
        switch (w) {
        case RT_FOUR: k_four<<<1, 32, 0, s>>>(a, b, c, d); break;
        case RT_STRUCT: k_struct<<<1, 32, 0, s>>>(ps); break;
        case DRV_FOUR: CKD(cuLaunchKernel((CUfunction)f4, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, args4, nullptr)); break;
        case DRV_STRUCT: CKD(cuLaunchKernel((CUfunction)fs, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, argss, nullptr)); break;
        }
    };
    struct {
        Way way;
        const char *args, *path;
    } ways[] = {{RT_FOUR, "4 pointers", "<<<>>> (cudart)"},
                {RT_STRUCT, "512 B struct", "<<<>>> (cudart)"},
                {DRV_FOUR, "4 pointers", "cuLaunchKernel (linked)"},
                {DRV_STRUCT, "512 B struct", "cuLaunchKernel (linked)"}};
    std::vector<std::string> rows;
    printf("%-14s %-26s %10s %14s\n", "arguments", "path", "mean us", "median burst");
    for (auto &w : ways) {
        for (int i = 0; i < 2000; i++) one(w.way);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        long bursts = std::max(1L, launches / burst);
        std::vector<double> per;
        double total = 0;
        for (long k = 0; k < bursts; k++) {
            double t0 = now_us();
            for (int i = 0; i < burst; i++) one(w.way);
            double t = now_us() - t0;
            total += t;
            per.push_back(t / burst);
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(s));
        }
        double m = total / (double)(bursts * burst);
        printf("%-14s %-26s %10.3f %14.3f\n", w.args, w.path, m, median(per));
        fflush(stdout);
        Obj row;
        row.str("args", w.args).str("path", w.path).n("mean_us", m).n("median_burst_us", median(per));
        row.n("launches", (double)(bursts * burst));
        rows.push_back(row.done());
    }
    CK(cudaStreamDestroy(s));
    for (auto &bp : bufs) CK(cudaFree(bp));
    Obj o = header("launch", shim);
    const char *track = getenv("GVM_TRACK_LAUNCHES");
    o.str("track_launches", track ? track : "").add("rows", list(rows));
    emit(o);
    return 0;
}
