/* Probe of cold moves (bench/RESULTS.md): a move to host right
 * after start pays for creating pinned host memory (cuMemCreate of host
 * memory: 4.75 GB/s on one thread, no faster on four, H100 2026-11-23),
 * where the goal wants half the link (~25 GB/s). How fast can pinned host
 * memory that the copy engines reach at full speed be had at all?
 *   create    cuMemCreate(HOST_NUMA) + cuMemMap at a staging address +
 *             cuMemSetAccess for device 0 (gvmshim's host piece)
 *   hostalloc cuMemHostAlloc (portable)
 *   touch     anonymous mmap, MADV_HUGEPAGE, every page written (the
 *             kernel zeroes it) on T threads
 *   register  cuMemHostRegister of the touched memory, piece by piece on
 *             T threads
 * each for GiB in 64 MiB pieces on 1, 4 and 8 threads; then the D2H and
 * H2D bandwidth of one 1 GiB copy into each kind of memory, and into
 * pageable memory already touched. Median of 3 rounds, GB/s.
 *     cc -O2 pinrate.c -I$CUDA/include -lcuda -lpthread -o pinrate */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s = "?"; cuGetErrorString(r_, &s); \
    printf("FAIL %s -> %d %s (line %d)\n", #x, r_, s, __LINE__); exit(1); } } while (0)
#define PIECE ((size_t)64 << 20)
#define TOTAL ((size_t)1 << 30)
#define NP ((int)(TOTAL / PIECE))
#define ROUNDS 3

static CUcontext ctx;
static CUdevice dev;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

enum kind { CREATE, HOSTALLOC, TOUCH, REGISTER };
struct job {
    enum kind kind;
    int next;
    char *base;                       /* TOUCH, REGISTER */
    void *ptr[NP];                    /* HOSTALLOC */
    CUmemGenericAllocationHandle h[NP];
    CUdeviceptr va;                   /* CREATE: staging range */
};

static void one(struct job *j, int i)
{
    switch (j->kind) {
    case CREATE: {
        CUmemAllocationProp p = {0};
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        p.location.id = 0;
        CK(cuMemCreate(&j->h[i], PIECE, &p, 0));
        CK(cuMemMap(j->va + (size_t)i * PIECE, PIECE, 0, j->h[i], 0));
        CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CK(cuMemSetAccess(j->va + (size_t)i * PIECE, PIECE, &a, 1));
        break;
    }
    case HOSTALLOC:
        CK(cuMemHostAlloc(&j->ptr[i], PIECE, CU_MEMHOSTALLOC_PORTABLE));
        break;
    case TOUCH:
        for (size_t o = 0; o < PIECE; o += 4096) j->base[(size_t)i * PIECE + o] = 1;
        break;
    case REGISTER:
        CK(cuMemHostRegister(j->base + (size_t)i * PIECE, PIECE, CU_MEMHOSTREGISTER_PORTABLE));
        break;
    }
}

static void *worker(void *arg)
{
    struct job *j = arg;
    CK(cuCtxSetCurrent(ctx));
    for (int i; (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < NP;) one(j, i);
    return NULL;
}

static double run(struct job *j, int threads)
{
    pthread_t t[16];
    j->next = 0;
    double t0 = now_s();
    for (int k = 1; k < threads; k++) pthread_create(&t[k], NULL, worker, j);
    worker(j);
    for (int k = 1; k < threads; k++) pthread_join(t[k], NULL);
    return (double)TOTAL / (now_s() - t0) / 1e9;
}

static char *fresh_anon(void)
{
    char *b = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) { perror("mmap"); exit(1); }
    madvise(b, TOTAL, MADV_HUGEPAGE);
    return b;
}

static void release(struct job *j)
{
    switch (j->kind) {
    case CREATE:
        CK(cuMemUnmap(j->va, TOTAL));
        for (int i = 0; i < NP; i++) CK(cuMemRelease(j->h[i]));
        break;
    case HOSTALLOC:
        for (int i = 0; i < NP; i++) CK(cuMemFreeHost(j->ptr[i]));
        break;
    case REGISTER:
        for (int i = 0; i < NP; i++) CK(cuMemHostUnregister(j->base + (size_t)i * PIECE));
        /* fall through */
    case TOUCH:
        munmap(j->base, TOTAL);
        break;
    }
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double copy_rate(CUdeviceptr d, void *h, int d2h)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    double r[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_s();
        if (d2h) CK(cuMemcpyDtoHAsync(h, d, TOTAL, s));
        else CK(cuMemcpyHtoDAsync(d, h, TOTAL, s));
        CK(cuStreamSynchronize(s));
        r[k] = (double)TOTAL / (now_s() - t0) / 1e9;
    }
    CK(cuStreamDestroy(s));
    qsort(r, ROUNDS, sizeof *r, cmpd);
    return r[ROUNDS / 2];
}

int main(void)
{
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char thp[128] = "?";
    if (f) { if (!fgets(thp, sizeof thp, f)) thp[0] = 0; fclose(f); }
    printf("THP: %s", thp);
    const char *names[] = {"create", "hostalloc", "touch", "register"};
    int threads[] = {1, 4, 8};
    static struct job j;
    CK(cuMemAddressReserve(&j.va, TOTAL, 0, 0, 0));
    printf("%-10s %8s %8s %8s   GB/s by threads, median of %d\n", "kind", "1", "4", "8", ROUNDS);
    for (int k = 0; k < 4; k++) {
        printf("%-10s", names[k]);
        for (int ti = 0; ti < 3; ti++) {
            double r[ROUNDS];
            for (int x = 0; x < ROUNDS; x++) {
                j.kind = (enum kind)k;
                if (k == REGISTER) {   /* touched beforehand, on 8 threads */
                    j.base = fresh_anon();
                    j.kind = TOUCH;
                    run(&j, 8);
                    j.kind = REGISTER;
                } else if (k == TOUCH) {
                    j.base = fresh_anon();
                }
                r[x] = run(&j, threads[ti]);
                release(&j);
            }
            qsort(r, ROUNDS, sizeof *r, cmpd);
            printf(" %8.2f", r[ROUNDS / 2]);
        }
        printf("\n");
        fflush(stdout);
    }
    /* Copy bandwidth into each kind. */
    CUdeviceptr d;
    CK(cuMemAlloc(&d, TOTAL));
    CK(cuMemsetD8(d, 7, TOTAL));
    j.kind = CREATE; run(&j, 1);
    printf("copy into create:    D2H %6.2f  H2D %6.2f GB/s\n", copy_rate(d, (void *)j.va, 1), copy_rate(d, (void *)j.va, 0));
    release(&j);
    void *ha;
    CK(cuMemHostAlloc(&ha, TOTAL, CU_MEMHOSTALLOC_PORTABLE));
    printf("copy into hostalloc: D2H %6.2f  H2D %6.2f GB/s\n", copy_rate(d, ha, 1), copy_rate(d, ha, 0));
    CK(cuMemFreeHost(ha));
    /* One registration: a copy may not span two (invalid argument). */
    j.base = fresh_anon(); j.kind = TOUCH; run(&j, 8);
    CK(cuMemHostRegister(j.base, TOTAL, CU_MEMHOSTREGISTER_PORTABLE));
    printf("copy into register:  D2H %6.2f  H2D %6.2f GB/s\n", copy_rate(d, j.base, 1), copy_rate(d, j.base, 0));
    CK(cuMemHostUnregister(j.base));
    release(&j);
    j.base = fresh_anon(); j.kind = TOUCH; run(&j, 8);
    printf("copy into pageable:  D2H %6.2f  H2D %6.2f GB/s (touched)\n", copy_rate(d, j.base, 1), copy_rate(d, j.base, 0));
    release(&j);
    /* A whole cold path: touch on 8 threads and register in one call. */
    double t0 = now_s();
    j.base = fresh_anon(); j.kind = TOUCH; run(&j, 8);
    double t1 = now_s();
    CK(cuMemHostRegister(j.base, TOTAL, CU_MEMHOSTREGISTER_PORTABLE));
    double t2 = now_s();
    printf("1 GiB in one register: touch %.1f ms, register %.1f ms (%.2f GB/s together)\n", (t1 - t0) * 1e3,
           (t2 - t1) * 1e3, (double)TOTAL / (t2 - t0) / 1e9);
    CK(cuMemHostUnregister(j.base));
    munmap(j.base, TOTAL);
    return 0;
}
