/* cudaDeviceReset under gvmshim, compared with the native run call by call.
 * A reset destroys the device's primary context and everything made in
 * it: the program's memory is given back to the GPU (NVML sees it go), a
 * program may allocate again at once (under a device limit too), and the
 * process exits cleanly right after one (CUDA's samples end that way).
 * Likewise cuCtxDestroy of a context the program made (scenario context).
 * Each scenario runs twice, natively and under the shim (GVM_TEST_LIB or
 * the LD_PRELOAD this program was started with), its stdout and stderr
 * together; the printed call results must be identical and both runs
 * pass their own checks.
 *
 *   reset                 parent: every scenario, native vs shim
 *   reset --child NAME    one scenario, in this process
 *
 * Exit 77 without a GPU. The peer scenario needs two (skipped on one). */
#include "gpu_test.h"

#include <string>
#include <vector>

using namespace gt;

static Gvm gvm;

static void rec(const char *what, cudaError_t e)
{
    printf("%-52s %s\n", what, cudaGetErrorName(e));
    fflush(stdout);
}
#define REC(call) ([&] { cudaError_t e_ = (call); rec(#call, e_); return e_; }())

/* The memory a reset gave back: used on dev is within slack of `before`. */
static void expect_given_back(int dev, size_t before, const char *when)
{
    size_t now = nvml_used(dev);
    if (!before || !now) return;
    EXPECT(now <= before + 160 * MiB, "%s: NVML shows %zu MiB used on device %d, %zu MiB before the allocations",
           when, now >> 20, dev, before >> 20);
}

/* ---- data -------------------------------------------------------------------- */

static void fill(void *p, size_t n, uint32_t seed)
{
    fill_words((uint32_t *)p, n / 4, 0, seed);
}

static void verify(void *p, size_t n, uint32_t seed, const char *what)
{
    Counter c;   /* made per check: a reset frees pinned memory too */
    verify_words(c, (const uint32_t *)p, n / 4, 0, seed, what);
}

/* ---- scenarios --------------------------------------------------------------- */

/* Memory of every kind, a copy in flight on a stream, then the reset and
 * the end of the program. */
static void reset_at_exit()
{
    void *a, *b, *c, *d;
    cudaStream_t s;
    REC(cudaMalloc(&a, 256));
    REC(cudaMalloc(&b, 3 * MiB));
    REC(cudaMalloc(&c, GiB));
    REC(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    REC(cudaMallocAsync(&d, 64 * MiB, s));
    fill(c, GiB, 1);
    REC(cudaMemcpyAsync(b, c, 3 * MiB, cudaMemcpyDeviceToDevice, s));
    REC(cudaMemcpyAsync(d, c, 64 * MiB, cudaMemcpyDeviceToDevice, s));
    REC(cudaDeviceReset());
}

/* Allocate, reset, allocate as much again: under a device limit of 2 GiB
 * (GVM_DEVICE_LIMIT in this scenario) the second round fits only if the
 * reset gave the first back. */
static void allocate_again()
{
    size_t base = nvml_used(0);
    for (int round = 0; round < 2; round++) {
        void *a, *b, *c, *d;
        cudaStream_t s;
        REC(cudaMalloc(&a, 1536 * MiB));
        REC(cudaMalloc(&b, MiB));
        REC(cudaMalloc(&c, 256));
        REC(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        REC(cudaMallocAsync(&d, 64 * MiB, s));
        REC(cudaStreamSynchronize(s));
        fill(a, 1536 * MiB, 10 + round);
        fill(b, MiB, 20 + round);
        fill(d, 64 * MiB, 30 + round);
        verify(a, 1536 * MiB, 10 + round, "the big allocation");
        verify(b, MiB, 20 + round, "1 MiB");
        verify(d, 64 * MiB, 30 + round, "stream-ordered 64 MiB");
        size_t used = nvml_used(0);
        EXPECT(!base || used >= base + 1536 * MiB, "round %d: NVML shows %zu MiB used, %zu MiB before", round,
               used >> 20, base >> 20);
        REC(cudaDeviceReset());
        REC(cudaFree(nullptr));
        expect_given_back(0, base, round ? "after the second reset" : "after the first reset");
    }
    void *e;
    REC(cudaMalloc(&e, 1900 * MiB));
    REC(cudaFree(e));
}

/* Spilled memory (GVM_DEVICE_LIMIT=0:1G, GVM_SPILL=host, host maps eager or
 * lazy by scenario): 1.5 GiB made on a 1 GiB limit, then the reset, then
 * the same again; each time every byte checked. */
static void spill_twice()
{
    size_t base = nvml_used(0);
    const size_t n = 512 * MiB;
    for (int round = 0; round < 2; round++) {
        void *p[3];
        for (int i = 0; i < 3; i++) {
            REC(cudaMalloc(&p[i], n));
            fill(p[i], n, 100 * round + i);
        }
        REC(cudaDeviceSynchronize());
        for (int i = 0; i < 3; i++) verify(p[i], n, 100 * round + i, "spilled round");
        if (gvm.present && gvm.tag_push && gvm.pause) {
            /* Tagged memory paused when the reset comes: gone with the rest. */
            void *t;
            CKG(gvm, gvm.tag_push("reset-test"));
            CK(cudaMalloc(&t, 64 * MiB));
            CKG(gvm, gvm.tag_pop());
            fill(t, 64 * MiB, 7);
            CK(cudaDeviceSynchronize());
            CKG(gvm, gvm.pause("reset-test", GVM_PAUSE_KEEP));
        }
        REC(cudaDeviceReset());
        REC(cudaFree(nullptr));
        expect_given_back(0, base, "after a reset with spilled memory");
        if (gvm.present && gvm.resume) {
            gvm_status st = gvm.resume("reset-test");
            EXPECT(st == GVM_OK, "gvm_resume of a tag whose memory the reset freed: %d", st);
        }
    }
}

/* Pointers the reset freed: freeing or asking about them answers as
 * natively, and new memory works. */
static void stale_pointers()
{
    void *big, *small, *fresh;
    REC(cudaMalloc(&big, 64 * MiB));
    REC(cudaMalloc(&small, 256));
    REC(cudaDeviceReset());
    REC(cudaFree(big));
    REC(cudaFree(small));
    cudaPointerAttributes attr;
    memset(&attr, 0, sizeof attr);
    REC(cudaPointerGetAttributes(&attr, big));
    printf("type of a freed pointer: %d\n", (int)attr.type);
    (void)cudaGetLastError();
    REC(cudaMalloc(&fresh, 64 * MiB));
    fill(fresh, 64 * MiB, 3);
    verify(fresh, 64 * MiB, 3, "memory made after the reset");
    REC(cudaFree(fresh));
}

/* ---- a context the program made -------------------------------------------- */

static void recd(const char *what, CUresult r)
{
    const char *name = nullptr;
    cuGetErrorName(r, &name);
    printf("%-52s %s\n", what, name ? name : "(unknown)");
    fflush(stdout);
}
#define RECD(call) recd(#call, (call))

/* Driver-API programs (PyCUDA among them) make contexts of their own:
 * destroying one frees what was allocated in it, as NVML shows, and
 * nothing of the primary context's; its stale pointers answer as natively. */
static void context_destroy()
{
    CUdevice dev;
    CKD(cuDeviceGet(&dev, 0));
    void *keep;
    REC(cudaMalloc(&keep, 64 * MiB));
    fill(keep, 64 * MiB, 61);
    CK(cudaDeviceSynchronize());
    size_t base = nvml_used(0);
    for (int round = 0; round < 2; round++) {
        CUcontext ctx = nullptr;
        RECD(cuCtxCreate(&ctx, nullptr, 0, dev));
        CUdeviceptr big = 0, small = 0;
        RECD(cuMemAlloc(&big, GiB));
        RECD(cuMemAlloc(&small, 256));
        RECD(cuMemsetD32(big, 0x5eed0000u + (unsigned)round, GiB / 4));
        RECD(cuMemsetD32(small, 7, 64));
        unsigned w = 0;
        RECD(cuMemcpyDtoH(&w, big + GiB - 4, 4));
        printf("last word %#x\n", w);
        RECD(cuCtxDestroy(ctx));
        expect_given_back(0, base, "after the program's context was destroyed");
        RECD(cuMemFree(big));
        RECD(cuMemFree(small));
    }
    verify(keep, 64 * MiB, 61, "the primary context's memory");
    REC(cudaFree(keep));
}

/* Two GPUs: resetting device 0 leaves device 1's memory alone, and frees
 * device 0's memory that spilled to device 1 (GVM_SPILL=peer). */
static void peer()
{
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) {
        printf("one GPU: skipped\n");
        return;
    }
    CK(cudaSetDevice(1));
    CK(cudaFree(nullptr));
    size_t base1 = nvml_used(1);
    void *own;
    REC(cudaMalloc(&own, 256 * MiB));
    fill(own, 256 * MiB, 41);
    CK(cudaDeviceSynchronize());
    size_t with_own = nvml_used(1);
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    size_t base0 = nvml_used(0);
    void *p[3];
    for (int i = 0; i < 3; i++) {
        REC(cudaMalloc(&p[i], 512 * MiB));
        fill(p[i], 512 * MiB, 50 + i);
    }
    for (int i = 0; i < 3; i++) verify(p[i], 512 * MiB, 50 + i, "device 0's memory");
    REC(cudaDeviceReset());
    REC(cudaFree(nullptr));
    expect_given_back(0, base0, "device 0 after its reset");
    REC(cudaSetDevice(1));
    verify(own, 256 * MiB, 41, "device 1's memory after device 0's reset");
    if (base1 && with_own) {
        size_t now = nvml_used(1);
        EXPECT(now <= with_own + 64 * MiB, "device 1 holds %zu MiB, %zu MiB before device 0's allocations",
               now >> 20, with_own >> 20);
    }
    REC(cudaFree(own));
}

static int child(const std::string &name)
{
    watchdog(150);
    device_count_or_skip();
    gvm = load_gvm();
    CK(cudaFree(nullptr));
    Runner r;
    if (name == "exit") r.run(name.c_str(), reset_at_exit);
    else if (name == "again") r.run(name.c_str(), allocate_again);
    else if (name == "spill" || name == "spill-lazy") r.run(name.c_str(), spill_twice);
    else if (name == "stale") r.run(name.c_str(), stale_pointers);
    else if (name == "peer") r.run(name.c_str(), peer);
    else if (name == "context") r.run(name.c_str(), context_destroy);
    else return 2;
    return r.finish();
}

/* ---- the parent ----------------------------------------------------------- */

static void scenario_env(const std::string &name)
{
    if (name == "again") setenv("GVM_DEVICE_LIMIT", "0:2G", 1);
    if (name == "spill" || name == "spill-lazy" || name == "peer") {
        setenv("GVM_DEVICE_LIMIT", "0:1G", 1);
        setenv("GVM_SPILL", name == "peer" ? "peer,host" : "host", 1);
    }
    if (name == "spill-lazy") setenv("GVM_SPILL_HOST_MAP", "lazy", 1);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    return compare_with_native({"exit", "again", "spill", "spill-lazy", "stale", "peer", "context"}, scenario_env, true);
}
