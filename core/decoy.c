/* Why a host mapping and not a reservation of the driver's: natively, a
 * freed cuMemAlloc address is still inside the driver's own virtual
 * address heap, but no object of the driver covers it any more, and every
 * pointer query treats it as unknown (cudaPointerGetAttributes says
 * cudaMemoryTypeUnregistered, cuMemGetAddressRange CUDA_ERROR_NOT_FOUND).
 * A range reserved with cuMemAddressReserve is not unknown to the driver:
 * RANGE_START_ADDR/RANGE_SIZE report the reservation even where nothing is
 * mapped (cuda.h says so, and cuPointerGetAttributes answers them with
 * MAPPED 0), which is exactly what leaked out of gvmshim's own reservations
 * (headroom, rounding). An inaccessible anonymous mapping of the process is
 * covered by no driver object at all, like the driver's free heap, which
 * is itself an inaccessible mapping of the process; nothing can ever be
 * allocated or registered there while gvmshim holds it. */
#define _GNU_SOURCE
#include "core/decoy.h"

#include "core/driver.h"
#include "core/log.h"

#include <stddef.h>
#include <sys/mman.h>

static uintptr_t decoy_base;

/* The decoy is only as good as the driver's ignorance of it: say so when
 * the driver answers for it as for something it knows. */
static void check_unknown(uintptr_t base)
{
    unsigned type = 0;
    CUresult single = DRV(cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)base);
    CUdeviceptr start = 0;
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    void *data[2] = {&start, &type};
    CUresult batch = DRV(cuPointerGetAttributes, 2, attrs, data, (CUdeviceptr)base);
    if (single == CUDA_SUCCESS || (batch == CUDA_SUCCESS && (start || type)))
        gvm_warn("the driver knows the decoy address %#lx; pointer queries on freed gvmshim memory may "
                 "answer differently from native ones", (unsigned long)base);
}

int gvm_decoy_init(void)
{
    if (__atomic_load_n(&decoy_base, __ATOMIC_ACQUIRE)) return 0;
    /* Twice the size, to cut a 2 MiB aligned range out of it. */
    size_t len = 2 * GVM_DECOY_SIZE;
    char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    uintptr_t base = ((uintptr_t)p + GVM_DECOY_SIZE - 1) & ~(GVM_DECOY_SIZE - 1);
    size_t head = base - (uintptr_t)p;
    if (head) munmap(p, head);
    if (len - head > GVM_DECOY_SIZE) munmap((char *)base + GVM_DECOY_SIZE, len - head - GVM_DECOY_SIZE);
    uintptr_t none = 0;
    if (!__atomic_compare_exchange_n(&decoy_base, &none, base, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        munmap((void *)base, GVM_DECOY_SIZE);
    else
        check_unknown(base);
    return 0;
}

uintptr_t gvm_decoy_for(uintptr_t p)
{
    return __atomic_load_n(&decoy_base, __ATOMIC_ACQUIRE) + (p & (GVM_DECOY_SIZE - 1));
}

uintptr_t gvm_decoy_restore(uintptr_t v, uintptr_t p)
{
    uintptr_t base = __atomic_load_n(&decoy_base, __ATOMIC_ACQUIRE);
    if (!base || v < base || v - base >= GVM_DECOY_SIZE) return v;
    return (p & ~(GVM_DECOY_SIZE - 1)) + (v - base);
}
