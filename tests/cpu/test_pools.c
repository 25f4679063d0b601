/* Stream-ordered pools through the whole interception path (run like
 * test-preload: LD_PRELOAD=libgvmshim.so, the simulated driver as
 * libcuda.so.1, whose pools keep the driver's figures: tests/sim/pool.c).
 * Each sequence runs in a child twice, under the shim (which serves the
 * default pools' allocations itself and answers their attributes,
 * core/pooluse.h) and without it, and prints every call's result and
 * every attribute read: the two lists must be identical. */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static gpa2_fn gpa;

static void *resolve(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(gpa(name, &fn, 12000, 0, &st), CUDA_SUCCESS);
    return fn;
}

#define D(name, ...) ((__typeof__(name) *)resolve(#name))(__VA_ARGS__)

/* Every call, printed for the parent to compare. */
static int nrec;
#define REC(call) record(#call, (call))
static CUresult record(const char *what, CUresult rc)
{
    printf("%d %d %s\n", nrec++, (int)rc, what);
    fflush(stdout);
    return rc;
}

static const struct {
    CUmemPool_attribute attr;
    const char *name;
} use_attrs[] = {
    {CU_MEMPOOL_ATTR_USED_MEM_CURRENT, "used"},
    {CU_MEMPOOL_ATTR_USED_MEM_HIGH, "used_high"},
    {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, "reserved"},
    {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, "reserved_high"},
};

/* The pool's four use figures, as a program reads them. */
static void show(const char *when, CUmemoryPool pool)
{
    printf("%s:", when);
    for (size_t i = 0; i < sizeof use_attrs / sizeof *use_attrs; i++) {
        cuuint64_t v = 0;
        CUresult rc = D(cuMemPoolGetAttribute, pool, use_attrs[i].attr, &v);
        printf(" %s=%d/%llu", use_attrs[i].name, (int)rc, (unsigned long long)v);
    }
    printf("\n");
    fflush(stdout);
}

static CUmemoryPool start(int dev)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    gpa = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    CHECK(gpa != NULL);
    CUcontext ctx;
    CHECK_EQ(D(cuInit, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuDevicePrimaryCtxRetain, &ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSetCurrent, ctx), CUDA_SUCCESS);
    CUmemoryPool pool = NULL, current = NULL;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &pool, dev), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceGetMemPool, &current, dev), CUDA_SUCCESS);
    CHECK(pool == current);
    return pool;
}

/* CuPy's MemoryAsyncPool cases: total (reserved), used and free bytes
 * while 512-byte multiples come and go on one stream, then on another
 * after free_all_blocks() (a synchronize and a trim to nothing). */
static int cupy_sequence(void)
{
    CUmemoryPool pool = start(0);
    CUdeviceptr p1 = 0, p2 = 0, p3 = 0;
    show("start", pool);
    REC(D(cuMemAllocAsync, &p1, 2 * 512, NULL));
    show("p1", pool);
    REC(D(cuMemAllocAsync, &p2, 4 * 512, NULL));
    show("p2", pool);
    REC(D(cuMemFreeAsync, p2, NULL));
    show("del p2", pool);
    REC(D(cuMemFreeAsync, p1, NULL));
    show("del p1", pool);
    REC(D(cuMemAllocAsync, &p3, 512, NULL));
    show("p3", pool);
    REC(D(cuMemFreeAsync, p3, NULL));
    REC(D(cuStreamSynchronize, NULL));
    REC(D(cuMemPoolTrimTo, pool, 0));
    show("free_all_blocks", pool);
    REC(D(cuMemAllocAsync, &p1, 4 * 512, NULL));
    REC(D(cuMemFreeAsync, p1, NULL));
    show("freed, no sync", pool);
    REC(D(cuMemPoolTrimTo, pool, 0));
    show("trim before a sync", pool);
    REC(D(cuCtxSynchronize));
    REC(D(cuMemPoolTrimTo, pool, 0));
    show("sync and trim", pool);
    CUstream s;
    REC(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
    REC(D(cuMemAllocAsync, &p2, 2 * 512, s));
    show("on another stream", pool);
    REC(D(cuMemFreeAsync, p2, s));
    REC(D(cuStreamSynchronize, s));
    show("its stream synchronized", pool);
    /* An odd size, counted unrounded, and one past a 32 MiB chunk right
     * after it in the pool's range: the pool maps one chunk more (H200,
     * CuPy's figures in gpu test gpu-cupy-pools). */
    REC(D(cuMemAllocAsync, &p1, 100, NULL));
    REC(D(cuMemAllocAsync, &p2, 32 * MiB + 1, NULL));
    show("odd sizes", pool);
    REC(D(cuMemFree_v2, p2));
    REC(D(cuMemFreeAsync, p1, NULL));
    CUevent e;
    REC(D(cuEventCreate, &e, 0));
    REC(D(cuEventRecord, e, NULL));
    REC(D(cuEventSynchronize, e));
    show("freed and synchronized", pool);
    return 0;
}

/* CuPy's odd sizes, then a release threshold of 5 MiB and a synchronize
 * (gpu test gpu-cupy-pools' steps "odd" and "threshold"), the one CuPy's
 * Device.synchronize() makes through CUDA 13's runtime. */
static int cupy_threshold_sequence(void)
{
    CUmemoryPool pool = start(0);
    CUdeviceptr p1 = 0, raw = 0, p2 = 0, many[64];
    cuuint64_t max = UINT64_MAX, five = 5 * MiB;
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max));
    REC(D(cuMemAllocAsync, &p1, 512, NULL));
    REC(D(cuMemAllocAsync, &raw, 100, NULL));
    REC(D(cuMemAllocAsync, &p2, 32 * MiB + 512, NULL));
    for (int i = 0; i < 64; i++) REC(D(cuMemAllocAsync, &many[i], 4096 * (size_t)(i + 1), NULL));
    show("odd", pool);
    for (int i = 63; i >= 0; i--) REC(D(cuMemFreeAsync, many[i], NULL));   /* a list is freed from its end */
    REC(D(cuMemFreeAsync, raw, NULL));
    REC(D(cuMemFreeAsync, p1, NULL));
    REC(D(cuMemFreeAsync, p2, NULL));
    REC(D(cuCtxSynchronize));
    show("odd synchronized", pool);
    REC(D(cuCtxSynchronize));
    REC(D(cuMemPoolTrimTo, pool, 0));
    show("clean", pool);
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &five));
    REC(D(cuMemAllocAsync, &p1, 20 * MiB, NULL));
    REC(D(cuMemFreeAsync, p1, NULL));
    show("5 MiB freed", pool);
    /* The wait CUDA 13's runtime makes for cudaDeviceSynchronize. */
    REC(D(cuCtxSynchronize_v2, NULL));
    show("5 MiB synchronized", pool);
    CUcontext ctx = NULL;
    REC(D(cuCtxGetCurrent, &ctx));
    REC(D(cuMemAllocAsync, &p1, 20 * MiB, NULL));
    REC(D(cuMemFreeAsync, p1, NULL));
    REC(D(cuCtxSynchronize_v2, ctx));
    show("its context named", pool);
    return 0;
}

/* The release threshold and a trim that keeps some, the highs and their
 * reset, the reuse flags, an allocation naming the default pool. */
static int settings_sequence(void)
{
    CUmemoryPool pool = start(0);
    cuuint64_t threshold = 40 * MiB, v = 0;
    CUdeviceptr p = 0, q = 0;
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    REC(D(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    printf("threshold %llu\n", (unsigned long long)v);
    REC(D(cuMemAllocAsync, &p, 72 * MiB, NULL));
    REC(D(cuMemAllocFromPoolAsync, &q, 1 * MiB, pool, NULL));
    show("73 MiB", pool);
    REC(D(cuMemFreeAsync, p, NULL));
    REC(D(cuMemFreeAsync, q, NULL));
    show("freed", pool);
    REC(D(cuCtxSynchronize));
    show("synchronized above the threshold", pool);
    threshold = UINT64_MAX;
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    REC(D(cuMemAllocAsync, &p, 48 * MiB, NULL));
    REC(D(cuMemFreeAsync, p, NULL));
    REC(D(cuCtxSynchronize));
    show("kept under an unbounded threshold", pool);
    REC(D(cuMemPoolTrimTo, pool, 40 * MiB));
    show("trimmed to 40 MiB", pool);
    cuuint64_t zero = 0, five = 5;
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    show("highs reset", pool);
    REC(D(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five));
    REC(D(cuMemPoolTrimTo, pool, 0));
    show("trimmed to nothing", pool);
    static const struct {
        CUmemPool_attribute attr;
        const char *name;
    } reuse[] = {{CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, "follow_event_dependencies"},
                 {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, "opportunistic"},
                 {CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, "internal_dependencies"}};
    for (size_t i = 0; i < sizeof reuse / sizeof *reuse; i++) {
        int flag = 7;
        REC(D(cuMemPoolGetAttribute, pool, reuse[i].attr, &flag));
        printf("%s %d\n", reuse[i].name, flag);
        flag = 0;
        REC(D(cuMemPoolSetAttribute, pool, reuse[i].attr, &flag));
        flag = 7;
        REC(D(cuMemPoolGetAttribute, pool, reuse[i].attr, &flag));
        printf("%s %d\n", reuse[i].name, flag);
    }
    /* Reuse off: the figures follow the same rule. */
    REC(D(cuMemAllocAsync, &p, 1 * MiB, NULL));
    REC(D(cuMemFreeAsync, p, NULL));
    REC(D(cuMemAllocAsync, &q, 1 * MiB, NULL));
    show("reuse off", pool);
    REC(D(cuMemFreeAsync, q, NULL));
    REC(D(cuCtxSynchronize));
    REC(D(cuMemPoolGetAttribute, NULL, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    REC(D(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, NULL));
    REC(D(cuMemPoolTrimTo, NULL, 0));
    return 0;
}

/* A pool the program made current (a handle here: the sim's pools are
 * handles) is the driver's entirely; the default pool's figures do not
 * move meanwhile. Then the second device's default pool. */
static int other_pools_sequence(void)
{
    CUmemoryPool def = start(0), mine = (CUmemoryPool)(uintptr_t)0x7770;
    CUdeviceptr p = 0, q = 0;
    REC(D(cuDeviceSetMemPool, 0, mine));
    REC(D(cuMemAllocAsync, &p, 3 * KiB, NULL));
    REC(D(cuMemAllocFromPoolAsync, &q, 5 * MiB, mine, NULL));
    show("mine", mine);
    show("default", def);
    REC(D(cuMemFreeAsync, p, NULL));
    REC(D(cuMemFreeAsync, q, NULL));
    REC(D(cuCtxSynchronize));
    show("mine freed", mine);
    REC(D(cuDeviceSetMemPool, 0, def));
    CUmemoryPool def1 = NULL;
    CUcontext ctx1;
    REC(D(cuDeviceGetDefaultMemPool, &def1, 1));
    REC(D(cuDevicePrimaryCtxRetain, &ctx1, 1));
    REC(D(cuCtxSetCurrent, ctx1));
    REC(D(cuMemAllocAsync, &p, 6 * MiB, NULL));
    show("device 1", def1);
    show("device 0", def);
    REC(D(cuMemFreeAsync, p, NULL));
    REC(D(cuCtxSynchronize));
    show("device 1 freed", def1);
    return 0;
}

/* A reset of the device's primary context takes the pool's allocations:
 * its figures start again from nothing. */
static int reset_sequence(void)
{
    CUmemoryPool pool = start(0);
    CUdeviceptr p = 0;
    CUcontext ctx;
    REC(D(cuMemAllocAsync, &p, 5 * MiB, NULL));
    show("before the reset", pool);
    REC(D(cuDevicePrimaryCtxReset_v2, 0));
    REC(D(cuDevicePrimaryCtxRetain, &ctx, 0));
    REC(D(cuCtxSetCurrent, ctx));
    show("after the reset", pool);
    REC(D(cuMemAllocAsync, &p, 1 * MiB, NULL));
    show("a new allocation", pool);
    REC(D(cuMemFreeAsync, p, NULL));
    REC(D(cuCtxSynchronize));
    show("freed", pool);
    return 0;
}

/* Failures under the shim: a synchronize or trim the driver refuses
 * settles nothing; when gvmshim cannot read the pool's release threshold
 * at a synchronize, the pool keeps its reserve until the next one. */
static void failures_keep_the_figures(void)
{
    CUmemoryPool pool = start(0);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    void (*fail_call)(const char *, unsigned long, CUresult) =
        (void (*)(const char *, unsigned long, CUresult))dlsym(lib, "simcuda_fail_call");
    CHECK(fail_call != NULL);
    cuuint64_t reserved = 0;
    CUdeviceptr p = 0;
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolTrimTo, pool, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &p, 3 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, p, NULL), CUDA_SUCCESS);
    fail_call("cuCtxSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_ERROR_LAUNCH_FAILED);
    fail_call("cuMemPoolTrimTo", 1, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemPoolTrimTo, pool, 0), CUDA_ERROR_INVALID_VALUE);
    fail_call("cuMemPoolGetAttribute", 1, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    CHECK_EQ(reserved, 32 * MiB);
    fail_call("cuMemPoolGetAttribute", 1, CUDA_ERROR_INVALID_VALUE);   /* gvmshim's read of the threshold */
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    CHECK_EQ(reserved, 32 * MiB);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    CHECK_EQ(reserved, 0);
}

/* Threads allocating and freeing on their own streams while others read
 * the figures and synchronize: the figures end where they began. */
static CUcontext threads_ctx;
static CUmemoryPool threads_pool;

static void *pool_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    CHECK_EQ(D(cuCtxSetCurrent, threads_ctx), CUDA_SUCCESS);
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int i = 0; i < 200; i++) {
        CUdeviceptr p = 0;
        size_t size = 1 + (size_t)(rand_r(&seed) % (3 * MiB));
        CHECK_EQ(D(cuMemAllocAsync, &p, size, s), CUDA_SUCCESS);
        cuuint64_t v;
        CHECK_EQ(D(cuMemPoolGetAttribute, threads_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_SUCCESS);
        CHECK(v >= size);
        CHECK_EQ(D(cuMemFreeAsync, p, s), CUDA_SUCCESS);
        if (i % 16 == 0) CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    }
    CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    return NULL;
}

static void threads_leave_the_figures_where_they_began(void)
{
    threads_pool = start(0);
    CHECK_EQ(D(cuCtxGetCurrent, &threads_ctx), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolTrimTo, threads_pool, 0), CUDA_SUCCESS);
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) CHECK_EQ(pthread_create(&t[i], NULL, pool_worker, (void *)(i + 1)), 0);
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolTrimTo, threads_pool, 0), CUDA_SUCCESS);
    cuuint64_t used = 1, reserved = 1, high = 0;
    CHECK_EQ(D(cuMemPoolGetAttribute, threads_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolGetAttribute, threads_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolGetAttribute, threads_pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), CUDA_SUCCESS);
    CHECK_EQ(used, 0);
    CHECK_EQ(reserved, 0);
    CHECK(high > 0);
}

/* ---- the parent: each sequence with and without the shim ----------------- */

static int run_child(const char *mode, int shim, char *out, size_t outlen)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (!shim) unsetenv("LD_PRELOAD");
        execl("/proc/self/exe", "test-pools", "--mode", mode, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    return test_child_output(pid, fds[0], out, outlen);
}

/* Runs mode both ways; the native run must contain each of expect. */
static void same_with_and_without_shim(const char *mode, const char *const *expect)
{
    static char shim[16384], native[16384];
    CHECK(getenv("LD_PRELOAD") != NULL);
    CHECK_EQ(run_child(mode, 0, native, sizeof native), 0);
    CHECK_EQ(run_child(mode, 1, shim, sizeof shim), 0);
    if (strcmp(shim, native)) {
        fprintf(stderr, "native:\n%s\nunder the shim:\n%s\n", native, shim);
        CHECK(!"pool answers differ");
    }
    for (; expect && *expect; expect++)
        if (!strstr(native, *expect)) {
            fprintf(stderr, "native run lacks '%s':\n%s\n", *expect, native);
            CHECK(!"unexpected native answer");
        }
}

static void cupy_async_pool_figures(void)
{
    static const char *const expect[] = {
        "p1: used=0/1024 used_high=0/1024 reserved=0/33554432",
        "del p1: used=0/0 used_high=0/3072 reserved=0/33554432",
        "free_all_blocks: used=0/0 used_high=0/3072 reserved=0/0",
        "trim before a sync: used=0/0 used_high=0/3072 reserved=0/33554432",
        "sync and trim: used=0/0 used_high=0/3072 reserved=0/0",
        "odd sizes: used=0/33554533 used_high=0/33554533 reserved=0/67108864",
        "freed and synchronized: used=0/0 used_high=0/33554533 reserved=0/0",
        NULL};
    same_with_and_without_shim("cupy", expect);
}

static void a_runtime_device_synchronize_releases(void)
{
    static const char *const expect[] = {
        "odd: used=0/42075236 used_high=0/42075236 reserved=0/67108864",
        "odd synchronized: used=0/0 used_high=0/42075236 reserved=0/67108864",
        "clean: used=0/0 used_high=0/42075236 reserved=0/0",
        "5 MiB freed: used=0/0 used_high=0/42075236 reserved=0/33554432",
        "5 MiB synchronized: used=0/0 used_high=0/42075236 reserved=0/0",
        "its context named: used=0/0 used_high=0/42075236 reserved=0/0",
        NULL};
    same_with_and_without_shim("cupy-threshold", expect);
}

static void pool_settings_and_highs(void)
{
    static const char *const expect[] = {
        "threshold 41943040",
        "73 MiB: used=0/76546048 used_high=0/76546048 reserved=0/100663296",
        "synchronized above the threshold: used=0/0 used_high=0/76546048 reserved=0/33554432",
        "kept under an unbounded threshold: used=0/0 used_high=0/76546048 reserved=0/67108864",
        "trimmed to 40 MiB: used=0/0 used_high=0/76546048 reserved=0/67108864",
        "highs reset: used=0/0 used_high=0/0 reserved=0/67108864 reserved_high=0/67108864",
        "opportunistic 1",
        "opportunistic 0",
        "follow_event_dependencies 0",
        "internal_dependencies 0",
        NULL};
    same_with_and_without_shim("settings", expect);
}

static void a_reset_empties_the_pool(void)
{
    static const char *const expect[] = {
        "after the reset: used=0/0 used_high=0/0 reserved=0/0 reserved_high=0/0",
        "a new allocation: used=0/1048576 used_high=0/1048576 reserved=0/33554432",
        NULL};
    same_with_and_without_shim("reset", expect);
}

static void pools_the_program_made_and_other_devices(void)
{
    static const char *const expect[] = {
        "mine: used=0/5245952 used_high=0/5245952 reserved=0/33554432",
        "default: used=0/0 used_high=0/0 reserved=0/0",
        "device 1: used=0/6291456 used_high=0/6291456 reserved=0/33554432",
        "device 1 freed: used=0/0 used_high=0/6291456 reserved=0/0",
        NULL};
    same_with_and_without_shim("other", expect);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--mode")) {
        if (!strcmp(argv[2], "cupy")) exit(cupy_sequence());
        if (!strcmp(argv[2], "settings")) exit(settings_sequence());
        if (!strcmp(argv[2], "cupy-threshold")) exit(cupy_threshold_sequence());
        if (!strcmp(argv[2], "other")) exit(other_pools_sequence());
        if (!strcmp(argv[2], "reset")) exit(reset_sequence());
        return 2;
    }
    static const struct test_case cases[] = {
        TEST_ENTRY(cupy_async_pool_figures)
        TEST_ENTRY(pool_settings_and_highs)
        TEST_ENTRY(a_runtime_device_synchronize_releases)
        TEST_ENTRY(pools_the_program_made_and_other_devices)
        TEST_ENTRY(a_reset_empties_the_pool)
        TEST_ENTRY(failures_keep_the_figures)
        TEST_ENTRY(threads_leave_the_figures_where_they_began)
    };
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
