/* Probe of what the driver charges (bench/RESULTS.md, "What we learned"):
 *  1. grow: does asking for an exportable handle (POSIX fd, RDMA) make
 *     cuMemCreate/cuMemMap/cuMemSetAccess of 8 GiB slower than a plain one?
 *  2. spill remaps: mapping 128 MiB of host memory at a region's address,
 *     in pieces of 2, 16, 64 or 128 MiB; and whether a host piece already
 *     mapped (with device access) at a staging address maps faster a second
 *     time (the driver may reuse its DMA mapping);
 *  3. what an idle cuCtxSynchronize costs (a cached region's reuse waits
 *     with one);
 *  4. (--devices) whether host (and device 0) memory maps at a cost per
 *     device granted;
 *  5. (--lanes) what a spill swap's two remaps cost alone, at once on two
 *     threads (does the driver serialize them?), and while a copy runs on
 *     the same device (does a remap wait for it, or slow it down?).
 * Medians of 5 rounds, microseconds.
 *     cc -O2 remapcost.c -I$CUDA/include -lcuda -lpthread -o remapcost */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s = "?"; cuGetErrorString(r_, &s); \
    printf("FAIL %s -> %d %s (line %d)\n", #x, r_, s, __LINE__); exit(1); } } while (0)
#define ROUNDS 5

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static CUmemAccessDesc dev_access(void)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

/* kind 0: plain, 1: + POSIX fd, 2: + POSIX fd + RDMA, 3: host NUMA 0 */
static CUmemAllocationProp prop_of(int kind)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (kind == 3) {
        p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        p.location.id = 0;
        return p;
    }
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    if (kind >= 1) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (kind >= 2) p.allocFlags.gpuDirectRDMACapable = 1;
    return p;
}

static void grow_probe(size_t size)
{
    static const char *names[] = {"plain", "posix-fd", "posix-fd+rdma"};
    CUmemAccessDesc a = dev_access();
    for (int kind = 0; kind < 3; kind++) {
        CUmemAllocationProp p = prop_of(kind);
        double c[ROUNDS], m[ROUNDS], s[ROUNDS], u[ROUNDS], r[ROUNDS];
        for (int i = 0; i < ROUNDS; i++) {
            CUdeviceptr va;
            CUmemGenericAllocationHandle h;
            CK(cuMemAddressReserve(&va, size, 0, 0, 0));
            double t0 = now_us();
            CK(cuMemCreate(&h, size, &p, 0));
            double t1 = now_us();
            CK(cuMemMap(va, size, 0, h, 0));
            double t2 = now_us();
            CK(cuMemSetAccess(va, size, &a, 1));
            double t3 = now_us();
            CK(cuMemUnmap(va, size));
            double t4 = now_us();
            CK(cuMemRelease(h));
            double t5 = now_us();
            CK(cuMemAddressFree(va, size));
            c[i] = t1 - t0, m[i] = t2 - t1, s[i] = t3 - t2, u[i] = t4 - t3, r[i] = t5 - t4;
        }
        double mc = median(c, ROUNDS), mm = median(m, ROUNDS), ms = median(s, ROUNDS);
        printf("grow %5zu MiB %-14s create %7.0f map %5.0f access %6.0f = %7.0f | unmap %6.0f release %6.0f us\n",
               size >> 20, names[kind], mc, mm, ms, mc + mm + ms, median(u, ROUNDS), median(r, ROUNDS));
    }
}

/* Maps `total` bytes of host memory in pieces of `piece` at one address
 * range, with device access; `staged`: every piece is already mapped with
 * device access at a second range. Returns map+access us (median). */
static int access_devices = 1;   /* devices granted by host_map */

static int map_kind = 3;          /* prop_of kind host_map maps: 3 host, 1 device 0 */

static double host_map(size_t total, size_t piece, int staged, double *unmap_us)
{
    int n = (int)(total / piece);
    CUmemAllocationProp p = prop_of(map_kind);
    CUmemAccessDesc a[8];
    for (int d = 0; d < access_devices; d++) {
        a[d] = dev_access();
        a[d].location.id = d;
    }
    CUmemGenericAllocationHandle *h = calloc((size_t)n, sizeof *h);
    for (int k = 0; k < n; k++) CK(cuMemCreate(&h[k], piece, &p, 0));
    CUdeviceptr va, stage;
    CK(cuMemAddressReserve(&va, total, 0, 0, 0));
    CK(cuMemAddressReserve(&stage, total, 0, 0, 0));
    if (staged) {
        for (int k = 0; k < n; k++) CK(cuMemMap(stage + (size_t)k * piece, piece, 0, h[k], 0));
        CK(cuMemSetAccess(stage, total, a, (size_t)access_devices));
    }
    double t[ROUNDS], u[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        double t0 = now_us();
        for (int k = 0; k < n; k++) CK(cuMemMap(va + (size_t)k * piece, piece, 0, h[k], 0));
        CK(cuMemSetAccess(va, total, a, (size_t)access_devices));
        double t1 = now_us();
        CK(cuMemUnmap(va, total));
        u[i] = now_us() - t1;
        t[i] = t1 - t0;
    }
    if (staged) CK(cuMemUnmap(stage, total));
    for (int k = 0; k < n; k++) CK(cuMemRelease(h[k]));
    CK(cuMemAddressFree(va, total));
    CK(cuMemAddressFree(stage, total));
    free(h);
    *unmap_us = median(u, ROUNDS);
    return median(t, ROUNDS);
}

static void remap_probe(void)
{
    size_t total = (size_t)128 << 20;
    size_t pieces[] = {(size_t)2 << 20, (size_t)16 << 20, (size_t)64 << 20, total};
    for (int staged = 0; staged < 2; staged++)
        for (unsigned i = 0; i < sizeof pieces / sizeof *pieces; i++) {
            double un, us = host_map(total, pieces[i], staged, &un);
            printf("host map 128 MiB in %3zu MiB pieces%s: map+access %6.0f us (%5.1f us/MiB) | unmap %6.0f us\n",
                   pieces[i] >> 20, staged ? ", staged" : "        ", us, us / 128, un);
        }
}

/* 4. whether mapping host memory costs per device granted (two GPUs). */
static void devices_probe(void)
{
    int ndev = 0;
    CK(cuDeviceGetCount(&ndev));
    for (map_kind = 3; map_kind >= 1; map_kind -= 2)
        for (access_devices = 1; access_devices <= ndev && access_devices <= 8; access_devices++) {
            double un, us = host_map((size_t)128 << 20, (size_t)64 << 20, 0, &un);
            printf("%s map 128 MiB in 64 MiB pieces, %d device(s) granted: map+access %6.0f us (%5.1f us/MiB) | "
                   "unmap %6.0f us\n", map_kind == 3 ? "host    " : "device 0", access_devices, us, us / 128, un);
        }
    access_devices = 1;
    map_kind = 3;
}

/* ---- 5. lanes ---------------------------------------------------------- */

struct lane_job {
    CUcontext ctx;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h[2];
    size_t piece;
    pthread_barrier_t *start;
    double us;
};

/* Maps both pieces at va, grants device 0, unmaps: one remap of a swap's
 * lane (the unmap is outside the time). */
static double lane_map(struct lane_job *j)
{
    CUmemAccessDesc a = dev_access();
    double t0 = now_us();
    for (int k = 0; k < 2; k++) CK(cuMemMap(j->va + (size_t)k * j->piece, j->piece, 0, j->h[k], 0));
    CK(cuMemSetAccess(j->va, 2 * j->piece, &a, 1));
    double us = now_us() - t0;
    CK(cuMemUnmap(j->va, 2 * j->piece));
    return us;
}

static void *lane_thread(void *arg)
{
    struct lane_job *j = arg;
    CK(cuCtxSetCurrent(j->ctx));
    if (j->start) pthread_barrier_wait(j->start);
    j->us = lane_map(j);
    return NULL;
}

static void lane_setup(struct lane_job *j, int kind, size_t piece, CUcontext ctx)
{
    CUmemAllocationProp p = prop_of(kind);
    memset(j, 0, sizeof *j);
    j->ctx = ctx;
    j->piece = piece;
    for (int k = 0; k < 2; k++) CK(cuMemCreate(&j->h[k], piece, &p, 0));
    CK(cuMemAddressReserve(&j->va, 2 * piece, 0, 0, 0));
}

static void lane_free(struct lane_job *j)
{
    for (int k = 0; k < 2; k++) CK(cuMemRelease(j->h[k]));
    CK(cuMemAddressFree(j->va, 2 * j->piece));
}

static void lanes_probe(void)
{
    const size_t piece = (size_t)64 << 20, big = (size_t)1 << 30;
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    struct lane_job host, dev;
    lane_setup(&host, 3, piece, ctx);
    lane_setup(&dev, 0, piece, ctx);
    double h_alone[ROUNDS], d_alone[ROUNDS], h_both[ROUNDS], d_both[ROUNDS], wall[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        h_alone[i] = lane_map(&host);
        d_alone[i] = lane_map(&dev);
    }
    for (int i = 0; i < ROUNDS; i++) {
        pthread_barrier_t b;
        pthread_barrier_init(&b, NULL, 3);
        host.start = dev.start = &b;
        pthread_t t1, t2;
        pthread_create(&t1, NULL, lane_thread, &host);
        pthread_create(&t2, NULL, lane_thread, &dev);
        pthread_barrier_wait(&b);
        double t0 = now_us();
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        wall[i] = now_us() - t0;
        h_both[i] = host.us, d_both[i] = dev.us;
        pthread_barrier_destroy(&b);
    }
    printf("lanes: host map 128 MiB alone %6.0f us, device map 128 MiB alone %6.0f us\n", median(h_alone, ROUNDS),
           median(d_alone, ROUNDS));
    printf("lanes: both at once on two threads: host %6.0f us, device %6.0f us, wall %6.0f us\n",
           median(h_both, ROUNDS), median(d_both, ROUNDS), median(wall, ROUNDS));

    /* A 1 GiB copy device -> pinned host on a stream, with and without the
     * host remap running beside it on this thread. */
    CUdeviceptr src;
    void *dst;
    CUstream s;
    CUevent e0, e1;
    CK(cuMemAlloc(&src, big));
    CK(cuMemAllocHost(&dst, big));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    double c_alone[ROUNDS], c_with[ROUNDS], m_with[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        for (int with = 0; with < 2; with++) {
            CK(cuEventRecord(e0, s));
            CK(cuMemcpyDtoHAsync(dst, src, big, s));
            CK(cuEventRecord(e1, s));
            if (with) m_with[i] = lane_map(&host);
            CK(cuEventSynchronize(e1));
            float ms = 0;
            CK(cuEventElapsedTime(&ms, e0, e1));
            (with ? c_with : c_alone)[i] = ms * 1e3;
        }
    }
    printf("lanes: 1 GiB D2H copy alone %6.0f us; with a host map beside it: copy %6.0f us, map %6.0f us\n",
           median(c_alone, ROUNDS), median(c_with, ROUNDS), median(m_with, ROUNDS));
    CK(cuEventDestroy(e0));
    CK(cuEventDestroy(e1));
    CK(cuStreamDestroy(s));
    CK(cuMemFreeHost(dst));
    CK(cuMemFree(src));
    lane_free(&host);
    lane_free(&dev);
}

static void sync_probe(void)
{
    double t[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        double t0 = now_us();
        for (int k = 0; k < 1000; k++) CK(cuCtxSynchronize());
        t[i] = (now_us() - t0) / 1000;
    }
    printf("idle cuCtxSynchronize %.3f us\n", median(t, ROUNDS));
}

int main(int argc, char **argv)
{
    size_t grow = (size_t)(argc > 1 ? atof(argv[1]) : 8) << 30;
    CK(cuInit(0));
    CUdevice d;
    CUcontext ctx;
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, d));
    int drv = 0;
    CK(cuDriverGetVersion(&drv));
    printf("%s, driver API %d\n", name, drv);
    if (argc > 1 && !strcmp(argv[1], "--devices")) {
        devices_probe();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--lanes")) {
        lanes_probe();
        return 0;
    }
    grow_probe((size_t)1 << 30);
    grow_probe(grow);
    remap_probe();
    sync_probe();
    return 0;
}
