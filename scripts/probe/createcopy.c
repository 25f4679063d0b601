/* Probe (bench/RESULTS.md): why creating a resume's device memory
 * beside its copies still costs most of the creation (2026-11-26, two
 * H100s: an 8 GiB resume's copy+remap phase grew by ~20 ms when its 25 ms
 * of creation moved beside the copies). Copies 8 GiB from pinned host
 * memory to device 0 in 64 MiB pieces, each piece created with
 * cuMemCreate, mapped at its own address and granted to device 0:
 *   ready      pieces created beforehand; the copies alone
 *   serial     create piece k, then copy into it, one after the other
 *   ahead      copy piece k issued, then piece k+1 created (gvmshim's move)
 *   thread     a second thread creates the pieces; the copy of k waits
 *              until piece k exists
 *   beside     pieces ready; another thread creates (and releases) as many
 *              unrelated pieces while the copies run: does creating device
 *              memory slow the copy engine, or only the creating thread?
 *   create     the creations alone
 * Median of 5 rounds, ms; GB/s of the copy.
 *     cc -O2 createcopy.c -I$CUDA/include -lcuda -lpthread -o createcopy
 * (-DPROBE_ON_SIM and build/tests/sim's libcuda.so.1: the logic, no timings) */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s = "?"; cuGetErrorString(r_, &s); \
    printf("FAIL %s -> %d %s (line %d)\n", #x, r_, s, __LINE__); exit(1); } } while (0)
#define ROUNDS 5
#define PIECE ((size_t)64 << 20)
#define NPIECE 128

struct piece {
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
};

static CUcontext ctx;
static CUstream stream;
static void *host;
static struct piece pieces[NPIECE];
static volatile int made;   /* pieces created so far (thread mode) */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void make(struct piece *p)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CK(cuMemCreate(&p->h, PIECE, &prop, 0));
    CK(cuMemAddressReserve(&p->va, PIECE, 0, 0, 0));
    CK(cuMemMap(p->va, PIECE, 0, p->h, 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(p->va, PIECE, &a, 1));
}

static void unmake(struct piece *p)
{
    CK(cuMemUnmap(p->va, PIECE));
    CK(cuMemAddressFree(p->va, PIECE));
    CK(cuMemRelease(p->h));
}

static void copy(int k)
{
    CK(cuMemcpyHtoDAsync(pieces[k].va, (char *)host + (size_t)k * PIECE % ((size_t)1 << 30), PIECE, stream));
}

static void *creator(void *arg)
{
    struct piece *out = arg;
    CK(cuCtxSetCurrent(ctx));
    for (int k = 0; k < NPIECE; k++) {
        make(&out[k]);
        __atomic_store_n(&made, k + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* One round of a mode; returns ms from the first call to the last copy's end. */
static double round_of(const char *mode)
{
    static struct piece other[NPIECE];
    bool ready = !strcmp(mode, "ready") || !strcmp(mode, "beside");
    if (ready)
        for (int k = 0; k < NPIECE; k++) make(&pieces[k]);
    CK(cuCtxSynchronize());
    pthread_t t;
    made = 0;
    double t0 = now_ms();
    if (!strcmp(mode, "create")) {
        for (int k = 0; k < NPIECE; k++) make(&pieces[k]);
    } else if (ready) {
        if (!strcmp(mode, "beside")) pthread_create(&t, NULL, creator, other);
        for (int k = 0; k < NPIECE; k++) copy(k);
    } else if (!strcmp(mode, "serial")) {
        for (int k = 0; k < NPIECE; k++) {
            make(&pieces[k]);
            copy(k);
        }
    } else if (!strcmp(mode, "ahead")) {
        make(&pieces[0]);
        for (int k = 0; k < NPIECE; k++) {
            copy(k);
            if (k + 1 < NPIECE) make(&pieces[k + 1]);
        }
    } else if (!strcmp(mode, "thread")) {
        pthread_create(&t, NULL, creator, pieces);
        for (int k = 0; k < NPIECE; k++) {
            while (__atomic_load_n(&made, __ATOMIC_ACQUIRE) <= k) { }
            copy(k);
        }
        pthread_join(t, NULL);
    }
    CK(cuStreamSynchronize(stream));
    double ms = now_ms() - t0;
    if (!strcmp(mode, "beside")) {
        pthread_join(t, NULL);
        for (int k = 0; k < NPIECE; k++) unmake(&other[k]);
    }
    for (int k = 0; k < NPIECE; k++) unmake(&pieces[k]);
    return ms;
}

int main(void)
{
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
#ifdef PROBE_ON_SIM   /* a logic check against tests/sim's driver, which pins nothing */
    host = malloc((size_t)1 << 30);
#else
    CK(cuMemHostAlloc(&host, (size_t)1 << 30, 0));
#endif
    memset(host, 1, (size_t)1 << 30);
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, dev));
    printf("%s, %d pieces of %zu MiB (%zu MiB), host to device 0\n", name, NPIECE, PIECE >> 20,
           (size_t)NPIECE * PIECE >> 20);
    const char *modes[] = {"ready", "serial", "ahead", "thread", "beside", "create"};
    round_of("ready");   /* warm-up */
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        double v[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) v[r] = round_of(modes[m]);
        qsort(v, ROUNDS, sizeof *v, cmp);
        double gb = (double)NPIECE * PIECE / 1e9;
        printf("%-7s %8.2f ms (min %.2f, max %.2f)  %6.2f GB/s\n", modes[m], v[ROUNDS / 2], v[0], v[ROUNDS - 1],
               gb / (v[ROUNDS / 2] / 1e3));
    }
    return 0;
}
