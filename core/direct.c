#include "core/direct.h"

#include "core/held.h"
#include "core/location.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* Handles are created and released far less often than memory is used
 * (each cuMemCreate costs the driver tens of microseconds): one lock and
 * a chained table are enough. */
#define BUCKETS 1024

struct entry {
    struct entry *next;
    CUmemGenericAllocationHandle handle;
    int dev;
    size_t bytes;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table[BUCKETS];
static size_t bytes_on[GVM_LOC_SLOTS], peak_on[GVM_LOC_SLOTS];

static unsigned bucket_of(CUmemGenericAllocationHandle h)
{
    uint64_t x = (uint64_t)h * 0x9e3779b97f4a7c15u;
    return (unsigned)(x >> 54) % BUCKETS;
}

bool gvm_direct_reserve(int dev, size_t bytes)
{
    if (!gvm_held_reserve(dev, bytes)) return false;
    int s = gvm_loc_slot(dev);
    size_t now = __atomic_add_fetch(&bytes_on[s], bytes, __ATOMIC_RELAXED);
    size_t p = __atomic_load_n(&peak_on[s], __ATOMIC_RELAXED);
    while (now > p && !__atomic_compare_exchange_n(&peak_on[s], &p, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return true;
}

void gvm_direct_unreserve(int dev, size_t bytes)
{
    __atomic_sub_fetch(&bytes_on[gvm_loc_slot(dev)], bytes, __ATOMIC_RELAXED);
    gvm_held_release(dev, bytes);
}

bool gvm_direct_remember(CUmemGenericAllocationHandle h, int dev, size_t bytes)
{
    struct entry *e = malloc(sizeof *e);
    if (!e) return false;
    *e = (struct entry){.handle = h, .dev = dev, .bytes = bytes};
    unsigned b = bucket_of(h);
    pthread_mutex_lock(&lock);
    e->next = table[b];
    table[b] = e;
    pthread_mutex_unlock(&lock);
    return true;
}

bool gvm_direct_forget(CUmemGenericAllocationHandle h, int *dev, size_t *bytes)
{
    struct entry *e;
    pthread_mutex_lock(&lock);
    struct entry **pp = &table[bucket_of(h)];
    while (*pp && (*pp)->handle != h) pp = &(*pp)->next;
    e = *pp;
    if (e) *pp = e->next;
    pthread_mutex_unlock(&lock);
    if (!e) return false;
    *dev = e->dev;
    *bytes = e->bytes;
    free(e);
    return true;
}

size_t gvm_direct_bytes(int loc) { return __atomic_load_n(&bytes_on[gvm_loc_slot(loc)], __ATOMIC_RELAXED); }

size_t gvm_direct_peak(int loc) { return __atomic_load_n(&peak_on[gvm_loc_slot(loc)], __ATOMIC_RELAXED); }
