/* The virtual memory management API, modelled on host memory:
 *   reservation  = PROT_NONE anonymous mapping (a hole in the VA space)
 *   handle       = a memfd of the allocation's size
 *   mapping      = the memfd mapped MAP_SHARED|MAP_FIXED into a reservation
 * so two mappings of one handle really alias the same bytes. */
#define _GNU_SOURCE
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int sim_page_multiple(size_t n)
{
    return n % (size_t)sysconf(_SC_PAGESIZE) == 0;
}

static int sim_granular(uintptr_t n)
{
    return n % SIM_GRANULE == 0;
}

/* ---- lookups ---------------------------------------------------------- */

struct sim_resv *sim_resv_at(uintptr_t p)
{
    for (size_t i = 0; i < sim.resvs.len; i++) {
        struct sim_resv *r = sim.resvs.item[i];
        if (p >= r->base && p - r->base < r->size)
            return r;
    }
    return NULL;
}

/* Orphans (mappings whose reservation was freed) have no address any more. */
struct sim_map *sim_map_at(uintptr_t p)
{
    for (size_t i = 0; i < sim.maps.len; i++) {
        struct sim_map *m = sim.maps.item[i];
        if (m->resv && p >= m->base && p - m->base < m->size)
            return m;
    }
    return NULL;
}

struct sim_handle *sim_handle_find(CUmemGenericAllocationHandle id)
{
    for (size_t i = 0; i < sim.handles.len; i++) {
        struct sim_handle *h = sim.handles.item[i];
        if (h->id == id)
            return h;
    }
    return NULL;
}

/* Whether [p, p+n) is exactly a run of adjacent whole mappings, the unit
 * cuMemUnmap and cuMemSetAccess work on. */
static int sim_whole_mappings(uintptr_t p, size_t n)
{
    if (n == 0 || p + n < p)
        return 0;
    for (uintptr_t at = p; at < p + n;) {
        struct sim_map *m = sim_map_at(at);
        if (!m || m->base != at || m->size > p + n - at)
            return 0;
        at += m->size;
    }
    return 1;
}

/* ---- reservations ----------------------------------------------------- */

static void *sim_map_hole(void *at, size_t size, int fixed)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0);
    return mmap(at, size, PROT_NONE, flags, -1, 0);
}

/* Honours the hint when that exact range is free, as the real driver does
 * (allocators use it to grow a range in place); else reserves anywhere. */
static uintptr_t sim_reserve_va(size_t size, size_t align, uintptr_t hint)
{
    if (hint && hint % align == 0) {
        void *p = sim_map_hole((void *)hint, size, 0);
        if (p == (void *)hint)
            return hint;
        if (p != MAP_FAILED)
            munmap(p, size);
    }
    if (size + align < size)
        return 0;
    char *p = sim_map_hole(NULL, size + align, 0);
    if (p == MAP_FAILED)
        return 0;
    uintptr_t base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = base - (uintptr_t)p, tail = align - head;
    if (head)
        munmap(p, head);
    if (tail)
        munmap((char *)base + size, tail);
    return base;
}

static CUresult sim_address_reserve(CUdeviceptr *ptr, size_t size, size_t align,
                                    CUdeviceptr hint, unsigned long long flags)
{
    if (!ptr || size == 0 || !sim_page_multiple(size) || flags != 0 ||
        (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align < SIM_GRANULE)
        align = SIM_GRANULE;
    struct sim_resv *r = calloc(1, sizeof *r);
    if (!r || sim_vec_push(&sim.resvs, r)) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uintptr_t base = sim_reserve_va(size, align, hint);
    void *view = base ? sim_map_hole(NULL, size, 0) : MAP_FAILED;
    if (view == MAP_FAILED) {
        if (base)
            munmap((void *)base, size);
        sim_vec_remove(&sim.resvs, r);
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *r = (struct sim_resv){base, size, (uintptr_t)view};
    *ptr = base;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    SIM_API(cuMemAddressReserve, SIM_WRITE, sim_capture_unsafe() ?:
            sim_address_reserve(ptr, size, alignment, addr, flags));
}

/* Like the real driver, freeing a range with mappings inside succeeds; the
 * mappings become orphans that still hold their handles, so leak counters
 * show the mistake. */
static CUresult sim_address_free(CUdeviceptr p, size_t size)
{
    struct sim_resv *r = sim_resv_at(p);
    if (!r || r->base != p || r->size != size)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sim.maps.len; i++) {
        struct sim_map *m = sim.maps.item[i];
        if (m->resv == r)
            m->resv = NULL;
    }
    munmap((void *)r->base, r->size);
    munmap((void *)r->dev_view, r->size);
    sim_vec_remove(&sim.resvs, r);
    free(r);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_API(cuMemAddressFree, SIM_WRITE, sim_capture_unsafe() ?: sim_address_free(ptr, size));
}

/* ---- physical allocations --------------------------------------------- */

/* The accounting location of an allocation property, or an error. */
static CUresult sim_prop_location(const CUmemAllocationProp *prop, int *loc)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev_valid(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        *loc = prop->location.id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
        /* CUDA 13 refuses exportable plain-host allocations. */
        if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
            return CUDA_ERROR_INVALID_VALUE;
        *loc = SIMCUDA_LOC_HOST;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (prop->location.id != 0)
            return CUDA_ERROR_INVALID_VALUE;
        *loc = SIMCUDA_LOC_HOST;
        return CUDA_SUCCESS;
    default: /* HOST_NUMA_CURRENT included */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static void sim_handle_destroy(struct sim_handle *h)
{
    close(h->fd);
    if (!h->imported) /* the exporting process was charged */
        sim_uncharge(h->loc, h->size);
    sim_vec_remove(&sim.handles, h);
    free(h);
}

/* Physical memory lives while a reference or a mapping remains. */
static void sim_handle_unref(struct sim_handle *h, int mapping)
{
    if (mapping)
        h->maps--;
    else
        h->refs--;
    if (!h->refs && !h->maps)
        sim_handle_destroy(h);
}

/* The memfd's name carries the location, so a process importing it
 * (tests/sim/ipc.c) knows where the memory lives. */
static CUresult sim_handle_backing(struct sim_handle *h)
{
    char name[32];
    snprintf(name, sizeof name, SIM_MEMFD_PREFIX "%d", h->loc);
    h->fd = memfd_create(name, MFD_CLOEXEC);
    if (h->fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(h->fd, (off_t)h->size) != 0) {
        close(h->fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult sim_mem_create(CUmemGenericAllocationHandle *out, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    int loc = 0;
    if (!out || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_prop_location(prop, &loc);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !sim_granular(size))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (__atomic_load_n(&sim.no_vmm, __ATOMIC_RELAXED))
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((rc = sim_charge(loc, size)) != CUDA_SUCCESS)
        return rc;
    /* Pinned host memory takes a GPU's driver ~14 ms per 64 MiB, and holds
     * it meanwhile: other threads' calls wait (SIMCUDA_HOST_CREATE_US). */
    unsigned pin_us = __atomic_load_n(&sim.host_create_us, __ATOMIC_RELAXED);
    if (loc == SIMCUDA_LOC_HOST && pin_us)
        usleep(pin_us);
    struct sim_handle *h = calloc(1, sizeof *h);
    if (!h || sim_vec_push(&sim.handles, h)) {
        free(h);
        sim_uncharge(loc, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct sim_handle){sim_new_id(), size, loc, -1, *prop, 1, 0, 0};
    if ((rc = sim_handle_backing(h)) != CUDA_SUCCESS) {
        h->fd = -1;
        sim_vec_remove(&sim.handles, h);
        free(h);
        sim_uncharge(loc, size);
        return rc;
    }
    *out = h->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    SIM_API(cuMemCreate, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_create(handle, size, prop, flags));
}

static __thread int sim_released_host;

static CUresult sim_mem_release(CUmemGenericAllocationHandle id)
{
    struct sim_handle *h = sim_handle_find(id);
    if (!h || !h->refs)
        return CUDA_ERROR_INVALID_VALUE;
    sim_released_host = h->loc == SIMCUDA_LOC_HOST;
    sim_handle_unref(h, 0);
    return CUDA_SUCCESS;
}

static CUresult sim_release_call(CUmemGenericAllocationHandle handle)
{
    SIM_API(cuMemRelease, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_release(handle));
}

/* Unpinning host memory takes its time too, but lets other calls run. */
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    sim_released_host = 0;
    CUresult rc = sim_release_call(handle);
    unsigned unpin_us = __atomic_load_n(&sim.host_release_us, __ATOMIC_RELAXED);
    if (sim_released_host && unpin_us)
        usleep(unpin_us);
    return rc;
}

/* ---- mappings --------------------------------------------------------- */

/* Whether [p, p+n) lies in one reservation and overlaps no mapping. */
static int sim_range_free(uintptr_t p, size_t n)
{
    struct sim_resv *r = sim_resv_at(p);
    if (!r || n > r->size - (p - r->base))
        return 0;
    for (size_t i = 0; i < sim.maps.len; i++) {
        struct sim_map *m = sim.maps.item[i];
        if (m->resv && m->base < p + n && p < m->base + m->size)
            return 0;
    }
    return 1;
}

static CUresult sim_mem_map(CUdeviceptr p, size_t size, size_t offset,
                            CUmemGenericAllocationHandle id, unsigned long long flags)
{
    if (flags != 0 || size == 0 || !sim_granular(p) || !sim_granular(size))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_handle *h = sim_handle_find(id);
    if (!h || !h->refs)
        return CUDA_ERROR_INVALID_VALUE;
    /* The real driver cannot map part of an allocation. */
    if (offset != 0 || size != h->size)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!sim_range_free(p, size))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_map *m = calloc(1, sizeof *m);
    if (!m || sim_vec_push(&sim.maps, m)) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED)
        sim_die("mmap of a handle over its reservation failed");
    *m = (struct sim_map){p, size, h, sim_resv_at(p), 0, 0, sim_new_id()};
    void *view = (void *)(m->resv->dev_view + (p - m->resv->base));
    if (mmap(view, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED)
        sim_die("mmap of a handle's device view failed");
    h->maps++;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    SIM_API(cuMemMap, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_map(ptr, size, offset, handle, flags));
}

static void sim_map_destroy(struct sim_map *m)
{
    if (m->resv && (sim_map_hole((void *)m->base, m->size, 1) == MAP_FAILED ||
                    sim_map_hole((void *)(m->resv->dev_view + (m->base - m->resv->base)), m->size,
                                 1) == MAP_FAILED))
        sim_die("cannot turn an unmapped range back into a hole");
    sim_vec_remove(&sim.maps, m);
    sim_handle_unref(m->h, 1);
    free(m);
}

/* Only whole mappings may be unmapped, as on the real driver. */
static CUresult sim_mem_unmap(CUdeviceptr p, size_t size)
{
    if (!sim_whole_mappings(p, size))
        return CUDA_ERROR_INVALID_VALUE;
    sim_flight_unmap(p, size);
    for (uintptr_t at = p; at < p + size;) {
        struct sim_map *m = sim_map_at(at);
        at += m->size;
        sim_map_destroy(m);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SIM_API(cuMemUnmap, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_unmap(ptr, size));
}

/* ---- access ----------------------------------------------------------- */

/* The mask bit a descriptor names on memory located at loc, or an error. */
static CUresult sim_access_bit(const CUmemLocation *l, int loc, unsigned *bit)
{
    switch (l->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev_valid(l->id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (loc != SIMCUDA_LOC_HOST && l->id != loc && !sim_peer_ok(l->id, loc))
            return CUDA_ERROR_INVALID_DEVICE;
        *bit = 1u << l->id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        /* The CPU cannot be given access to device-located memory. */
        if (loc != SIMCUDA_LOC_HOST)
            return CUDA_ERROR_NOT_SUPPORTED;
        *bit = SIMCUDA_CPU_BIT;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult sim_check_desc(const CUmemAccessDesc *d, int loc)
{
    unsigned bit;
    if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_access_bit(&d->location, loc, &bit);
}

/* Whether the CPU may touch a mapping with this access: any granted access
 * makes the pages readable and writable (a simulation convenience, so tests
 * can check data by reading through the pointer), except host-located
 * memory without CPU access when CPU faults are simulated. */
static int sim_cpu_may_touch(const struct sim_map *m)
{
    if (m->h->loc == SIMCUDA_LOC_HOST && __atomic_load_n(&sim.cpu_faults, __ATOMIC_RELAXED))
        return (m->mask & SIMCUDA_CPU_BIT) != 0;
    return m->mask != 0;
}

char *sim_dev_view(uintptr_t p, size_t n)
{
    struct sim_resv *r = sim_resv_at(p);
    /* A span that leaves its reservation goes through the CPU's view. */
    if (!r || n > r->size - (p - r->base))
        return (char *)p;
    return (char *)(r->dev_view + (p - r->base));
}

static void sim_apply_desc(struct sim_map *m, const CUmemAccessDesc *d)
{
    unsigned bit = 0;
    sim_access_bit(&d->location, m->h->loc, &bit);
    m->mask &= ~bit;
    m->rwmask &= ~bit;
    if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
        m->mask |= bit;
    if (d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        m->rwmask |= bit;
    if (mprotect((void *)m->base, m->size, sim_cpu_may_touch(m) ? PROT_READ | PROT_WRITE : PROT_NONE))
        sim_die("mprotect of a mapping failed");
}

static CUresult sim_mem_set_access(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc,
                                   size_t count)
{
    if (!desc || count == 0 || !sim_whole_mappings(p, size))
        return CUDA_ERROR_INVALID_VALUE;
    for (uintptr_t at = p; at < p + size; at += sim_map_at(at)->size) {
        for (size_t i = 0; i < count; i++) {
            CUresult rc = sim_check_desc(&desc[i], sim_map_at(at)->h->loc);
            if (rc != CUDA_SUCCESS)
                return rc;
        }
    }
    for (uintptr_t at = p; at < p + size;) {
        struct sim_map *m = sim_map_at(at);
        for (size_t i = 0; i < count; i++)
            sim_apply_desc(m, &desc[i]);
        at += m->size;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    SIM_API(cuMemSetAccess, SIM_WRITE, sim_capture_unsafe() ?: sim_mem_set_access(ptr, size, desc, count));
}

static CUresult sim_mem_get_access(unsigned long long *flags, const CUmemLocation *l,
                                   CUdeviceptr p)
{
    unsigned bit = 0;
    struct sim_map *m = sim_map_at(p);
    if (!flags || !l || !m)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_access_bit(l, m->h->loc, &bit);
    if (rc == CUDA_ERROR_NOT_SUPPORTED || (rc == CUDA_ERROR_INVALID_DEVICE &&
                                           sim_dev_valid(l->id)))
        bit = 0, rc = CUDA_SUCCESS; /* a location that cannot have access has none */
    if (rc != CUDA_SUCCESS)
        return rc;
    *flags = (m->rwmask & bit)  ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
             : (m->mask & bit) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr ptr)
{
    SIM_API(cuMemGetAccess, SIM_READ, sim_mem_get_access(flags, location, ptr));
}

/* ---- queries ---------------------------------------------------------- */

/* One granularity for every location, like current GPUs. */
static CUresult sim_granularity(size_t *g, const CUmemAllocationProp *prop,
                                CUmemAllocationGranularity_flags option)
{
    if (!g || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                        option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *g = SIM_GRANULE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity,
                                               const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    SIM_API(cuMemGetAllocationGranularity, SIM_READ, sim_granularity(granularity, prop, option));
}

/* Any address inside a mapping names its handle, and takes a reference. */
static CUresult sim_retain_handle(CUmemGenericAllocationHandle *out, void *addr)
{
    struct sim_map *m = sim_map_at((uintptr_t)addr);
    if (!out || !m)
        return CUDA_ERROR_INVALID_VALUE;
    m->h->refs++;
    *out = m->h->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    SIM_API(cuMemRetainAllocationHandle, SIM_WRITE, sim_retain_handle(handle, addr));
}

static CUresult sim_handle_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle id)
{
    struct sim_handle *h = sim_handle_find(id);
    if (!prop || !h)
        return CUDA_ERROR_INVALID_VALUE;
    *prop = h->prop;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    SIM_API(cuMemGetAllocationPropertiesFromHandle, SIM_READ, sim_handle_props(prop, handle));
}

/* ---- test-control API and reset --------------------------------------- */

void sim_vmm_reset(void)
{
    while (sim.maps.len)
        sim_map_destroy(sim.maps.item[0]);
    while (sim.handles.len)
        sim_handle_destroy(sim.handles.item[0]);
    for (size_t i = 0; i < sim.resvs.len; i++) {
        struct sim_resv *r = sim.resvs.item[i];
        munmap((void *)r->base, r->size);
        free(r);
    }
    sim.resvs.len = 0;
}

size_t simcuda_phys_bytes(int location)
{
    size_t sum = 0;
    pthread_rwlock_rdlock(&sim.lock);
    for (size_t i = 0; i < sim.handles.len; i++) {
        struct sim_handle *h = sim.handles.item[i];
        if (h->loc == location)
            sum += h->size;
    }
    pthread_rwlock_unlock(&sim.lock);
    return sum;
}

static long sim_count(const struct sim_vec *v)
{
    pthread_rwlock_rdlock(&sim.lock);
    long n = (long)v->len;
    pthread_rwlock_unlock(&sim.lock);
    return n;
}

void simcuda_dump_live(FILE *out)
{
    pthread_rwlock_rdlock(&sim.lock);
    for (size_t i = 0; i < sim.resvs.len; i++) {
        const struct sim_resv *r = sim.resvs.item[i];
        fprintf(out, "simcuda: reservation %#lx + %zu\n", (unsigned long)r->base, r->size);
    }
    for (size_t i = 0; i < sim.handles.len; i++) {
        const struct sim_handle *h = sim.handles.item[i];
        fprintf(out, "simcuda: handle %llu at %d, %zu bytes\n", h->id, h->loc, h->size);
    }
    for (size_t i = 0; i < sim.maps.len; i++) {
        const struct sim_map *m = sim.maps.item[i];
        fprintf(out, "simcuda: mapping %#lx + %zu of handle %llu\n", (unsigned long)m->base, m->size,
                m->h ? m->h->id : 0ULL);
    }
    pthread_rwlock_unlock(&sim.lock);
}

long simcuda_live_handles(void) { return sim_count(&sim.handles); }
long simcuda_live_reservations(void) { return sim_count(&sim.resvs); }
long simcuda_live_mappings(void) { return sim_count(&sim.maps); }
long simcuda_live_native(void) { return sim_count(&sim.natives); }

long simcuda_orphan_mappings(void)
{
    long n = 0;
    pthread_rwlock_rdlock(&sim.lock);
    for (size_t i = 0; i < sim.maps.len; i++)
        n += ((struct sim_map *)sim.maps.item[i])->resv == NULL;
    pthread_rwlock_unlock(&sim.lock);
    return n;
}
