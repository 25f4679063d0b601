/* CUDA graph capture through the whole interception path (run like
 * test-preload: LD_PRELOAD=libgvmshim.so, the simulated driver as
 * libcuda.so.1, which models capture: tests/sim/graph.c). Each sequence
 * runs in a child twice, under the shim and without it, and prints every
 * call's result: the two lists must be identical, and the replayed graph
 * must produce the same data. */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "gvmshim.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#define MiB ((size_t)1 << 20)

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lib;
static gpa2_fn gpa;

static void *resolve(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(gpa(name, &fn, 12000, 0, &st), CUDA_SUCCESS);
    return fn;
}

#define D(name, ...) ((__typeof__(name) *)resolve(#name))(__VA_ARGS__)

static void *sim_fn(const char *name)
{
    void *f = dlsym(lib, name);
    CHECK(f != NULL);
    return f;
}

/* The gvmshim API when preloaded, NULL otherwise. */
static void *shim_fn(const char *name) { return dlsym(RTLD_DEFAULT, name); }

static CUcontext ctx0;

static void start(void)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    gpa = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    CHECK(gpa != NULL);
    CHECK_EQ(D(cuInit, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuDevicePrimaryCtxRetain, &ctx0, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
}

/* Every call of a sequence, printed for the parent to compare. */
static int nrec;
#define REC(call) record(#call, (call))
static CUresult record(const char *what, CUresult rc)
{
    printf("%d %d %s\n", nrec++, (int)rc, what);
    fflush(stdout);
    return rc;
}

static CUstreamCaptureMode thread_mode(CUstreamCaptureMode m)
{
    CHECK_EQ(D(cuThreadExchangeStreamCaptureMode, &m), CUDA_SUCCESS);
    return m;
}

/* The fake kernel: adds one to each of n bytes at p. */
static void add_one(void **params)
{
    unsigned char *p = (unsigned char *)(uintptr_t)*(CUdeviceptr *)params[0];
    size_t n = *(size_t *)params[1];
    for (size_t i = 0; i < n; i++) p[i]++;
}

static CUfunction kernel(void)
{
    CUfunction (*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    size_t sizes[2] = {sizeof(CUdeviceptr), sizeof(size_t)};
    return make(add_one, 2, sizes);
}

static unsigned char host_in[MiB];

/* What a replay leaves in A (2 MiB) and copies to B and C. */
static void check_replayed(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
    static unsigned char out[2 * MiB];
    CHECK_EQ(D(cuMemcpyDtoH_v2, out, a, sizeof out), CUDA_SUCCESS);
    for (size_t i = 0; i < MiB; i++) CHECK_EQ(out[i], (unsigned char)(host_in[i] + 1));
    /* The set's 0x41424344 pattern, each byte plus one. */
    for (size_t i = MiB; i < 2 * MiB; i++) CHECK_EQ(out[i], 0x45 - i % 4);
    unsigned char small[4096];
    CHECK_EQ(D(cuMemcpyDtoH_v2, small, b, sizeof small), CUDA_SUCCESS);
    CHECK(!memcmp(small, out, sizeof small));
    if (c) {
        static unsigned char copy[2 * MiB];
        CHECK_EQ(D(cuMemcpyDtoH_v2, copy, c, sizeof copy), CUDA_SUCCESS);
        CHECK(!memcmp(copy, out, sizeof copy));
    }
}

enum scenario { GLOBAL, THREAD_LOCAL, RELAXED, TORCH };

/* Capture in `scenario` a sequence of allocations, an async copy, set,
 * kernel and frees; replay the graph, move A and replay again. TORCH is
 * what PyTorch does: a global capture, cudaMalloc in relaxed thread mode. */
static int sequence(enum scenario sc, size_t filler)
{
    start();
    for (size_t i = 0; i < sizeof host_in; i++) host_in[i] = (unsigned char)(i * 7 + 3);
    CUfunction k = kernel();
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a, b, d, e, f, x = 0, c = 0, c2 = 0;
    CHECK_EQ(D(cuMemAlloc_v2, &a, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &b, 4096), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &d, 6 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &e, 512), CUDA_SUCCESS);
    if (filler) CHECK_EQ(D(cuMemAlloc_v2, &x, filler), CUDA_SUCCESS);
    /* Freed just before: in gvmshim's cache, not yet settled. */
    CHECK_EQ(D(cuMemAlloc_v2, &f, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, f), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, a, 0, 8 * MiB), CUDA_SUCCESS);
    long (*mappings)(void) = sim_fn("simcuda_live_mappings");

    CUstreamCaptureMode mode = sc == GLOBAL || sc == TORCH ? CU_STREAM_CAPTURE_MODE_GLOBAL
                               : sc == THREAD_LOCAL         ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                                            : CU_STREAM_CAPTURE_MODE_RELAXED;
    REC(D(cuStreamBeginCapture_v2, s, mode));
    CUstreamCaptureMode saved = sc == TORCH ? thread_mode(CU_STREAM_CAPTURE_MODE_RELAXED) : 0;
    if (REC(D(cuMemAlloc_v2, &c, 8 * MiB)) != CUDA_SUCCESS) c = 0;
    if (REC(D(cuMemAlloc_v2, &c2, 1000)) != CUDA_SUCCESS) c2 = 0;
    if (sc == TORCH) thread_mode(saved);
    REC(D(cuMemcpyHtoDAsync_v2, a, host_in, MiB, s));
    REC(D(cuMemsetD32Async, a + MiB, 0x41424344u, MiB / 4, s));
    size_t n = 2 * MiB;
    void *params[] = {&a, &n};
    REC(D(cuLaunchKernel, k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    REC(D(cuMemcpyDtoDAsync_v2, b, a, 4096, s));
    if (c) REC(D(cuMemcpyDtoDAsync_v2, c, a, 2 * MiB, s));
    long maps = mappings();
    if (sc == TORCH) saved = thread_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    REC(D(cuMemFree_v2, d));
    REC(D(cuMemFree_v2, e));
    if (c2) REC(D(cuMemFree_v2, c2));
    if (sc == TORCH) thread_mode(saved);
    /* Nothing the graph may use was unmapped during the capture. */
    CHECK(mappings() >= maps || !shim_fn("gvm_query"));
    CUgraph g = NULL;
    REC(D(cuStreamEndCapture, s, &g));
    CUstreamCaptureStatus st;
    REC(D(cuStreamIsCapturing, s, &st));
    printf("status %d graph %d\n", (int)st, g != NULL);
    if (!g) return 0;
    CUgraphExec ge;
    REC(D(cuGraphInstantiateWithFlags, &ge, g, 0));
    REC(D(cuGraphLaunch, ge, s));
    REC(D(cuStreamSynchronize, s));
    check_replayed(a, b, c);
    if (filler && shim_fn("gvm_query")) {
        /* The allocation past the limit went to host; nothing was evicted
         * (checked before the move below makes room to promote it). */
        gvm_status (*query)(const void *, gvm_info *) = shim_fn("gvm_query");
        gvm_info ic, ix;
        CHECK_EQ(query((void *)c, &ic), GVM_OK);
        CHECK_EQ(query((void *)x, &ix), GVM_OK);
        CHECK_EQ(ic.location, GVM_HOST);
        CHECK_EQ(ix.location, 0);
    }
    /* The graph binds addresses: after a move it replays the same. */
    gvm_status (*migrate)(const void *, int) = shim_fn("gvm_migrate");
    if (migrate) CHECK_EQ(migrate((void *)a, GVM_HOST), GVM_OK);
    CHECK_EQ(D(cuMemsetD8_v2, a, 0, 8 * MiB), CUDA_SUCCESS);
    REC(D(cuGraphLaunch, ge, s));
    check_replayed(a, b, c);
    REC(D(cuGraphExecDestroy, ge));
    REC(D(cuGraphDestroy, g));
    return 0;
}

/* A free in stream order on a capturing stream: gvmshim memory is never a
 * graph allocation, so the driver answers as for cudaMalloc memory. */
static int free_async_sequence(void)
{
    start();
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr p, q;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 4 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &q, 4 * MiB), CUDA_SUCCESS);
    REC(D(cuMemFreeAsync, q, s));   /* not capturing: freed in stream order */
    REC(D(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED));
    REC(D(cuMemsetD8Async, p, 1, 4 * MiB, s));
    REC(D(cuMemFreeAsync, p, s));
    CUgraph g = NULL;
    REC(D(cuStreamEndCapture, s, &g));
    printf("graph %d\n", g != NULL);
    REC(D(cuMemFree_v2, p));
    return 0;
}

/* Frees gvmshim cannot cache during a capture stay mapped until it ends. */
static int deferred_sequence(void)
{
    start();
    long (*mappings)(void) = sim_fn("simcuda_live_mappings");
    long (*handles)(void) = sim_fn("simcuda_live_handles");
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr p, q;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 16 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &q, 16 * MiB), CUDA_SUCCESS);
    long m0 = mappings(), h0 = handles();
    CHECK_EQ(D(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8Async, p, 1, 16 * MiB, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, q), CUDA_SUCCESS);
    CHECK_EQ(mappings(), m0);
    CHECK_EQ(handles(), h0);
    CUgraph g = NULL;
    CHECK_EQ(D(cuStreamEndCapture, s, &g), CUDA_SUCCESS);
    CHECK(g != NULL);
    /* The capture is over: the deferred frees are done. */
    CHECK(mappings() < m0);
    CHECK(handles() <= h0 - 2);
    return 0;
}

/* ---- the parent: each sequence with and without the shim ----------------- */

static int run_child(const char *mode, int shim, const char *env1, const char *env2, char *out, size_t outlen)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (!shim) unsetenv("LD_PRELOAD");
        /* The scenarios free memory just before a capture and rely on it
         * staying in gvmshim's cache, however slowly a sanitizer runs. */
        putenv((char *)"GVM_CACHE_IDLE=0");
        if (env1) putenv((char *)env1);
        if (env2) putenv((char *)env2);
        execl("/proc/self/exe", "test-capture", "--mode", mode, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    return test_child_output(pid, fds[0], out, outlen);
}

static void same_with_and_without_shim(const char *mode, const char *env1, const char *env2, const char *expect)
{
    static char shim[16384], native[16384];
    CHECK(getenv("LD_PRELOAD") != NULL);
    CHECK_EQ(run_child(mode, 0, env1, env2, native, sizeof native), 0);
    CHECK_EQ(run_child(mode, 1, env1, env2, shim, sizeof shim), 0);
    if (strcmp(shim, native)) {
        fprintf(stderr, "native:\n%s\nunder the shim:\n%s\n", native, shim);
        CHECK(!"call results differ");
    }
    if (expect && !strstr(native, expect)) {
        fprintf(stderr, "native run lacks '%s':\n%s\n", expect, native);
        CHECK(!"unexpected native result");
    }
}

static void capture_global_mode(void)
{
    /* cudaMalloc is forbidden: refused, and the capture is invalidated. */
    same_with_and_without_shim("global", NULL, NULL, "1 900 D(cuMemAlloc_v2, &c, 8 * MiB)");
}

static void capture_thread_local_mode(void)
{
    same_with_and_without_shim("thread-local", NULL, NULL, "status 0 graph 0");
}

static void capture_relaxed_mode(void)
{
    same_with_and_without_shim("relaxed", NULL, NULL, "status 0 graph 1");
    /* Frees that cannot be cached are deferred, then done after the end. */
    same_with_and_without_shim("relaxed", "GVM_CACHE_LIMIT=0", NULL, "status 0 graph 1");
}

static void capture_like_pytorch(void)
{
    same_with_and_without_shim("torch", NULL, NULL, "status 0 graph 1");
}

static void spill_during_capture_places_on_host(void)
{
    same_with_and_without_shim("spill", "GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", "status 0 graph 1");
}

static void free_async_on_a_capturing_stream(void)
{
    same_with_and_without_shim("free-async", NULL, NULL, "graph 0");
}

static void frees_are_deferred_until_the_capture_ends(void)
{
    char out[4096];
    CHECK_EQ(run_child("deferred", 1, "GVM_CACHE_LIMIT=0", NULL, out, sizeof out), 0);
}

/* What other threads do while one captures (in global mode): CUDA lets a
 * thread in thread-local mode allocate and free; gvmshim must not wait for
 * the device on its behalf, and a move asked for meanwhile is refused. */
struct worker {
    CUdeviceptr big;
    gvm_status migrate_during;
};

static void *other_thread(void *arg)
{
    struct worker *w = arg;
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    thread_mode(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    for (int i = 0; i < 4; i++) {
        CUdeviceptr p, q;
        CHECK_EQ(D(cuMemAlloc_v2, &p, 8 * MiB), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemAlloc_v2, &q, 3000), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemFree_v2, q), CUDA_SUCCESS);
    }
    gvm_status (*migrate)(const void *, int) = shim_fn("gvm_migrate");
    w->migrate_during = migrate((void *)w->big, GVM_HOST);
    /* Every operation that remaps waits for the capture to end. */
    gvm_status (*alias)(const void *, void **) = shim_fn("gvm_alias");
    gvm_status (*resize)(const void *, size_t) = shim_fn("gvm_realloc");
    gvm_status (*pause)(const char *, int) = shim_fn("gvm_pause");
    void *second = NULL;
    CHECK_EQ(alias((void *)w->big, &second), GVM_ERR_BUSY);
    CHECK_EQ(resize((void *)w->big, 4 * MiB), GVM_ERR_BUSY);
    CHECK_EQ(pause(NULL, GVM_PAUSE_KEEP), GVM_ERR_BUSY);
    return NULL;
}

static void other_threads_do_not_break_a_capture(void)
{
    start();
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    struct worker w;
    CHECK_EQ(D(cuMemAlloc_v2, &w.big, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8Async, w.big, 7, 8 * MiB, s), CUDA_SUCCESS);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, &w) == 0);
    pthread_join(t, NULL);
    /* A move waits for the devices: not while a capture is open. */
    CHECK_EQ(w.migrate_during, GVM_ERR_BUSY);
    CUgraph g = NULL;
    CHECK_EQ(D(cuStreamEndCapture, s, &g), CUDA_SUCCESS);
    CHECK(g != NULL);
    gvm_status (*migrate)(const void *, int) = shim_fn("gvm_migrate");
    CHECK_EQ(migrate((void *)w.big, GVM_HOST), GVM_OK);
    CUgraphExec ge;
    CHECK_EQ(D(cuGraphInstantiateWithFlags, &ge, g, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuGraphLaunch, ge, s), CUDA_SUCCESS);
    unsigned char b = 0;
    CHECK_EQ(D(cuMemcpyDtoH_v2, &b, w.big + 8 * MiB - 1, 1), CUDA_SUCCESS);
    CHECK_EQ(b, 7);
}

/* A capture holds back waits on its own device only: device 0 still
 * settles (and reuses) freed memory while device 1 captures. */
static void a_capture_holds_back_its_own_device_only(void)
{
    start();
    CUcontext ctx1, popped;
    CUstream s1;
    CHECK_EQ(D(cuDevicePrimaryCtxRetain, &ctx1, 1), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxPushCurrent_v2, ctx1), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamCreate, &s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr q;
    CHECK_EQ(D(cuMemAlloc_v2, &q, 4 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxPopCurrent_v2, &popped), CUDA_SUCCESS);
    CUdeviceptr f, g;
    CHECK_EQ(D(cuMemAlloc_v2, &f, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, f), CUDA_SUCCESS);
    unsigned long (*calls_of)(const char *) = sim_fn("simcuda_calls_of");
    unsigned long syncs = calls_of("cuCtxSynchronize");
    CHECK_EQ(D(cuStreamBeginCapture_v2, s1, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8Async, q, 3, 4 * MiB, s1), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &g, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(g, f);
    CHECK(calls_of("cuCtxSynchronize") > syncs);
    CUgraph graph = NULL;
    CHECK_EQ(D(cuStreamEndCapture, s1, &graph), CUDA_SUCCESS);
    CHECK(graph != NULL);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--mode")) {
        if (!strcmp(argv[2], "global")) exit(sequence(GLOBAL, 0));
        if (!strcmp(argv[2], "thread-local")) exit(sequence(THREAD_LOCAL, 0));
        if (!strcmp(argv[2], "relaxed")) exit(sequence(RELAXED, 0));
        if (!strcmp(argv[2], "torch")) exit(sequence(TORCH, 0));
        if (!strcmp(argv[2], "spill")) exit(sequence(RELAXED, 32 * MiB));
        if (!strcmp(argv[2], "free-async")) exit(free_async_sequence());
        if (!strcmp(argv[2], "deferred")) exit(deferred_sequence());
        return 2;
    }
    static const struct test_case cases[] = {
        TEST_ENTRY(capture_global_mode)
        TEST_ENTRY(capture_thread_local_mode)
        TEST_ENTRY(capture_relaxed_mode)
        TEST_ENTRY(capture_like_pytorch)
        TEST_ENTRY(spill_during_capture_places_on_host)
        TEST_ENTRY(free_async_on_a_capturing_stream)
        TEST_ENTRY(frees_are_deferred_until_the_capture_ends)
        TEST_ENTRY(other_threads_do_not_break_a_capture)
        TEST_ENTRY(a_capture_holds_back_its_own_device_only)
    };
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
