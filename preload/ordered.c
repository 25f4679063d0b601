#include "preload/ordered.h"

#include "core/location.h"

#include <pthread.h>
#include <stdlib.h>

#define BUCKETS 4096

struct entry {
    struct entry *next;
    uintptr_t p;
    int dev;
    size_t bytes;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table[BUCKETS];
static size_t live_count;   /* read without the lock by the free path */
static uint64_t bytes_on[GVM_MAX_DEVICES], high_on[GVM_MAX_DEVICES];

static unsigned bucket_of(uintptr_t p) { return (unsigned)((p >> 8) * 0x9e3779b97f4a7c15u >> 52) % BUCKETS; }

void gvm_ordered_note(uintptr_t p, int dev, size_t bytes)
{
    if (dev < 0 || dev >= GVM_MAX_DEVICES) return;
    struct entry *e = malloc(sizeof *e);
    if (!e) return;   /* the attributes then leave it out, as before */
    *e = (struct entry){.p = p, .dev = dev, .bytes = bytes};
    unsigned b = bucket_of(p);
    pthread_mutex_lock(&lock);
    e->next = table[b];
    table[b] = e;
    __atomic_store_n(&live_count, live_count + 1, __ATOMIC_RELAXED);
    bytes_on[dev] += bytes;
    if (bytes_on[dev] > high_on[dev]) high_on[dev] = bytes_on[dev];
    pthread_mutex_unlock(&lock);
}

void gvm_ordered_forget(uintptr_t p)
{
    if (!__atomic_load_n(&live_count, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&lock);
    struct entry **pp = &table[bucket_of(p)];
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    struct entry *e = *pp;
    if (e) {
        *pp = e->next;
        __atomic_store_n(&live_count, live_count - 1, __ATOMIC_RELAXED);
        bytes_on[e->dev] -= e->bytes;
    }
    pthread_mutex_unlock(&lock);
    free(e);
}

static uint64_t read_locked(const uint64_t *v, int dev)
{
    if (dev < 0 || dev >= GVM_MAX_DEVICES) return 0;
    pthread_mutex_lock(&lock);
    uint64_t x = v[dev];
    pthread_mutex_unlock(&lock);
    return x;
}

uint64_t gvm_ordered_bytes(int dev) { return read_locked(bytes_on, dev); }

uint64_t gvm_ordered_high(int dev) { return read_locked(high_on, dev); }

void gvm_ordered_reset_high(int dev)
{
    if (dev < 0 || dev >= GVM_MAX_DEVICES) return;
    pthread_mutex_lock(&lock);
    high_on[dev] = bytes_on[dev];
    pthread_mutex_unlock(&lock);
}
