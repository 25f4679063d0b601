/* The driver's accounting of a memory pool, as cuMemPoolGetAttribute
 * answers it (the figures a program reads: PyTorch's cudaMallocAsync
 * backend, CuPy's MemoryAsyncPool):
 *   used      live allocations at their requested sizes, unrounded;
 *   reserved  the 32 MiB chunks the pool maps for where it places each
 *             allocation in its address range; a synchronize releases
 *             chunks no allocation covers down to the release threshold,
 *             cuMemPoolTrimTo(keep) while at least keep stays and never
 *             a chunk a free no synchronize settled yet covers;
 *   highs     the most of each, reset to the current figure by setting 0.
 * The placement is core/poolarena.c's, compiled in here: it was checked
 * against the driver's own addresses and reserve, logged on an H200
 * (driver 580.159) by scripts/probe/poolplace.c, by cpu test pool-arena
 * replaying that log; this model's job is the pool's answers, so that the
 * cpu suite checks what the shim's hooks feed the same bookkeeping.
 * The release threshold (default 0) and the reuse flags (default on) are
 * kept as set. Every pool handle gets its figures on first use (the sim's
 * pools are handles only: device.c). */
#include "sim.h"

#include "../../core/poolarena.h"

#include <pthread.h>

#define SIM_POOLS 64

struct sim_pool_use {
    CUmemoryPool pool;
    uint64_t used, used_high, reserved_high, threshold;
    struct gvm_pool_arena arena;
    int reuse[3]; /* FOLLOW_EVENT_DEPENDENCIES, ALLOW_OPPORTUNISTIC, ALLOW_INTERNAL_DEPENDENCIES */
};

static pthread_mutex_t sim_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_pool_use sim_pool_uses[SIM_POOLS];

static uint64_t sim_reserved(const struct sim_pool_use *u) { return gvm_arena_reserved(&u->arena); }

/* pool's figures, made on first use; NULL when the table is full. Lock held. */
static struct sim_pool_use *sim_pool_use_of(CUmemoryPool pool)
{
    for (int i = 0; i < SIM_POOLS; i++)
        if (sim_pool_uses[i].pool == pool)
            return &sim_pool_uses[i];
    for (int i = 0; i < SIM_POOLS; i++)
        if (!sim_pool_uses[i].pool) {
            sim_pool_uses[i] = (struct sim_pool_use){.pool = pool, .reuse = {1, 1, 1}};
            return &sim_pool_uses[i];
        }
    return NULL;
}

static void sim_pool_marks(struct sim_pool_use *u)
{
    if (u->used > u->used_high)
        u->used_high = u->used;
    if (sim_reserved(u) > u->reserved_high)
        u->reserved_high = sim_reserved(u);
}

void sim_pool_note_alloc(CUmemoryPool pool, uintptr_t p, size_t size)
{
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u) {
        gvm_arena_alloc(&u->arena, p, size);
        u->used += size;
        sim_pool_marks(u);
    }
    pthread_mutex_unlock(&sim_pool_lock);
}

void sim_pool_note_free(CUmemoryPool pool, uintptr_t p, size_t size)
{
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u) {
        u->used -= size < u->used ? size : u->used;
        gvm_arena_free(&u->arena, p);
    }
    pthread_mutex_unlock(&sim_pool_lock);
}

/* Every pool: the sim ran all work at enqueue, so any synchronize settles
 * every free. */
void sim_pool_settle(void)
{
    pthread_mutex_lock(&sim_pool_lock);
    for (int i = 0; i < SIM_POOLS; i++) {
        struct sim_pool_use *u = &sim_pool_uses[i];
        if (u->pool)
            gvm_arena_sync(&u->arena, u->threshold);
    }
    pthread_mutex_unlock(&sim_pool_lock);
}

CUresult sim_pool_trim_to(CUmemoryPool pool, size_t keep)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u)
        gvm_arena_trim(&u->arena, keep);
    pthread_mutex_unlock(&sim_pool_lock);
    return CUDA_SUCCESS;
}

CUresult sim_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, void *value, int set)
{
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    cuuint64_t *v64 = value;
    int *vint = value;
    if (!u) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
               attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
        int *flag = &u->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        if (set)
            *flag = *vint != 0;
        else
            *vint = *flag;
    } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        if (set)
            u->threshold = *v64;
        else
            *v64 = u->threshold;
    } else if (attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) {
        if (set)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *v64 = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? u->used : sim_reserved(u);
    } else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
        uint64_t *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? &u->used_high : &u->reserved_high;
        if (!set)
            *v64 = *high;
        else if (*v64 != 0)
            rc = CUDA_ERROR_INVALID_VALUE; /* only a reset to 0 is allowed */
        else
            *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? u->used : sim_reserved(u);
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&sim_pool_lock);
    return rc;
}

void sim_pool_uses_reset(void)
{
    pthread_mutex_lock(&sim_pool_lock);
    for (int i = 0; i < SIM_POOLS; i++) {
        gvm_arena_clear(&sim_pool_uses[i].arena);
        sim_pool_uses[i] = (struct sim_pool_use){0};
    }
    pthread_mutex_unlock(&sim_pool_lock);
}

void sim_pool_forget(CUmemoryPool pool)
{
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u) {
        gvm_arena_clear(&u->arena);
        u->used = u->used_high = u->reserved_high = 0;
    }
    pthread_mutex_unlock(&sim_pool_lock);
}
