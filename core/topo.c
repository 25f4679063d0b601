#include "core/topo.h"

#include "core/capture.h"
#include "core/driver.h"
#include "core/log.h"

#include <pthread.h>
#include <string.h>

struct gvm_topo gvm_topo;
static pthread_mutex_t topo_lock = PTHREAD_MUTEX_INITIALIZER;

static int attr(CUdevice_attribute a, int dev)
{
    int v = 0;
    if (DRV(cuDeviceGetAttribute, &v, a, dev) != CUDA_SUCCESS) return 0;
    return v;
}

static size_t granularity(CUmemLocationType type, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    size_t g = 0;
    if (DRV(cuMemGetAllocationGranularity, &g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
        g == 0)
        return 0;
    return g;
}

static CUresult read_device(int d)
{
    struct gvm_device *dev = &gvm_topo.dev[d];
    dev->vmm = attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d);
    dev->posix_fd = attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, d);
    dev->rdma = attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, d);
    dev->pci[0] = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
    dev->pci[1] = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
    dev->pci[2] = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
    CUresult rc = DRV(cuDeviceTotalMem_v2, &dev->total, d);
    if (rc != CUDA_SUCCESS) return rc;
    dev->gran = dev->vmm ? granularity(CU_MEM_LOCATION_TYPE_DEVICE, d) : 0;
    if (dev->vmm && !dev->gran) dev->vmm = false;
    if (!dev->vmm) gvm_warn("device %d has no virtual memory management: its allocations pass through", d);
    return CUDA_SUCCESS;
}

static void read_host(void)
{
    gvm_topo.host_numa_id = attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
    if (gvm_topo.host_numa_id < 0) gvm_topo.host_numa_id = 0;
    gvm_topo.host_type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    if (!attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0)) {
        gvm_topo.host_type = CU_MEM_LOCATION_TYPE_HOST;
        gvm_topo.host_numa_id = 0;
        if (!attr(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0)) return;
    }
    size_t g = granularity(gvm_topo.host_type, gvm_topo.host_numa_id);
    gvm_topo.host_vmm = g != 0;
    if (g > gvm_topo.gran) gvm_topo.gran = g;
}

static bool native_atomics(int a, int b)
{
    int v = 0;
    return gvm_drv.cuDeviceGetP2PAttribute &&
           DRV(cuDeviceGetP2PAttribute, &v, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, a, b) == CUDA_SUCCESS && v;
}

CUresult gvm_topo_init(void)
{
    int n = 0;
    CUresult rc = DRV(cuDeviceGetCount, &n);
    if (rc != CUDA_SUCCESS) return rc;
    if (n > GVM_MAX_DEVICES) n = GVM_MAX_DEVICES;
    gvm_topo.ndev = n;
    for (int d = 0; d < n; d++) {
        if ((rc = read_device(d)) != CUDA_SUCCESS) return rc;
        if (gvm_topo.dev[d].gran > gvm_topo.gran) gvm_topo.gran = gvm_topo.dev[d].gran;
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int ok = a == b;
            if (!ok && DRV(cuDeviceCanAccessPeer, &ok, a, b) != CUDA_SUCCESS) ok = 0;
            gvm_topo.peer[a][b] = (unsigned char)ok;
            gvm_topo.nvlink[a][b] = (unsigned char)(a != b && ok && native_atomics(a, b));
        }
    for (int d = 0; d < n; d++) gvm_topo.reach[d] |= 1u << d;   /* peers enabled before the start stay */
    if (n > 0) read_host();
    return CUDA_SUCCESS;
}

bool gvm_topo_reaches(int dev, int loc)
{
    if (dev < 0 || dev >= gvm_topo.ndev) return false;
    if (loc == GVM_LOC_HOST) return true;
    if (loc < 0 || loc >= gvm_topo.ndev) return false;
    return gvm_topo.peer[dev][loc];
}

bool gvm_topo_nvlinked(int dev, int loc)
{
    return dev >= 0 && dev < gvm_topo.ndev && loc >= 0 && loc < gvm_topo.ndev && gvm_topo.nvlink[dev][loc];
}

static void grant(CUmemAccessDesc *d, CUmemLocationType type, int id)
{
    memset(d, 0, sizeof *d);
    d->location.type = type;
    d->location.id = id;
    d->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* Only a HOST_NUMA descriptor makes the CPU side readable; a HOST
 * descriptor is accepted and then faults (measured on H200). */
static int grant_cpu(CUmemAccessDesc *descs, int n)
{
    grant(&descs[n], CU_MEM_LOCATION_TYPE_HOST_NUMA, gvm_topo.host_numa_id);
    return n + 1;
}

int gvm_topo_access_mask(int loc, uint32_t devices, bool cpu, CUmemAccessDesc *descs)
{
    int n = 0;
    for (int d = 0; d < gvm_topo.ndev; d++)
        if ((devices >> d & 1) && gvm_topo.dev[d].vmm && gvm_topo_reaches(d, loc))
            grant(&descs[n++], CU_MEM_LOCATION_TYPE_DEVICE, d);
    return cpu && loc == GVM_LOC_HOST ? grant_cpu(descs, n) : n;
}

CUresult gvm_topo_ctx(int dev, CUcontext *ctx)
{
    if (dev < 0 || dev >= gvm_topo.ndev) return CUDA_ERROR_INVALID_DEVICE;
    CUcontext c = __atomic_load_n(&gvm_topo.dev[dev].ctx, __ATOMIC_ACQUIRE);
    if (c) { *ctx = c; return CUDA_SUCCESS; }
    pthread_mutex_lock(&topo_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!gvm_topo.dev[dev].ctx) {
        rc = DRV(cuDevicePrimaryCtxRetain, &c, dev);
        if (rc == CUDA_SUCCESS) __atomic_store_n(&gvm_topo.dev[dev].ctx, c, __ATOMIC_RELEASE);
    }
    c = gvm_topo.dev[dev].ctx;
    pthread_mutex_unlock(&topo_lock);
    *ctx = c;
    return rc;
}

CUresult gvm_topo_push(int dev)
{
    CUcontext c;
    CUresult rc = gvm_topo_ctx(dev, &c);
    if (rc != CUDA_SUCCESS) return rc;
    return DRV(cuCtxPushCurrent_v2, c);
}

void gvm_topo_pop(void)
{
    CUcontext c;
    DRV(cuCtxPopCurrent_v2, &c);
}

size_t gvm_topo_used(int dev)
{
    size_t free_bytes = 0, total = 0;
    if (!gvm_drv.cuMemGetInfo_v2 || gvm_topo_push(dev) != CUDA_SUCCESS) return SIZE_MAX;
    CUresult rc = DRV(cuMemGetInfo_v2, &free_bytes, &total);
    gvm_topo_pop();
    return rc == CUDA_SUCCESS && total >= free_bytes ? total - free_bytes : SIZE_MAX;
}

CUstream gvm_topo_stream_made(int dev, int dir) { return __atomic_load_n(&gvm_topo.dev[dev].stream[dir], __ATOMIC_ACQUIRE); }

CUresult gvm_topo_stream(int dev, int dir, CUstream *stream)
{
    struct gvm_device *d = &gvm_topo.dev[dev];
    CUstream s = gvm_topo_stream_made(dev, dir);
    if (s) { *stream = s; return CUDA_SUCCESS; }
    pthread_mutex_lock(&topo_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!d->stream[dir]) {
        CUstream ns = NULL;
        CUevent e0 = NULL, e1 = NULL;
        rc = DRV(cuStreamCreate, &ns, CU_STREAM_NON_BLOCKING);
        if (rc == CUDA_SUCCESS) rc = DRV(cuEventCreate, &e0, CU_EVENT_DISABLE_TIMING);
        if (rc == CUDA_SUCCESS) rc = DRV(cuEventCreate, &e1, CU_EVENT_DISABLE_TIMING);
        if (rc == CUDA_SUCCESS) {
            d->events[dir][0] = e0;
            d->events[dir][1] = e1;
            __atomic_store_n(&d->stream[dir], ns, __ATOMIC_RELEASE);
        } else {
            if (e0) DRV(cuEventDestroy_v2, e0);
            if (ns) DRV(cuStreamDestroy_v2, ns);
        }
    }
    *stream = d->stream[dir];
    pthread_mutex_unlock(&topo_lock);
    return rc;
}

static bool ctx_active(int dev)
{
    if (!gvm_drv.cuDevicePrimaryCtxGetState) return gvm_topo.dev[dev].ctx != NULL;
    unsigned flags = 0;
    int active = 0;
    if (DRV(cuDevicePrimaryCtxGetState, dev, &flags, &active) != CUDA_SUCCESS) return false;
    return active != 0;
}

/* The device whose primary context this thread cleans up after a reset
 * (gvm_topo_resetting); -1: none. */
static __thread int resetting = -1;

void gvm_topo_resetting(int dev) { resetting = dev; }

CUcontext gvm_topo_primary(int dev)
{
    CUcontext c = __atomic_load_n(&gvm_topo.dev[dev].ctx, __ATOMIC_ACQUIRE);
    if (c || !ctx_active(dev)) return c;
    /* Active but not retained by gvmshim: a retain of an active primary
     * context only names it. */
    if (DRV(cuDevicePrimaryCtxRetain, &c, dev) != CUDA_SUCCESS) return NULL;
    DRV(cuDevicePrimaryCtxRelease_v2, dev);
    return c;
}

void gvm_topo_forget_context(int dev)
{
    struct gvm_device *d = &gvm_topo.dev[dev];
    pthread_mutex_lock(&topo_lock);
    /* Gone with the context: never touched again (the driver may hand the
     * same handles to the program's next streams and events). */
    for (int dir = 0; dir < 2; dir++) {
        __atomic_store_n(&d->stream[dir], NULL, __ATOMIC_RELEASE);
        d->events[dir][0] = d->events[dir][1] = NULL;
    }
    /* The retain outlives the reset (the count is kept, the context is
     * made again by the next retain): given back, so that gvmshim's next
     * use of the device retains it afresh. */
    if (__atomic_exchange_n(&d->ctx, NULL, __ATOMIC_ACQ_REL)) DRV(cuDevicePrimaryCtxRelease_v2, dev);
    pthread_mutex_unlock(&topo_lock);
}

/* ---- contexts the program made ---------------------------------------
 *
 * A copy or kernel queued in a context the program made runs apart from
 * the primary context's work: a wait that synchronized the primary
 * contexts and the caller's let a spill from another thread unmap memory
 * such a copy still wrote (tests/cpu/test_spill_copy.c; a GPU faults).
 * The contexts the program allocates in are remembered, and every wait
 * for a device synchronizes them. Noting one makes no driver call (an
 * allocation's failures are the driver's, call by call): a primary
 * context gvmshim has not retained yet may be noted, and is passed over
 * at the wait. */
#define OWN_MAX 64

static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    int dev;
} own[OWN_MAX];
static int nown;          /* written under own_lock; 0 (no such context): a wait costs one load more */
static unsigned own_gen;  /* forgettings so far: a handle may be reused since */

void gvm_topo_note_context(int dev, CUcontext ctx)
{
    /* A thread allocates in one context mostly: noted once. */
    static __thread CUcontext noted;
    static __thread unsigned noted_gen;
    unsigned gen = __atomic_load_n(&own_gen, __ATOMIC_ACQUIRE);
    if (!ctx || (ctx == noted && gen == noted_gen) || ctx == __atomic_load_n(&gvm_topo.dev[dev].ctx, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&own_lock);
    int i = 0;
    while (i < nown && own[i].ctx != ctx) i++;
    if (i == nown && nown < OWN_MAX) {
        own[i].ctx = ctx;
        own[i].dev = dev;
        __atomic_store_n(&nown, nown + 1, __ATOMIC_RELEASE);
    } else if (i == nown) {
        gvm_warn("more than %d contexts of the program's own: moves do not wait for the work of context %p",
                 OWN_MAX, (void *)ctx);
    }
    pthread_mutex_unlock(&own_lock);
    noted = ctx;
    noted_gen = gen;
}

void gvm_topo_forget_program_context(CUcontext ctx)
{
    pthread_mutex_lock(&own_lock);
    for (int i = 0; i < nown; i++)
        if (own[i].ctx == ctx) {
            own[i] = own[nown - 1];
            __atomic_store_n(&nown, nown - 1, __ATOMIC_RELEASE);
            break;
        }
    __atomic_add_fetch(&own_gen, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&own_lock);
}

/* A context destroyed meanwhile (its record not yet forgotten) has no
 * work left. */
static bool gone(CUresult rc) { return rc == CUDA_ERROR_INVALID_CONTEXT || rc == CUDA_ERROR_CONTEXT_IS_DESTROYED; }

/* Synchronizes the program's own contexts on dev (-1: on every device);
 * primary contexts are the callers' to wait for. Under own_lock, so that
 * none is forgotten, and its handle reused, while it is current here. */
static CUresult sync_own(int dev)
{
    if (!__atomic_load_n(&nown, __ATOMIC_ACQUIRE)) return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&own_lock);
    for (int i = 0; i < nown && rc == CUDA_SUCCESS; i++) {
        if ((dev >= 0 && own[i].dev != dev) || own[i].ctx == gvm_topo_primary(own[i].dev)) continue;
        if ((rc = DRV(cuCtxPushCurrent_v2, own[i].ctx)) == CUDA_SUCCESS) {
            CUcontext c;
            rc = DRV(cuCtxSynchronize);
            DRV(cuCtxPopCurrent_v2, &c);
        }
        if (gone(rc)) rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&own_lock);
    return rc;
}

static __thread bool reuse_nowait;
static __thread uint64_t ordered_stream;

void gvm_topo_stream_order(bool on, uint64_t stream)
{
    reuse_nowait = on;
    ordered_stream = on ? stream : 0;
}

bool gvm_topo_reuse_waits(void) { return !reuse_nowait; }

uint64_t gvm_topo_ordered_stream(void) { return ordered_stream; }

uint64_t gvm_topo_epoch(int dev) { return __atomic_load_n(&gvm_topo.dev[dev].syncs_started, __ATOMIC_ACQUIRE); }

bool gvm_topo_settled(int dev, uint64_t stamp)
{
    return __atomic_load_n(&gvm_topo.dev[dev].syncs_done, __ATOMIC_ACQUIRE) > stamp;
}

/* Whole waits (gvm_topo_quiesce) begun and the highest finished: the
 * stamps of core/usemark.c, which must cover every device. */
static uint64_t quiesces_started, quiesces_done;

uint64_t gvm_topo_quiesce_epoch(void) { return __atomic_load_n(&quiesces_started, __ATOMIC_ACQUIRE); }

bool gvm_topo_quiesced(uint64_t stamp) { return __atomic_load_n(&quiesces_done, __ATOMIC_ACQUIRE) > stamp; }

static void advance(uint64_t *done_counter, uint64_t ticket)
{
    uint64_t done = __atomic_load_n(done_counter, __ATOMIC_RELAXED);
    while (done < ticket &&
           !__atomic_compare_exchange_n(done_counter, &done, ticket, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
}

static void sync_finished(int dev, uint64_t ticket)
{
    advance(&gvm_topo.dev[dev].syncs_done, ticket);
}

static CUresult current_device(CUcontext *cur, int *dev)
{
    CUdevice d = -1;
    *dev = -1;
    *cur = NULL;
    CUresult rc = DRV(cuCtxGetCurrent, cur);
    if (rc != CUDA_SUCCESS || !*cur) return rc;
    rc = DRV(cuCtxGetDevice, &d);
    if (rc == CUDA_SUCCESS) *dev = d;
    /* A current context that a reset destroyed has no work to wait for. */
    if (rc == CUDA_ERROR_CONTEXT_IS_DESTROYED) {
        *cur = NULL;
        rc = CUDA_SUCCESS;
    }
    return rc;
}

static CUresult sync_device(int dev);

CUresult gvm_topo_sync_device(int dev)
{
    if (!gvm_capture_wait_begin(dev)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult rc = sync_device(dev);
    gvm_capture_wait_end(dev);
    return rc;
}

static CUresult sync_device(int dev)
{
    uint64_t ticket = __atomic_add_fetch(&gvm_topo.dev[dev].syncs_started, 1, __ATOMIC_ACQ_REL);
    if (dev == resetting) {
        sync_finished(dev, ticket);   /* the reset ended all its work */
        return CUDA_SUCCESS;
    }
    int cur = -1;
    CUcontext c = NULL, primary = NULL;
    CUresult rc = current_device(&c, &cur);
    if (rc != CUDA_SUCCESS) return rc;
    if (cur == dev && (rc = DRV(cuCtxSynchronize)) != CUDA_SUCCESS) return rc;
    if (cur != dev) c = NULL;
    /* The primary context too, unless it is the one just synchronized (as
     * it is under cudart; known once gvmshim holds it: no query needed). */
    CUcontext held = __atomic_load_n(&gvm_topo.dev[dev].ctx, __ATOMIC_ACQUIRE);
    if ((!c || held != c) && ctx_active(dev) && gvm_topo_ctx(dev, &primary) == CUDA_SUCCESS && primary != c) {
        if ((rc = gvm_topo_push(dev)) != CUDA_SUCCESS) return rc;
        rc = DRV(cuCtxSynchronize);
        gvm_topo_pop();
        if (rc != CUDA_SUCCESS) return rc;
    }
    if ((rc = sync_own(dev)) != CUDA_SUCCESS) return rc;
    sync_finished(dev, ticket);
    return CUDA_SUCCESS;
}

CUresult gvm_topo_settle(int dev, uint64_t stamp)
{
    return gvm_topo_settled(dev, stamp) ? CUDA_SUCCESS : gvm_topo_sync_device(dev);
}

static CUresult quiesce(void);

CUresult gvm_topo_quiesce(void)
{
    if (!gvm_capture_wait_begin(-1)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult rc = quiesce();
    gvm_capture_wait_end(-1);
    return rc;
}

static CUresult quiesce(void)
{
    uint64_t ticket[GVM_MAX_DEVICES], whole = __atomic_add_fetch(&quiesces_started, 1, __ATOMIC_ACQ_REL);
    for (int d = 0; d < gvm_topo.ndev; d++)
        ticket[d] = __atomic_add_fetch(&gvm_topo.dev[d].syncs_started, 1, __ATOMIC_ACQ_REL);
    CUresult rc = DRV(cuCtxSynchronize);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_CONTEXT && rc != CUDA_ERROR_CONTEXT_IS_DESTROYED) return rc;
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (!gvm_topo.dev[d].vmm || d == resetting || !ctx_active(d)) continue;
        if ((rc = gvm_topo_push(d)) != CUDA_SUCCESS) return rc;
        rc = DRV(cuCtxSynchronize);
        gvm_topo_pop();
        if (rc != CUDA_SUCCESS) return rc;
    }
    if ((rc = sync_own(-1)) != CUDA_SUCCESS) return rc;
    for (int d = 0; d < gvm_topo.ndev; d++) sync_finished(d, ticket[d]);
    advance(&quiesces_done, whole);
    return CUDA_SUCCESS;
}
