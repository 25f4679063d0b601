/* Initialization, devices, primary contexts and the per-thread context
 * stack. */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>

/* The calling thread's context stack. It is stamped with the generation
 * it was built in, so simcuda_reset empties every thread's stack without
 * touching other threads' TLS. */
static __thread struct {
    unsigned gen;
    int depth;
    struct CUctx_st *stack[SIM_CTX_DEPTH];
} sim_tls;

static void sim_tls_sync(void)
{
    unsigned gen = __atomic_load_n(&sim.generation, __ATOMIC_ACQUIRE);
    if (sim_tls.gen != gen) {
        sim_tls.gen = gen;
        sim_tls.depth = 0;
    }
}

int sim_dev_valid(int dev)
{
    return dev >= 0 && dev < sim.ndev;
}

/* Whether device `dev` may access memory that lives on `peer`. */
int sim_peer_ok(int dev, int peer)
{
    return dev != peer && !__atomic_load_n(&sim.no_peer, __ATOMIC_RELAXED);
}

struct CUctx_st *sim_ctx_current(void)
{
    sim_tls_sync();
    return sim_tls.depth ? sim_tls.stack[sim_tls.depth - 1] : NULL;
}

int sim_ctx_valid(CUcontext c)
{
    for (int i = 0; i < sim.ndev; i++)
        if (c == &sim.dev[i].ctx)
            return 1;
    return sim_vec_has(&sim.ctxs, c);
}

/* The device of the current context, as calls that run "in" a context
 * need one. */
CUresult sim_need_ctx(int *dev)
{
    struct CUctx_st *c = sim_ctx_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (__atomic_load_n(&c->destroyed, __ATOMIC_RELAXED))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (dev)
        *dev = c->dev;
    return CUDA_SUCCESS;
}

void sim_ctx_reset_all(void)
{
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        sim.dev[i].ctx.refs = 0;
        sim.dev[i].ctx.peers = 0;
        __atomic_store_n(&sim.dev[i].ctx.destroyed, 0, __ATOMIC_RELAXED);
    }
    for (size_t i = 0; i < sim.ctxs.len; i++)
        free(sim.ctxs.item[i]);
    sim.ctxs.len = 0;
}

/* ---- init and devices ------------------------------------------------- */

static CUresult sim_init(unsigned flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim.ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    __atomic_store_n(&sim.initialized, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    SIM_API(cuInit, SIM_WRITE | SIM_ANYTIME, sim_init(Flags));
}

static CUresult sim_driver_version(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    SIM_API(cuDriverGetVersion, SIM_NOLOCK | SIM_ANYTIME, sim_driver_version(driverVersion));
}

static CUresult sim_device_count(int *n)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = sim.ndev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    SIM_API(cuDeviceGetCount, SIM_READ, sim_device_count(count));
}

static CUresult sim_device_get(CUdevice *d, int ordinal)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_API(cuDeviceGet, SIM_READ, sim_device_get(device, ordinal));
}

static CUresult sim_device_name(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "gvmshim simulated GPU %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_API(cuDeviceGetName, SIM_READ, sim_device_name(name, len, dev));
}

static CUresult sim_total_mem(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = sim.dev[dev].capacity;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_API(cuDeviceTotalMem_v2, SIM_READ, sim_total_mem(bytes, dev));
}

static int sim_attribute_value(CUdevice_attribute a)
{
    int vmm = !__atomic_load_n(&sim.no_vmm, __ATOMIC_RELAXED);
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
        return vmm;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: /* cuMemAllocAsync works */
        return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        return 4;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        return 9;
    default: /* HOST_NUMA_ID and COMPUTE_CAPABILITY_MINOR included */
        return 0;
    }
}

static CUresult sim_device_attribute(int *pi, CUdevice_attribute a, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = sim_attribute_value(a);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    SIM_API(cuDeviceGetAttribute, SIM_READ, sim_device_attribute(pi, attrib, dev));
}

static CUresult sim_can_access_peer(int *can, CUdevice dev, CUdevice peer)
{
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev) || !sim_dev_valid(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    *can = sim_peer_ok(dev, peer);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    SIM_API(cuDeviceCanAccessPeer, SIM_READ, sim_can_access_peer(canAccessPeer, dev, peerDev));
}

/* Peers are NVLink-joined (native atomics) unless SIMCUDA_PEER_PCIE. */
static CUresult sim_p2p_attribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(src) || !sim_dev_valid(dst) || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    int ok = sim_peer_ok(src, dst);
    switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = ok; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = ok && !__atomic_load_n(&sim.pcie_peer, __ATOMIC_RELAXED);
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst)
{
    SIM_API(cuDeviceGetP2PAttribute, SIM_READ, sim_p2p_attribute(value, attrib, src, dst));
}

/* ---- memory pools: which one cuMemAllocAsync would use ------------------- */

/* The sim's stream-ordered allocations ignore pools; a pool is only a
 * handle here, the default one a fixed value per device. */
static CUmemoryPool sim_pool_current[SIM_MAX_DEVICES];

static CUmemoryPool sim_pool_default(int dev) { return (CUmemoryPool)(uintptr_t)(0x5000 + 0x10 * dev); }

static CUresult sim_get_pool(CUmemoryPool *pool, int dev, int current)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = current && sim_pool_current[dev] ? sim_pool_current[dev] : sim_pool_default(dev);
    return CUDA_SUCCESS;
}

static CUresult sim_set_pool(int dev, CUmemoryPool pool)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_pool_current[dev] = pool;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    SIM_API(cuDeviceGetMemPool, SIM_READ, sim_get_pool(pool, dev, 1));
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    SIM_API(cuDeviceGetDefaultMemPool, SIM_READ, sim_get_pool(pool, dev, 0));
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    SIM_API(cuDeviceSetMemPool, SIM_WRITE, sim_set_pool(dev, pool));
}

/* The pool's use and settings: pool.c. */
static CUresult sim_pool_get_attr(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return sim_pool_attr(pool, attr, value, 0);
}

static CUresult sim_pool_set_attr(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return sim_pool_attr(pool, attr, value, 1);
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_API(cuMemPoolGetAttribute, SIM_READ, sim_pool_get_attr(pool, attr, value));
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_API(cuMemPoolSetAttribute, SIM_WRITE, sim_pool_set_attr(pool, attr, value));
}

/* The devices each default pool grants access to, besides its own. */
static unsigned sim_pool_grants[SIM_MAX_DEVICES];

static int sim_pool_owner(CUmemoryPool pool)
{
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (pool == sim_pool_default(d))
            return d;
    return -1;
}

CUmemoryPool sim_pool_default_of(int dev) { return sim_pool_default(dev); }

CUmemoryPool sim_pool_current_of(int dev)
{
    return sim_pool_current[dev] ? sim_pool_current[dev] : sim_pool_default(dev);
}

int sim_pool_reaches(int owner, int dev)
{
    return owner == dev || (sim_dev_valid(owner) && (sim_pool_grants[owner] >> dev & 1));
}

/* Taking its own device's access from a pool is refused (H100 pair,
 * driver 580: CUDA_ERROR_INVALID_DEVICE). */
static CUresult sim_pool_set_access(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    if (!pool || (count && !map))
        return CUDA_ERROR_INVALID_VALUE;
    int owner = sim_pool_owner(pool);
    for (size_t i = 0; i < count; i++) {
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !sim_dev_valid(map[i].location.id))
            return CUDA_ERROR_INVALID_VALUE;
        if (map[i].location.id == owner && map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
            return CUDA_ERROR_INVALID_DEVICE;
    }
    for (size_t i = 0; owner >= 0 && i < count; i++) {
        int d = map[i].location.id;
        if (d == owner)
            continue;
        if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
            sim_pool_grants[owner] &= ~(1u << d);
        else
            sim_pool_grants[owner] |= 1u << d;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    SIM_API(cuMemPoolSetAccess, SIM_WRITE, sim_pool_set_access(pool, map, count));
}


CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    SIM_API(cuMemPoolTrimTo, SIM_WRITE, sim_pool_trim_to(pool, minBytesToKeep));
}

/* The owner's access is read-write; a pool the program made grants none. */
static CUresult sim_pool_get_access(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *at)
{
    if (!flags || !pool || !at || at->type != CU_MEM_LOCATION_TYPE_DEVICE || !sim_dev_valid(at->id))
        return CUDA_ERROR_INVALID_VALUE;
    int owner = sim_pool_owner(pool);
    *flags = owner >= 0 && sim_pool_reaches(owner, at->id) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                            : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *location)
{
    SIM_API(cuMemPoolGetAccess, SIM_READ, sim_pool_get_access(flags, pool, location));
}

/* ---- peer access --------------------------------------------------------- */

int sim_ctx_reaches(int dev)
{
    struct CUctx_st *c = sim_ctx_current();
    return !c || c->dev == dev || (c->peers >> dev & 1);
}

int sim_native_reached(const struct sim_native *n)
{
    struct CUctx_st *c = sim_ctx_current();
    return sim_ctx_reaches(n->dev) || (n->pooled && sim_pool_reaches(n->dev, c->dev));
}

static CUresult sim_peer_access(CUcontext peer, unsigned flags, int enable)
{
    struct CUctx_st *c = sim_ctx_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!peer || !sim_ctx_valid(peer))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (enable && flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (peer->dev == c->dev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (enable && !sim_peer_ok(c->dev, peer->dev))
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    unsigned bit = 1u << peer->dev;
    if (enable && (c->peers & bit))
        return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (!enable && !(c->peers & bit))
        return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    c->peers ^= bit;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    SIM_API(cuCtxEnablePeerAccess, SIM_WRITE, sim_peer_access(peer, flags, 1));
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer)
{
    SIM_API(cuCtxDisablePeerAccess, SIM_WRITE, sim_peer_access(peer, 0, 0));
}

/* ---- primary contexts ------------------------------------------------- */

static CUresult sim_primary_retain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim.dev[dev].ctx.refs++;
    __atomic_store_n(&sim.dev[dev].ctx.destroyed, 0, __ATOMIC_RELAXED);   /* made again */
    *pctx = &sim.dev[dev].ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_API(cuDevicePrimaryCtxRetain, SIM_WRITE, sim_primary_retain(pctx, dev));
}

static CUresult sim_primary_release(CUdevice dev)
{
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (sim.dev[dev].ctx.refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT; /* released more than retained */
    sim.dev[dev].ctx.refs--;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    SIM_API(cuDevicePrimaryCtxRelease_v2, SIM_WRITE, sim_primary_release(dev));
}

static CUresult sim_primary_state(CUdevice dev, unsigned *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = sim.dev[dev].ctx.refs > 0 && !__atomic_load_n(&sim.dev[dev].ctx.destroyed, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_API(cuDevicePrimaryCtxGetState, SIM_READ, sim_primary_state(dev, flags, active));
}

/* What a context's end takes with it: its cuMemAlloc memory, streams,
 * events and host registrations, and peer access to and from it (per
 * device here: the sim's peer access is by device). VMM memory stays. */
static void sim_ctx_end(struct CUctx_st *c)
{
    c->peers = 0;
    for (int i = 0; i < sim.ndev; i++)
        sim.dev[i].ctx.peers &= ~(1u << c->dev);
    for (size_t i = 0; i < sim.ctxs.len; i++)
        ((struct CUctx_st *)sim.ctxs.item[i])->peers &= ~(1u << c->dev);
    sim_native_drop_ctx(c);
    sim_streams_drop_ctx(c);
    sim_hostreg_drop_ctx(c);
}

/* As the real driver does (one H100, driver 580, 2026-11-27): the context
 * is destroyed whatever its retain count, which is kept; the handle stays
 * the same, calls made in it fail with CONTEXT_IS_DESTROYED until a retain
 * makes it again. Its cuMemAlloc memory, streams, events, host
 * registrations and peer access go; VMM memory stays. */
static CUresult sim_primary_reset(CUdevice dev)
{
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *c = &sim.dev[dev].ctx;
    __atomic_store_n(&c->destroyed, 1, __ATOMIC_RELAXED);
    sim_ctx_end(c);
    sim_pool_forget(sim_pool_default_of(dev)); /* its allocations went with the context */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    SIM_API(cuDevicePrimaryCtxReset_v2, SIM_WRITE, sim_primary_reset(dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    SIM_API(cuDevicePrimaryCtxReset, SIM_WRITE, sim_primary_reset(dev));
}

/* ---- contexts the program makes (cuCtxCreate) --------------------------- */

static CUresult sim_ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_tls_sync();
    if (sim_tls.depth == SIM_CTX_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c || sim_vec_push(&sim.ctxs, c)) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    (void)flags;
    c->dev = dev;
    c->refs = 1;
    c->user = 1;
    sim_tls.stack[sim_tls.depth++] = c;   /* made current, as the real call does */
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_API(cuCtxCreate_v2, SIM_WRITE, sim_ctx_create(pctx, flags, dev));
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_API(cuCtxCreate, SIM_WRITE, sim_ctx_create(pctx, flags, dev));
}

/* Execution affinity (SM counts) is not simulated: the parameters are
 * checked for shape only. */
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags,
                                CUdevice dev)
{
    SIM_API(cuCtxCreate_v3, SIM_WRITE,
            nparams < 0 || (nparams && !params) ? CUDA_ERROR_INVALID_VALUE : sim_ctx_create(pctx, flags, dev));
}

/* CUDA 12.5's: affinity or a CIG context in the parameters; neither is
 * simulated, so only a NULL or empty one is taken. */
CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    SIM_API(cuCtxCreate_v4, SIM_WRITE,
            params && (params->numExecAffinityParams || params->cigParams) ? CUDA_ERROR_NOT_SUPPORTED
                                                                           : sim_ctx_create(pctx, flags, dev));
}

/* A context made by cuCtxCreate (a primary one is refused) ends
 * (sim_ctx_end) and leaves this thread's stack wherever it is there. */
static CUresult sim_ctx_destroy(CUcontext ctx)
{
    if (!ctx || !sim_vec_has(&sim.ctxs, ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx_end(ctx);
    sim_tls_sync();
    int k = 0;
    for (int i = 0; i < sim_tls.depth; i++)
        if (sim_tls.stack[i] != ctx)
            sim_tls.stack[k++] = sim_tls.stack[i];
    sim_tls.depth = k;
    sim_vec_remove(&sim.ctxs, ctx);
    free(ctx);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    SIM_API(cuCtxDestroy_v2, SIM_WRITE, sim_ctx_destroy(ctx));
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    SIM_API(cuCtxDestroy, SIM_WRITE, sim_ctx_destroy(ctx));
}

/* ---- the current-context stack ---------------------------------------- */

static CUresult sim_ctx_get_current(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_ctx_current();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_API(cuCtxGetCurrent, SIM_NOLOCK, sim_ctx_get_current(pctx));
}

/* Replaces the top of the stack; NULL pops, as the real driver does. */
static CUresult sim_ctx_set_current(CUcontext ctx)
{
    sim_tls_sync();
    if (!ctx) {
        if (sim_tls.depth)
            sim_tls.depth--;
        return CUDA_SUCCESS;
    }
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!sim_tls.depth)
        sim_tls.depth = 1;
    sim_tls.stack[sim_tls.depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    SIM_API(cuCtxSetCurrent, SIM_READ, sim_ctx_set_current(ctx));
}

static CUresult sim_ctx_push(CUcontext ctx)
{
    sim_tls_sync();
    if (!ctx || !sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (sim_tls.depth == SIM_CTX_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_tls.stack[sim_tls.depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    SIM_API(cuCtxPushCurrent_v2, SIM_READ, sim_ctx_push(ctx));
}

static CUresult sim_ctx_pop(CUcontext *pctx)
{
    sim_tls_sync();
    if (!sim_tls.depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = sim_tls.stack[--sim_tls.depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_API(cuCtxPopCurrent_v2, SIM_NOLOCK, sim_ctx_pop(pctx));
}

static CUresult sim_ctx_get_device(CUdevice *dev)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_need_ctx(dev);
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    SIM_API(cuCtxGetDevice, SIM_NOLOCK, sim_ctx_get_device(device));
}

/* All work ran at enqueue time, so synchronizing only checks the context
 * (and ends its kernels in flight: flight.c). */
static CUresult sim_ctx_sync(void)
{
    CUresult rc = sim_capture_ctx_sync();
    if (rc == CUDA_SUCCESS) {
        sim_flight_ctx_sync();
        sim_pool_settle();
    }
    return rc;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    SIM_API(cuCtxSynchronize, SIM_READ, sim_ctx_sync());
}

/* The context named (NULL: the current one), waited for as if current. */
static CUresult sim_ctx_sync_of(CUcontext ctx)
{
    if (!ctx)
        return sim_ctx_sync();
    CUresult rc = sim_ctx_push(ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = sim_ctx_sync();
    sim_ctx_pop(NULL);
    return rc;
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_API(cuCtxSynchronize_v2, SIM_READ, sim_ctx_sync_of(ctx));
}
