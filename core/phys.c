#include "core/phys.h"

#include "core/driver.h"
#include "core/log.h"
#include "core/topo.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct pool {
    struct gvm_phys *head;
    size_t bytes;
    size_t limit;
};

static struct pool pools[GVM_LOC_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void fill_prop(int loc, CUmemAllocationProp *p)
{
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (loc == GVM_LOC_HOST) {
        /* HOST handles refuse any export type; HOST_NUMA ones accept it but
         * nothing shares spilled memory, so ask for none. */
        p->location.type = gvm_topo.host_type;
        p->location.id = gvm_topo.host_numa_id;
        return;
    }
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = loc;
    if (gvm_topo.dev[loc].posix_fd) p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (gvm_topo.dev[loc].rdma) p->allocFlags.gpuDirectRDMACapable = 1;
}

CUresult gvm_phys_create(int loc, size_t size, struct gvm_phys **out)
{
    struct gvm_phys *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    CUmemAllocationProp prop;
    fill_prop(loc, &prop);
    CUresult rc = DRV(cuMemCreate, &p->handle, size, &prop, 0);
    if (rc != CUDA_SUCCESS) {
        free(p);
        return rc;
    }
    p->size = size;
    p->loc = loc;
    *out = p;
    return CUDA_SUCCESS;
}

static CUresult map_staging(struct gvm_phys *p)
{
    CUdeviceptr va = 0;
    CUresult rc = DRV(cuMemAddressReserve, &va, p->size, 0, 0, 0);
    if (rc != CUDA_SUCCESS) return rc;
    rc = DRV(cuMemMap, va, p->size, 0, p->handle, 0);
    if (rc != CUDA_SUCCESS) goto free_va;
    CUmemAccessDesc descs[GVM_MAX_DEVICES + 1];
    int n = gvm_topo_access(p->loc, false, descs);
    rc = DRV(cuMemSetAccess, va, p->size, descs, (size_t)n);
    if (rc != CUDA_SUCCESS) goto unmap;
    p->staging = va;
    return CUDA_SUCCESS;
unmap:
    DRV(cuMemUnmap, va, p->size);
free_va:
    DRV(cuMemAddressFree, va, p->size);
    return rc;
}

void gvm_phys_destroy(struct gvm_phys *p)
{
    if (!p) return;
    if (p->staging) {
        DRV(cuMemUnmap, p->staging, p->size);
        DRV(cuMemAddressFree, p->staging, p->size);
    }
    CUresult rc = DRV(cuMemRelease, p->handle);
    if (rc != CUDA_SUCCESS) gvm_warn("cuMemRelease failed (%d): %zu bytes may leak", rc, p->size);
    free(p);
}

static struct gvm_phys *pool_take(int loc, size_t size, bool staging)
{
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    struct gvm_phys **best = NULL;
    pthread_mutex_lock(&pool_lock);
    for (struct gvm_phys **pp = &pl->head; *pp; pp = &(*pp)->next) {
        if ((*pp)->size != size) continue;
        best = pp;
        if (!staging || (*pp)->staging) break;   /* prefer one already staged */
    }
    struct gvm_phys *p = NULL;
    if (best) {
        p = *best;
        *best = p->next;
        pl->bytes -= p->size;
        p->next = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

CUresult gvm_phys_get(int loc, size_t size, bool staging, struct gvm_phys **out)
{
    struct gvm_phys *p = pool_take(loc, size, staging);
    CUresult rc = CUDA_SUCCESS;
    if (!p) {
        rc = gvm_phys_create(loc, size, &p);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_phys_trim(loc, SIZE_MAX))
            rc = gvm_phys_create(loc, size, &p);
        if (rc != CUDA_SUCCESS) return rc;
    }
    if (staging && !p->staging && (rc = map_staging(p)) != CUDA_SUCCESS) {
        gvm_phys_put(p);
        return rc;
    }
    *out = p;
    return CUDA_SUCCESS;
}

void gvm_phys_put(struct gvm_phys *p)
{
    if (!p) return;
    struct pool *pl = &pools[gvm_loc_slot(p->loc)];
    pthread_mutex_lock(&pool_lock);
    bool keep = pl->bytes + p->size <= pl->limit;
    if (keep) {
        p->next = pl->head;
        pl->head = p;
        pl->bytes += p->size;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!keep) gvm_phys_destroy(p);
}

size_t gvm_phys_trim(int loc, size_t bytes)
{
    struct pool *pl = &pools[gvm_loc_slot(loc)];
    size_t freed = 0;
    while (freed < bytes) {
        pthread_mutex_lock(&pool_lock);
        struct gvm_phys *p = pl->head;
        if (p) {
            pl->head = p->next;
            pl->bytes -= p->size;
        }
        pthread_mutex_unlock(&pool_lock);
        if (!p) break;
        freed += p->size;
        gvm_phys_destroy(p);
    }
    return freed;
}

size_t gvm_phys_pooled(int loc)
{
    pthread_mutex_lock(&pool_lock);
    size_t b = pools[gvm_loc_slot(loc)].bytes;
    pthread_mutex_unlock(&pool_lock);
    return b;
}

void gvm_phys_set_limit(int loc, size_t bytes)
{
    pthread_mutex_lock(&pool_lock);
    pools[gvm_loc_slot(loc)].limit = bytes;
    pthread_mutex_unlock(&pool_lock);
    if (gvm_phys_pooled(loc) > bytes) gvm_phys_trim(loc, gvm_phys_pooled(loc) - bytes);
}
