/* Peer access the program enables between contexts. Natively a context
 * reaches another device's cuMemAlloc memory only once the program enabled
 * peer access to the owning context: until then cuMemGetAddressRange
 * answers CUDA_ERROR_NOT_FOUND and the device pointer attribute has no
 * value (H200 pair, driver 580). Pointer queries (hooks_query.c) answer
 * from what is recorded here, so they read as natively; and gvmshim grants
 * a device's memory to another device only from then on (core/reach.h). */
#include "preload/shim.h"

#include "core/log.h"
#include "core/reach.h"

#include <pthread.h>

#define PEER_PAIRS 256

struct peer_pair {
    CUcontext from, to;
};

static struct peer_pair pairs[PEER_PAIRS];
static int npairs;
static pthread_mutex_t pairs_lock = PTHREAD_MUTEX_INITIALIZER;

static int find(CUcontext from, CUcontext to)
{
    for (int i = 0; i < npairs; i++)
        if (pairs[i].from == from && pairs[i].to == to) return i;
    return -1;
}

bool gvm_shim_peer_enabled(CUcontext from, CUcontext to)
{
    pthread_mutex_lock(&pairs_lock);
    bool on = find(from, to) >= 0;
    pthread_mutex_unlock(&pairs_lock);
    return on;
}

/* A full table forgets nothing it must answer for: the pair is then
 * treated as enabled, which is what gvmshim's memory really allows. */
static bool overflowed;

bool gvm_shim_peer_unknown(void) { return __atomic_load_n(&overflowed, __ATOMIC_RELAXED); }

static void record(CUcontext to, bool on)
{
    CUcontext from = NULL;
    if (GVM_REAL(cuCtxGetCurrent)(&from) != CUDA_SUCCESS || !from) return;
    pthread_mutex_lock(&pairs_lock);
    int i = find(from, to);
    if (on && i < 0) {
        if (npairs < PEER_PAIRS)
            pairs[npairs++] = (struct peer_pair){from, to};
        else
            __atomic_store_n(&overflowed, true, __ATOMIC_RELAXED);
    } else if (!on && i >= 0) {
        pairs[i] = pairs[--npairs];
    }
    pthread_mutex_unlock(&pairs_lock);
}

void gvm_shim_peer_forget(CUcontext ctx)
{
    pthread_mutex_lock(&pairs_lock);
    for (int i = npairs; i-- > 0;)
        if (pairs[i].from == ctx || pairs[i].to == ctx) pairs[i] = pairs[--npairs];
    pthread_mutex_unlock(&pairs_lock);
}

/* The device of ctx (pushed for the question: the driver answers for the
 * current context only); -1 if it cannot be told. */
int gvm_shim_device_of(CUcontext ctx)
{
    CUdevice d = -1;
    if (GVM_REAL(cuCtxPushCurrent_v2)(ctx) != CUDA_SUCCESS) return -1;
    if (GVM_REAL(cuCtxGetDevice)(&d) != CUDA_SUCCESS) d = -1;
    CUcontext popped;
    GVM_REAL(cuCtxPopCurrent_v2)(&popped);
    return (int)d;
}

/* The current context's device now reaches the peer's allocations, and
 * gvmshim grants them to it (core/reach.h). */
static void reach(CUcontext peer)
{
    CUdevice from = -1;
    int to = gvm_shim_device_of(peer);
    if (GVM_REAL(cuCtxGetDevice)(&from) != CUDA_SUCCESS || from < 0 || to < 0) return;
    CUresult rc = gvm_reach_enable(to, (int)from);
    if (rc != CUDA_SUCCESS)
        gvm_warn("granting device %d the memory of device %d failed (%d)", (int)from, to, rc);
}

GVM_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    gvm_hook_count(GVM_FN_cuCtxEnablePeerAccess);
    CUresult rc = GVM_REAL(cuCtxEnablePeerAccess)(peer, flags);
    if (rc == CUDA_SUCCESS) {
        record(peer, true);
        reach(peer);
    }
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer)
{
    gvm_hook_count(GVM_FN_cuCtxDisablePeerAccess);
    CUresult rc = GVM_REAL(cuCtxDisablePeerAccess)(peer);
    if (rc == CUDA_SUCCESS) record(peer, false);
    return rc;
}
