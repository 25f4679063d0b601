#include "core/vamap.h"

#include <pthread.h>
#include <stdlib.h>

#define L2_BITS 14
#define L1_BITS (48 - GVM_VAMAP_SHIFT - L2_BITS)

typedef void *slot_t;
static slot_t *level1[1u << L1_BITS];
static pthread_mutex_t writer = PTHREAD_MUTEX_INITIALIZER;

void *gvm_vamap_get(uintptr_t addr)
{
    if (addr >> 48) return NULL;
    uintptr_t page = addr >> GVM_VAMAP_SHIFT;
    slot_t *l2 = __atomic_load_n(&level1[page >> L2_BITS], __ATOMIC_ACQUIRE);
    if (!l2) return NULL;
    return __atomic_load_n(&l2[page & ((1u << L2_BITS) - 1)], __ATOMIC_ACQUIRE);
}

int gvm_vamap_set(uintptr_t base, size_t len, void *val)
{
    if (!len) return 0;
    if ((base + len - 1) >> 48) return -1;
    uintptr_t first = base >> GVM_VAMAP_SHIFT;
    uintptr_t last = (base + len - 1) >> GVM_VAMAP_SHIFT;
    int rc = 0;
    pthread_mutex_lock(&writer);
    for (uintptr_t page = first; page <= last; page++) {
        slot_t *l2 = __atomic_load_n(&level1[page >> L2_BITS], __ATOMIC_ACQUIRE);
        if (!l2) {
            if (!val) continue;
            l2 = calloc(1u << L2_BITS, sizeof *l2);
            if (!l2) { rc = -1; break; }
            __atomic_store_n(&level1[page >> L2_BITS], l2, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&l2[page & ((1u << L2_BITS) - 1)], val, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&writer);
    return rc;
}
