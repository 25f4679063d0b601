/* Starting the core against the simulated driver, for tests that link the
 * core directly (no preloading). */
#ifndef GVM_TEST_SIMCORE_H
#define GVM_TEST_SIMCORE_H

#include "core/core.h"
#include "core/driver.h"
#include "core/heap.h"
#include "core/hostaccess.h"
#include "core/hostpin.h"
#include "core/topo.h"
#include "gvmshim.h"
#include "harness.h"
#include "simcuda.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

static inline void sim_start(int ndev, size_t capacity, void (*tune)(struct gvm_settings *))
{
    simcuda_set_devices(ndev);
    for (int d = 0; d < ndev; d++) simcuda_set_capacity(d, capacity);
    char err[256];
    if (gvm_driver_load("libcuda.so.1", dlsym, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    CHECK_EQ(gvm_drv.cuInit(0), CUDA_SUCCESS);
    CUcontext ctx;
    CHECK_EQ(gvm_drv.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    struct gvm_settings s;
    gvm_settings_defaults(&s);
    s.host_access = GVM_HOST_ACCESS_EAGER;
    if (tune) tune(&s);
    /* The simulated machine's memory is the sim's: how much the build
     * machine has free must not decide which path a case takes. */
    gvm_hostpin_set_meminfo(NULL);
    gvm_hostaccess_use_sigaction(sigaction);   /* no preload layer in between */
    CHECK_EQ(gvm_core_probe(), CUDA_SUCCESS);
    CHECK_EQ(gvm_core_start(&s), CUDA_SUCCESS);
}

static inline CUcontext current_ctx(void)
{
    CUcontext c = NULL;
    gvm_drv.cuCtxGetCurrent(&c);
    return c;
}

/* An allocation as the program would get it on device dev. */
static inline uintptr_t sim_alloc_on(int dev, size_t n)
{
    struct gvm_place pl = {.loc = dev};
    uintptr_t p = 0;
    CHECK_EQ(gvm_heap_alloc(n, dev, current_ctx(), &pl, 0, &p), CUDA_SUCCESS);
    CHECK(p != 0);
    return p;
}

static inline uintptr_t sim_alloc(size_t n) { return sim_alloc_on(0, n); }

/* fill() and intact() write and read the program's view of simulated
 * device memory: ASan has nothing to check there (mmap'd, never poisoned)
 * and TSan cannot tie these accesses to the driver's, which go through
 * another mapping of the same pages (tests/sim/vmm.c). Instrumented, they
 * were most of a sanitizer run's time. */
#define GVM_TEST_UNCHECKED __attribute__((no_sanitize("address", "thread")))

GVM_TEST_UNCHECKED static inline void fill(uintptr_t p, size_t n, uint32_t seed)
{
    uint32_t *w = (uint32_t *)p;
    for (size_t i = 0; i < n / 4; i++) w[i] = seed ^ (uint32_t)(i * 2654435761u);
}

GVM_TEST_UNCHECKED static inline int intact(uintptr_t p, size_t n, uint32_t seed)
{
    const uint32_t *w = (const uint32_t *)p;
    for (size_t i = 0; i < n / 4; i++)
        if (w[i] != (seed ^ (uint32_t)(i * 2654435761u))) return 0;
    return 1;
}

/* Gives every idle byte back, so the simulated driver's counters show only
 * what live allocations hold. */
static inline void trim_all(void)
{
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_heap_trim(d);
    gvm_heap_trim(GVM_LOC_HOST);
}

struct leaks {
    long handles, reservations, mappings;
    size_t registered;   /* host pages registered with the driver */
};

static inline struct leaks leaks_now(void)
{
    trim_all();
    return (struct leaks){simcuda_live_handles(), simcuda_live_reservations(), simcuda_live_mappings(),
                          simcuda_registered_bytes()};
}

/* What a failed leak check prints: every object left, then the counts
 * again a moment and another trim later. Counts that are back to what
 * they were mean that a thread was still releasing memory when the trim
 * returned, not that it leaked for good (a bug all the same: a trim must
 * give back what is idle before it returns). */
static inline void leaks_dump(void)
{
    simcuda_dump_live(stderr);
    struct timespec moment = {0, 100 * 1000 * 1000};
    nanosleep(&moment, NULL);
    struct leaks later = leaks_now();
    fprintf(stderr, "simcuda: 100 ms and a trim later: %ld handles, %ld reservations, %ld mappings\n",
            later.handles, later.reservations, later.mappings);
}

#define CHECK_NO_LEAK(before)                                                  \
    do {                                                                       \
        struct leaks after_ = leaks_now();                                     \
        if (after_.handles != (before).handles ||                              \
            after_.reservations != (before).reservations ||                    \
            after_.mappings != (before).mappings ||                            \
            after_.registered != (before).registered)                          \
            leaks_dump();                                                      \
        CHECK_EQ(after_.handles, (before).handles);                            \
        CHECK_EQ(after_.reservations, (before).reservations);                  \
        CHECK_EQ(after_.mappings, (before).mappings);                          \
        CHECK_EQ(after_.registered, (before).registered);                      \
    } while (0)

#endif
