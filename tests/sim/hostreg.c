/* Host memory registered with the driver (cuMemHostRegister): charged
 * against the host's capacity, as the pages it pins are; copies reach host
 * memory whether registered or not (all memory is host memory here), so
 * the record serves the leak accounting and the driver's refusals: a range
 * registered twice, an unregister of memory never registered. */
#include "sim.h"

#include <stdlib.h>

struct sim_hostreg {
    uintptr_t base;
    size_t size;
    struct CUctx_st *ctx; /* it was registered in: its end unregisters */
};

static struct sim_hostreg *sim_hostreg_overlapping(uintptr_t p, size_t size)
{
    for (size_t i = 0; i < sim.hostregs.len; i++) {
        struct sim_hostreg *h = sim.hostregs.item[i];
        if (p < h->base + h->size && h->base < p + size)
            return h;
    }
    return NULL;
}

static CUresult sim_host_register(void *p, size_t size, unsigned flags)
{
    /* Like the real driver (H100, 2026-11-27): the calling thread needs a
     * current context, though portable memory serves every one. */
    CUresult ctx = sim_need_ctx(NULL);
    if (ctx != CUDA_SUCCESS)
        return ctx;
    if (!p || !size || (flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_hostreg_overlapping((uintptr_t)p, size))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    CUresult rc = sim_charge(SIMCUDA_LOC_HOST, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_hostreg *h = calloc(1, sizeof *h);
    if (!h || sim_vec_push(&sim.hostregs, h)) {
        free(h);
        sim_uncharge(SIMCUDA_LOC_HOST, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->base = (uintptr_t)p;
    h->size = size;
    h->ctx = sim_ctx_current();
    return CUDA_SUCCESS;
}

static CUresult sim_host_unregister(void *p)
{
    CUresult ctx = sim_need_ctx(NULL);
    if (ctx != CUDA_SUCCESS)
        return ctx;
    for (size_t i = 0; i < sim.hostregs.len; i++) {
        struct sim_hostreg *h = sim.hostregs.item[i];
        if (h->base != (uintptr_t)p)
            continue;
        sim_vec_remove(&sim.hostregs, h);
        sim_uncharge(SIMCUDA_LOC_HOST, h->size);
        free(h);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    SIM_API(cuMemHostRegister_v2, SIM_WRITE, sim_host_register(p, bytesize, Flags));
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    SIM_API(cuMemHostUnregister, SIM_WRITE, sim_host_unregister(p));
}

void sim_hostreg_reset(void)
{
    for (size_t i = 0; i < sim.hostregs.len; i++) {
        struct sim_hostreg *h = sim.hostregs.item[i];
        sim_uncharge(SIMCUDA_LOC_HOST, h->size);
        free(h);
    }
    sim.hostregs.len = 0;
}

/* Portable registrations too (one H100, driver 580, 2026-11-27). */
void sim_hostreg_drop_ctx(struct CUctx_st *c)
{
    for (size_t i = sim.hostregs.len; i-- > 0;) {
        struct sim_hostreg *h = sim.hostregs.item[i];
        if (h->ctx != c)
            continue;
        sim_vec_remove(&sim.hostregs, h);
        sim_uncharge(SIMCUDA_LOC_HOST, h->size);
        free(h);
    }
}

size_t simcuda_registered_bytes(void)
{
    pthread_rwlock_rdlock(&sim.lock);
    size_t n = 0;
    for (size_t i = 0; i < sim.hostregs.len; i++)
        n += ((struct sim_hostreg *)sim.hostregs.item[i])->size;
    pthread_rwlock_unlock(&sim.lock);
    return n;
}
