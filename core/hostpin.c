#define _GNU_SOURCE
#include "core/hostpin.h"

#include "core/driver.h"
#include "core/held.h"
#include "core/log.h"
#include "core/settings.h"
#include "core/topo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Huge pages: one fault and one pinned page per 2 MiB instead of 512. */
#define HUGE ((size_t)2 << 20)

bool gvm_hostpin_usable(void)
{
    return gvm_settings.host_register && gvm_drv.cuMemHostRegister_v2 && gvm_drv.cuMemHostUnregister;
}

/* An anonymous mapping of size bytes aligned to HUGE (the kernel backs an
 * aligned range with huge pages where it may), or NULL. */
static void *map_aligned(size_t size)
{
    size_t len = size + HUGE;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    if (a > m) munmap(m, (size_t)(a - m));
    if (a + size < m + len) munmap(a + size, (size_t)(m + len - (a + size)));
    return a;
}

/* Pages near the devices' host NUMA node, as cuMemCreate's HOST_NUMA
 * pieces are; a refusal leaves the kernel's own choice. */
static void prefer_node(void *a, size_t size)
{
#ifdef SYS_mbind
    if (gvm_topo.host_type != CU_MEM_LOCATION_TYPE_HOST_NUMA || gvm_topo.host_numa_id < 0 ||
        gvm_topo.host_numa_id >= 64)
        return;
    unsigned long mask = 1ul << gvm_topo.host_numa_id;
    const int mpol_preferred = 1;
    syscall(SYS_mbind, a, size, mpol_preferred, &mask, (unsigned long)gvm_topo.host_numa_id + 2, 0u);
#else
    (void)a;
    (void)size;
#endif
}

/* Registering and unregistering need a current context on the calling
 * thread (a pool's creator or trimmer may have none). */
static CUresult in_context(int dev, void *a, size_t size, bool reg)
{
    CUresult rc = gvm_topo_push(dev);
    if (rc != CUDA_SUCCESS) return rc;
    rc = reg ? DRV(cuMemHostRegister_v2, a, size, CU_MEMHOSTREGISTER_PORTABLE) : DRV(cuMemHostUnregister, a);
    gvm_topo_pop();
    return rc;
}

/* Resets of each device's primary context: a registration made in it
 * before the last one is gone (the driver drops it with the context). */
static unsigned resets[GVM_MAX_DEVICES];

void gvm_hostpin_forget(int dev) { __atomic_add_fetch(&resets[dev], 1, __ATOMIC_ACQ_REL); }

static bool registered(const struct gvm_phys *p)
{
    return p->host_era == __atomic_load_n(&resets[p->host_dev], __ATOMIC_ACQUIRE);
}

static const char *meminfo_path = "/proc/meminfo";

void gvm_hostpin_set_meminfo(const char *path) { meminfo_path = path; }

/* Whether the kernel has `size` bytes to spare beside a margin. Touching
 * pages the machine does not have wakes the OOM killer, where creating
 * pinned memory fails cleanly: so without them, a piece is created. */
static bool room_for(size_t size)
{
    FILE *f = meminfo_path ? fopen(meminfo_path, "r") : NULL;
    if (!f) return true;   /* nothing to go by: as before the check */
    char line[128];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    const unsigned long long margin = 1ull << 30;
    return !found || kib * 1024 >= size + margin;
}

CUresult gvm_hostpin_create(size_t size, int dev, struct gvm_phys **out)
{
    if (!room_for(size)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!gvm_held_reserve(GVM_LOC_HOST, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct gvm_phys *p = calloc(1, sizeof *p);
    char *a = p ? map_aligned(size) : NULL;
    CUresult rc = a ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        madvise(a, size, MADV_HUGEPAGE);
        /* A forked child must not share pinned pages copy-on-write. */
        madvise(a, size, MADV_DONTFORK);
        prefer_node(a, size);
        for (size_t o = 0; o < size; o += 4096) ((volatile char *)a)[o] = 0;
        rc = in_context(dev, a, size, true);
    }
    if (rc != CUDA_SUCCESS) {
        if (a) munmap(a, size);
        free(p);
        gvm_held_release(GVM_LOC_HOST, size);
        return rc;
    }
    p->host = a;
    p->staging = (CUdeviceptr)(uintptr_t)a;
    p->staged_for = UINT32_MAX;
    p->size = size;
    p->loc = GVM_LOC_HOST;
    p->host_dev = dev;
    p->host_era = __atomic_load_n(&resets[dev], __ATOMIC_ACQUIRE);
    *out = p;
    return CUDA_SUCCESS;
}

void gvm_hostpin_destroy(struct gvm_phys *p)
{
    /* Unregistered by a reset: pushing its context would only make it again. */
    CUresult rc = registered(p) ? in_context(p->host_dev, p->host, p->size, false) : CUDA_SUCCESS;
    if (rc != CUDA_SUCCESS && !gvm_driver_gone(rc))
        rc = in_context(p->host_dev, p->host, p->size, false);   /* a passing fault */
    if (rc != CUDA_SUCCESS) {
        /* Pages the driver may still reach stay the process's: never reused. */
        if (!gvm_driver_gone(rc)) gvm_warn("cuMemHostUnregister failed (%d): %zu bytes of host memory stay pinned", rc, p->size);
        free(p);
        return;
    }
    munmap(p->host, p->size);
    gvm_held_release(GVM_LOC_HOST, p->size);
    free(p);
}
