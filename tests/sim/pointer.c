/* What the driver knows about an address: validity checks for device
 * work, cuMemGetAddressRange, cuPointerGetAttribute(s) and the matching
 * test queries. */
#include "sim.h"

#include <string.h>

#define SIM_DEV_BITS (~SIMCUDA_CPU_BIT)

int sim_dev_span_ok(uintptr_t p, size_t n) { return sim_dev_span_ok_for(p, n, -1); }

int sim_dev_span_ok_for(uintptr_t p, size_t n, int dev)
{
    unsigned want = dev >= 0 ? 1u << dev : SIM_DEV_BITS;
    if (p + n < p)
        return 0;
    struct sim_native *nat = sim_native_at(p);
    if (nat)
        return n <= nat->size - (p - nat->base);
    for (uintptr_t at = p; at < p + n;) {
        struct sim_map *m = sim_map_at(at);
        if (!m || !(m->mask & want))
            return 0; /* a hole, or a mapping the device was not given access to */
        at = m->base + m->size;
    }
    return 1;
}

int sim_is_dev_addr(uintptr_t p)
{
    return sim_native_at(p) || sim_resv_at(p);
}

/* ---- address range ---------------------------------------------------- */

/* For VMM memory the range is the mapping (the physical segment), not the
 * reservation: that is what the real driver answers. Like the real driver
 * it needs a current context. */
static CUresult sim_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    CUresult rc = sim_need_ctx(NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_native *n = sim_native_at(p);
    struct sim_map *m = n ? NULL : sim_map_at(p);
    /* Another device's cuMemAlloc memory is not in this context's view
     * until peer access is enabled (H200 pair, driver 580: NOT_FOUND, both
     * outputs zeroed). */
    if (n && !sim_native_reached(n)) {
        if (base)
            *base = 0;
        if (size)
            *size = 0;
        return CUDA_ERROR_NOT_FOUND;
    }
    if (!n && !m)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = n ? n->base : m->base;
    if (size)
        *size = n ? n->size : m->size;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    SIM_API(cuMemGetAddressRange_v2, SIM_READ, sim_address_range(pbase, psize, dptr));
}

/* ---- pointer attributes ----------------------------------------------- */

/* What the driver knows of an address: nothing, only a reservation
 * around it (cuMemAddressReserve with nothing mapped there), or memory. */
enum { SIM_UNKNOWN, SIM_RESERVED, SIM_MEMORY };

/* Everything an attribute query can say about one address. */
struct sim_ptr_info {
    int known;
    CUcontext ctx; /* NULL for VMM memory, which no context owns */
    unsigned memtype;
    int ordinal;
    uintptr_t range_base, map_base;
    size_t range_size, map_size;
    unsigned long long buffer_id, block_id, handle_types;
    int rdma, host_visible, native, reached;
    uintptr_t pool; /* a default pool's allocation: the pool, else 0 */
    unsigned mask, rwmask;
};

static struct sim_ptr_info sim_ptr_lookup(uintptr_t p)
{
    struct sim_ptr_info pi = {0};
    struct sim_native *n = sim_native_at(p);
    struct sim_map *m = n ? NULL : sim_map_at(p);
    struct sim_resv *r = n || m ? NULL : sim_resv_at(p);
    if (n) {
        /* A default pool's memory belongs to no context, is neither legacy
         * IPC, RDMA nor decompression capable, and names its pool (two
         * H100s, driver 580). */
        pi = (struct sim_ptr_info){
            .known = SIM_MEMORY, .ctx = n->pooled ? NULL : &sim.dev[n->dev].ctx, .memtype = CU_MEMORYTYPE_DEVICE,
            .ordinal = n->dev, .range_base = n->base, .range_size = n->size,
            /* The driver maps cuMemAlloc memory in granularity blocks
             * (H100, driver 580: MAPPING_* name the block). */
            .map_base = n->base & ~(SIM_GRANULE - 1),
            .map_size = ((n->base + n->size + SIM_GRANULE - 1) & ~(SIM_GRANULE - 1)) - (n->base & ~(SIM_GRANULE - 1)),
            .buffer_id = n->id,
            .block_id = n->id, .rdma = !n->pooled, .native = 1, .mask = 1u << n->dev, .rwmask = 1u << n->dev,
            .reached = sim_native_reached(n), .pool = n->pooled ? (uintptr_t)sim_pool_default_of(n->dev) : 0};
    } else if (r) {
        /* The range attributes name the reservation (cuda.h), MAPPED says 0. */
        pi = (struct sim_ptr_info){.known = SIM_RESERVED, .range_base = r->base, .range_size = r->size};
    } else if (m) {
        int host = m->h->loc == SIMCUDA_LOC_HOST;
        pi = (struct sim_ptr_info){
            .known = SIM_MEMORY, .memtype = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE,
            .ordinal = host ? 0 : m->h->loc, .range_base = m->resv->base,
            .range_size = m->resv->size, .map_base = m->base, .map_size = m->size,
            .buffer_id = m->id, .block_id = m->h->id,
            .handle_types = m->h->prop.requestedHandleTypes,
            .rdma = m->h->prop.allocFlags.gpuDirectRDMACapable, .host_visible = host,
            .mask = m->mask, .rwmask = m->rwmask};
    }
    return pi;
}

/* Width in bytes of each attribute's value; 0 for attributes the sim
 * does not know. */
static size_t sim_attr_width(CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        return 4;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        return 8;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    default:
        return 0;
    }
}

/* The access the current context's device has, as ACCESS_FLAGS reports. */
static unsigned long long sim_access_flags(const struct sim_ptr_info *pi)
{
    struct CUctx_st *c = sim_ctx_current();
    /* Without a current context the owner's access is reported (H100). */
    unsigned bit = c ? 1u << c->dev : (unsigned)pi->rwmask;
    /* cuMemAlloc memory reads as read-write from every device's context,
     * peer access enabled or not (two H100s on NVLink, driver 580). */
    if (pi->native || (pi->rwmask & bit))
        return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    return (pi->mask & bit) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
                            : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
}

/* The value of attribute a for a reserved address without memory; 0 when
 * it has none. */
static int sim_resv_attr_value(const struct sim_ptr_info *pi, CUpointer_attribute a,
                               unsigned long long *v)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *v = pi->range_base; return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *v = pi->range_size; return 1;
    case CU_POINTER_ATTRIBUTE_MAPPED: *v = 0; return 1;
    default: return 0;
    }
}

/* The value of attribute a for a known pointer; 0 when it has none. */
static int sim_attr_value(const struct sim_ptr_info *pi, CUpointer_attribute a, uintptr_t p,
                          unsigned long long *v)
{
    if (pi->known == SIM_RESERVED)
        return sim_resv_attr_value(pi, a, v);
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *v = (uintptr_t)pi->ctx; return 1;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *v = pi->memtype; return 1;
    /* Without a current context there is no device address (H100: the
     * single query fails with CUDA_ERROR_INVALID_CONTEXT after writing 0),
     * nor in a context that does not reach the memory (H200 pair: another
     * device's cuMemAlloc memory without peer access, INVALID_VALUE; an H100
     * pair: a default pool's memory is reached where the pool grants it). */
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *v = p;
        return sim_ctx_current() != NULL && (!pi->native || pi->reached);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *v = p; return pi->host_visible;
    /* cuMemAlloc memory answers 1 for both (H100, driver 580). */
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *v = (unsigned)pi->native; return 1;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *v = pi->buffer_id; return 1;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *v = 0; return 1;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *v = (unsigned)pi->ordinal; return 1;
    /* Legacy IPC exports cuMemAlloc memory only. */
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *v = (unsigned)(pi->native && !pi->pool); return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *v = pi->range_base; return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *v = pi->range_size; return 1;
    case CU_POINTER_ATTRIBUTE_MAPPED: *v = 1; return 1;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *v = pi->handle_types; return 1;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *v = (unsigned)pi->rdma; return 1;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *v = sim_access_flags(pi); return 1;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *v = pi->pool; return 1;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *v = pi->map_size; return 1;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *v = pi->map_base; return 1;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *v = pi->block_id; return 1;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: *v = (unsigned)(pi->native && !pi->pool); return 1;
    default: return 0; /* P2P tokens: sim_p2p_tokens */
    }
}

static void sim_attr_store(void *data, size_t width, unsigned long long v)
{
    if (width == 4) {
        unsigned u = (unsigned)v;
        memcpy(data, &u, 4);
    } else if (width == 8) {
        memcpy(data, &v, 8);
    } else {
        memset(data, 0, width);
    }
}

/* Tokens for the nv-p2p kernel interface exist for cuMemAlloc memory only
 * (cuda.h); these are made up, the sim has no such interface. */
static int sim_p2p_tokens(const struct sim_ptr_info *pi, void *data)
{
    if (!pi->native)
        return 0;
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS t = {pi->buffer_id, 1};
    memcpy(data, &t, sizeof t);
    return 1;
}

static CUresult sim_pointer_attribute(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    unsigned long long v;
    size_t width = sim_attr_width(a);
    if (!data || !width)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ptr_info pi = sim_ptr_lookup(p);
    if (a == CU_POINTER_ATTRIBUTE_P2P_TOKENS)
        return sim_p2p_tokens(&pi, data) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!pi.known || !sim_attr_value(&pi, a, p, &v)) {
        /* A known pointer without that value: the driver writes 0 first. */
        if (pi.known == SIM_MEMORY) sim_attr_store(data, width, 0);
        if (pi.known == SIM_MEMORY && a == CU_POINTER_ATTRIBUTE_DEVICE_POINTER)
            return sim_ctx_current() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT;
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim_attr_store(data, width, v);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    SIM_API(cuPointerGetAttribute, SIM_READ, sim_pointer_attribute(data, attribute, ptr));
}

/* Unlike the single query, an unknown pointer is no error: every value
 * reads as zero (MEMORY_TYPE 0), as on the real driver. */
static CUresult sim_pointer_attributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                       CUdeviceptr p)
{
    if (n == 0 || !attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if (!sim_attr_width(attrs[i]) || !data[i])
            return CUDA_ERROR_INVALID_VALUE;
    struct sim_ptr_info pi = sim_ptr_lookup(p);
    for (unsigned i = 0; i < n; i++) {
        unsigned long long v = 0;
        if (attrs[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS && sim_p2p_tokens(&pi, data[i]))
            continue;
        if (!pi.known || !sim_attr_value(&pi, attrs[i], p, &v))
            v = 0;
        sim_attr_store(data[i], sim_attr_width(attrs[i]), v);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    SIM_API(cuPointerGetAttributes, SIM_READ,
            sim_pointer_attributes(numAttributes, attributes, data, ptr));
}

/* ---- test queries ----------------------------------------------------- */

int simcuda_access_mask(CUdeviceptr p)
{
    pthread_rwlock_rdlock(&sim.lock);
    struct sim_ptr_info pi = sim_ptr_lookup(p);
    pthread_rwlock_unlock(&sim.lock);
    return (int)pi.mask;
}

int simcuda_location_of(CUdeviceptr p)
{
    int loc = SIMCUDA_LOC_UNMAPPED;
    pthread_rwlock_rdlock(&sim.lock);
    struct sim_native *n = sim_native_at(p);
    struct sim_map *m = n ? NULL : sim_map_at(p);
    if (n)
        loc = n->dev;
    else if (m)
        loc = m->h->loc;
    pthread_rwlock_unlock(&sim.lock);
    return loc;
}
