/* The driver's accounting of a memory pool, as cuMemPoolGetAttribute
 * answers it (the figures a program reads: PyTorch's cudaMallocAsync
 * backend, CuPy's MemoryAsyncPool):
 *   used      live allocations at their requested sizes, unrounded;
 *   reserved  grows by whole 32 MiB chunks when the pool's free bytes
 *             cannot hold an allocation; at a synchronize, released to
 *             no more than the release threshold (in chunks, never below
 *             the chunks live allocations hold); at cuMemPoolTrimTo(keep),
 *             down to keep or below, never below what live allocations and
 *             frees no synchronize settled yet hold;
 *   highs     the most of each, reset to the current figure by setting 0.
 * The release threshold (default 0) and the reuse flags (default on) are
 * kept as set. The chunk and the unrounded sizes are as measured on an
 * H200, driver 580.159 (gpu tests gpu-pointer-answers,
 * gpu-torch-async-pool). Every pool handle gets its figures on first use
 * (the sim's pools are handles only: device.c). */
#include "sim.h"

#include <pthread.h>

/* The chunk a pool maps and releases memory in; VMM granularity
 * (SIM_GRANULE) is another thing. */
#define SIM_POOL_CHUNK ((uint64_t)32 << 20)
#define SIM_POOLS 64

struct sim_pool_use {
    CUmemoryPool pool;
    uint64_t used, reserved, used_high, reserved_high, unsettled, threshold;
    int reuse[3]; /* FOLLOW_EVENT_DEPENDENCIES, ALLOW_OPPORTUNISTIC, ALLOW_INTERNAL_DEPENDENCIES */
};

static pthread_mutex_t sim_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_pool_use sim_pool_uses[SIM_POOLS];

static uint64_t sim_up(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }

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
    if (u->reserved > u->reserved_high)
        u->reserved_high = u->reserved;
}

void sim_pool_note_alloc(CUmemoryPool pool, size_t size)
{
    uint64_t n = size;
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u) {
        if (u->reserved - u->used < n)
            u->reserved += sim_up(n, SIM_POOL_CHUNK);
        u->used += n;
        if (u->unsettled > u->reserved - u->used)
            u->unsettled = u->reserved - u->used;
        sim_pool_marks(u);
    }
    pthread_mutex_unlock(&sim_pool_lock);
}

void sim_pool_note_free(CUmemoryPool pool, size_t size)
{
    uint64_t n = size;
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u) {
        u->used -= n < u->used ? n : u->used;
        u->unsettled += n;
        if (u->unsettled > u->reserved - u->used)
            u->unsettled = u->reserved - u->used;
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
        u->unsettled = 0;
        if (!u->pool || u->reserved <= u->threshold)
            continue;
        uint64_t keep = u->threshold / SIM_POOL_CHUNK * SIM_POOL_CHUNK, floor = sim_up(u->used, SIM_POOL_CHUNK);
        if (keep < floor)
            keep = floor;
        if (keep < u->reserved)
            u->reserved = keep;
    }
    pthread_mutex_unlock(&sim_pool_lock);
}

CUresult sim_pool_trim_to(CUmemoryPool pool, size_t keep)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u && u->reserved > keep) {
        uint64_t target = keep / SIM_POOL_CHUNK * SIM_POOL_CHUNK;
        uint64_t floor = sim_up(u->used + u->unsettled, SIM_POOL_CHUNK);
        if (target < floor)
            target = floor;
        if (target < u->reserved)
            u->reserved = target;
    }
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
            *v64 = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? u->used : u->reserved;
    } else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
        uint64_t *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? &u->used_high : &u->reserved_high;
        if (!set)
            *v64 = *high;
        else if (*v64 != 0)
            rc = CUDA_ERROR_INVALID_VALUE; /* only a reset to 0 is allowed */
        else
            *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? u->used : u->reserved;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&sim_pool_lock);
    return rc;
}

void sim_pool_uses_reset(void)
{
    pthread_mutex_lock(&sim_pool_lock);
    for (int i = 0; i < SIM_POOLS; i++)
        sim_pool_uses[i] = (struct sim_pool_use){0};
    pthread_mutex_unlock(&sim_pool_lock);
}

void sim_pool_forget(CUmemoryPool pool)
{
    pthread_mutex_lock(&sim_pool_lock);
    struct sim_pool_use *u = sim_pool_use_of(pool);
    if (u) {
        u->used = u->reserved = u->used_high = u->reserved_high = u->unsettled = 0;
    }
    pthread_mutex_unlock(&sim_pool_lock);
}
