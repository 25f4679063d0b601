/* copy: the CPU cost of one intercepted copy call, 256 bytes device to
 * device on a non-blocking stream. Calls are issued in bursts of --burst
 * (the stream is synchronized between bursts, untimed, so its queue never
 * fills); the time of the bursts divided by the calls is the cost per call.
 * Nothing is subtracted. Three ways in:
 *
 *   cuMemcpyDtoDAsync, the symbol this program links from libcuda (under
 *     LD_PRELOAD the call lands on gvmshim's exported symbol directly);
 *   cuMemcpyDtoDAsync through cudaGetDriverEntryPointByVersion (the
 *     resolver path cudart and frameworks use);
 *   cudaMemcpyAsync (cudart's own path to the driver).
 *
 * --vmm: the two buffers are the program's own VMM memory (cuMemCreate,
 * cuMemMap, cuMemSetAccess) instead of cudaMalloc's. Run natively, it is
 * what the driver itself charges for a copy between mapped VMM ranges,
 * the memory every gvmshim pointer is: the shim's figure minus this one is
 * its hooks' cost alone.
 *
 *     bench-copy [--calls 200000] [--burst 500] [--vmm] */
#define GT_FAIL_EXITS
#include "gpu_test.h"

#include <dlfcn.h>

using namespace gt;

typedef CUresult (*dtod_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

enum Way { LINKED, ENTRY, RUNTIME };

struct Result {
    double mean_us, median_burst_us, min_burst_us;
};

static Result measure(Way way, dtod_fn entry, void *dst, void *src, size_t n, cudaStream_t s, long calls, int burst)
{
    auto one = [&]() {
        switch (way) {
        case LINKED: CKD(cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, (CUstream)s)); break;
        case ENTRY: CKD(entry((CUdeviceptr)dst, (CUdeviceptr)src, n, (CUstream)s)); break;
        case RUNTIME: CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s)); break;
        }
    };
    for (int i = 0; i < 2000; i++) one();   /* warm-up */
    CK(cudaStreamSynchronize(s));
    long bursts = std::max(1L, calls / burst);
    std::vector<double> per;
    double total = 0;
    for (long b = 0; b < bursts; b++) {
        double t0 = now_us();
        for (int i = 0; i < burst; i++) one();
        double t = now_us() - t0;
        total += t;
        per.push_back(t / burst);
        CK(cudaStreamSynchronize(s));
    }
    Result r;
    r.mean_us = total / (double)(bursts * burst);
    r.median_burst_us = median(per);
    r.min_burst_us = percentile(per, 0.0);
    return r;
}

/* One granule of the program's own VMM memory on device 0, mapped and
 * readable and writable there. */
static void *vmm_alloc(size_t *granule)
{
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CKD(cuMemGetAllocationGranularity(granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h;
    CUdeviceptr p;
    CKD(cuMemCreate(&h, *granule, &prop, 0));
    CKD(cuMemAddressReserve(&p, *granule, 0, 0, 0));
    CKD(cuMemMap(p, *granule, 0, h, 0));
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CKD(cuMemSetAccess(p, *granule, &acc, 1));
    CKD(cuMemRelease(h));   /* the mapping keeps it */
    return (void *)p;
}

static void vmm_free(void *p, size_t granule)
{
    CKD(cuMemUnmap((CUdeviceptr)p, granule));
    CKD(cuMemAddressFree((CUdeviceptr)p, granule));
}

int main(int argc, char **argv)
{
    watchdog(120);
    long calls = 200000;
    int burst = 500;
    bool vmm = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atol(argv[++i]);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc) burst = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--vmm")) vmm = true;
        else {
            fprintf(stderr, "usage: %s [--calls N] [--burst N] [--vmm]\n", argv[0]);
            return 2;
        }
    }
    if (calls < 1000 || burst < 1) {
        fprintf(stderr, "--calls must be >= 1000 and --burst >= 1\n");
        return 2;
    }
    device_count_or_skip();
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    bool shim = dlsym(RTLD_DEFAULT, "gvm_query") != nullptr;
    const size_t n = 256;
    void *src = nullptr, *dst = nullptr;
    size_t granule = 0;
    /* Allocate first: the runtime loads the driver (and the shim its table). */
    if (vmm) {
        src = vmm_alloc(&granule);
        dst = vmm_alloc(&granule);
    } else {
        CK(cudaMalloc(&src, n));
        CK(cudaMalloc(&dst, n));
    }
    CK(cudaMemset(src, 1, n));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult qr;
    CK(cudaGetDriverEntryPointByVersion("cuMemcpyDtoDAsync", &fn, 12000, cudaEnableDefault, &qr));
    if (!fn || qr != cudaDriverEntryPointSuccess) fail_at(__FILE__, __LINE__, "cuMemcpyDtoDAsync not resolved");
    dtod_fn entry = (dtod_fn)fn;
    Dl_info info;
    const char *where = dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";

    struct {
        Way way;
        const char *name;
    } ways[] = {{LINKED, "cuMemcpyDtoDAsync (linked symbol)"},
                {ENTRY, "cuMemcpyDtoDAsync (entry point)"},
                {RUNTIME, "cudaMemcpyAsync D2D"}};
    std::vector<std::string> rows;
    printf("entry point resolved in %s\n", where);
    printf("%-36s %10s %14s %12s\n", "call (256 B D2D)", "mean us", "median burst", "min burst");
    for (auto &w : ways) {
        Result r = measure(w.way, entry, dst, src, n, s, calls, burst);
        printf("%-36s %10.3f %14.3f %12.3f\n", w.name, r.mean_us, r.median_burst_us, r.min_burst_us);
        fflush(stdout);
        Obj row;
        row.str("call", w.name).n("mean_us", r.mean_us).n("median_burst_us", r.median_burst_us);
        row.n("min_burst_us", r.min_burst_us).n("calls", (double)(std::max(1L, calls / burst) * burst));
        rows.push_back(row.done());
    }
    /* The copies did copy. */
    unsigned char back[256];
    CK(cudaMemcpy(back, dst, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (back[i] != 1) fail_at(__FILE__, __LINE__, "the copied bytes are wrong at %zu", i);
    CK(cudaStreamDestroy(s));
    if (vmm) {
        vmm_free(src, granule);
        vmm_free(dst, granule);
    } else {
        CK(cudaFree(src));
        CK(cudaFree(dst));
    }
    Obj o = header("copy", shim);
    o.str("entry_point_in", where).str("memory", vmm ? "vmm" : "cudaMalloc").add("rows", list(rows));
    emit(o);
    return 0;
}
