/* gvmshim when the driver shuts down under it, as at exit: the driver's
 * exit handlers run first, and the program's static destructors (and
 * gvmshim's own exit handlers and threads) that run after them find every
 * call answering CUDA_ERROR_DEINITIALIZED. Everything the process held
 * went with the driver: gvmshim releases nothing more and says nothing
 * (core/driver.h, gvm_driver_gone). A release that fails while the driver
 * lives is still reported. This program links the simulated driver and
 * runs with LD_PRELOAD=libgvmshim.so; each case re-executes it with an env
 * and reads what it wrote on stderr. */
#define _GNU_SOURCE
#include "linked.h"
#include "simcuda.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8
#define PER_THREAD 4

static CUdeviceptr owned[THREADS][PER_THREAD];

/* What a thread of the program frees: large, small, spilled or not. */
static void *free_own(void *arg)
{
    CUdeviceptr *mine = arg;
    cuCtxSetCurrent(ctx);   /* refused: the driver is gone */
    for (int i = 0; i < PER_THREAD; i++) cuMemFree(mine[i]);
    return NULL;
}

static void *alloc_own(void *arg)
{
    CUdeviceptr *mine = arg;
    static const size_t sizes[PER_THREAD] = {3000, 6 * MiB, 8 * MiB, 20 * MiB};
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    for (int i = 0; i < PER_THREAD; i++) {
        CHECK_EQ(cuMemAlloc(&mine[i], sizes[i]), CUDA_SUCCESS);
        CHECK_EQ(cuMemsetD8(mine[i], (unsigned char)i, sizes[i]), CUDA_SUCCESS);
    }
    return NULL;
}

static void on_threads(void *(*fn)(void *))
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, fn, owned[i]) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

/* Registered last, so it runs first at exit: the driver's exit handlers,
 * then the program's destructors freeing from every thread. */
static void driver_exit_then_destructors(void)
{
    unsigned long before = simcuda_call_count();
    simcuda_shut_down();
    on_threads(free_own);
    fprintf(stderr, "calls after the shutdown: %lu\n", simcuda_call_count() - before);
}

/* 8 threads past the device limit (spilling to the env's targets), a
 * buffer freed into the cache, then an exit that frees everything once
 * the driver is gone. */
static int shut_down_workload(void)
{
    start();
    on_threads(alloc_own);
    CUdeviceptr cached;
    CHECK_EQ(cuMemAlloc(&cached, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(cached), CUDA_SUCCESS);
    CHECK(atexit(driver_exit_then_destructors) == 0);
    return 0;
}

/* An unmap that keeps failing (an invalid value: the driver lives) at a
 * free: the memory stays mapped and reserved, and the program is told. */
static int stuck_unmap_workload(void)
{
    start();
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc(&p, 8 * MiB), CUDA_SUCCESS);
    simcuda_fail_calls("cuMemUnmap", 1, 2, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    CHECK(simcuda_location_of(p) != SIMCUDA_LOC_UNMAPPED);
    return 0;
}

/* envs: NULL-terminated VAR=value settings; stderr into out. */
static int run_self(const char *mode, const char *const *envs, char *out, size_t outlen)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        for (; *envs; envs++) putenv((char *)*envs);
        execl("/proc/self/exe", "test-teardown", "--mode", mode, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    return test_child_output(pid, fds[0], out, outlen);
}

static bool says_something(const char *out) { return strstr(out, ": warning: ") || strstr(out, ": error: "); }

static void frees_after_the_driver_shut_down_say_nothing(void)
{
    /* Spilled to the peer and to host, mapped there or lazily, with the
     * promoter, the host pool's fill and the give-back running. */
    const char *peer[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=peer,host", "GVM_CACHE_LIMIT=16M",
                          "GVM_PROMOTE_INTERVAL=1ms", NULL};
    const char *host[] = {"GVM_DEVICE_LIMIT=0:64M,1:64M", "GVM_SPILL=peer,host", "GVM_HOST_POOL=256M",
                          "GVM_POOL_LIMIT=64M", "GVM_PROMOTE_INTERVAL=1ms", NULL};
    const char *lazy[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy",
                          "GVM_HOST_POOL=256M", "GVM_CACHE_IDLE=1ms", NULL};
    const char *const *runs[] = {peer, host, lazy};
    static char out[1 << 16];
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int rc = run_self("shut-down", runs[i], out, sizeof out);
        if (rc || says_something(out)) fprintf(stderr, "run %zu:\n%s", i, out);
        CHECK_EQ(rc, 0);
        CHECK(!says_something(out));
        const char *calls = strstr(out, "calls after the shutdown: ");
        CHECK(calls != NULL);
        CHECK(strtoul(calls + strlen("calls after the shutdown: "), NULL, 10) > 0);   /* it was told */
    }
}

static void a_failed_unmap_while_the_driver_lives_still_warns(void)
{
    static char out[1 << 14];
    const char *envs[] = {"GVM_CACHE_LIMIT=0", NULL};
    int rc = run_self("stuck-unmap", envs, out, sizeof out);
    if (rc) fprintf(stderr, "%s", out);
    CHECK_EQ(rc, 0);
    CHECK(strstr(out, "gvmshim: warning: cuMemUnmap failed (1) at "));
    CHECK(strstr(out, "gvmshim: warning: leaking "));
}

static const struct test_case cases[] = {
    TEST_ENTRY(frees_after_the_driver_shut_down_say_nothing)
    TEST_ENTRY(a_failed_unmap_while_the_driver_lives_still_warns)
};

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--mode")) {
        if (!strcmp(argv[2], "shut-down")) exit(shut_down_workload());
        if (!strcmp(argv[2], "stuck-unmap")) exit(stuck_unmap_workload());
        return 2;
    }
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
