/* The program's own VMM calls (PyTorch's expandable segments, NCCL's cuMem
 * buffers): the memory stays the program's, but device memory it creates
 * counts under the device limit from cuMemCreate to cuMemRelease
 * (core/direct.h), so the limit holds for the whole process as
 * nvidia-smi sees it. */
#include "preload/shim.h"

#include "core/decoy.h"
#include "core/direct.h"
#include "core/heap.h"
#include "core/held.h"
#include "policy/place.h"

/* The device whose memory a creation makes, or -1 when it is none that
 * counts: host memory, a device gvmshim does not know, a request the
 * driver will refuse anyway (its answer is the native one). */
static int counted_device(const CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop)
{
    if (!h || !prop || !size || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return -1;
    int dev = prop->location.id;
    if (!gvm_shim_serving() || dev < 0 || dev >= gvm_topo.ndev) return -1;
    return dev;
}

GVM_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                                        unsigned long long flags)
{
    gvm_hook_count(GVM_FN_cuMemCreate);
    int dev = counted_device(h, size, prop);
    if (dev < 0) {
        gvm_stat_local_inc(passthrough_calls);
        return GVM_REAL(cuMemCreate)(h, size, prop, flags);
    }
    CUresult rc = gvm_policy_reserve_direct(dev, size);
    if (rc != CUDA_SUCCESS) return rc;
    rc = GVM_REAL(cuMemCreate)(h, size, prop, flags);
    if (rc != CUDA_SUCCESS || !gvm_direct_remember(*h, dev, size)) gvm_held_release(dev, size);
    return rc;
}

/* Forgotten before the driver releases it: once released, the driver may
 * hand the same value to another thread's creation. */
GVM_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle h)
{
    gvm_hook_count(GVM_FN_cuMemRelease);
    int dev = -1;
    size_t bytes = 0;
    bool counted = gvm_shim_active() && gvm_direct_forget(h, &dev, &bytes);
    CUresult rc = GVM_REAL(cuMemRelease)(h);
    if (!counted) return rc;
    if (rc == CUDA_SUCCESS || !gvm_direct_remember(h, dev, bytes)) gvm_held_release(dev, bytes);
    return rc;
}

/* cuMemAlloc memory has no allocation handle, and the driver refuses to
 * retain one for it: NCCL's user-buffer registration then leaves the
 * buffer unregistered (or exports it through legacy IPC, with
 * NCCL_LEGACY_CUDA_REGISTER=1). gvmshim's memory answers the same. The
 * handle the driver would give is one piece's, which neither covers the
 * extent cuMemGetAddressRange reports (a peer that maps that extent with
 * it fails with CUDA_ERROR_NOT_SUPPORTED) nor follows the memory when it
 * moves. The refusal is the driver's own for an address where nothing is
 * mapped (core/decoy.h). */
GVM_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    gvm_hook_count(GVM_FN_cuMemRetainAllocationHandle);
    if (gvm_shim_active() && gvm_heap_region((uintptr_t)addr))
        return GVM_REAL(cuMemRetainAllocationHandle)(h, (void *)gvm_decoy_for((uintptr_t)addr));
    gvm_stat_local_inc(passthrough_calls);
    return GVM_REAL(cuMemRetainAllocationHandle)(h, addr);
}
